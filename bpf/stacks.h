/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * flare's own stack storage, for every stack of every tool: kernel stacks
 * and user stacks, whether walked by frame pointers (bpf_get_stack) or
 * with tables (unwind.h). Included by unwind.h.
 *
 * Why not the kernel's stack-trace map: it is a table of buckets chosen
 * by a hash of the frames with a fixed seed, without chaining. Two common
 * stacks in one bucket collide on every event of a run; without
 * BPF_F_REUSE_STACKID the second is lost ([Missed Kernel Stack]), with it
 * the first is overwritten under keys that still point to it. KASLR makes
 * it a different pair on every boot. Here a stack's id is a hash of its
 * frames, a different stack under a taken id is probed apart (the next
 * ids), and a stack is lost only when the storage is full.
 *
 * Two stacks are the same when their lengths and 64-bit hashes are (the
 * stored stack keeps its whole hash; the id holds 31 or 62 bits of it),
 * not frame by frame: comparing up to 127 frames on every event cost
 * more than the kernel's own map. Two different stacks of a run share a
 * 64-bit hash with a chance of about n^2 / 2^65: 1e-11 for 16384 stacks.
 */
#ifndef FLARE_STACKS_H
#define FLARE_STACKS_H

#include "unwind_types.h"

/* Every stack of the run, by id: its head (common.h); sized before load
 * (--stack-storage-size). Entries are never replaced, so an id names one
 * stack for as long as it is there. A periodic reader may delete the
 * stacks it has not met lately, head then tail (collect/stacks.rs,
 * Periodic::forgetting): one met again is stored again, its tail mended
 * (flare_mend_tail). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, struct flare_stack);
	__uint(max_entries, 16384);
} stacks SEC(".maps");

/* The tails of stacks longer than a head, a chunk an entry. User space
 * sizes it before load, and has it allocated as used where the kernel's
 * allocator keeps up in NMI context (BPF_F_NO_PREALLOC, 6.12+;
 * collect::stacks::size_storage). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct flare_tail_key);
	__type(value, struct flare_stack_chunk);
	__uint(max_entries, 16384);
} stack_tails SEC(".maps");

/* The ids of stacks newly stored, with their words: a periodic reader
 * that deletes the stacks it no longer meets also deletes those no count
 * ever named (an off-CPU period sampled out after its stack was stored at
 * the switch), which it never reads (collect/stacks.rs, News). A record
 * the ring has no room for is dropped: that stack stays until renewal.
 * User space sizes it before load. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} stack_news SEC(".maps");

/* Where a stack is assembled before it is stored: one per CPU, by CPU
 * (an array, not a per-CPU array, whose values may not exceed 32 KiB);
 * user space sets max_entries to the possible CPUs before load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct flare_stack_scratch);
	__uint(max_entries, 1);
} stack_scratch SEC(".maps");

/* This CPU's scratch stack, or NULL. */
static __always_inline struct flare_stack_scratch *flare_scratch(void)
{
	__u32 cpu = bpf_get_smp_processor_id();

	return bpf_map_lookup_elem(&stack_scratch, &cpu);
}

/* The frames the kernel's own walk (bpf_get_stack) stops at:
 * kernel.perf_event_max_stack, set before load. A stack that long (or
 * FLARE_MAX_FRAMES long, all it is asked for) may have been cut. */
const volatile __u32 kernel_max_frames = FLARE_MAX_STACK_DEPTH;

struct flare_stack_stats stack_stats = {};

/* Bits of a stack's hash that make its id: all of them, unless a test
 * narrows them (FLARE_TEST_STACK_HASH_BITS) so that different stacks
 * collide on purpose. Set before load. */
const volatile __u64 stack_hash_mask = ~0ULL;

/* Test knob (FLARE_TEST_RUNTIME_FRAME): every user stack ends in a
 * runtime frame of type FLARE_FRAME_TEST, so that tests can follow a
 * frame that is not an address from this record to every writer. Set
 * before load. */
const volatile bool test_runtime_frame = false;

/* FNV-1a over 64-bit words, with a fold so that the low bits (the ids'
 * first probe) depend on every frame. The table unwinder hashes frame by
 * frame as it walks, with the same step. */
#define FLARE_HASH_SEED	0xcbf29ce484222325ULL

static __always_inline __u64 flare_hash_step(__u64 h, __u64 pc)
{
	h = (h ^ pc) * 0x100000001b3ULL;
	return h ^ (h >> 29);
}

/* The hash of the first `len` words of `s`, of at most `max` words. */
static __always_inline __u64 flare_hash_frames(struct flare_stack_scratch *s, __u32 len, int max)
{
	__u64 h = FLARE_HASH_SEED;

	for (int i = 0; i < max && i < FLARE_MAX_STACK_WORDS; i++) {
		if (i >= len)
			break;
		h = flare_hash_step(h, s->pcs[i]);
	}
	return h;
}

/* True when `a` and `b` hold the same frames (see above). */
static __always_inline bool flare_same_stack(struct flare_stack *a, struct flare_stack_scratch *b)
{
	return a->len == b->len && a->hash == b->hash;
}

/*
 * Appends a runtime frame of `type` (FLARE_FRAME_*: a header, identifiers
 * `a` and `b`, then `cookie`) after the `len` words of `s`, at the root
 * end, hashing its words into `*hash`: the new length, or `len` when the
 * frame does not fit.
 */
static __always_inline __u64 flare_push_runtime_frame(struct flare_stack_scratch *s, __u64 len, __u64 *hash,
						      __u8 type, __u64 a, __u64 b, __u64 cookie)
{
	__u64 header = FLARE_FRAME_HEADER(type, 0, FLARE_RUNTIME_FRAME_WORDS);
	__u64 at = len;

	/* The compiler may test a copy of `len` the verifier cannot tie to
	 * `at`: bound `at` itself. Written word by word, not through an
	 * array: the walk's step that calls this must stay within the 512
	 * bytes of stack its program, it and its callbacks share. */
	barrier_var(at);
	if (at > FLARE_MAX_STACK_WORDS - 1 - FLARE_RUNTIME_FRAME_WORDS)
		return len;
	s->pcs[at] = header;
	s->pcs[at + 1] = a;
	s->pcs[at + 2] = b;
	s->pcs[at + 3] = cookie;
	*hash = flare_hash_step(*hash, header);
	*hash = flare_hash_step(*hash, a);
	*hash = flare_hash_step(*hash, b);
	*hash = flare_hash_step(*hash, cookie);
	return len + 1 + FLARE_RUNTIME_FRAME_WORDS;
}

/* Under the test knob, ends the user stack `s` of `len` words in a test
 * runtime frame: identifiers (the process id, the native words below it),
 * cookie 0. Returns the new length. */
static __always_inline __u64 flare_test_runtime_frame(struct flare_stack_scratch *s, __u64 len, __u64 *hash)
{
	if (!test_runtime_frame)
		return len;
	return flare_push_runtime_frame(s, len, hash, FLARE_FRAME_TEST,
					bpf_get_current_pid_tgid() >> 32, len, 0);
}

/* The chunks of a stack of `words` words, its head included. */
static __always_inline __u32 flare_stack_chunks(__u64 words)
{
	return (words + FLARE_MAX_STACK_DEPTH - 1) / FLARE_MAX_STACK_DEPTH;
}

/*
 * Stores the tail of `s` (its words past the head) under `id`, chunk by
 * chunk, skipping chunks already there. A chunk the tails' storage has no
 * room for ends it: the next sample of the stack tries again (a map
 * allocated as it fills may refuse in NMI context until it is refilled),
 * and user space shows the stack as cut where its tail ends meanwhile.
 */
static __always_inline void flare_store_tail(struct flare_stack_scratch *s, __u64 id)
{
	__u32 chunks = flare_stack_chunks(s->len & FLARE_LEN_WORDS);
	long err;

	s->tail_key.id = id;
	for (int k = 1; k < FLARE_STACK_CHUNKS; k++) {
		if (k >= chunks)
			break;
		s->tail_key.chunk = k;
		err = bpf_map_update_elem(&stack_tails, &s->tail_key,
					  &s->pcs[k * FLARE_MAX_STACK_DEPTH], BPF_NOEXIST);
		if (err && err != -FLARE_EEXIST) {
			__sync_fetch_and_add(&stack_stats.tails_full, 1);
			break;
		}
	}
}

/* Stores what is missing of the tail of `s`, already stored under `id`:
 * one lookup (its last chunk) when nothing is. */
static __always_inline void flare_mend_tail(struct flare_stack_scratch *s, __u64 id)
{
	__u32 chunks = flare_stack_chunks(s->len & FLARE_LEN_WORDS);

	if (chunks <= 1)
		return;
	s->tail_key.id = id;
	s->tail_key.chunk = chunks - 1;
	if (!bpf_map_lookup_elem(&stack_tails, &s->tail_key))
		flare_store_tail(s, id);
}

/*
 * Stores `s` (its len set) under the first of FLARE_STACK_PROBES ids from
 * `hash` that is free or already holds the same stack: ids are
 * `(hash + probe) & mask | base`, `mask` and `base` keeping kernel and user
 * stacks in ranges of their own (FLARE_KERNEL_ID_MASK, FLARE_USER_ID_BASE).
 * The head goes to `stacks`; the CPU that stores it first stores its
 * tail. Returns the id, or a negative errno as bpf_get_stackid gives one:
 * -ENOMEM when the storage is full, -EEXIST when every probed id holds
 * another stack (never seen in practice: the ids have 31 or 62 bits).
 * A function of its own, not inlined: its locals then take no room in
 * the frame of the program that walks the stack, whose frame and the
 * walk's callbacks' share 512 bytes (6.1 rounds each frame up to 32).
 */
static __noinline __s64 flare_store_stack(struct flare_stack_scratch *s, __u64 hash, __u64 mask,
					  __u64 base)
{
	if (s->len & FLARE_LEN_CUT)
		__sync_fetch_and_add(&stack_stats.cut, 1);
	s->hash = hash;
	hash &= stack_hash_mask;
	for (int p = 0; p < FLARE_STACK_PROBES; p++) {
		__u64 id = ((hash + p) & mask) | base;
		struct flare_stack *old = bpf_map_lookup_elem(&stacks, &id);

		if (!old) {
			/* The head is the scratch's first fields. */
			long err = bpf_map_update_elem(&stacks, &id, s, BPF_NOEXIST);

			if (!err) {
				__u64 news[2] = { id, s->len & FLARE_LEN_WORDS };

				if (news[1] > FLARE_MAX_STACK_DEPTH)
					flare_store_tail(s, id);
				bpf_ringbuf_output(&stack_news, news, sizeof(news), BPF_RB_NO_WAKEUP);
				return id;
			}
			/* Taken meanwhile by another CPU, full, or busy. */
			old = bpf_map_lookup_elem(&stacks, &id);
			if (!old) {
				/* A bucket lock taken (-EBUSY; -EDEADLK or
				 * -ETIMEDOUT where it is resilient) is no sign of
				 * a full storage; anything else is (-E2BIG, and
				 * 5.10 says otherwise). */
				if (err == -FLARE_EBUSY || err == -FLARE_EDEADLK ||
				    err == -FLARE_ETIMEDOUT) {
					__sync_fetch_and_add(&stack_stats.busy, 1);
					return -FLARE_EBUSY;
				}
				__sync_fetch_and_add(&stack_stats.full, 1);
				return -FLARE_ENOMEM;
			}
		}
		if (flare_same_stack(old, s)) {
			flare_mend_tail(s, id);
			return id;
		}
		__sync_fetch_and_add(&stack_stats.collisions, 1);
	}
	return -FLARE_EEXIST;
}

/* The `len` of a stack of `words` words and `frames` frames, `cut` when
 * the walk stopped before the outermost frame. */
static __always_inline __u64 flare_stack_len(__u64 words, __u64 frames, bool cut)
{
	return words | (frames << FLARE_LEN_FRAMES_SHIFT) | (cut ? FLARE_LEN_CUT : 0);
}

/*
 * Captures a stack with bpf_get_stack (`flags`: 0 for the kernel stack,
 * BPF_F_USER_STACK for the user stack by frame pointers) and stores it:
 * its id, or a negative errno (-EFAULT: there is no such stack, as for
 * the kernel stack of a sample taken in user mode). A kernel stack is
 * asked for up to FLARE_MAX_STACK_DEPTH frames, a user stack for as many
 * as the kernel walks (kernel_max_frames, up to FLARE_MAX_FRAMES): one
 * that long is marked cut.
 */
static __always_inline __s64 flare_get_stack(void *ctx, __u64 flags, __u64 mask, __u64 base)
{
	bool user = flags & BPF_F_USER_STACK;
	int max = user ? FLARE_MAX_FRAMES : FLARE_MAX_STACK_DEPTH;
	struct flare_stack_scratch *s = flare_scratch();
	__u64 hash, words;
	long n;

	if (!s)
		return -FLARE_EFAULT;
	n = bpf_get_stack(ctx, s->pcs, max * sizeof(__u64), flags);
	if (n <= 0)
		return n < 0 ? n : -FLARE_EFAULT;
	words = (__u64)n / sizeof(__u64);
	hash = flare_hash_frames(s, words, max);
	if (user) {
		bool cut = words >= kernel_max_frames || words >= FLARE_MAX_FRAMES;
		__u64 frames = words;

		words = flare_test_runtime_frame(s, words, &hash);
		frames += words != frames;
		s->len = flare_stack_len(words, frames, cut);
		if (cut)
			s->len |= FLARE_LEN_KERNEL_CAP;
	} else {
		s->len = flare_stack_len(words, words, false);
	}
	return flare_store_stack(s, hash, mask, base);
}

#endif /* FLARE_STACKS_H */
