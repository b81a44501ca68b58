/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Definitions shared by every flare BPF program and read by the Rust side
 * through the skeletons' generated types.
 */
#ifndef FLARE_COMMON_H
#define FLARE_COMMON_H

#define FLARE_TASK_COMM_LEN 16
/* The kernel's default perf_event_max_stack. */
#define FLARE_MAX_STACK_DEPTH 127
/* Stack id stored when a stack was not asked for (-U / -K). */
#define FLARE_STACK_SKIPPED (-1)

#define FLARE_EFAULT 14
#define FLARE_EEXIST 17
#define FLARE_ENOMEM 12
#define FLARE_E2BIG 7

/* Stack ids (bpf/stacks.h): kernel stacks' ids are below 2^31 (they fit
 * the keys' 32-bit fields), user stacks' at or above FLARE_USER_ID_BASE;
 * a negative id is an errno. */
#define FLARE_KERNEL_ID_MASK	0x7fffffffULL
#define FLARE_USER_ID_BASE	(1ULL << 62)
#define FLARE_USER_ID_MASK	(FLARE_USER_ID_BASE - 1)
/* Ids tried for one stack before it is given up as colliding. */
#define FLARE_STACK_PROBES	4

/* A stack in flare's storage (`stacks`), leaf first, with the 64-bit
 * hash of its frames (its id holds only some of the bits). */
struct flare_stack {
	__u64 len;
	__u64 hash;
	__u64 pcs[FLARE_MAX_STACK_DEPTH];
};

/* What the stack storage met, summed over the run. */
struct flare_stack_stats {
	__u64 collisions;	/* ids taken by another stack (probed past) */
	__u64 full;		/* stacks not stored: the storage was full */
};

#endif /* FLARE_COMMON_H */
