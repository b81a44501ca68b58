/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The in-kernel user-stack unwinder (--unwind auto|dwarf), included by
 * flare.bpf.h. It starts from the task's user registers (saved at the top
 * of its kernel stack: the same place for a sample, a tracepoint and a
 * uprobe), finds each pc's mapping in the process's sorted slice of
 * `unwind_mappings`, binary-searches the object's rows (one inner array
 * per object in `unwind_tables`, filled by src/unwind/) and steps to the
 * caller; where there is no table (JIT code, objects without CFI) it
 * steps by the frame pointer (auto only). The walk runs under bpf_loop
 * (5.17+); user space keeps frame pointers where the kernel lacks it.
 *
 * Stacks go to flare's stack storage (stacks.h), keyed by a hash of
 * their frames computed as they are walked.
 */
#ifndef FLARE_UNWIND_H
#define FLARE_UNWIND_H

#include <bpf/bpf_core_read.h>
#include "unwind_types.h"
#include "stacks.h"
#include "python.h"
#include "java.h"
#include "v8.h"
#include "ruby.h"

const volatile __u32 unwind_mode = UNWIND_MODE_FP;

struct unwind_stats unwind_stats = {};


struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct unwind_proc);
	__uint(max_entries, 8192);
} unwind_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct unwind_mapping);
	__uint(max_entries, 65536);
} unwind_mappings SEC(".maps");

/* The template of every object's rows; user space creates each with the
 * object's own size (BPF_F_INNER_MAP) and fills it through mmap. */
struct unwind_rows {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_INNER_MAP | BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);	/* struct unwind_row */
	__uint(max_entries, 1);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__array(values, struct unwind_rows);
} unwind_tables SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} unwind_events SEC(".maps");

/* When each process was last reported, so that one busy process does not
 * flood the ring buffer. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 4096);
} unwind_reported SEC(".maps");

/* Zeros a walk starts from, read by a helper (flare_unwind_user); in both
 * builds, whose globals must match. */
__u64 unwind_zeros[32];

/* The walk's state, carried from one bpf_loop step to the next. */
struct unwind_walk {
	__u64 pc, sp, bp, lr;
	__u64 hash;
	__u32 first, nr;	/* the process's mappings */
	__u32 n;		/* words so far */
	__u32 frames;		/* frames so far */
	__u32 pid;
	bool have_proc;
	bool return_address;	/* pc is a return address (not the first frame) */
	bool complete;
	bool native_done;	/* the native walk ended; Python frames remain */
	bool ended;		/* ended by the stack, not by the depth limit */
	bool java;		/* a JVM: its code cache is in java_scratch */
	bool v8;		/* V8: its process is in v8_scratch */
	struct py_walk py;
	struct rb_walk rb;
};

/* The walk's state, one per CPU (in both builds, whose maps must match),
 * not on the stack: the verifier does not follow what map memory holds,
 * so the states of the walk's steps (each checked as if bpf_loop called
 * it any number of times) do not multiply with the values the walk's
 * fields take on the way (the depth after a native frame or after a
 * runtime frame's four words...). On the stack, the Python and Java
 * walks took 104 of the 131 ms this program took to verify (Linux 6.18);
 * in map memory, all of it takes some 20. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct unwind_walk);
	__uint(max_entries, 1);
} unwind_walks SEC(".maps");

static __always_inline struct unwind_walk *unwind_walk_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&unwind_walks, &zero);
}

#ifdef FLARE_FP_ONLY
/*
 * The frame-pointer build of every object (build.rs): no walk, so no
 * callback functions, which kernels before 5.13 cannot load (and which
 * need bpf_loop, 5.17). Its maps and globals are the same as the full
 * build's, so one skeleton opens either (src/bpf/variant.rs).
 */
static __always_inline __s64 flare_unwind_user(__u32 pid)
{
	return -FLARE_EFAULT;
}
#else

/*
 * The architecture's registers: `bp` is the frame pointer (rbp; x29 on
 * arm64), `lr` arm64's link register (x30), where a function that has not
 * saved it yet keeps its return address: known for the interrupted frame
 * (and after a signal frame), 0 once the walk has stepped past it.
 */
#if defined(__TARGET_ARCH_arm64)
/* User addresses have 48 bits (CONFIG_ARM64_VA_BITS=48, Debian's and the
 * clouds'); the bits above hold a return address's pointer-authentication
 * code (-mbranch-protection) and the top byte's tag. */
#define UNWIND_ADDR_MASK	0x0000ffffffffffffULL
/* The frame record (x29, x30) is 16 bytes from where x29 points. */
#else
#define UNWIND_ADDR_MASK	(~0ULL)
#endif

/* A process is reported at most this often: soon enough that a process
 * that has just exec'd (its old mappings loaded, its new ones not) gets
 * full stacks again within a few samples, rarely enough that a process
 * running code outside every mapping does not flood user space. User
 * space deletes the entry when a load found what was reported, so a
 * program mapping its libraries one after another is followed at once. */
#define UNWIND_REPORT_GAP_NS	20000000ULL

static __always_inline void unwind_report(__u32 pid, __u32 kind, __u64 pc)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 *last = bpf_map_lookup_elem(&unwind_reported, &pid);
	struct unwind_event *e;

	if (last && now - *last < UNWIND_REPORT_GAP_NS)
		return;
	bpf_map_update_elem(&unwind_reported, &pid, &now, BPF_ANY);
	e = bpf_ringbuf_reserve(&unwind_events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&unwind_stats.events_lost, 1);
		return;
	}
	e->pid = pid;
	e->kind = kind;
	e->pc = pc;
	bpf_ringbuf_submit(e, 0);
}

/* A binary search in progress, one bpf_loop step at a time (so that the
 * verifier checks one step, not every unrolled one). */
struct unwind_search {
	__u64 key;
	__u32 lo, hi;
	__u32 first;		/* mappings: the process's first index; rows:
				 * the page index entries before them */
	__u32 table;		/* rows: the object's table */
};

/* One step over the process's mappings: lo ends one past the last start
 * at or below the key. */
static long unwind_map_step(__u64 i, void *ctx)
{
	struct unwind_search *s = ctx;
	struct unwind_mapping *m;
	__u32 mid, idx;

	if (s->lo >= s->hi)
		return 1;
	mid = (s->lo + s->hi) / 2;
	idx = s->first + mid;
	m = bpf_map_lookup_elem(&unwind_mappings, &idx);
	if (!m) {
		s->lo = 0;
		return 1;
	}
	if (m->start <= s->key)
		s->lo = mid + 1;
	else
		s->hi = mid;
	return 0;
}

/* One step over an object's rows, as above. */
static long unwind_row_step(__u64 i, void *ctx)
{
	struct unwind_search *s = ctx;
	struct unwind_row *r;
	void *inner;
	__u32 mid, idx;

	if (s->lo >= s->hi)
		return 1;
	inner = bpf_map_lookup_elem(&unwind_tables, &s->table);
	if (!inner) {
		s->lo = 0;
		return 1;
	}
	mid = (s->lo + s->hi) / 2;
	idx = s->first + mid;
	r = bpf_map_lookup_elem(inner, &idx);
	if (!r) {
		s->lo = 0;
		return 1;
	}
	if (r->pc <= (__u32)s->key)
		s->lo = mid + 1;
	else
		s->hi = mid;
	return 0;
}

/* The process's mapping holding `pc`, or NULL. */
static __always_inline struct unwind_mapping *unwind_find_mapping(struct unwind_walk *w, __u64 pc)
{
	struct unwind_search s = { .key = pc, .hi = w->nr, .first = w->first };
	struct unwind_mapping *m;
	__u32 idx;

	bpf_loop(UNWIND_MAX_MAPS_LOG2 + 1, unwind_map_step, &s, 0);
	if (s.lo == 0)
		return NULL;
	idx = w->first + s.lo - 1;
	m = bpf_map_lookup_elem(&unwind_mappings, &idx);
	if (!m || pc >= m->end)
		return NULL;
	return m;
}

/* The row of `m`'s table covering `pc`, or NULL. */
static __always_inline struct unwind_row *unwind_find_row(struct unwind_mapping *m, __u64 pc)
{
	struct unwind_search s = { .hi = m->rows, .table = m->table, .first = m->pages };
	__u64 rel = pc - m->bias, *at, *next;
	__u32 page, idx;
	void *inner;

	if (s.table == UNWIND_NO_TABLE || pc < m->bias || rel > 0xffffffffULL)
		return NULL;
	s.key = rel;
	inner = bpf_map_lookup_elem(&unwind_tables, &s.table);
	if (!inner)
		return NULL;
	/* Narrow the search to the rows of pc's page. */
	page = rel >> UNWIND_PAGE_SHIFT;
	if (page + 1 < m->pages) {
		idx = page + 1;
		next = bpf_map_lookup_elem(inner, &idx);
		at = bpf_map_lookup_elem(inner, &page);
		if (at && next && *at < *next + 1 && *next < m->rows) {
			s.lo = *at;
			s.hi = *next + 1;
		}
	}
	bpf_loop(UNWIND_MAX_ROWS_LOG2 + 1, unwind_row_step, &s, 0);
	if (s.lo == 0)
		return NULL;
	idx = s.first + s.lo - 1;
	return bpf_map_lookup_elem(inner, &idx);
}

static __always_inline bool unwind_read(__u64 *dst, __u64 addr)
{
	return bpf_probe_read_user(dst, sizeof(*dst), (void *)addr) == 0;
}

/* One step by the frame pointer: 1 to end the walk. */
static __always_inline long unwind_fp_step(struct unwind_walk *w)
{
	__u64 bp = w->bp, ra, next_bp;

	if (unwind_mode == UNWIND_MODE_DWARF || !bp || bp < w->sp)
		return 1;
	if (!unwind_read(&next_bp, bp) || !unwind_read(&ra, bp + 8))
		return 1;
	__sync_fetch_and_add(&unwind_stats.fp_frames, 1);
	/* x86-64: the caller's rsp exactly; arm64: a lower bound, as the
	 * frame record may sit anywhere in the frame. */
	w->sp = bp + 16;
	w->bp = next_bp;
	w->pc = ra & UNWIND_ADDR_MASK;
	w->lr = 0;
	w->return_address = true;
	return 0;
}

/* Records the Java frame java_step stepped through and moves the walk to
 * its caller: 1 when the stack is full. */
static __always_inline long unwind_java_frame(struct unwind_walk *w, struct java_scratch *js,
					      struct flare_stack_scratch *out)
{
	__u64 len;

	len = flare_push_runtime_frame(out, w->n, &w->hash, FLARE_FRAME_JAVA, js->ptr,
				       java_frame_id(js), js->cookie);
	if (len == w->n)
		return 1;
	w->n = len;
	__sync_fetch_and_add(&java_stats.frames, 1);
	w->pc = js->ra;
	w->sp = js->caller_sp;
	w->bp = js->caller_bp;
	w->lr = 0;
	w->return_address = true;
	return 0;
}

/* Where the builtins v8_proc names are in their binary's unwind table,
 * into v8_scratch: the copies other isolates (worker threads) run are
 * where that table maps the same rows. */
static __always_inline void unwind_v8_blob_table(struct unwind_walk *w)
{
	struct v8_scratch *vs = v8_scratch_get();
	struct unwind_mapping *m;

	if (!vs)
		return;
	vs->blob_table = UNWIND_NO_TABLE;
	if (!w->have_proc)
		return;
	m = unwind_find_mapping(w, vs->proc.blob_low);
	if (!m || m->table == UNWIND_NO_TABLE || vs->proc.blob_low < m->bias)
		return;
	vs->blob_table = m->table;
	vs->blob_row_low = vs->proc.blob_low - m->bias;
	vs->blob_row_high = vs->proc.blob_high - m->bias;
}

/* Records the JavaScript frame at the frame pointer in place of `pc`,
 * when `pc` is in V8's builtins or code without unwind tables (in no
 * mapping `m`, or one without a table) and the frame is one: true then
 * (a full stack keeps the pc). */
static __always_inline bool unwind_v8_frame(struct unwind_walk *w, struct flare_stack_scratch *out,
					    __u64 pc, struct unwind_mapping *m)
{
	struct v8_scratch *vs = v8_scratch_get();
	__u32 flags = w->return_address ? V8_AT_RETURN : 0;
	__u64 len, row;

	if (!vs)
		return false;
	/* In the builtins: a range v8_proc names, or the builtins' place in
	 * any mapping of the binary's table (a worker's copy). */
	row = m ? pc - m->bias : 0;
	vs->pc_blob = 0;
	if (pc >= vs->proc.blob_low && pc < vs->proc.blob_high)
		vs->pc_blob = vs->proc.blob_low;
	else if (pc >= vs->proc.other_low && pc < vs->proc.other_high)
		vs->pc_blob = vs->proc.other_low;
	else if (m && m->table != UNWIND_NO_TABLE && m->table == vs->blob_table &&
		 row >= vs->blob_row_low && row < vs->blob_row_high)
		vs->pc_blob = pc - (row - vs->blob_row_low);
	if (vs->pc_blob)
		flags |= V8_AT_BUILTIN;
	else if (m && m->table != UNWIND_NO_TABLE)
		return false;
	if (!v8_frame(pc, w->sp, w->bp, w->return_address ? 0 : w->lr, flags))
		return false;
	len = flare_push_runtime_frame(out, w->n, &w->hash, FLARE_FRAME_V8, vs->sfi,
				       vs->kind_offset, vs->code);
	if (len == w->n)
		return false;
	w->n = len;
	__sync_fetch_and_add(&v8_stats.frames, 1);
	return true;
}

/* Steps through a signal trampoline: its sp points at the frame the
 * kernel pushed, which holds the interrupted registers. 1 to end. */
static __always_inline long unwind_signal_step(struct unwind_walk *w)
{
	__u64 bp, sp, pc, lr = 0;

#if defined(__TARGET_ARCH_arm64)
	/* struct rt_sigframe: siginfo (128 bytes), then the ucontext, whose
	 * uc_mcontext (at 176) is a sigcontext: fault_address, regs[31],
	 * sp, pc. */
	__u64 regs = w->sp + 128 + 176 + 8;

	if (!unwind_read(&bp, regs + 29 * 8) || !unwind_read(&lr, regs + 30 * 8) ||
	    !unwind_read(&sp, regs + 31 * 8) || !unwind_read(&pc, regs + 32 * 8))
		return 1;
	lr &= UNWIND_ADDR_MASK;
#else
	/* rsp points at the ucontext; its mcontext holds the interrupted
	 * rbp, rsp and rip (x86-64 sigcontext). */
	if (!unwind_read(&bp, w->sp + 40 + 10 * 8) ||
	    !unwind_read(&sp, w->sp + 40 + 15 * 8) ||
	    !unwind_read(&pc, w->sp + 40 + 16 * 8))
		return 1;
#endif
	w->bp = bp;
	w->sp = sp;
	w->pc = pc;
	w->lr = lr;
	w->return_address = false;
	return 0;
}

/* Records the current pc (or, for the eval loop of a Python process,
 * starts putting its Python frames in its place) and steps to the
 * caller: 1 to end the walk. */
static __always_inline long unwind_native_step(struct unwind_walk *w, struct flare_stack_scratch *out)
{
	struct unwind_mapping *m = NULL;
	struct unwind_row *r = NULL;
	__u64 pc = w->pc, cfa, ra, bp, lookup;
	__u32 n = w->n;
	__u8 kind;

	if (!pc || n >= FLARE_MAX_STACK_WORDS)
		return 1;
	if (w->java) {
		struct java_scratch *js = java_scratch_get();

		if (js && java_in_cache(js, pc)) {
			js->pc = pc;
			js->sp = w->sp;
			js->bp = w->bp;
			js->return_address = w->return_address;
			js->lr = w->lr;
			if (java_step(js))
				return unwind_java_frame(w, js, out);
		}
	}
	lookup = w->return_address ? pc - 1 : pc;
	if (w->have_proc) {
		m = unwind_find_mapping(w, lookup);
		if (!m)
			unwind_report(w->pid, UNWIND_EVENT_PC, pc);
		else
			r = unwind_find_row(m, lookup);
	}
	/* V8's builtins and JIT code (no unwind table): its frame at the
	 * frame pointer may be a JavaScript frame. */
	if (w->v8 && unwind_v8_frame(w, out, pc, m)) {
		/* Stepped by the frame pointer, as V8 keeps it. */
		r = NULL;
	} else if (w->py.frame && py_in_eval(lookup)) {
		w->py.pending = true;
		w->py.eval_pc = pc;
		w->py.emitted = 0;
	} else if (w->rb.on && rb_in_exec(lookup)) {
		w->rb.pending = true;
		w->rb.exec_pc = pc;
		w->rb.emitted = 0;
		w->rb.after_exec = true;
	} else if (w->rb.on && w->have_proc && (!m || m->table == UNWIND_NO_TABLE) && rb_frames_left()) {
		/* Ruby's JIT code: no frame to step by. Every Ruby frame
		 * left goes in, and the walk ends. */
		w->rb.pending = true;
		w->rb.rest = true;
		w->rb.emitted = 0;
		return 1;
	} else {
		if (w->rb.on) {
			if (!w->rb.after_exec && rb_in_exec_caller(lookup))
				rb_entering(out, &w->n, &w->hash);
			w->rb.after_exec = false;
			n = w->n;
		}
		barrier_var(n);
		if (n >= FLARE_MAX_STACK_WORDS)
			return 1;
		out->pcs[n] = pc;
		w->n = n + 1;
		w->hash = flare_hash_step(w->hash, pc);
	}
	if (!r)
		return unwind_fp_step(w);

	kind = r->kind;
	switch (kind & 0xf) {
	case UNWIND_CFA_RSP:
		cfa = w->sp + r->cfa_off;
		break;
	case UNWIND_CFA_RBP:
		cfa = w->bp + r->cfa_off;
		break;
#if defined(__TARGET_ARCH_x86)
	case UNWIND_CFA_PLT:
		cfa = w->sp + 8 + ((pc & 15) >= r->cfa_off ? 8 : 0);
		break;
#endif
	case UNWIND_CFA_END:
		w->complete = true;
		return 1;
	case UNWIND_CFA_SIGNAL:
		return unwind_signal_step(w);
	default:
		return unwind_fp_step(w);
	}
#if defined(__TARGET_ARCH_arm64)
	/* The caller's frame is at or above this one (a leaf may have
	 * none); the return address is in x30 or where the rule says. */
	if (cfa < w->sp)
		return 1;
	switch ((kind >> 6) & 3) {
	case UNWIND_RA_LR:
		if (!w->lr)
			return 1;
		ra = w->lr;
		break;
	case UNWIND_RA_AFTER_FP:
		if (!unwind_read(&ra, cfa + ((__s64)r->rbp_off + 1) * 8))
			return 1;
		break;
	case UNWIND_RA_SAVED:
		if (!unwind_read(&ra, cfa + (__s64)r->rbp_off * 8))
			return 1;
		break;
	default:
		return 1;
	}
	ra &= UNWIND_ADDR_MASK;
	/* A frame with its return address in x30 that does not move sp
	 * would step to itself forever. */
	if (cfa == w->sp && ra == pc)
		return 1;
	w->lr = 0;
#else
	/* The caller's frame is above this one. */
	if (cfa <= w->sp || !unwind_read(&ra, cfa - 8))
		return 1;
#endif
	switch ((kind >> 4) & 3) {
	case UNWIND_RBP_SAVED:
		if (!unwind_read(&bp, cfa + (__s64)r->rbp_off * 8))
			return 1;
		w->bp = bp;
		break;
	case UNWIND_RBP_UNKNOWN:
		w->bp = 0;
		break;
	}
	w->sp = cfa;
	w->pc = ra;
	w->return_address = true;
	return 0;
}

/* The walk's room: a runtime frame's words and a frame's count. */
static __always_inline bool unwind_room(struct unwind_walk *w)
{
	return w->frames < FLARE_MAX_FRAMES &&
	       w->n + 1 + FLARE_RUNTIME_FRAME_WORDS <= FLARE_MAX_STACK_WORDS;
}

/* One step of the walk, a native frame or a Python frame in place of an
 * eval call's native frame (python.h): 1 to end the walk. */
static __always_inline long unwind_one(struct unwind_walk *w, struct flare_stack_scratch *out)
{
	long ret;

	if (w->py.pending) {
		if (py_step(&w->py, out, &w->n, &w->hash))
			return 1;
		if (!w->py.pending && w->native_done)
			return 1;
		return 0;
	}
	if (w->rb.pending) {
		if (rb_step(&w->rb, out, &w->n, &w->hash))
			return 1;
		if (!w->rb.pending && w->native_done)
			return 1;
		return 0;
	}
	if (w->native_done)
		return 1;
	ret = unwind_native_step(w, out);
	if (ret && (w->py.pending || w->rb.pending)) {
		/* The eval call's Python frames (or the loop's Ruby ones) still go in. */
		w->native_done = true;
		return 0;
	}
	return ret;
}

/* One step while there is room: 1 when the walk ended, 2 when it is cut
 * (no room left), else 0. A global function:
 * the verifier checks it once, on its own, from any state. Inlined in
 * bpf_loop's callback, it was checked at every state the callback's
 * checks reached (from Linux 6.7, until they converge): 52k of the 71k
 * instructions the profile program took to verify, 29 passes over the
 * step, once four runtimes' walks were in it. */
__noinline int unwind_step_once(void)
{
	struct unwind_walk *w = unwind_walk_get();
	struct flare_stack_scratch *out = flare_scratch();

	if (!w || !out || !unwind_room(w))
		return 2;
	return unwind_one(w, out) ? 1 : 0;
}

/* bpf_loop's callback: a step, counting the frames it puts in. A walk
 * that runs out of room (or of steps) is cut. */
static long unwind_step(__u64 i, void *ctx)
{
	struct unwind_walk *w = unwind_walk_get();
	__u32 before;
	int ret;

	if (!w)
		return 1;
	before = w->n;
	ret = unwind_step_once();
	if (w->n != before)
		w->frames++;
	/* The callback's return must be 0 or 1 as the verifier sees it,
	 * and a global function's is any value. */
	if (ret == 1)
		w->ended = true;
	return ret ? 1 : 0;
}

/* The walk's start from the task's saved user registers: false when
 * they are not user mode's (a kernel thread). */
static __always_inline bool unwind_user_regs(struct unwind_walk *w, struct pt_regs *regs)
{
#if defined(__TARGET_ARCH_arm64)
	/* PSR_MODE_MASK: EL0 is mode 0. */
	if (BPF_CORE_READ(regs, pstate) & 0xf)
		return false;
	w->pc = BPF_CORE_READ(regs, pc);
	w->sp = BPF_CORE_READ(regs, sp);
	w->bp = BPF_CORE_READ(regs, regs[29]);
	w->lr = BPF_CORE_READ(regs, regs[30]) & UNWIND_ADDR_MASK;
#else
	if ((BPF_CORE_READ(regs, cs) & 3) != 3)
		return false;
	w->pc = BPF_CORE_READ(regs, ip);
	w->sp = BPF_CORE_READ(regs, sp);
	w->bp = BPF_CORE_READ(regs, bp);
#endif
	return true;
}

/*
 * Walks the current task's user stack with the tables and stores it: its
 * id, or a negative errno as flare_store_stack gives one (-EFAULT: no
 * user stack).
 */
static __always_inline __s64 flare_unwind_user(__u32 pid)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct unwind_walk *w;
	struct unwind_proc *proc;
	struct flare_stack_scratch *out;
	struct pt_regs *regs;
	__u64 words;

	/*
	 * Zeroed for each walk. In map memory the verifier knows none of
	 * its fields (when the walk lived on the stack, it was zeroed by a
	 * helper for that: before Linux 6.7 the verifier checked bpf_loop's
	 * callback once, from the first state, and dropped as dead the code
	 * reading fields a later step sets; on 6.1 every Python frame was
	 * lost so).
	 */
	w = unwind_walk_get();
	if (!w)
		return -FLARE_EFAULT;
	_Static_assert(sizeof(*w) <= sizeof(unwind_zeros), "unwind_zeros holds a walk");
	if (bpf_probe_read_kernel(w, sizeof(*w), unwind_zeros))
		return -FLARE_EFAULT;
	if (!BPF_CORE_READ(task, mm))
		return -FLARE_EFAULT;
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs || !unwind_user_regs(w, regs))
		return -FLARE_EFAULT;
	w->pid = pid;
	w->hash = FLARE_HASH_SEED;
	proc = bpf_map_lookup_elem(&unwind_procs, &pid);
	if (proc) {
		w->first = proc->first;
		w->nr = proc->nr;
		w->have_proc = true;
	} else {
		__sync_fetch_and_add(&unwind_stats.no_proc, 1);
		unwind_report(pid, UNWIND_EVENT_PROC, w->pc);
	}
	py_start(&w->py, pid);
	w->rb.on = rb_begin(pid, py_thread_pointer()) == 1;
	w->java = java_start(pid);
	w->v8 = v8_start(pid);
	if (w->v8)
		unwind_v8_blob_table(w);
	/* A step puts in at most one frame; eval calls that Python frames
	 * replace, and stubs, take steps that put in none. */
	bpf_loop(2 * FLARE_MAX_FRAMES, unwind_step, NULL, 0);
	__sync_fetch_and_add(&unwind_stats.stacks, 1);
	if (w->complete)
		__sync_fetch_and_add(&unwind_stats.complete, 1);
	out = flare_scratch();
	if (!out || !w->n)
		return -FLARE_EFAULT;
	words = flare_test_runtime_frame(out, w->n, &w->hash);
	out->len = flare_stack_len(words, w->frames + (words != w->n), !w->ended);
	return flare_store_stack(out, w->hash, FLARE_USER_ID_MASK, FLARE_USER_ID_BASE);
}
#endif /* FLARE_FP_ONLY */

#endif /* FLARE_UNWIND_H */
