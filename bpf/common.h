/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Definitions shared by every flare BPF program and read by the Rust side
 * through the skeletons' generated types.
 */
#ifndef FLARE_COMMON_H
#define FLARE_COMMON_H

#define FLARE_TASK_COMM_LEN 16
/* The kernel's default perf_event_max_stack: the words of a stored
 * stack's head (and of each chunk of its tail), and the deepest kernel
 * stack flare asks for. */
#define FLARE_MAX_STACK_DEPTH 127
/* User stacks go deeper: a stack of up to FLARE_STACK_CHUNKS chunks of
 * FLARE_MAX_STACK_DEPTH words, and of at most FLARE_MAX_FRAMES frames (a
 * runtime frame takes 4 words, so 1,024 of them fit beside natives). */
#define FLARE_STACK_CHUNKS	36
#define FLARE_MAX_STACK_WORDS	(FLARE_STACK_CHUNKS * FLARE_MAX_STACK_DEPTH)
#define FLARE_MAX_FRAMES	1024
/* Stack id stored when a stack was not asked for (-U / -K). */
#define FLARE_STACK_SKIPPED (-1)

#define FLARE_EFAULT 14
#define FLARE_EEXIST 17
#define FLARE_ENOMEM 12
#define FLARE_E2BIG 7
#define FLARE_EBUSY 16
#define FLARE_EDEADLK 35
#define FLARE_ETIMEDOUT 110

/* Stack ids (bpf/stacks.h): kernel stacks' ids are below 2^31 (they fit
 * the keys' 32-bit fields), user stacks' at or above FLARE_USER_ID_BASE;
 * a negative id is an errno. */
#define FLARE_KERNEL_ID_MASK	0x7fffffffULL
#define FLARE_USER_ID_BASE	(1ULL << 62)
#define FLARE_USER_ID_MASK	(FLARE_USER_ID_BASE - 1)
/* Ids tried for one stack before it is given up as colliding. */
#define FLARE_STACK_PROBES	4

/*
 * A stack in flare's storage (`stacks`), leaf first, with the 64-bit
 * hash of its words (its id holds only some of the bits). `len` counts
 * words, not frames: a native frame is one word, its address; any other
 * frame is a header word and the words it says follow. A header's top
 * 16 bits are FLARE_FRAME_TAG, which no canonical address has (x86-64
 * and arm64 user addresses start with zeros, kernel ones with 0xffff),
 * so native stacks are stored as they were walked and the one decoder
 * (src/collect/stacks.rs) tells the kinds apart word by word.
 */
#define FLARE_FRAME_TAG		0xf1a0ULL
/* Header: tag, type (8 bits), flags (8 bits), 24 bits free, words that
 * follow (8 bits). */
#define FLARE_FRAME_HEADER(type, flags, words) \
	((FLARE_FRAME_TAG << 48) | ((__u64)(type) << 40) | ((__u64)(flags) << 32) | (__u64)(words))
/* Frame types. A runtime frame is followed by three words: two of the
 * runtime's identifiers as read in the process (e.g. a code object and an
 * instruction index) and a validity cookie read beside them, which tells
 * a reused address apart. */
#define FLARE_FRAME_PYTHON	1
#define FLARE_FRAME_JAVA	2
#define FLARE_FRAME_V8		3
#define FLARE_FRAME_RUBY	4
/* Written only under the test knob `test_runtime_frame`. */
#define FLARE_FRAME_TEST	255
#define FLARE_RUNTIME_FRAME_WORDS 3

/* What leads every time-stamped record (timed.h): the tool's key follows. */
struct flare_timed_hdr {
	__u64 time_ns;		/* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 value;		/* 1 for a sample; blocked time in microseconds */
	__u32 tid;		/* the thread, as flare's PID namespace sees it */
	__u32 cpu;
};

_Static_assert(sizeof(struct flare_timed_hdr) == 24, "flare_timed_hdr layout");

/*
 * A stored stack's head: its first FLARE_MAX_STACK_DEPTH words. A longer
 * stack keeps the rest in `stack_tails` (stacks.h), chunk by chunk, so
 * that storage costs what a stack is long. `len` holds the stack's words
 * (FLARE_LEN_WORDS), its frames (FLARE_LEN_FRAMES) and whether the walk
 * was cut before the outermost frame (FLARE_LEN_CUT).
 */
struct flare_stack {
	__u64 len;
	__u64 hash;
	__u64 pcs[FLARE_MAX_STACK_DEPTH];
};

#define FLARE_LEN_WORDS		0xffffULL
#define FLARE_LEN_FRAMES_SHIFT	16
#define FLARE_LEN_CUT		(1ULL << 32)
/* ... by the kernel's own walk (bpf_get_stack), at its limit. */
#define FLARE_LEN_KERNEL_CAP	(1ULL << 33)

/* A chunk of a long stack's tail: chunk k (from 1) holds words
 * k * FLARE_MAX_STACK_DEPTH on. */
struct flare_tail_key {
	__u64 id;
	__u64 chunk;
};

/* Where a stack is assembled (as big as the deepest; its first fields are
 * a `struct flare_stack`'s, so its head is stored from it as it is), with
 * the key its tail chunks are stored under: kept here, not on the BPF
 * stack, whose 512 bytes the tools' own keys and the walk already fill. */
struct flare_stack_scratch {
	__u64 len;
	__u64 hash;
	__u64 pcs[FLARE_MAX_STACK_WORDS];
	struct flare_tail_key tail_key;
};

struct flare_stack_chunk {
	__u64 pcs[FLARE_MAX_STACK_DEPTH];
};

/* What the stack storage met, summed over the run. */
struct flare_stack_stats {
	__u64 collisions;	/* ids taken by another stack (probed past) */
	__u64 full;		/* stacks not stored: the storage was full */
	__u64 busy;		/* stacks not stored: the storage was busy */
	__u64 tails_full;	/* tail chunks not stored: their storage was full */
	__u64 cut;		/* stacks cut at the depth limit */
};

#endif /* FLARE_COMMON_H */
