// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * flare offcputime, wakeuptime and offwaketime: blocked time summed in the
 * kernel by stack, with the waker's stack beside it.
 *
 * One object serves the three tools (rodata `mode`). A task that switches
 * out gets a `start` entry (time, and its stacks while it is still
 * current); when it switches in again the blocked time is added to the
 * `counts` entry of its key. offwaketime also keeps, per woken task, who
 * woke it (`wokeby`, filled in the waker's context); wakeuptime instead
 * ends the period at the wakeup and keys it by the waker.
 *
 * Three ways to attach, chosen by user space: tp_btf (BTF-typed
 * tracepoints), raw_tp (the same tracepoints untyped), kprobes on
 * finish_task_switch/try_to_wake_up. Under kprobes the switching-out task
 * is no longer current, so its stacks are taken when it runs again
 * (`stacks_at_switch_in`), as bcc does. The waker side uses sched_waking,
 * which always runs in the waker's context (sched_wakeup may run on the
 * target's CPU, after an IPI, where current is some other task).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "flare.bpf.h"
#include "offcpu.h"
#include "targets.h"

#define PF_KTHREAD 0x00200000

/* Knobs fixed for a run, set before load. */
const volatile __u32 mode = OFFCPU_MODE_OFFCPU;
const volatile __u32 thread_filter = OFFCPU_THREADS_ALL;
const volatile bool filter_state = false;	/* --state given */
const volatile __u64 state = 0;			/* --state value */
const volatile __u64 min_us = 1;
const volatile __u64 max_us = (__u64)-1;
const volatile bool stacks_at_switch_in = false;
/* Shorter blocked periods are sampled (flare_sampled), 0: none are. */
const volatile __u64 sample_us = 0;
/* With sampling, one preemption in this many is tracked (flare_preempt_scale). */
const volatile __u32 preempt_every = 1;

struct offcpu_stats stats = {};
/* Present so that the skeletons generate the key and record types. */
struct offcpu_key offcpu_key_type = {};
struct offcpu_timed offcpu_timed_type = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct offcpu_key);
	__type(value, __u64);
	__uint(max_entries, 10240);
} counts SEC(".maps");

/* Keyed by tid; the idle tasks (all tid 0) by 1 << 32 | cpu. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, struct offcpu_start);
	__uint(max_entries, 16384);
} start SEC(".maps");

/* offwaketime: the waker of each woken task, until the task runs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, struct offcpu_task);
	__uint(max_entries, 16384);
} wokeby SEC(".maps");


static __always_inline struct task_struct *current_task(void)
{
	return (struct task_struct *)bpf_get_current_task();
}

static __always_inline __u64 task_key(__u32 tid)
{
	return tid ? tid : ((1ULL << 32) | bpf_get_smp_processor_id());
}

static __always_inline bool thread_allowed(struct task_struct *t)
{
	__u32 id;

	if (flare_is_self(BPF_CORE_READ(t, tgid)))
		return false;
	switch (thread_filter) {
	case OFFCPU_THREADS_PIDS:
		id = BPF_CORE_READ(t, tgid);
		return flare_is_target(id) || flare_follows(t);
	case OFFCPU_THREADS_TIDS:
		id = BPF_CORE_READ(t, pid);
		return flare_is_target(id);
	case OFFCPU_THREADS_USER:
		return !(BPF_CORE_READ(t, flags) & PF_KTHREAD);
	case OFFCPU_THREADS_KERNEL:
		return BPF_CORE_READ(t, flags) & PF_KTHREAD;
	default:
		return true;
	}
}

static __always_inline bool state_allowed(struct task_struct *t)
{
	if (!filter_state)
		return true;
	/* bcc: 0 means running (preempted); other values are a bitmask. */
	if (state == 0)
		return flare_task_state(t) == 0;
	return flare_task_state(t) & state;
}

/* The ids, name and stacks of the current task (cheap helpers only). */
static __always_inline void fill_current(void *ctx, struct offcpu_task *out)
{
	__u64 id = bpf_get_current_pid_tgid();

	out->pid = id >> 32;
	out->tid = (__u32)id;
	out->start = flare_current_start();
	bpf_get_current_comm(&out->comm, sizeof(out->comm));
	flare_capture_stacks(ctx, &out->user_stack_id, &out->kernel_stack_id);
}

/* Counts a blocked period of `us` that began at `ts`, of thread `tid`;
 * or, with times kept, sends it. */
static __always_inline void add(struct offcpu_key *key, __u64 us, __u64 ts, __u32 tid)
{
	struct offcpu_timed *rec;

	if (timed) {
		rec = flare_timed_reserve(sizeof(*rec), ts, us, tid, &stats.ring_full);
		if (rec) {
			rec->key = *key;
			flare_timed_submit(rec);
		}
		return;
	}
	if (!flare_count(&counts, key, us))
		__sync_fetch_and_add(&stats.hash_full, 1);
}

/* The blocked time in microseconds since `ts` (times `scale`), if within
 * -m/-M and kept by sampling (counted as the sampling period then). */
static __always_inline bool blocked_us(__u64 ts, __u64 now, __u64 scale, __u64 *us)
{
	if (ts > now) {
		__sync_fetch_and_add(&stats.negative, 1);
		return false;
	}
	*us = (now - ts) / 1000;
	if (*us < min_us || *us > max_us)
		return false;
	*us *= scale;
	return flare_sampled(us, sample_us);
}

/* `prev` leaves the CPU (it is still current, except under kprobes). */
static __always_inline void switch_out(void *ctx, struct task_struct *prev,
				       __u64 now)
{
	struct offcpu_start s = {};
	__u64 key;

	if (!thread_allowed(prev))
		return;
	if (mode != OFFCPU_MODE_WAKEUP && !state_allowed(prev))
		return;
	s.scale = mode == OFFCPU_MODE_OFFCPU ?
		  flare_preempt_scale(flare_task_state(prev), preempt_every) : 1;
	if (!s.scale)
		return;
	s.ts = now;
	if (mode != OFFCPU_MODE_WAKEUP && !stacks_at_switch_in) {
		/* prev is still current: read it through the helpers. */
		fill_current(ctx, &s.task);
		key = task_key(s.task.tid);
	} else {
		key = task_key(BPF_CORE_READ(prev, pid));
	}
	if (bpf_map_update_elem(&start, &key, &s, BPF_ANY))
		__sync_fetch_and_add(&stats.start_full, 1);
}

/* `next` gets the CPU back: its blocked period ends (not for wakeuptime,
 * whose period ends at the wakeup). Under kprobes `next` is current. */
static __always_inline void switch_in(void *ctx, struct task_struct *next,
				      __u64 now)
{
	struct offcpu_key key = {};
	struct offcpu_start *sp;
	struct offcpu_task *woke;
	__u64 tkey, ts, us, scale;

	tkey = task_key(BPF_CORE_READ(next, pid));
	sp = bpf_map_lookup_elem(&start, &tkey);
	if (!sp)
		return;
	ts = sp->ts;
	scale = sp->scale;
	key.target = sp->task;
	bpf_map_delete_elem(&start, &tkey);
	if (mode == OFFCPU_MODE_OFFWAKE) {
		woke = bpf_map_lookup_elem(&wokeby, &tkey);
		if (woke) {
			key.waker = *woke;
			key.has_waker = 1;
			bpf_map_delete_elem(&wokeby, &tkey);
		}
	}
	if (!blocked_us(ts, now, scale, &us))
		return;
	if (stacks_at_switch_in)
		fill_current(ctx, &key.target);	/* next is current */
	add(&key, us, ts, tkey >> 32 ? 0 : (__u32)tkey);
}

static __always_inline int on_switch(void *ctx, struct task_struct *prev,
				     struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();

	switch_out(ctx, prev, now);
	if (mode != OFFCPU_MODE_WAKEUP)
		switch_in(ctx, next, now);
	return 0;
}

/* Current wakes `p`. */
static __always_inline int on_waking(void *ctx, struct task_struct *p)
{
	/* One key for both modes: the waker alone (offwaketime) or with
	 * its target (wakeuptime). Two structs would leave the unwinder's
	 * step less than the stack it needs. */
	struct offcpu_key key = {};
	struct offcpu_start *sp;
	__u64 tkey, ts, us;

	if (mode == OFFCPU_MODE_OFFCPU)
		return 0;
	tkey = task_key(BPF_CORE_READ(p, pid));
	if (mode == OFFCPU_MODE_OFFWAKE) {
		if (!thread_allowed(p))
			return 0;
		fill_current(ctx, &key.waker);
		bpf_map_update_elem(&wokeby, &tkey, &key.waker, BPF_ANY);
		return 0;
	}
	/* wakeuptime: the sleep ends here, charged to the waker. */
	sp = bpf_map_lookup_elem(&start, &tkey);
	if (!sp)
		return 0;
	ts = sp->ts;
	bpf_map_delete_elem(&start, &tkey);
	if (!blocked_us(ts, bpf_ktime_get_ns(), 1, &us))
		return 0;
	BPF_CORE_READ_STR_INTO(&key.target.comm, p, comm);
	fill_current(ctx, &key.waker);
	/* bcc keys wakeuptime by names and stack only; the pid stays for
	 * symbolizing a user stack. */
	key.waker.tid = 0;
	if (!user_stacks) {
		key.waker.pid = 0;
		key.waker.start = 0;
	}
	key.has_waker = 1;
	add(&key, us, ts, tkey >> 32 ? 0 : (__u32)tkey);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(flare_switch_btf, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	return on_switch(ctx, prev, next);
}

SEC("tp_btf/sched_waking")
int BPF_PROG(flare_waking_btf, struct task_struct *p)
{
	return on_waking(ctx, p);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(flare_switch_raw, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	return on_switch(ctx, prev, next);
}

SEC("raw_tp/sched_waking")
int BPF_PROG(flare_waking_raw, struct task_struct *p)
{
	return on_waking(ctx, p);
}

/* Attached by name from user space: the symbol may carry a suffix
 * (finish_task_switch.isra.0). */
SEC("kprobe")
int BPF_KPROBE(flare_switch_kprobe, struct task_struct *prev)
{
	return on_switch(ctx, prev, current_task());
}

SEC("kprobe")
int BPF_KPROBE(flare_waking_kprobe, struct task_struct *p)
{
	return on_waking(ctx, p);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
