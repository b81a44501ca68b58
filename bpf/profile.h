/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Types shared by profile.bpf.c and src/tools/profile.rs. */
#ifndef FLARE_PROFILE_H
#define FLARE_PROFILE_H

#include "common.h"

/* One entry of the `counts` map: a distinct (task, stacks) pair. */
struct profile_key {
	__u32 pid;		/* thread group id, as flare's PID namespace sees it */
	__u32 tid;		/* thread id, or 0 unless threads are told apart */
	__s64 user_stack_id;	/* id in `stacks`, or a negative errno */
	__s32 kernel_stack_id;	/* id in `stacks`, or a negative errno */
	char comm[FLARE_TASK_COMM_LEN];
	__u32 pad;
	__u64 start;		/* when the process started (flare_current_start) */
};

_Static_assert(sizeof(struct profile_key) == 48, "profile_key layout");

/* Counters of what could not be recorded. */
struct profile_stats {
	__u64 samples;		/* samples that passed the filters */
	__u64 hash_full;	/* samples dropped because `counts` was full */
	__u64 pidns_miss;	/* samples of tasks outside flare's PID namespace */
	__u64 ring_full;	/* timed samples dropped: the ring was full */
};

/* A timed sample (timed.h). */
struct profile_timed {
	struct flare_timed_hdr hdr;
	struct profile_key key;
};

#endif /* FLARE_PROFILE_H */
