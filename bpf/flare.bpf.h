/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * BPF-side helpers shared by every flare program: the one place stacks
 * are captured (flare_capture_stacks, into stacks.h's storage), task ids
 * as flare's PID namespace sees them, a task's state, and counting into a
 * hash map, or sending time-stamped records (timed.h). Included once by each tool.bpf.c, after vmlinux.h and libbpf's
 * headers; tools with -p/-t lists include targets.h after it.
 */
#ifndef FLARE_BPF_H
#define FLARE_BPF_H

#include "common.h"
#include <bpf/bpf_core_read.h>
#include "unwind.h"
#include "timed.h"

/* flare's PID namespace, when it is not the initial one (set before load). */
const volatile bool use_pidns = false;
const volatile __u64 pidns_dev = 0;
const volatile __u64 pidns_ino = 0;

/* flare's own process as its PID namespace sees it: left out of every
 * profile unless 0 (--include-self). Set before load. */
const volatile __u32 self_tgid = 0;

/* A command flare launched (`-- CMD`): processes it starts, at any depth,
 * are targets too. Its tgid in the initial PID namespace, or 0. Set before
 * load. */
const volatile __u32 follow_tgid = 0;

/* How many ancestors flare_follows looks at. */
#define FLARE_FOLLOW_DEPTH 8

/* Which stacks to capture (-U / -K), set before load. */
const volatile bool user_stacks = true;
const volatile bool kernel_stacks = true;

/*
 * The current task's process and thread ids as flare's PID namespace sees
 * them. False for a task outside that namespace (it has no ids there).
 */
static __always_inline bool flare_current_ids(__u32 *tgid, __u32 *tid)
{
	__u64 id = bpf_get_current_pid_tgid();

	if (use_pidns) {
		struct bpf_pidns_info ns = {};

		if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns)))
			return false;
		*tgid = ns.tgid;
		*tid = ns.pid;
		return true;
	}
	*tgid = id >> 32;
	*tid = (__u32)id;
	return true;
}

/* task_struct before 5.14 called its state `state`. */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

/* A task's state (TASK_RUNNING is 0), on kernels before and after 5.14. */
static __always_inline __u64 flare_task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___pre514 *)t, state);
}

/*
 * When the current process started: its group leader's start_time, in
 * CLOCK_MONOTONIC nanoseconds (the clock of the mapping tracker's
 * records). Keys carry it beside the pid, so that user space names the
 * stacks of a process that exited with its own mappings when a later
 * process takes its PID. A thread that execs keeps its process's start.
 */
static __always_inline __u64 flare_current_start(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	return BPF_CORE_READ(task, group_leader, start_time);
}

/* True for flare's own process (tgid as flare's PID namespace sees it). */
static __always_inline bool flare_is_self(__u32 tgid)
{
	return self_tgid && tgid == self_tgid;
}

/*
 * True when `t` is the launched command's process or descends from it
 * (within FLARE_FOLLOW_DEPTH generations): how tools follow the children
 * of a command they started. False when no command was launched.
 */
static __always_inline bool flare_follows(struct task_struct *t)
{
	if (!follow_tgid)
		return false;
#pragma unroll
	for (int i = 0; i < FLARE_FOLLOW_DEPTH; i++) {
		__u32 tgid;

		if (!t)
			return false;
		tgid = BPF_CORE_READ(t, tgid);
		if (tgid == follow_tgid)
			return true;
		if (tgid <= 1)
			return false;
		t = BPF_CORE_READ(t, real_parent);
	}
	return false;
}

/* flare_follows for the current task. */
static __always_inline bool flare_follows_current(void)
{
	return flare_follows((struct task_struct *)bpf_get_current_task());
}

/*
 * The current task's user stack, stored (stacks.h): its id, or a negative
 * errno. The one place user stacks are walked, so that every tool gets
 * the same unwinding: with tables (unwind.h) unless frame pointers were
 * asked for.
 */
static __always_inline __s64 flare_user_stack(void *ctx)
{
	__u32 tgid, tid;

	if (unwind_mode != UNWIND_MODE_FP && flare_current_ids(&tgid, &tid))
		return flare_unwind_user(tgid);
	return flare_get_stack(ctx, BPF_F_USER_STACK, FLARE_USER_ID_MASK, FLARE_USER_ID_BASE);
}

/*
 * Captures the current task's stacks as the run asked for them: ids in
 * `stacks`, a negative errno when one could not be stored, or
 * FLARE_STACK_SKIPPED when it was not asked for. `ctx` is the program's
 * context (perf event, tracepoint, probe registers).
 */
static __always_inline void flare_capture_stacks(void *ctx, __s64 *user_id, __s32 *kernel_id)
{
	*user_id = user_stacks ? flare_user_stack(ctx) : FLARE_STACK_SKIPPED;
	*kernel_id = kernel_stacks ? (__s32)flare_get_stack(ctx, 0, FLARE_KERNEL_ID_MASK, 0)
				   : FLARE_STACK_SKIPPED;
}

/*
 * Sampling of blocked periods, the way Go samples its block profile: with
 * `every` (> 0), a period of `*len` shorter than `every` is kept with
 * probability *len / every and then counted as `every` long, so that the
 * sum by stack stays the true time on average while a busy machine's
 * thousands of short waits a second (preemptions, mostly) become a few
 * records, as samples of the CPU are; longer periods are counted as they
 * are. False when the period is left out.
 */
static __always_inline bool flare_sampled(__u64 *len, __u64 every)
{
	if (!every || *len >= every)
		return true;
	/* Uniform in [0, every): every < 2^32 is checked by user space. */
	if ((((__u64)bpf_get_prandom_u32() * every) >> 32) >= *len)
		return false;
	*len = every;
	return true;
}

/*
 * With blocked periods sampled, a thread preempted (still runnable as it
 * leaves the CPU: state 0) is tracked one time in `every`, its period
 * then standing for `every` of them (a scale of `every`): it waits for a
 * few scheduler slices, less than the sampling period, so it would be
 * kept with probability length / period anyway, and its stacks need not
 * be walked and stored at each of a busy machine's thousands of
 * preemptions a second. Returns the scale, or 0 when it is not tracked.
 */
static __always_inline __u64 flare_preempt_scale(__u64 state, __u32 every)
{
	if (every <= 1 || state != 0)
		return 1;
	return bpf_get_prandom_u32() % every ? 0 : every;
}

/*
 * Adds `delta` to the counter of `key` in the hash map `map`. False when
 * the key is new and the map is full.
 */
static __always_inline bool flare_count(void *map, const void *key, __u64 delta)
{
	__u64 *count = bpf_map_lookup_elem(map, key);

	if (count) {
		__sync_fetch_and_add(count, delta);
		return true;
	}
	if (!bpf_map_update_elem(map, key, &delta, BPF_NOEXIST))
		return true;
	/* Another CPU may have inserted the same key meanwhile. */
	count = bpf_map_lookup_elem(map, key);
	if (!count)
		return false;
	__sync_fetch_and_add(count, delta);
	return true;
}

#endif /* FLARE_BPF_H */
