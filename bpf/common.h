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

#endif /* FLARE_COMMON_H */
