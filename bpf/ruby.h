/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * CRuby frames (3.1, 3.3, 3.4) in the user stacks the table unwinder walks
 * (unwind.h, which includes this). For a process user space found to run
 * Ruby (src/runtime/ruby/detect.rs fills `rb_procs`), the walk reads the
 * thread's execution context from libruby's thread-local storage
 * (`ruby_current_ec`: through the thread's DTV on x86-64, at the thread
 * pointer plus an offset on arm64), trying each candidate slot user space
 * found and keeping the first whose value checks out as an execution
 * context (its VM stack, size and current frame agree). Each time the
 * native walk meets the interpreter's loop (vm_exec_core), it puts in its
 * place the control frames that activation ran: from the current one up
 * to the first flagged FINISH (where that activation started). A pc in
 * code with no unwind table (YJIT's) puts in every control frame left and
 * ends the walk: JIT code keeps no frame to step by.
 *
 * A Ruby frame is (instruction sequence, method entry and instruction
 * index, cookie: the sequence's code address); a C function's frame is
 * (0, its method entry, cookie: the method's definition). User space
 * names them from the live process (src/runtime/ruby/namer.rs).
 *
 * One control frame per bpf_loop step, so that frames count against the
 * walk's budget like native ones; every read is bpf_probe_read_user and a
 * failed one ends the Ruby frames, never the native walk.
 */
#ifndef FLARE_RUBY_H
#define FLARE_RUBY_H

#include "common.h"

#define RB_MAX_SLOTS	4
/* Frame and environment flags (vm_core.h, the same in 3.1-3.4). */
#define RB_MAGIC_MASK	0x7fff0001ULL
#define RB_MAGIC_CFUNC	0x55550001ULL
#define RB_FLAG_FINISH	0x20ULL
#define RB_FLAG_CFRAME	0x80ULL
#define RB_ENV_LOCAL	0x2ULL
/* Object types: T_IMEMO, and the imemo types of a method entry and of a
 * special variable holder (which may hold one). */
#define RB_T_MASK	0x1fULL
#define RB_T_IMEMO	0x1aULL
#define RB_IMEMO_MENT	6
#define RB_IMEMO_SVAR	2
/* Environments followed to a block's method entry. */
#define RB_MAX_ENVS	4
/* The instruction index when it does not fit the frame's 16 bits. */
#define RB_NO_POS	0xffffULL
#define RB_ADDR_MASK	((1ULL << 48) - 1)

/* A Ruby process (src/runtime/ruby/mod.rs Process::bpf_bytes). */
struct rb_proc {
	__u64 exec_start, exec_end;	/* vm_exec_core */
	__s64 slots[RB_MAX_SLOTS];	/* candidate places of the ec pointer */
	__u64 modid;			/* TLS module id (DTV), 0: thread pointer */
	__u64 caller_start, caller_end;	/* rb_vm_exec, or empty */
	__u16 cfp_size;			/* sizeof(rb_control_frame_t) */
	__u8 nslots;
	__u8 pad[5];
};

_Static_assert(sizeof(struct rb_proc) == 80, "rb_proc layout");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct rb_proc);
	__uint(max_entries, 4096);
} rb_procs SEC(".maps");

/* What the Ruby walk did, summed over the run. */
struct rb_stats {
	__u64 stacks;		/* user stacks of Ruby processes */
	__u64 frames;		/* Ruby frames put in them */
	__u64 no_thread;	/* stacks of threads without an execution context */
	__u64 read_errors;	/* frames ended by a failed read */
};

struct rb_stats rb_stats = {};

/* The Ruby walk of the current stack, one per CPU (as v8_scratch): the
 * global functions below read and write it, and the walk's step reads
 * each frame they find from it. */
struct rb_scratch {
	__u64 cfp;		/* the next control frame; 0: none */
	__u64 last;		/* the outermost one to put in */
	__u64 exec_start, exec_end;
	__u64 caller_start, caller_end;
	__u64 a, b, cookie;	/* the frame rb_frame read */
	__u64 ep[3];		/* a frame's environment: ep[-2], ep[-1], ep[0] */
	__u64 f[5];		/* a control frame: pc, sp, iseq, self, ep */
	__u16 cfp_size;
	__u8 pad[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct rb_scratch);
	__uint(max_entries, 1);
} rb_scratch SEC(".maps");

static __always_inline struct rb_scratch *rb_scratch_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&rb_scratch, &zero);
}

/* The state the table walk carries for Ruby. */
struct rb_walk {
	__u64 exec_pc;		/* the loop's activation being replaced */
	__u32 emitted;		/* frames put in for it so far */
	bool on;		/* the thread runs Ruby: rb_scratch holds its walk */
	bool pending;		/* putting an activation's frames in place */
	bool rest;		/* every frame left, then the walk ends */
	bool after_exec;	/* the last native frame was the loop's */
};

/* What rb_frame found. */
#define RB_NONE		0	/* no frame: the activation's frames end */
#define RB_FRAME	1	/* a frame (rb_scratch's a, b, cookie); more follow */
#define RB_LAST		2	/* a frame, the activation's last */
#define RB_SKIP		3	/* no frame to show; more follow */

static __always_inline bool rb_read(void *dst, __u32 size, __u64 addr)
{
	return bpf_probe_read_user(dst, size, (void *)addr) == 0;
}

/* Whether `addr` holds an imemo of type `type`. */
static __always_inline bool rb_is_imemo(__u64 addr, __u32 type)
{
	__u64 flags = 0;

	if (!addr || (addr & 7) || !rb_read(&flags, 8, addr))
		return false;
	return (flags & RB_T_MASK) == RB_T_IMEMO && ((flags >> 12) & 0xf) == type;
}

/* Whether the pointer at `base + slot` is an execution context: its VM
 * stack, size and current frame agree. Its current frame and stack's end
 * then in rs's cfp and last. */
static __always_inline bool rb_try_ec(struct rb_scratch *rs, __u64 base, __s64 slot)
{
	__u64 ec = 0, end;

	if (!rb_read(&ec, 8, base + slot) || !ec || (ec & 7))
		return false;
	/* vm_stack, vm_stack_size (words), cfp. */
	if (!rb_read(rs->ep, 24, ec))
		return false;
	if (!rs->ep[0] || !rs->ep[1] || rs->ep[1] >= (1ULL << 24))
		return false;
	end = rs->ep[0] + rs->ep[1] * 8;
	if (rs->ep[2] <= rs->ep[0] || rs->ep[2] >= end || (end - rs->ep[2]) % rs->cfp_size)
		return false;
	rs->cfp = rs->ep[2];
	rs->last = end;
	return true;
}

/*
 * Starts the Ruby walk of process `pid`'s current thread, whose thread
 * pointer is `tp`: 1 when it runs Ruby (rb_scratch then holds the walk).
 * A global function: the verifier checks it once, on its own.
 */
__noinline int rb_begin(__u32 pid, __u64 tp)
{
	struct rb_proc *p = bpf_map_lookup_elem(&rb_procs, &pid);
	struct rb_scratch *rs = rb_scratch_get();
	__u64 base, dtv = 0;
	__u16 size;
	int i;

	if (!p || !rs)
		return 0;
	__sync_fetch_and_add(&rb_stats.stacks, 1);
	size = p->cfp_size;
	if (size < 32 || size > 128 || !tp)
		return 0;
	rs->cfp_size = size;
	rs->cfp = 0;
	rs->exec_start = p->exec_start;
	rs->exec_end = p->exec_end;
	rs->caller_start = p->caller_start;
	rs->caller_end = p->caller_end;
	base = tp;
	if (p->modid && (!rb_read(&dtv, 8, tp + 8) || !dtv ||
			 !rb_read(&base, 8, dtv + 16 * (p->modid & 0xffff)) || !base)) {
		__sync_fetch_and_add(&rb_stats.no_thread, 1);
		return 0;
	}
	for (i = 0; i < RB_MAX_SLOTS; i++) {
		if (i >= p->nslots)
			break;
		if (rb_try_ec(rs, base, p->slots[i]))
			break;
		rs->cfp = 0;
	}
	/* The bottom frame is the stack's dummy: the last put in is the one
	 * above it (Ruby's own backtraces stop there too). */
	if (!rs->cfp || rs->last < 2 * size || rs->cfp > rs->last - 2 * size) {
		__sync_fetch_and_add(&rb_stats.no_thread, 1);
		rs->cfp = 0;
		return 0;
	}
	rs->last -= 2 * size;
	return 1;
}

/* True when `pc` lies in the interpreter's loop. */
static __always_inline bool rb_in_exec(__u64 pc)
{
	struct rb_scratch *rs = rb_scratch_get();

	return rs && rs->cfp && pc >= rs->exec_start && pc < rs->exec_end;
}

/* True when `pc` lies in the loop's caller. */
static __always_inline bool rb_in_exec_caller(__u64 pc)
{
	struct rb_scratch *rs = rb_scratch_get();

	return rs && rs->cfp && pc >= rs->caller_start && pc < rs->caller_end;
}

/* True when Ruby frames are left to put in. */
static __always_inline bool rb_frames_left(void)
{
	struct rb_scratch *rs = rb_scratch_get();

	return rs && rs->cfp;
}

/* The method entry of the frame whose environment rs->ep holds, as
 * Ruby's rb_vm_frame_method_entry finds it: up the environments to the
 * method's, or 0. */
static __always_inline __u64 rb_method_entry(struct rb_scratch *rs)
{
	__u64 me, ep;
	int i;

	for (i = 0; i < RB_MAX_ENVS; i++) {
		if (rs->ep[2] & RB_ENV_LOCAL)
			break;
		if (rb_is_imemo(rs->ep[0], RB_IMEMO_MENT))
			return rs->ep[0];
		ep = rs->ep[1] & ~3ULL;
		if (!ep || !rb_read(rs->ep, 24, ep - 16))
			return 0;
	}
	if (!(rs->ep[2] & RB_ENV_LOCAL))
		return 0;
	me = rs->ep[0];
	if (rb_is_imemo(me, RB_IMEMO_MENT))
		return me;
	/* A special variable holder keeps the entry beside the variables. */
	if (rb_is_imemo(me, RB_IMEMO_SVAR) && rb_read(&me, 8, me + 8) &&
	    rb_is_imemo(me, RB_IMEMO_MENT))
		return me;
	return 0;
}

/*
 * Reads the next control frame of the walk in rb_scratch: RB_NONE,
 * RB_FRAME, RB_LAST or RB_SKIP, its identifiers in rb_scratch's a, b and
 * cookie. A global function, checked once.
 */
__noinline int rb_frame(void)
{
	struct rb_scratch *rs = rb_scratch_get();
	__u64 cfp, body = 0, pos, flags;
	bool finish;

	if (!rs)
		return RB_NONE;
	cfp = rs->cfp;
	if (!cfp || cfp > rs->last)
		return RB_NONE;
	if (!rb_read(rs->f, sizeof(rs->f), cfp) || !rs->f[4] ||
	    !rb_read(rs->ep, sizeof(rs->ep), rs->f[4] - 16)) {
		__sync_fetch_and_add(&rb_stats.read_errors, 1);
		rs->cfp = 0;
		return RB_NONE;
	}
	rs->cfp = cfp + rs->cfp_size;
	if (rs->cfp > rs->last)
		rs->cfp = 0;
	flags = rs->ep[2];
	finish = flags & RB_FLAG_FINISH;
	rs->a = 0;
	rs->b = 0;
	rs->cookie = 0;
	if (!(flags & RB_FLAG_CFRAME) && rs->f[0]) {
		/* A Ruby frame: its sequence's body, and its code. */
		if (rb_read(&body, 8, rs->f[2] + 16) && body &&
		    rb_read(&rs->cookie, 8, body + 8) && rs->cookie) {
			pos = rs->f[0] >= rs->cookie ? (rs->f[0] - rs->cookie) / 8 : RB_NO_POS;
			if (pos && pos != RB_NO_POS)
				pos--;
			if (pos > RB_NO_POS)
				pos = RB_NO_POS;
			rs->a = rs->f[2];
			rs->b = (rb_method_entry(rs) & RB_ADDR_MASK) | (pos << 48);
		}
	} else if ((flags & RB_MAGIC_MASK) == RB_MAGIC_CFUNC && rb_is_imemo(rs->ep[0], RB_IMEMO_MENT) &&
		   rb_read(&rs->cookie, 8, rs->ep[0] + 16) && rs->cookie) {
		/* A C function's frame: its method entry, and definition. */
		rs->b = rs->ep[0] & RB_ADDR_MASK;
	}
	if (!rs->cookie || !(rs->a || rs->b))
		return finish || !rs->cfp ? RB_NONE : RB_SKIP;
	__sync_fetch_and_add(&rb_stats.frames, 1);
	return finish || !rs->cfp ? RB_LAST : RB_FRAME;
}

/*
 * At the loop's caller met without the loop above it: an activation being
 * entered, its first frame (flagged FINISH) pushed already. Puts that
 * frame after the `*n` words of `out` (hashing it into `*hash`); any
 * other frame is left for the activations below.
 */
static __always_inline void rb_entering(struct flare_stack_scratch *out, __u32 *n, __u64 *hash)
{
	struct rb_scratch *rs = rb_scratch_get();
	__u64 cfp, len;

	if (!rs)
		return;
	cfp = rs->cfp;
	if (rb_frame() != RB_LAST) {
		rs->cfp = cfp;
		return;
	}
	len = flare_push_runtime_frame(out, *n, hash, FLARE_FRAME_RUBY, rs->a, rs->b, rs->cookie);
	*n = len;
}

/*
 * Puts the next control frame of the activation being replaced after the
 * `*n` words of `out` (hashing it into `*hash`), or ends that
 * activation's frames (with `rest`, the Ruby frames). Returns 1 when the
 * stack is full.
 */
static __always_inline long rb_step(struct rb_walk *rb, struct flare_stack_scratch *out, __u32 *n,
				    __u64 *hash)
{
	struct rb_scratch *rs = rb_scratch_get();
	int found = rb_frame();
	__u64 len;

	if (rs && (found == RB_FRAME || found == RB_LAST)) {
		len = flare_push_runtime_frame(out, *n, hash, FLARE_FRAME_RUBY, rs->a, rs->b, rs->cookie);
		if (len == *n)
			return 1;
		*n = len;
		rb->emitted++;
	}
	if (found == RB_SKIP || (rb->rest && found == RB_LAST && rb_frames_left()) ||
	    (found == RB_FRAME))
		return 0;
	rb->pending = false;
	/* An activation whose frames could not be read stays a native
	 * frame (the JIT's code has none to stay). */
	if (!rb->emitted && !rb->rest) {
		__u32 at = *n;

		barrier_var(at);
		if (at < FLARE_MAX_STACK_WORDS) {
			out->pcs[at] = rb->exec_pc;
			*n = at + 1;
			*hash = flare_hash_step(*hash, rb->exec_pc);
		}
	}
	return 0;
}

#endif /* FLARE_RUBY_H */
