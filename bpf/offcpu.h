/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Types shared by offcpu.bpf.c and src/tools/offcpu/. */
#ifndef FLARE_OFFCPU_H
#define FLARE_OFFCPU_H

#include "common.h"

/* Which tool the object serves (rodata `mode`). */
#define OFFCPU_MODE_OFFCPU	0	/* offcputime: blocked time by own stack */
#define OFFCPU_MODE_WAKEUP	1	/* wakeuptime: sleep time by waker stack */
#define OFFCPU_MODE_OFFWAKE	2	/* offwaketime: own stack + waker stack */

/* Thread filters (rodata `thread_filter`), bcc's -p/-t/-u/-k. */
#define OFFCPU_THREADS_ALL	0
#define OFFCPU_THREADS_PIDS	1	/* tgid in `targets` */
#define OFFCPU_THREADS_TIDS	2	/* tid in `targets` */
#define OFFCPU_THREADS_USER	3	/* no kernel threads */
#define OFFCPU_THREADS_KERNEL	4	/* kernel threads only */

/* A task on one side of a key: ids, name and stack ids. */
struct offcpu_task {
	__u32 pid;		/* thread group id */
	__u32 tid;		/* thread id */
	__s64 user_stack_id;	/* id in `stacks`, or a negative errno */
	__s32 kernel_stack_id;	/* id in `stacks`, or a negative errno */
	char comm[FLARE_TASK_COMM_LEN];
	__u32 pad;
	__u64 start;		/* when the process started (flare_current_start) */
};

_Static_assert(sizeof(struct offcpu_task) == 48, "offcpu_task layout");

/*
 * One entry of the `counts` map. offcputime fills `target` only;
 * wakeuptime fills `waker` and the target's comm; offwaketime both (the
 * waker is all zeroes, with `has_waker` 0, when no wakeup was seen).
 */
struct offcpu_key {
	struct offcpu_task target;
	struct offcpu_task waker;
	__u32 has_waker;
	__u32 pad;
};

_Static_assert(sizeof(struct offcpu_key) == 104, "offcpu_key layout");

/* What is kept for a task from switch-out until it runs again. */
struct offcpu_start {
	__u64 ts;		/* bpf_ktime_get_ns() at switch-out */
	struct offcpu_task task;
	__u64 scale;		/* what the period stands for: 1, or preempt_every */
};

_Static_assert(sizeof(struct offcpu_start) == 64, "offcpu_start layout");

/* Counters of what could not be recorded. */
struct offcpu_stats {
	__u64 hash_full;	/* blocked periods dropped: `counts` was full */
	__u64 start_full;	/* switch-outs not tracked: `start` was full */
	__u64 negative;		/* periods with a clock going backwards */
	__u64 ring_full;	/* timed periods dropped: the ring was full */
};

/* A timed blocked period (timed.h): it began at hdr.time_ns and lasted
 * hdr.value microseconds. */
struct offcpu_timed {
	struct flare_timed_hdr hdr;
	struct offcpu_key key;
};

#endif /* FLARE_OFFCPU_H */
