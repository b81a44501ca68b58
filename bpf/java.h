/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * HotSpot frames in the user stacks the table unwinder walks (unwind.h,
 * which includes this). For a process user space found to run a JVM
 * (src/runtime/java/detect.rs fills `java_procs`), a pc in its code cache is not
 * a native frame: the walk finds the code blob holding it through its
 * code heap's segment map, records a Java frame and steps to the caller
 * the way that kind of blob's frames are laid out:
 * - the interpreter: frames chained by the frame pointer (rbp; x29 on
 *   arm64), the Method* and bytecode pointer in fixed slots below it (the
 *   leaf's bytecode pointer is in r13; x22 on arm64), the caller's stack
 *   pointer in another;
 * - compiled methods and native wrappers (nmethods): a fixed frame size,
 *   the return address and saved frame pointer at its top, the frame
 *   pointer free for other use; a leaf in its prologue or epilogue has a
 *   smaller frame (x86-64) or its return address in x30 (arm64), told
 *   from its code's bytes;
 * - other stubs: their frame size, or the frame pointer when they have
 *   none.
 * Each frame is a runtime frame (pointer, kind | pc offset or bytecode
 * index, cookie) that user space names from the live process
 * (src/runtime/java/namer.rs): a Method* with its ConstMethod* as cookie, or an
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

/* A return address's bits (arm64: without its pointer-authentication
 * code, as unwind.h strips it). */
#if defined(__TARGET_ARCH_arm64)
#define JAVA_ADDR_MASK		0x0000ffffffffffffULL
#else
#define JAVA_ADDR_MASK		(~0ULL)
#endif

/* Frame kinds (src/runtime/java/mod.rs Kind), in the top byte of the second
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

/* A JVM process (src/runtime/java/mod.rs Process::bpf_bytes). */
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
	__u8 flags;
};

/* java_proc.flags: JDK 23 on, the code's start and the deopt handler are
 * int offsets from the blob, not addresses. */
#define JAVA_BLOB_OFFSETS	1

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

/* arm64 instructions read around a leaf's pc: JAVA_A64_BEFORE before it,
 * then the pc's and those after it (an nmethod's prologue, from its
 * inline cache check to its frame's completion, fits). */
#define JAVA_A64_BEFORE		8
#define JAVA_A64_WORDS		48

/* Bytes of a code blob read at once: its header and, for an nmethod,
 * the members BPF reads (JDK 11's compile id lies at 324). */
#define JAVA_BLOB_READ		336
/* Words of an interpreter frame read at once, from 10 below its frame
 * pointer to the return address above it. */
#define JAVA_FRAME_BELOW	10
#define JAVA_FRAME_WORDS	(JAVA_FRAME_BELOW + 2)

/*
 * The Java walk's state and what it reads, one per CPU, not on the stack:
 * the program that loops over the walk's step, the step and the callbacks
 * it calls share the kernel's 512 bytes of stack, of which offcputime's
 * programs leave the step 96. A read's destination is a stack slot, and
 * so is every value live across a helper call (BPF keeps only four
 * registers across one): the frame being stepped lives here instead.
 */
struct java_scratch {
	struct java_proc proc;		/* the JVM being walked */
	__u64 word;			/* one word read */
	/* The frame being stepped, its blob and its caller's registers. */
	__u64 pc, sp, bp, blob, code_begin, ptr, cookie, offset;
	__u64 ra, caller_sp, caller_bp;
	__s64 frame_size, complete;
	__u32 first, kind;
	__u64 lr;			/* arm64: the leaf's x30 (0 past the leaf) */
	bool return_address;		/* pc is a return address */
	bool used_lr;			/* the caller's pc came from lr */
	/* The segment map walk: the blob's heap, its segment. */
	__u64 heap_low, segmap, segment, shift;
	__u8 blob_bytes[JAVA_BLOB_READ];
	__u64 frame[JAVA_FRAME_WORDS];
	__u8 code[16];
	__u32 insns[JAVA_A64_WORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct java_scratch);
	__uint(max_entries, 1);
} java_scratch SEC(".maps");

static __always_inline struct java_scratch *java_scratch_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&java_scratch, &zero);
}

static __always_inline bool java_read(void *dst, __u32 size, __u64 addr)
{
	return bpf_probe_read_user(dst, size, (void *)addr) == 0;
}

/* Starts the Java side of the walk of process `pid`: true for a JVM. */
static __always_inline bool java_start(__u32 pid)
{
	struct java_proc *p = bpf_map_lookup_elem(&java_procs, &pid);
	struct java_scratch *js = java_scratch_get();

	if (!p || !js)
		return false;
	__sync_fetch_and_add(&java_stats.stacks, 1);
	js->proc = *p;
	return true;
}

/* True when `pc` lies in the code cache of the JVM being walked. */
static __always_inline bool java_in_cache(struct java_scratch *js, __u64 pc)
{
	return pc >= js->proc.cache_low && pc < js->proc.cache_high;
}

/* The code blob holding `pc`, or 0: back through its code heap's
 * segment map, each byte the number of segments to step back (0 at a
 * block's first segment, 0xff where no block is). A bounded loop, not
 * bpf_loop, whose context would take stack. */
static __always_inline __u64 java_find_blob(struct java_scratch *js, __u64 pc)
{
	struct java_proc *p = &js->proc;

	js->heap_low = 0;
	for (int i = 0; i < JAVA_MAX_HEAPS; i++) {
		if (pc >= p->heap_low[i] && pc < p->heap_high[i]) {
			js->heap_low = p->heap_low[i];
			js->segmap = p->segmap[i];
			js->shift = p->shift[i];
			break;
		}
	}
	if (!js->heap_low || js->shift > 16)
		return 0;
	js->segment = (pc - js->heap_low) >> js->shift;
#pragma clang loop unroll(disable)
	for (int i = 0; i < JAVA_SEGMAP_HOPS; i++) {
		__u8 tag;

		if (!java_read(&js->word, 1, js->segmap + js->segment))
			return 0;
		tag = js->word;
		if (!tag)
			return js->heap_low + (js->segment << js->shift) + p->heap_block;
		if (tag == 0xff || tag > js->segment)
			return 0;
		js->segment -= tag;
	}
	return 0;
}

/* Members of the blob read into `js`, at offsets the tables gave (0 past
 * the bytes read). */
static __always_inline __u64 java_blob_u64(struct java_scratch *js, __u16 off)
{
	if (off > JAVA_BLOB_READ - 8)
		return 0;
	return *(__u64 *)(js->blob_bytes + off);
}

static __always_inline __s32 java_blob_s32(struct java_scratch *js, __u16 off)
{
	if (off > JAVA_BLOB_READ - 4)
		return 0;
	return *(__s32 *)(js->blob_bytes + off);
}

/* The word `slot` words from an interpreter frame's frame pointer, of
 * those read into `js` (0 outside them). */
static __always_inline __u64 java_frame_word(struct java_scratch *js, __s8 slot)
{
	/* Unsigned: a slot below the words read wraps past them. */
	__u64 i = (__u64)(__s64)(JAVA_FRAME_BELOW + slot);

	if (i >= JAVA_FRAME_WORDS)
		return 0;
	return js->frame[i];
}

/*
 * The caller of a leaf compiled frame stopped in its epilogue, as a
 * stack adjustment: 8 (only the return address is left on the stack:
 * on `ret`, or past `pop rbp` before it), 16 (on `pop rbp`), or 0 (not
 * in an epilogue, as far as its bytes tell).
 */
static __always_inline __u64 java_epilogue(struct java_scratch *js, __u64 pc)
{
	__u8 *code = js->code;

	if (!java_read(code, sizeof(js->code), pc - 1))
		return 0;
	if (code[1] == 0xc3)		/* ret */
		return 8;
	/* A ret soon after: the tail of an epilogue (a return poll). */
	for (int i = 2; i < sizeof(js->code); i++) {
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

/* The leaf's bytecode pointer register, where the interpreter keeps it:
 * r13 (x86-64), x22 (arm64). */
static __always_inline __u64 java_leaf_bcp(void)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());

	if (!regs)
		return 0;
#if defined(__TARGET_ARCH_x86)
	return BPF_CORE_READ(regs, r13);
#elif defined(__TARGET_ARCH_arm64)
	return BPF_CORE_READ(regs, regs[22]);
#else
	return 0;
#endif
}

/*
 * Where a leaf compiled frame's caller is on arm64, from the code around
 * its pc (src/runtime/java/arm64.rs has the same rules, and tests). HotSpot builds
 * an nmethod's frame with `sub sp, sp, #size; stp x29, x30, [sp, #size-16]`
 * (or, for large frames and native wrappers, `stp x29, x30, [sp, #-16]!`
 * then the sub) and takes it down with `ldp x29, x30, [sp, #size-16];
 * add sp, sp, #size` (or the add, then `ldp x29, x30, [sp], #16`) before
 * a return poll and `ret`.
 */
#define JAVA_LEAF_BUILT		0	/* the frame size gives the caller */
#define JAVA_LEAF_LR_AT_SP	1	/* caller's sp = sp, return address in x30 */
#define JAVA_LEAF_LR_ABOVE	2	/* caller's sp = sp + frame size, x30 */
#define JAVA_LEAF_RECORD_AT_SP	3	/* x29 and x30 saved at sp, caller's sp 16 above */

#define A64_STP_FP_LR_OFF(i)	(((i) & 0xffc07fff) == 0xa9007bfd)
#define A64_STP_FP_LR_PRE(i)	(((i) & 0xffc07fff) == 0xa9807bfd)
#define A64_LDP_FP_LR_OFF(i)	(((i) & 0xffc07fff) == 0xa9407bfd)
#define A64_LDP_FP_LR_POST(i)	(((i) & 0xffc07fff) == 0xa8c07bfd)
#define A64_SUB_SP(i)		(((i) & 0xff8003ff) == 0xd10003ff || ((i) & 0xffe0ffff) == 0xcb2063ff)
#define A64_ADD_SP(i)		(((i) & 0xff8003ff) == 0x910003ff || ((i) & 0xffe0ffff) == 0x8b2063ff)
/* ret, retaa, retab; b, bl; br, blr. */
#define A64_LEAVES(i)		((i) == 0xd65f03c0 || (i) == 0xd65f0bff || (i) == 0xd65f0fff || \
				 ((i) & 0x7c000000) == 0x14000000 || ((i) & 0xffdffc1f) == 0xd61f0000)

static __always_inline __u32 java_arm64_leaf(struct java_scratch *js, bool prologue)
{
	__u32 *c = js->insns;
	__u64 end = js->code_begin + js->complete;
	bool sub = false;

	if (!java_read(c, sizeof(js->insns), js->pc - JAVA_A64_BEFORE * 4))
		return JAVA_LEAF_BUILT;
	if (prologue) {
		/* What the prologue has still to do, from the pc on. */
#pragma clang loop unroll(disable)
		for (int i = JAVA_A64_BEFORE; i < JAVA_A64_WORDS; i++) {
			__u32 insn = c[i];

			if (js->pc + (i - JAVA_A64_BEFORE) * 4 >= end)
				break;
			if (A64_STP_FP_LR_OFF(insn))
				return sub ? JAVA_LEAF_LR_AT_SP : JAVA_LEAF_LR_ABOVE;
			if (A64_STP_FP_LR_PRE(insn))
				return JAVA_LEAF_LR_AT_SP;
			if (A64_SUB_SP(insn))
				sub = true;
		}
		/* A sub still to come after a pre-indexed stp. */
		return sub ? JAVA_LEAF_RECORD_AT_SP : JAVA_LEAF_BUILT;
	}
	if (A64_ADD_SP(c[JAVA_A64_BEFORE]) && A64_LDP_FP_LR_OFF(c[JAVA_A64_BEFORE - 1]))
		return JAVA_LEAF_LR_ABOVE;
	if (A64_LDP_FP_LR_POST(c[JAVA_A64_BEFORE]))
		return JAVA_LEAF_RECORD_AT_SP;
	/* What the epilogue has done, back from the pc to a branch. */
#pragma clang loop unroll(disable)
	for (int i = JAVA_A64_BEFORE - 1; i > 0; i--) {
		__u32 insn = c[i];

		if (A64_LEAVES(insn))
			break;
		if (A64_LDP_FP_LR_POST(insn) || (A64_ADD_SP(insn) && A64_LDP_FP_LR_OFF(c[i - 1])))
			return JAVA_LEAF_LR_AT_SP;
	}
	return JAVA_LEAF_BUILT;
}

/*
 * Steps through the Java frame at `js->pc` (in the code cache of the JVM
 * java_start copied; with `js->sp`, `js->bp` and `js->return_address`): sets
 * the frame's identifiers (`ptr`, `kind`, `offset`, `cookie`) and its
 * caller's registers (`ra`, `caller_sp`, `caller_bp`) in `js`. Returns
 * false when the pc is in no code blob or the frame's caller cannot be
 * found (the walk takes it as native). Everything lives in `js`, not in
 * registers the helpers it calls would make it spill.
 */
static __always_inline bool java_step(struct java_scratch *js)
{
	struct java_proc *p = &js->proc;

	js->caller_bp = js->bp;
	js->used_lr = false;
	js->blob = java_find_blob(js, js->return_address ? js->pc - 1 : js->pc);
	if (!js->blob) {
		__sync_fetch_and_add(&java_stats.no_blob, 1);
		return false;
	}
	if (!java_read(js->blob_bytes, sizeof(js->blob_bytes), js->blob))
		goto bad;
	if (p->flags & JAVA_BLOB_OFFSETS)
		js->code_begin = js->blob + (__u32)java_blob_s32(js, p->blob_code_begin);
	else
		js->code_begin = java_blob_u64(js, p->blob_code_begin);
	js->frame_size = (__s64)java_blob_s32(js, p->blob_frame_size) * 8;
	/* An int, or an int16_t from JDK 23: its low half either way. */
	js->complete = (__s16)java_blob_s32(js, p->blob_frame_complete);
	if (!java_read(&js->word, 4, java_blob_u64(js, p->blob_name)) || js->frame_size < 0 ||
	    js->frame_size > 0x100000)
		goto bad;
	js->first = js->word;

	if (js->first == JAVA_NAME_INTERPRETER) {
		__u64 bp = js->bp;

		if (bp < js->sp || bp >= js->sp + 0x100000 ||
		    !java_read(js->frame, sizeof(js->frame), bp - JAVA_FRAME_BELOW * 8))
			goto bad;
		js->ptr = java_frame_word(js, p->interp_method);
		js->caller_sp = java_frame_word(js, p->interp_sender_sp);
		js->caller_bp = java_frame_word(js, 0);
		js->ra = java_frame_word(js, 1);
		js->offset = js->return_address ? java_frame_word(js, p->interp_bcp) : java_leaf_bcp();
		if (!java_read(&js->word, 8, js->ptr + p->method_const))
			goto bad;
		js->cookie = js->word;
		if (!java_read(&js->word, 2, js->cookie + p->const_code_size))
			goto bad;
		/* The bytecode index: the bytecodes follow the ConstMethod. */
		if (js->offset < js->cookie + p->const_size ||
		    js->offset - (js->cookie + p->const_size) >= (__u16)js->word)
			js->offset = JAVA_NO_BCI;
		else
			js->offset -= js->cookie + p->const_size;
		js->kind = JAVA_KIND_INTERPRETED;
	} else if (js->first == JAVA_NAME_NMETHOD || js->first == JAVA_NAME_NATIVE) {
#if defined(__TARGET_ARCH_arm64)
		__u32 leaf = JAVA_LEAF_BUILT;
#else
		__u64 adjust = 0;
#endif

		/* A deoptimized frame returns to the deopt handler; the pc
		 * it had is saved in the frame. */
		js->word = p->flags & JAVA_BLOB_OFFSETS ?
				   js->blob + (__u32)java_blob_s32(js, p->nm_deopt) :
				   java_blob_u64(js, p->nm_deopt);
		if (js->pc == js->word &&
		    java_read(&js->word, 8, js->sp + java_blob_s32(js, p->nm_orig_pc)) &&
		    js->word >= js->code_begin)
			js->pc = js->word;
#if defined(__TARGET_ARCH_arm64)
		if (!js->return_address)
			leaf = java_arm64_leaf(js, js->pc < js->code_begin + js->complete);
		if (leaf == JAVA_LEAF_LR_AT_SP || leaf == JAVA_LEAF_LR_ABOVE) {
			js->caller_sp = js->sp + (leaf == JAVA_LEAF_LR_ABOVE ? js->frame_size : 0);
			js->ra = js->lr;
			js->used_lr = true;
		} else if (leaf == JAVA_LEAF_RECORD_AT_SP) {
			js->caller_sp = js->sp + 16;
			if (!java_read(&js->ra, 8, js->sp + 8) || !java_read(&js->caller_bp, 8, js->sp))
				goto bad;
		} else
#else
		if (!js->return_address && js->pc < js->code_begin + js->complete) {
			/* In the prologue: the frame is not built yet. */
			adjust = js->pc + 4 >= js->code_begin + js->complete ? 16 : 8;
		} else if (!js->return_address) {
			adjust = java_epilogue(js, js->pc);
		}
		if (adjust) {
			js->caller_sp = js->sp + adjust;
			if (!java_read(&js->ra, 8, js->caller_sp - 8))
				goto bad;
			if (adjust == 16 && !java_read(&js->caller_bp, 8, js->caller_sp - 16))
				goto bad;
		} else
#endif
		{
			bool found = false;

			/* The return address, up to JAVA_RA_SLOTS words above
			 * the frame size; one word at a time. */
			js->caller_sp = js->sp + js->frame_size;
			for (int i = 0; i < JAVA_RA_SLOTS; i++, js->caller_sp += 8) {
				if (!java_read(&js->ra, 8, js->caller_sp - 8))
					goto bad;
				if (java_in_cache(js, js->ra & JAVA_ADDR_MASK)) {
					found = true;
					break;
				}
			}
			if (!found || !java_read(&js->caller_bp, 8, js->caller_sp - 16))
				goto bad;
		}
		js->kind = js->first == JAVA_NAME_NATIVE ? JAVA_KIND_NATIVE : JAVA_KIND_COMPILED;
		js->ptr = js->blob;
		js->cookie = (__u32)java_blob_s32(js, p->nm_compile_id);
		js->offset = js->pc - js->code_begin;
	} else {
		if (js->first == JAVA_NAME_VTABLE ||
		    (!js->return_address && js->pc < js->code_begin + js->complete)) {
			/* No frame yet: the return address is on the stack
			 * (x86-64) or in x30 (arm64). */
#if defined(__TARGET_ARCH_arm64)
			js->caller_sp = js->sp;
			js->ra = js->lr;
			js->used_lr = true;
#else
			js->caller_sp = js->sp + 8;
#endif
		} else if (!js->frame_size) {
			/* Stubs without a frame size keep the frame pointer
			 * (the call stub) once they have saved a frame record.
			 * On arm64 a leaf that has not (a copy routine called
			 * with bl) has its return address in x30, which the
			 * record would hold too. */
#if defined(__TARGET_ARCH_arm64)
			if (!js->return_address && js->lr &&
			    (js->bp < js->sp || !java_read(&js->word, 8, js->bp + 8) ||
			     (js->word & JAVA_ADDR_MASK) != js->lr)) {
				js->caller_sp = js->sp;
				js->ra = js->lr;
				js->used_lr = true;
			} else
#endif
			{
				if (js->bp < js->sp || !java_read(&js->caller_bp, 8, js->bp))
					goto bad;
				js->caller_sp = js->bp + 16;
			}
		} else {
			js->caller_sp = js->sp + js->frame_size;
			if (js->frame_size >= 16 &&
			    !java_read(&js->caller_bp, 8, js->caller_sp - 16))
				goto bad;
		}
		if (!js->used_lr && !java_read(&js->ra, 8, js->caller_sp - 8))
			goto bad;
		js->kind = JAVA_KIND_STUB;
		js->ptr = js->blob;
		js->cookie = js->first;
		js->offset = js->pc - js->code_begin;
	}
	/* The caller's frame is above; or, on arm64, where the return
	 * address is still in x30, the same sp (only once: x30 is gone
	 * after the leaf). */
	js->ra &= JAVA_ADDR_MASK;
	if (js->caller_sp < js->sp || (js->caller_sp == js->sp && !js->used_lr) || !js->ra)
		goto bad;
	return true;
bad:
	__sync_fetch_and_add(&java_stats.bad_frames, 1);
	return false;
}

/* The identifiers of the frame java_step stepped through, as a runtime
 * frame's second word: kind, return-address bit, bci or pc offset. */
static __always_inline __u64 java_frame_id(struct java_scratch *js)
{
	return ((__u64)js->kind << 56) | ((__u64)js->return_address << 55) |
	       (js->offset & 0xffffffff);
}

#endif /* FLARE_JAVA_H */
