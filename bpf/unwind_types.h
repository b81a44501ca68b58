/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Types of the in-kernel unwinder (unwind.h), shared with src/unwind/.
 * Kept apart so that the Rust side can mirror them without the walker.
 */
#ifndef FLARE_UNWIND_TYPES_H
#define FLARE_UNWIND_TYPES_H

#include "common.h"

/* --unwind: how user stacks are walked (rodata `unwind_mode`). */
#define UNWIND_MODE_FP		0	/* bpf_get_stack: frame pointers */
#define UNWIND_MODE_AUTO	1	/* tables, frame pointers where none */
#define UNWIND_MODE_DWARF	2	/* tables only: no table ends the walk */

/* Row kinds (src/unwind/table.rs): the CFA rule in the low 4 bits...
 * ("rsp" and "rbp" are sp and x29 on arm64) */
#define UNWIND_CFA_NONE		0	/* no information: frame pointer */
#define UNWIND_CFA_RSP		1	/* CFA = rsp + cfa_off */
#define UNWIND_CFA_RBP		2	/* CFA = rbp + cfa_off */
#define UNWIND_CFA_PLT		3	/* rsp + 8 (+ 8 once (rip & 15) >= cfa_off); x86-64 */
#define UNWIND_CFA_END		4	/* outermost frame: the stack is complete */
#define UNWIND_CFA_SIGNAL	5	/* signal trampoline: the kernel's frame at sp */
/* ... the rbp rule in bits 4-5 ... */
#define UNWIND_RBP_SAME		0
#define UNWIND_RBP_SAVED	1	/* at CFA + 8 * rbp_off */
#define UNWIND_RBP_UNKNOWN	2
/* ... and, on arm64, the return address's in bits 6-7 (x86-64: always at
 * CFA - 8, the bits 0). */
#define UNWIND_RA_LR		0	/* still in x30 (a leaf, a prologue) */
#define UNWIND_RA_AFTER_FP	1	/* at CFA + 8 * (rbp_off + 1): a frame record */
#define UNWIND_RA_SAVED		2	/* at CFA + 8 * rbp_off (x29 not saved) */
#define UNWIND_RA_UNKNOWN	3

/* An object's table has no more rows than this (binary search depth). */
#define UNWIND_MAX_ROWS_LOG2	23
#define UNWIND_MAX_ROWS		(1U << UNWIND_MAX_ROWS_LOG2)
/* A process has no more executable mappings than this. */
#define UNWIND_MAX_MAPS_LOG2	10
/* A table's page index: entry p is the row covering the start of page p
 * (rows are found from address - bias >> UNWIND_PAGE_SHIFT), so that a
 * lookup searches a page's few rows, not the whole table. */
#define UNWIND_PAGE_SHIFT	12
/* Mapping without a table (JIT, no CFI): frame pointers. */
#define UNWIND_NO_TABLE		0xffffffffU

/* Row of an object's table, from its `pc` to the next row's. */
struct unwind_row {
	__u32 pc;		/* address - the table's base */
	__u16 cfa_off;
	__u8 kind;		/* cfa | rbp << 4 | ra << 6 */
	__s8 rbp_off;		/* in 8-byte words from the CFA */
};

_Static_assert(sizeof(struct unwind_row) == 8, "unwind_row layout");

/* An executable mapping of a process, sorted by start in its slice. */
struct unwind_mapping {
	__u64 start;
	__u64 end;
	__u64 bias;		/* row pc = address - bias */
	__u32 table;		/* index in `unwind_tables`, or UNWIND_NO_TABLE */
	__u32 rows;		/* rows in that table */
	__u32 pages;		/* page index entries before the rows (0: none) */
	__u32 pad;
};

_Static_assert(sizeof(struct unwind_mapping) == 40, "unwind_mapping layout");

/* A process's mappings: a slice of `unwind_mappings`. */
struct unwind_proc {
	__u32 first;
	__u32 nr;
};

/* Sent to user space: a process, or an address, with no mapping known. */
#define UNWIND_EVENT_PROC	1	/* no `unwind_procs` entry */
#define UNWIND_EVENT_PC		2	/* pc in no mapping of the process */

struct unwind_event {
	__u32 pid;		/* as flare's PID namespace sees it */
	__u32 kind;
	__u64 pc;
};

/* What the unwinder did, summed over the run. */
struct unwind_stats {
	__u64 stacks;		/* user stacks walked */
	__u64 complete;		/* ... that reached the outermost frame */
	__u64 fp_frames;	/* frames found through the frame pointer */
	__u64 no_proc;		/* stacks of processes not loaded yet */
	__u64 events_lost;	/* events the ring buffer had no room for */
};

#endif /* FLARE_UNWIND_TYPES_H */
