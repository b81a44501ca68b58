/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Types shared by stackcount.bpf.c and src/tools/stackcount/. */
#ifndef FLARE_STACKCOUNT_H
#define FLARE_STACKCOUNT_H

#include "common.h"

/* The pid of a key when stacks of all processes are counted together
 * (kernel stacks only, without -P): bcc's 0xffffffff. */
#define FLARE_SC_ALL_PIDS 0xffffffffU

/* One entry of the `counts` map: a distinct (process, stacks) pair. */
struct stackcount_key {
	__u32 pid;		/* thread group id, or FLARE_SC_ALL_PIDS */
	__s32 kernel_stack_id;	/* id in `stacks`, or a negative errno */
	__s64 user_stack_id;	/* id in `stacks`, or a negative errno */
	char comm[FLARE_TASK_COMM_LEN];	/* empty with FLARE_SC_ALL_PIDS */
	__u64 start;		/* when the process started (flare_current_start),
				 * 0 with FLARE_SC_ALL_PIDS */
};

_Static_assert(sizeof(struct stackcount_key) == 40, "stackcount_key layout");

/* Counters of what happened, read at every interval. */
struct stackcount_stats {
	__u64 events;		/* events that passed the filters */
	__u64 hash_full;	/* events dropped because `counts` was full */
	__u64 pidns_miss;	/* events of tasks outside flare's PID namespace */
	__u64 ring_full;	/* timed events dropped: the ring was full */
};

/* A timed event (timed.h). */
struct stackcount_timed {
	struct flare_timed_hdr hdr;
	struct stackcount_key key;
};

#endif /* FLARE_STACKCOUNT_H */
