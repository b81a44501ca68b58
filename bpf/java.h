/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * HotSpot frames in the user stacks the table unwinder walks (unwind.h,
 * which includes this). For a process user space found to run a JVM
 * (src/java/detect.rs fills `java_procs`), a pc in its code cache is not
 * a native frame: the walk finds the code blob holding it through its
 * code heap's segment map, records a Java frame and steps to the caller
 * the way that kind of blob's frames are laid out:
 * - the interpreter: frames chained by rbp, the Method* and bytecode
 *   pointer in fixed slots below it (the leaf's bytecode pointer is in
 *   r13), the caller's stack pointer in another;
 * - compiled methods and native wrappers (nmethods): a fixed frame size,
 *   the return address and saved rbp at its top, rbp free for other use;
 *   a leaf in its prologue or epilogue has a smaller frame;
 * - other stubs: their frame size, or rbp when they have none.
 * Each frame is a runtime frame (pointer, kind | pc offset or bytecode
 * index, cookie) that user space names from the live process
 * (src/java/namer.rs): a Method* with its ConstMethod* as cookie, or an
 * nmethod with its compile id (a freed and reused one has another).
 * Based on the JVM's own layouts as the OpenTelemetry profiler and
 * libjvm_db read them; flare's own code.
 */
#ifndef FLARE_JAVA_H
#define FLARE_JAVA_H

#include "common.h"

#define JAVA_MAX_HEAPS		4
/* Hops back through a segment map at most: each hop goes up to 254
 * segments, so blobs of up to 16,000 segments (1 MiB of 64-byte
 * segments; the interpreter is some 200 KiB). */
#define JAVA_SEGMAP_HOPS	64
/* Words above a compiled frame searched for its return address (x86-64
 * code may have pushed a few more than its frame size says). */
#define JAVA_RA_SLOTS		6

/* Frame kinds (src/java/mod.rs Kind), in the top byte of the second
 * identifier; bit 55 says the pc is a return address. */
#define JAVA_KIND_INTERPRETED	1
#define JAVA_KIND_COMPILED	2
#define JAVA_KIND_NATIVE	3
#define JAVA_KIND_STUB		4
#define JAVA_NO_BCI		0xffff

/* The first four bytes of a code blob's name. */
#define JAVA_NAME_NMETHOD	0x74656d6e	/* "nmethod" */
#define JAVA_NAME_NATIVE	0x6974616e	/* "native nmethod" */
#define JAVA_NAME_INTERPRETER	0x65746e49	/* "Interpreter" */
#define JAVA_NAME_VTABLE	0x62617476	/* "vtable chunks" */

/* A JVM process (src/java/mod.rs Process::bpf_bytes). */
struct java_proc {
	__u64 heap_low[JAVA_MAX_HEAPS];
	__u64 heap_high[JAVA_MAX_HEAPS];
	__u64 segmap[JAVA_MAX_HEAPS];
	__u64 cache_low, cache_high;
	__u16 blob_name, blob_code_begin, blob_frame_size, blob_frame_complete;
	__u16 nm_compile_id, nm_orig_pc, nm_deopt, method_const;
	__u16 const_size, const_code_size, heap_block, pad0;
	__u8 shift[JAVA_MAX_HEAPS];
	__s8 interp_sender_sp, interp_method, interp_bcp;
	__u8 pad1;
};

_Static_assert(sizeof(struct java_proc) == 144, "java_proc layout");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct java_proc);
	__uint(max_entries, 1024);
} java_procs SEC(".maps");

/* What the Java walk did, summed over the run. */
struct java_stats {
	__u64 stacks;		/* user stacks of JVM processes */
	__u64 frames;		/* Java frames put in them */
	__u64 no_blob;		/* code cache pcs in no code blob */
	__u64 bad_frames;	/* frames whose caller could not be found */
};

struct java_stats java_stats = {};

/* What the table walk carries for Java. */
struct java_walk {
	__u64 cache_low, cache_high;	/* 0, 0: not a JVM */
	__u64 r13;			/* the leaf's, as sampled */
	__u32 pid;
};

/* The registers the walk steps. */
struct java_regs {
	__u64 pc, sp, bp;
	bool return_address;
};

static __always_inline bool java_read(void *dst, __u32 size, __u64 addr)
{
	return bpf_probe_read_user(dst, size, (void *)addr) == 0;
}

/* Starts the Java side of the walk of process `pid`. */
static __always_inline void java_start(struct java_walk *j, __u32 pid, __u64 r13)
{
	struct java_proc *p = bpf_map_lookup_elem(&java_procs, &pid);

	if (!p)
		return;
	__sync_fetch_and_add(&java_stats.stacks, 1);
	j->cache_low = p->cache_low;
	j->cache_high = p->cache_high;
	j->r13 = r13;
	j->pid = pid;
}

/* True when `pc` lies in the JVM's code cache. */
static __always_inline bool java_in_cache(struct java_walk *j, __u64 pc)
{
	return pc >= j->cache_low && pc < j->cache_high;
}

/* A walk back through a segment map, one hop per bpf_loop step. */
struct java_segmap_walk {
	__u64 segmap;
	__u64 segment;
	int found;		/* 1: at a block's first segment; -1: none */
};

static long java_segmap_step(__u64 i, void *ctx)
{
	struct java_segmap_walk *s = ctx;
	__u8 tag = 0xff;

	if (!java_read(&tag, 1, s->segmap + s->segment) || tag == 0xff || tag > s->segment) {
		s->found = -1;
		return 1;
	}
	if (!tag) {
		s->found = 1;
		return 1;
	}
	s->segment -= tag;
	return 0;
}

/* The code blob holding `pc`, or 0. */
static __always_inline __u64 java_find_blob(struct java_proc *p, __u64 pc)
{
	struct java_segmap_walk s = {};
	__u64 low = 0;
	__u8 shift = 0;

	for (int i = 0; i < JAVA_MAX_HEAPS; i++) {
		if (pc >= p->heap_low[i] && pc < p->heap_high[i]) {
			low = p->heap_low[i];
			s.segmap = p->segmap[i];
			shift = p->shift[i];
			break;
		}
	}
	if (!low || shift > 16)
		return 0;
	s.segment = (pc - low) >> shift;
	bpf_loop(JAVA_SEGMAP_HOPS, java_segmap_step, &s, 0);
	if (s.found != 1)
		return 0;
	return low + (s.segment << shift) + p->heap_block;
}

/*
 * The caller of a leaf compiled frame stopped in its epilogue, as a
 * stack adjustment: 8 (only the return address is left on the stack:
 * on `ret`, or past `pop rbp` before it), 16 (on `pop rbp`), or 0 (not
 * in an epilogue, as far as its bytes tell).
 */
static __always_inline __u64 java_epilogue(__u64 pc)
{
	__u8 code[16];

	if (!java_read(code, sizeof(code), pc - 1))
		return 0;
	if (code[1] == 0xc3)		/* ret */
		return 8;
	/* A ret soon after: the tail of an epilogue (a return poll). */
	for (int i = 2; i < sizeof(code); i++) {
		if (code[i] != 0xc3)
			continue;
		if (code[1] == 0x5d)	/* pop rbp */
			return 16;
		if (code[0] == 0x5d || code[0] == 0xc9)	/* after pop rbp / leave */
			return 8;
		return 0;
	}
	return 0;
}

/*
 * Steps through the Java frame at `r->pc` (in the code cache): records it
 * after the `*n` words of `out` (hashing it into `*hash`) and sets `r` to
 * its caller's registers. Returns 0 when it did, 1 when the stack is full
 * or the frame's caller cannot be found (the walk ends), -1 when the pc
 * is in no code blob (the caller walks it natively).
 */
static __always_inline long java_step(struct java_walk *j, struct java_regs *r,
				      struct flare_stack *out, __u32 *n, __u64 *hash)
{
	struct java_proc *p = bpf_map_lookup_elem(&java_procs, &j->pid);
	__u64 blob, name = 0, code_begin = 0, ptr, cookie, offset, len;
	__u64 pc = r->pc, sp = r->sp, bp = r->bp, ra = 0, caller_sp, caller_bp = bp;
	__s32 frame_size = 0, complete = 0;
	__u32 kind, first = 0;

	if (!p)
		return -1;
	blob = java_find_blob(p, r->return_address ? pc - 1 : pc);
	if (!blob) {
		__sync_fetch_and_add(&java_stats.no_blob, 1);
		return -1;
	}
	if (!java_read(&name, 8, blob + p->blob_name) || !java_read(&first, 4, name) ||
	    !java_read(&code_begin, 8, blob + p->blob_code_begin) ||
	    !java_read(&frame_size, 4, blob + p->blob_frame_size) ||
	    !java_read(&complete, 4, blob + p->blob_frame_complete))
		goto bad;
	frame_size *= 8;
	if (frame_size < 0 || frame_size > 0x100000)
		goto bad;

	if (first == JAVA_NAME_INTERPRETER) {
		__u64 method = 0, bcp = 0, cmethod = 0;
		__u16 code_size = 0;

		if (bp < sp || bp >= sp + 0x100000)
			goto bad;
		if (!java_read(&method, 8, bp + p->interp_method * 8) ||
		    !java_read(&caller_sp, 8, bp + p->interp_sender_sp * 8) ||
		    !java_read(&caller_bp, 8, bp) || !java_read(&ra, 8, bp + 8))
			goto bad;
		if (r->return_address) {
			if (!java_read(&bcp, 8, bp + p->interp_bcp * 8))
				bcp = 0;
		} else {
			bcp = j->r13;
		}
		if (!java_read(&cmethod, 8, method + p->method_const) ||
		    !java_read(&code_size, 2, cmethod + p->const_code_size))
			goto bad;
		offset = bcp - (cmethod + p->const_size);
		if (bcp < cmethod + p->const_size || offset >= code_size)
			offset = JAVA_NO_BCI;
		kind = JAVA_KIND_INTERPRETED;
		ptr = method;
		cookie = cmethod;
	} else if (first == JAVA_NAME_NMETHOD || first == JAVA_NAME_NATIVE) {
		__u64 deopt = 0, adjust = 0;
		__s32 orig_pc_offset = 0;
		__u32 id = 0;

		if (!java_read(&id, 4, blob + p->nm_compile_id))
			goto bad;
		/* A deoptimized frame returns to the deopt handler; the pc
		 * it had is saved in the frame. */
		if (java_read(&deopt, 8, blob + p->nm_deopt) && pc == deopt &&
		    java_read(&orig_pc_offset, 4, blob + p->nm_orig_pc)) {
			__u64 orig = 0;

			if (java_read(&orig, 8, sp + orig_pc_offset) && orig >= code_begin)
				pc = orig;
		}
		if (!r->return_address && pc < code_begin + complete) {
			/* In the prologue: the frame is not built yet. */
			adjust = pc + 4 >= code_begin + complete ? 16 : 8;
		} else if (!r->return_address) {
			adjust = java_epilogue(pc);
		}
		if (adjust) {
			caller_sp = sp + adjust;
			if (!java_read(&ra, 8, caller_sp - 8))
				goto bad;
			if (adjust == 16 && !java_read(&caller_bp, 8, caller_sp - 16))
				goto bad;
		} else {
			__u64 words[JAVA_RA_SLOTS] = {};
			bool found = false;

			caller_sp = sp + frame_size;
			if (!java_read(words, sizeof(words), caller_sp - 8))
				goto bad;
			for (int i = 0; i < JAVA_RA_SLOTS; i++) {
				if (java_in_cache(j, words[i])) {
					ra = words[i];
					caller_sp += i * 8;
					found = true;
					break;
				}
			}
			if (!found)
				goto bad;
			if (!java_read(&caller_bp, 8, caller_sp - 16))
				goto bad;
		}
		kind = first == JAVA_NAME_NATIVE ? JAVA_KIND_NATIVE : JAVA_KIND_COMPILED;
		ptr = blob;
		cookie = id;
		offset = pc - code_begin;
	} else {
		if (first == JAVA_NAME_VTABLE || (!r->return_address && pc < code_begin + complete)) {
			caller_sp = sp + 8;
		} else if (!frame_size) {
			/* Stubs without a frame size keep rbp as a frame
			 * pointer (the call stub). */
			if (bp < sp)
				goto bad;
			caller_sp = bp + 16;
			if (!java_read(&caller_bp, 8, bp))
				goto bad;
		} else {
			caller_sp = sp + frame_size;
			if (frame_size >= 16 && !java_read(&caller_bp, 8, caller_sp - 16))
				goto bad;
		}
		if (!java_read(&ra, 8, caller_sp - 8))
			goto bad;
		kind = JAVA_KIND_STUB;
		ptr = blob;
		cookie = first;
		offset = pc - code_begin;
	}
	if (caller_sp <= sp)
		goto bad;
	len = flare_push_runtime_frame(out, *n, hash, FLARE_FRAME_JAVA, ptr,
				       ((__u64)kind << 56) | ((__u64)r->return_address << 55) |
				       (offset & 0xffffffff),
				       cookie);
	if (len == *n)
		return 1;
	*n = len;
	__sync_fetch_and_add(&java_stats.frames, 1);
	r->pc = ra;
	r->sp = caller_sp;
	r->bp = caller_bp;
	r->return_address = true;
	return 0;
bad:
	__sync_fetch_and_add(&java_stats.bad_frames, 1);
	return -1;
}

#endif /* FLARE_JAVA_H */
