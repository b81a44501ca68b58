// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * flare wallclock: where threads spend their time, on the CPU and off it,
 * in nanoseconds by stack.
 *
 * On the CPU: a software CPU-clock perf event (per CPU, or per target
 * thread) runs flare_wall_sample, which adds one period to the key of the
 * current thread's stacks (state WALL_ON_CPU). Off the CPU: at
 * sched_switch the thread leaving the CPU gets a `start` entry (time,
 * stacks and the state it blocks in, taken while it is still current);
 * when it runs again the time in between is added to that key (a period
 * shorter than sample_ns, when set, is sampled: flare_sampled). Threads
 * still blocked are accounted by user space at each read (the `start`
 * entries are visible to it). A thread's last switch-out (it is dying)
 * starts nothing, nor, with user_blocked_only, a kernel thread's.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "flare.bpf.h"
#include "wallclock.h"
#include "targets.h"

#define TASK_DEAD_STATE 0x80
#define PF_KTHREAD 0x00200000

/* Knobs fixed for a run, set before load. */
const volatile bool filter_pid = false;		/* tgid in `targets` (or followed) */
const volatile bool filter_tid = false;		/* tid in `targets` */
const volatile bool filter_state = false;	/* --state given */
const volatile __u64 state = 0;			/* --state value (0: preempted) */
const volatile __u64 min_ns = 0;		/* shorter blocked periods are dropped */
const volatile __u64 period_ns = 0;		/* CPU time one sample stands for */
const volatile __u64 sample_ns = 0;		/* shorter blocked periods are sampled */
const volatile __u32 preempt_every = 1;		/* one preemption in this many is tracked */
const volatile bool user_blocked_only = false;	/* kernel threads' blocked time is not kept */

struct wallclock_stats stats = {};
/* Present so that the skeleton generates the types for Rust. */
struct wallclock_key wallclock_key_type = {};
struct wallclock_start wallclock_start_type = {};
struct wallclock_timed wallclock_timed_type = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct wallclock_key);
	__type(value, __u64);
	__uint(max_entries, 40960);
} counts SEC(".maps");

/* Blocked threads, keyed by thread id in the initial PID namespace. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct wallclock_start);
	__uint(max_entries, 16384);
} start SEC(".maps");


/* Fills the current task's ids, name and stacks into `key`; false when
 * the task is not watched. */
static __always_inline bool fill_current(void *ctx, struct wallclock_key *key)
{
	__u32 tgid, tid;

	if ((__u32)bpf_get_current_pid_tgid() == 0)
		return false;	/* the idle task */
	if (!flare_current_ids(&tgid, &tid)) {
		__sync_fetch_and_add(&stats.pidns_miss, 1);
		return false;
	}
	if (flare_is_self(tgid))
		return false;
	if (filter_pid && !flare_is_target(tgid) && !flare_follows_current())
		return false;
	if (filter_tid && !flare_is_target(tid))
		return false;
	key->pid = tgid;
	key->start = flare_current_start();
	key->tid = tid;
	bpf_get_current_comm(&key->comm, sizeof(key->comm));
	flare_capture_stacks(ctx, &key->user_stack_id, &key->kernel_stack_id);
	return true;
}

/* Counts `ns` of `key`'s time from `ts` on; or, with times kept, sends it. */
static __always_inline void add(struct wallclock_key *key, __u64 ns, __u64 ts)
{
	struct wallclock_timed *rec;

	if (timed) {
		rec = flare_timed_reserve(sizeof(*rec), ts, ns, key->tid, &stats.ring_full);
		if (rec) {
			rec->key = *key;
			flare_timed_submit(rec);
		}
		return;
	}
	if (!flare_count(&counts, key, ns))
		__sync_fetch_and_add(&stats.hash_full, 1);
}

SEC("perf_event")
int flare_wall_sample(struct bpf_perf_event_data *ctx)
{
	struct wallclock_key key = {};
	__u64 now = timed ? bpf_ktime_get_ns() : 0;	/* before the stacks are walked */

	if (!fill_current(ctx, &key))
		return 0;
	key.state = WALL_ON_CPU;
	add(&key, period_ns, now);
	return 0;
}

/* `prev` (still current) leaves the CPU; `next` gets it back. */
static __always_inline int on_switch(void *ctx, struct task_struct *prev,
				     struct task_struct *next)
{
	struct wallclock_start s = {};
	struct wallclock_start *sp;
	__u64 now = bpf_ktime_get_ns();
	__u32 tid = BPF_CORE_READ(prev, pid);
	__u64 st = flare_task_state(prev);
	__u64 ns;

	if ((st & TASK_DEAD_STATE) || BPF_CORE_READ(prev, exit_state)) {
		bpf_map_delete_elem(&start, &tid);
	} else if ((!filter_state || (state == 0 ? st == 0 : (st & state))) &&
		   !(user_blocked_only && (BPF_CORE_READ(prev, flags) & PF_KTHREAD)) &&
		   flare_preempt_scale(st, preempt_every) && fill_current(ctx, &s.key)) {
		s.ts = now;
		s.key.state = (__u32)st;
		if (bpf_map_update_elem(&start, &tid, &s, BPF_ANY))
			__sync_fetch_and_add(&stats.start_full, 1);
	}

	tid = BPF_CORE_READ(next, pid);
	sp = bpf_map_lookup_elem(&start, &tid);
	if (!sp)
		return 0;
	s = *sp;
	bpf_map_delete_elem(&start, &tid);
	if (now <= s.ts || now - s.ts < min_ns)
		return 0;
	ns = now - s.ts;
	/* A preemption tracked one time in preempt_every stands for them all
	 * (user space scales its own reads of `start` alike). */
	if (s.key.state == 0 && preempt_every > 1)
		ns *= preempt_every;
	if (flare_sampled(&ns, sample_ns))
		add(&s.key, ns, s.ts);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(flare_wall_switch_btf, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	return on_switch(ctx, prev, next);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(flare_wall_switch_raw, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	return on_switch(ctx, prev, next);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
