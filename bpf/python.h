/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * CPython frames (3.8-3.15) in the user stacks the table unwinder walks
 * (unwind.h, which includes this). For a process user space found to run
 * CPython (src/runtime/python/detect.rs fills `py_procs`), the walk reads the
 * thread's PyThreadState from glibc's thread-specific slot of Python's
 * autoTSSkey, or 3.15's thread-local variable (at the thread pointer +
 * tstate_slot), and its current frame; each time
 * the native walk meets the eval loop (_PyEval_EvalFrameDefault, .cold
 * part too), it puts the Python frames that eval call ran in its place:
 * one frame per eval call up to 3.10, the frames up to the entry frame
 * from 3.11 (`is_entry`, or the shim frame, owned by no Python function,
 * from 3.12). Each is a
 * runtime frame (code object, instruction, cookie) that user space names
 * from the live process (src/runtime/python/namer.rs); the cookie, read from the
 * code object, tells a freed and reused address apart.
 *
 * One Python frame per bpf_loop step, so that frames count against the
 * walk's budget like native ones; every read is bpf_probe_read_user and a
 * failed one ends the Python frames, never the native walk.
 */
#ifndef FLARE_PYTHON_H
#define FLARE_PYTHON_H

#include "common.h"

/* Frame chains (src/runtime/python/layout.rs FrameModel). */
#define PY_MODEL_OBJECT	0	/* 3.8-3.10: PyFrameObject, f_back */
#define PY_MODEL_ENTRY	1	/* 3.11: _PyInterpreterFrame, is_entry */
#define PY_MODEL_OWNER	2	/* 3.12+: owner >= the shim's */
/* 3.14+ tags a frame's code object (a _PyStackRef) in its low bits. */
#define PY_TAG_BITS	3ULL
#define PY_NO_CFRAME	0xffff

/* A CPython process (src/runtime/python/mod.rs Process::bpf_bytes). */
struct py_proc {
	__u64 eval_start, eval_end;	/* _PyEval_EvalFrameDefault */
	__u64 cold_start, cold_end;	/* its .cold part, or empty */
	__u64 code_type;		/* &PyCode_Type */
	__u64 tstate_slot;		/* fs base + this: PyThreadState * */
	__u16 tstate_frame;		/* -> frame, or -> _PyCFrame * */
	__u16 cframe_current;		/* _PyCFrame -> frame, or PY_NO_CFRAME */
	__u16 frame_previous, frame_code, frame_instr, frame_entry;
	__u16 code_argcount, code_flags, code_firstlineno;
	__u8 model;
	__u8 owner_cstack;		/* the first owner of no Python function */
	__u32 pad;
};

_Static_assert(sizeof(struct py_proc) == 72, "py_proc layout");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct py_proc);
	__uint(max_entries, 4096);
} py_procs SEC(".maps");

/* What the Python walk did, summed over the run. */
struct py_stats {
	__u64 stacks;		/* user stacks of Python processes */
	__u64 frames;		/* Python frames put in them */
	__u64 no_thread;	/* stacks of threads without a thread state */
	__u64 read_errors;	/* frames ended by a failed read */
};

struct py_stats py_stats = {};

/* The process being walked, copied from `py_procs` when the walk starts:
 * here (one per CPU, as java_scratch), not in the walk's state, which
 * lives on the program's stack, whose 512 bytes it shares with the
 * walk's callbacks (6.1 rounds each frame up to 32 bytes). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct py_proc);
	__uint(max_entries, 1);
} py_scratch SEC(".maps");

static __always_inline struct py_proc *py_scratch_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&py_scratch, &zero);
}

/* The state the table walk carries for Python. */
struct py_walk {
	__u64 frame;		/* the next frame to put in the stack; 0: none */
	__u64 eval_pc;		/* the eval call being replaced */
	__u32 emitted;		/* frames put in for it so far */
	bool pending;		/* putting an eval call's frames in place */
};

static __always_inline bool py_read(void *dst, __u32 size, __u64 addr)
{
	return bpf_probe_read_user(dst, size, (void *)addr) == 0;
}

/* The thread pointer (x86-64's fs base, arm64's tpidr_el0) of the
 * current task. */
static __always_inline __u64 py_thread_pointer(void)
{
#if defined(__TARGET_ARCH_x86)
	struct task_struct *task = bpf_get_current_task_btf();

	return BPF_CORE_READ(task, thread.fsbase);
#elif defined(__TARGET_ARCH_arm64)
	struct task_struct *task = bpf_get_current_task_btf();

	return BPF_CORE_READ(task, thread.uw.tp_value);
#else
	return 0;
#endif
}

/* Starts the Python walk of process `pid`'s current thread: false when
 * the process is not Python or the thread runs no Python. */
static __always_inline bool py_start(struct py_walk *py, __u32 pid)
{
	struct py_proc *p = bpf_map_lookup_elem(&py_procs, &pid);
	struct py_proc *walked = py_scratch_get();
	__u64 tp, tstate = 0, frame = 0;

	if (!p || !walked)
		return false;
	__sync_fetch_and_add(&py_stats.stacks, 1);
	*walked = *p;
	tp = py_thread_pointer();
	if (!tp || !py_read(&tstate, 8, tp + p->tstate_slot) || !tstate) {
		__sync_fetch_and_add(&py_stats.no_thread, 1);
		return false;
	}
	if (!py_read(&frame, 8, tstate + p->tstate_frame))
		return false;
	if (frame && p->cframe_current != PY_NO_CFRAME &&
	    !py_read(&frame, 8, frame + p->cframe_current))
		return false;
	py->frame = frame;
	return frame != 0;
}

/* True when `pc` lies in the eval loop of the process walked. */
static __always_inline bool py_in_eval(__u64 pc)
{
	struct py_proc *p = py_scratch_get();

	return p && ((pc >= p->eval_start && pc < p->eval_end) ||
		     (pc >= p->cold_start && pc < p->cold_end));
}

/* The validity cookie of code object `code` (src/runtime/python/mod.rs cookie()),
 * or 0 when it cannot be read or is not a code object. */
static __always_inline __u64 py_cookie(struct py_proc *p, __u64 code)
{
	__u64 type = 0;
	__u32 argcount = 0, flags = 0, firstlineno = 0;

	if (!py_read(&type, 8, code + 8) || type != p->code_type)
		return 0;
	if (!py_read(&argcount, 4, code + p->code_argcount) ||
	    !py_read(&flags, 4, code + p->code_flags) ||
	    !py_read(&firstlineno, 4, code + p->code_firstlineno))
		return 0;
	return ((__u64)firstlineno << 32) | ((__u64)(argcount & 0xff) << 24) |
	       (flags & 0xffffff);
}

/*
 * Puts the next Python frame of the eval call being replaced after the
 * `*n` words of `out` (hashing it into `*hash`), or ends that eval call's
 * frames. Returns 1 when the stack is full.
 */
static __always_inline long py_step(struct py_walk *py, struct flare_stack_scratch *out, __u32 *n,
				    __u64 *hash)
{
	struct py_proc *p = py_scratch_get();
	__u64 f = py->frame, code = 0, instr = 0, next = 0, cookie, len;
	__u32 lasti = 0;
	__u8 mark = 0;
	bool last = false;

	if (!p || !f || !py_read(&next, 8, f + p->frame_previous) ||
	    !py_read(&code, 8, f + p->frame_code)) {
		__sync_fetch_and_add(&py_stats.read_errors, 1);
		py->frame = 0;
		goto end;
	}
	py->frame = next;
	code &= ~PY_TAG_BITS;
	if (p->model == PY_MODEL_OBJECT) {
		if (!py_read(&lasti, 4, f + p->frame_instr))
			lasti = 0xffffffff;
		instr = lasti;
		last = true;
	} else {
		if (!py_read(&mark, 1, f + p->frame_entry) ||
		    !py_read(&instr, 8, f + p->frame_instr)) {
			__sync_fetch_and_add(&py_stats.read_errors, 1);
			py->frame = 0;
			goto end;
		}
		if (p->model == PY_MODEL_OWNER && mark >= p->owner_cstack)
			/* The shim an eval call starts with (or 3.14+'s other
			 * frames of the interpreter's own): its frames end. */
			goto end;
		instr -= code;
		last = p->model == PY_MODEL_ENTRY && mark;
	}
	cookie = py_cookie(p, code);
	if (cookie) {
		len = flare_push_runtime_frame(out, *n, hash, FLARE_FRAME_PYTHON, code, instr, cookie);
		if (len == *n)
			return 1;
		*n = len;
		py->emitted++;
		__sync_fetch_and_add(&py_stats.frames, 1);
	}
	if (!last && next)
		return 0;
end:
	py->pending = false;
	/* An eval call whose frames could not be read stays a native frame. */
	if (!py->emitted) {
		__u32 at = *n;

		barrier_var(at);
		if (at < FLARE_MAX_STACK_WORDS) {
			out->pcs[at] = py->eval_pc;
			*n = at + 1;
			*hash = flare_hash_step(*hash, py->eval_pc);
		}
	}
	return 0;
}

#endif /* FLARE_PYTHON_H */
