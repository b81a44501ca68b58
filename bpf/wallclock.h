/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Types shared by wallclock.bpf.c and src/tools/wallclock.rs. */
#ifndef FLARE_WALLCLOCK_H
#define FLARE_WALLCLOCK_H

#include "common.h"

/* `state` of a key whose time was spent on the CPU (sampled). Other
 * values are the task state at switch-out (0: preempted while runnable). */
#define WALL_ON_CPU 0xffffffffu

/* One entry of the `counts` map: a thread, its stacks and where its time
 * went; the value is nanoseconds. */
struct wallclock_key {
	__u32 pid;		/* thread group id, as flare's PID namespace sees it */
	__u32 tid;		/* thread id, likewise */
	__s64 user_stack_id;	/* id in `stacks`, or a negative errno */
	__s32 kernel_stack_id;	/* id in `stacks`, or a negative errno */
	__u32 state;		/* WALL_ON_CPU, or the task state when it blocked */
	char comm[FLARE_TASK_COMM_LEN];
	__u64 start;		/* when the process started (flare_current_start) */
};

_Static_assert(sizeof(struct wallclock_key) == 48, "wallclock_key layout");

/* A thread off the CPU since `ts` (bpf_ktime_get_ns), with its key. */
struct wallclock_start {
	__u64 ts;
	struct wallclock_key key;
};

_Static_assert(sizeof(struct wallclock_start) == 56, "wallclock_start layout");

/* Counters of what could not be recorded. */
struct wallclock_stats {
	__u64 hash_full;	/* periods or samples dropped: `counts` was full */
	__u64 start_full;	/* switch-outs not tracked: `start` was full */
	__u64 pidns_miss;	/* events of tasks outside flare's PID namespace */
	__u64 ring_full;	/* timed periods or samples dropped: the ring was full */
};

/* A timed sample or blocked period (timed.h); hdr.value is nanoseconds. */
struct wallclock_timed {
	struct flare_timed_hdr hdr;
	struct wallclock_key key;
};

#endif /* FLARE_WALLCLOCK_H */
