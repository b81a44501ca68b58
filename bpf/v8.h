/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * V8 (Node.js) frames in the user stacks the table unwinder walks
 * (unwind.h, which includes this). V8 keeps a frame pointer in every
 * frame of its own code, and its frames hold, at fixed slots below the
 * frame pointer (the binary's `v8dbg_off_fp_*`), a marker or the
 * function's context, the JSFunction, and for interpreted frames the
 * bytecode array and offset. For a process user space found to run V8
 * (src/runtime/v8/detect.rs fills `v8_procs`), a pc in the embedded
 * builtins or in code without unwind tables (V8's JIT code, anonymous
 * memory) has its frame at the frame pointer read:
 * - a typed frame (a marker, not a context: entry, exit, stub frames)
 *   keeps its native pc, which names the builtin;
 * - a JavaScript frame becomes a runtime frame (SharedFunctionInfo,
 *   kind | offset, code): interpreted, the bytecode offset and the
 *   bytecode array; compiled, the pc's offset in its Code and the Code,
 *   found from the JSFunction (its code pointer, or from V8 13 on its
 *   dispatch table entry); in other code (on-stack replacement's), the
 *   pc and the JSFunction; else the function alone.
 * The walk then steps to the caller by the frame pointer, as it did for
 * such code before. A pc in a frameless builtin (a bytecode handler)
 * is charged to the JavaScript frame the frame pointer holds, its
 * caller, as V8's own profiler does. User space names the frames from
 * the live process (src/runtime/v8/namer.rs).
 */
#ifndef FLARE_V8_H
#define FLARE_V8_H

#include "common.h"

/* v8_frame's flags. */
#define V8_AT_RETURN		1	/* the pc is a return address */
#define V8_AT_BUILTIN		2	/* the pc is in a copy of the builtins */

/* Frame kinds (src/runtime/v8/mod.rs Kind), in the top byte of the
 * second identifier. */
#define V8_KIND_INTERPRETED	1	/* bytecode offset */
#define V8_KIND_COMPILED	2	/* pc offset in the Code */
#define V8_KIND_FUNCTION	3	/* the function alone */
#define V8_KIND_ELSEWHERE	4	/* the pc, in code the function does not point to */

/* The words read around a frame pointer: V8_BELOW below it, then the
 * saved frame pointer and the return address. */
#define V8_BELOW		6
#define V8_FRAME_WORDS		(V8_BELOW + 2)

/* The words at the top of the stack tried as the return address of a
 * frameless builtin's call (v8_frame). */
#define V8_LEAF_WORDS		3

/* User addresses' bits: arm64 keeps a return address's
 * pointer-authentication code above them. */
#if defined(__TARGET_ARCH_arm64)
#define V8_ADDR_MASK		0x0000ffffffffffffULL
#else
#define V8_ADDR_MASK		(~0ULL)
#endif

/* Ranges of the interpreter's code v8_proc holds. */
#define V8_INTERP_RANGES	4

/* A V8 process (src/runtime/v8/mod.rs Process::bpf_bytes). */
struct v8_proc {
	__u64 blob_low, blob_high;	/* the embedded builtins' code */
	__u64 dispatch;			/* V8 13 on: the dispatch table (0: none) */
	__u16 jsfunc_first, jsfunc_last, type_sfi, type_code;
	__u16 type_bytecode, off_map, off_type, off_shared;
	__u16 off_code;			/* JSFunction's code, or its dispatch handle */
	__u16 off_start, off_size;	/* Code's instruction start and size */
	__u16 pad0;
	/* The frame's slots, as indices into v8_scratch.frame (the words
	 * from V8_BELOW below the frame pointer): V8_BELOW + offset / 8. */
	__u8 slot_marker, slot_function, slot_bytecode_array, slot_bytecode_offset;
	__u8 flags, pad1[3];
	/* The other mapping of the builtins (0, 0: none): code V8 made
	 * before its copy, or calls that reach the binary's own, run there
	 * (Node 20's baseline code calls the copy, its interpreter the
	 * binary's). */
	__u64 other_low, other_high;
	/* The code that runs on an interpreted frame (the interpreter's
	 * trampolines, its bytecode handlers), as offsets in the builtins:
	 * low, high pairs (high 0: unused; the first's 0: not known, the
	 * binary has no labels for them). */
	__u32 interp[V8_INTERP_RANGES * 2];
};

/* v8_proc.flags */
#define V8_START_IS_FIELD	1	/* off_start is a field holding the instructions' address */
#define V8_DISPATCH		2	/* JSFunction holds a dispatch handle */

_Static_assert(sizeof(struct v8_proc) == 104, "v8_proc layout");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct v8_proc);
	__uint(max_entries, 1024);
} v8_procs SEC(".maps");

struct v8_stats {
	__u64 stacks;		/* user stacks of V8 processes */
	__u64 frames;		/* JavaScript frames put in them */
	__u64 function_only;	/* of which named by their function alone */
};

struct v8_stats v8_stats = {};

/* The walk's V8 state, one per CPU, not on the stack (java.h says why). */
struct v8_scratch {
	struct v8_proc proc;
	__u64 frame[V8_FRAME_WORDS];
	__u64 word, sfi, code, kind_offset;
	/* Where the builtins are in the unwind table of the binary holding
	 * them (unwind.h sets it per stack): every mapping of that table
	 * holds a copy there. V8 makes one per isolate, so one per worker
	 * thread: more than v8_proc's two ranges. */
	__u64 blob_row_low, blob_row_high;
	__u32 blob_table, pad;
	/* Where the copy of the builtins holding the first frame's pc
	 * starts (unwind.h sets it per frame; 0: the pc is in none). */
	__u64 pc_blob;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct v8_scratch);
	__uint(max_entries, 1);
} v8_scratch SEC(".maps");

static __always_inline struct v8_scratch *v8_scratch_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&v8_scratch, &zero);
}

/* Starts the V8 side of the walk of process `pid`: true for V8. */
static __always_inline bool v8_start(__u32 pid)
{
	struct v8_proc *p = bpf_map_lookup_elem(&v8_procs, &pid);
	struct v8_scratch *vs = v8_scratch_get();

	if (!p || !vs)
		return false;
	__sync_fetch_and_add(&v8_stats.stacks, 1);
	vs->proc = *p;
	return true;
}

static __always_inline bool v8_in_blob(struct v8_scratch *vs, __u64 pc)
{
	return (pc >= vs->proc.blob_low && pc < vs->proc.blob_high) ||
	       (pc >= vs->proc.other_low && pc < vs->proc.other_high);
}

/* The word at `addr` into vs->word. */
static __always_inline bool v8_read(struct v8_scratch *vs, __u64 addr)
{
	return bpf_probe_read_user(&vs->word, 8, (void *)addr) == 0;
}

/* Without pointer compression: a heap object's pointer has tag 1 in its
 * low two bits; a Smi has 0 in its low bit and its value in the high
 * 32 bits. */
static __always_inline bool v8_is_heap(__u64 v)
{
	return (v & 3) == 1;
}

static __always_inline bool v8_is_smi(__u64 v)
{
	return (v & 0xffffffffULL) == 0;
}

/* The instance type of heap object `obj`, or 0. */
static __always_inline __u16 v8_type(struct v8_scratch *vs, __u64 obj)
{
	__u16 type = 0;

	if (!v8_is_heap(obj) || !v8_read(vs, obj - 1 + vs->proc.off_map) || !v8_is_heap(vs->word))
		return 0;
	if (bpf_probe_read_user(&type, 2, (void *)(vs->word - 1 + vs->proc.off_type)))
		return 0;
	return type;
}

/* The Code running `function` when it holds `pc`, into vs->code. */
static __always_inline bool v8_code_of(struct v8_scratch *vs, __u64 function, __u64 pc)
{
	struct v8_proc *p = &vs->proc;
	__u64 code, start;
	__u32 size = 0;

	if (p->flags & V8_DISPATCH) {
		__u32 handle = 0;

		if (!p->dispatch ||
		    bpf_probe_read_user(&handle, 4, (void *)(function - 1 + p->off_code)))
			return false;
		/* An entry is 16 bytes; its second word holds the Code's
		 * address (untagged) above 16 bits of parameter count. */
		if (!v8_read(vs, p->dispatch + (__u64)(handle >> 8) * 16 + 8))
			return false;
		code = (vs->word >> 16) | 1;
	} else {
		if (!v8_read(vs, function - 1 + p->off_code))
			return false;
		code = vs->word;
	}
	if (v8_type(vs, code) != p->type_code)
		return false;
	if (p->flags & V8_START_IS_FIELD) {
		if (!v8_read(vs, code - 1 + p->off_start))
			return false;
		start = vs->word;
	} else {
		start = code - 1 + p->off_start;
	}
	if (bpf_probe_read_user(&size, 4, (void *)(code - 1 + p->off_size)))
		return false;
	if (pc < start || pc >= start + size)
		return false;
	vs->code = code;
	vs->kind_offset = ((__u64)V8_KIND_COMPILED << 56) | (pc - start);
	return true;
}

/* Whether `addr` is in the interpreter's code of the copy of the
 * builtins that holds the pc (vs->pc_blob). */
static __always_inline bool v8_interpreter(struct v8_scratch *vs, __u64 addr)
{
	__u64 off = addr - vs->pc_blob;

	if (!vs->pc_blob || addr < vs->pc_blob)
		return false;
	for (int i = 0; i < V8_INTERP_RANGES; i++)
		if (off >= vs->proc.interp[2 * i] && off < vs->proc.interp[2 * i + 1])
			return true;
	return false;
}

/* Whether `addr` is in a copy of the builtins: one v8_proc names, or
 * the one holding the pc. */
static __always_inline bool v8_any_blob(struct v8_scratch *vs, __u64 addr)
{
	return v8_in_blob(vs, addr) ||
	       (vs->pc_blob && addr >= vs->pc_blob &&
		addr - vs->pc_blob < vs->proc.blob_high - vs->proc.blob_low);
}

/* Records the interpreted frame of bytecode array `bytecode` at the Smi
 * `offset`: 1. */
static __always_inline int v8_interpreted(struct v8_scratch *vs, __u64 bytecode, __u64 offset)
{
	vs->code = bytecode;
	vs->kind_offset = ((__u64)V8_KIND_INTERPRETED << 56) | ((offset >> 32) & 0xffffffffULL);
	return 1;
}

/* Records the frame of `function` as running other code at `pc`: 1. */
static __always_inline int v8_elsewhere(struct v8_scratch *vs, __u64 function, __u64 pc)
{
	vs->code = function;
	vs->kind_offset = ((__u64)V8_KIND_ELSEWHERE << 56) | (pc & ((1ULL << 56) - 1));
	__sync_fetch_and_add(&v8_stats.function_only, 1);
	return 1;
}

/*
 * Reads the frame at `bp` of a pc in V8's code (`flags`: V8_AT_RETURN
 * when it is a return address, V8_AT_BUILTIN when in the builtins; `sp` the stack pointer at it, `lr` arm64's link register at
 * the first frame, else 0): 1 when it is a JavaScript frame, its identifiers then in
 * v8_scratch's sfi, kind_offset and code. A global function: the
 * verifier checks it once, on its own, not at every state of the walk
 * that calls it.
 */
__noinline int v8_frame(__u64 pc, __u64 sp, __u64 bp, __u64 lr, __u32 flags)
{
	bool return_address = flags & V8_AT_RETURN, in_blob = flags & V8_AT_BUILTIN;
	struct v8_scratch *vs = v8_scratch_get();
	struct v8_proc *p;
	__u64 base = bp - V8_BELOW * 8, function, marker, offset, bytecode;
	bool interpreted;
	__u16 type;

	if (!vs)
		return 0;
	p = &vs->proc;
	if (!bp || bpf_probe_read_user(vs->frame, sizeof(vs->frame), (void *)base))
		return 0;
	_Static_assert(V8_FRAME_WORDS == 8, "slots are masked with 7");
	marker = vs->frame[p->slot_marker & 7];
	function = vs->frame[p->slot_function & 7];
	/* A typed frame's marker is a small integer, shifted by one. */
	if (!(marker & 1))
		return 0;
	type = v8_type(vs, function);
	if (type < p->jsfunc_first || type > p->jsfunc_last)
		return 0;
	/* (v8_type reads the map into vs->word.) */
	if (!v8_read(vs, function - 1 + p->off_shared))
		return 0;
	vs->sfi = vs->word;
	if (v8_type(vs, vs->sfi) != p->type_sfi)
		return 0;
	vs->code = 0;
	vs->kind_offset = (__u64)V8_KIND_FUNCTION << 56;
	/* Interpreted: the pc in the builtins, a bytecode array and a Smi
	 * offset in their slots. Code compiled on stack replacement keeps
	 * the interpreter's slots, the offset at the loop's jump: where the
	 * interpreter's code is known, a first frame's pc in another builtin
	 * (one that keeps no frame: string concatenation, array growth) is
	 * the interpreter's only when called from that code. */
	bytecode = vs->frame[p->slot_bytecode_array & 7];
	offset = vs->frame[p->slot_bytecode_offset & 7];
	interpreted = in_blob && v8_is_smi(offset) && v8_type(vs, bytecode) == p->type_bytecode;
	if (interpreted && (!p->interp[1] || return_address || v8_interpreter(vs, pc)))
		return v8_interpreted(vs, bytecode, offset);
	/* Compiled (baseline or optimized): the pc in its function's code.
	 * A return address is looked up one byte back, in its call. */
	if (v8_code_of(vs, function, return_address ? pc - 1 : pc))
		return 1;
	/* A pc in other code (compiled on stack replacement, which is no
	 * function's code): the pc and the function, for user space to find
	 * the code in the function's feedback. */
	if (!in_blob)
		return v8_elsewhere(vs, function, return_address ? pc - 1 : pc);
	/* The first frame's pc in a builtin that keeps no frame, called from
	 * the interpreter or from the compiled code the frame pointer's
	 * frame runs: the call's return address is at the top of the stack,
	 * or a word or two above what the builtin pushed (as the
	 * OpenTelemetry profiler reads it); arm64's call left it in the link
	 * register. The builtin is charged to its caller: the bytecode, or
	 * the code at the call with what was inlined there. */
	if (!return_address) {
		__u64 first = 0, at;
		bool have_first = false;

		if (lr) {
			at = (lr & V8_ADDR_MASK) - 1;
			if (interpreted && v8_interpreter(vs, at))
				return v8_interpreted(vs, bytecode, offset);
			if (v8_code_of(vs, function, at))
				return 1;
			first = at;
			have_first = true;
		}
		for (int i = 0; i < V8_LEAF_WORDS; i++) {
			if (!v8_read(vs, sp + i * 8))
				break;
			at = (vs->word & V8_ADDR_MASK) - 1;
			if (interpreted && v8_interpreter(vs, at))
				return v8_interpreted(vs, bytecode, offset);
			if (v8_code_of(vs, function, at))
				return 1;
			if (!have_first) {
				first = at;
				have_first = true;
			}
		}
		/* Called from other code (on-stack replacement's): the first
		 * return address that may be the call's, as above; with the
		 * interpreter's slots, only one outside the builtins (a
		 * builtin called by another called by the interpreter
		 * returns into the builtins). */
		if (have_first && !(interpreted && v8_any_blob(vs, first)))
			return v8_elsewhere(vs, function, first);
	}
	if (interpreted)
		return v8_interpreted(vs, bytecode, offset);
	__sync_fetch_and_add(&v8_stats.function_only, 1);
	return 1;
}

#endif /* FLARE_V8_H */
