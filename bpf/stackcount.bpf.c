// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * flare stackcount: count the stacks that reach a function, tracepoint or
 * probe.
 *
 * One body, count_stack(), reached from one entry point per probe kind:
 * uprobe and uprobe.multi (user functions), usdt (SDT probes), tracepoint,
 * kprobe and kprobe.multi or fentry (kernel functions). User space turns
 * autoload off for every entry point the pattern does not need. Each event
 * that passes the filters bumps the counter of its (pid, comm, user stack
 * id, kernel stack id) key; stacks live in a stack-trace map.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>
#include "stackcount.h"

/* Knobs fixed for a run, set before load. */
const volatile bool filter_pid = false;	/* tgid must be target_pid (-p) */
const volatile __u32 target_pid = 0;
const volatile bool filter_cpu = false;	/* event must be on target_cpu (-c) */
const volatile __u32 target_cpu = 0;
const volatile bool per_process = true;	/* keep processes apart in keys */
const volatile bool user_stacks = true;
const volatile bool kernel_stacks = true;
const volatile bool use_pidns = false;	/* flare runs in a child PID ns */
const volatile __u64 pidns_dev = 0;
const volatile __u64 pidns_ino = 0;

struct stackcount_stats stats = {};
/* Present so that the skeleton generates the key type for Rust. */
struct stackcount_key stackcount_key_type = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct stackcount_key);
	__type(value, __u64);
	__uint(max_entries, 40960);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, FLARE_MAX_STACK_DEPTH * sizeof(__u64));
	__uint(max_entries, 16384);
} stacks SEC(".maps");

static __always_inline int count_stack(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct stackcount_key key = {};
	__u64 one = 1, *count;

	if (filter_cpu && bpf_get_smp_processor_id() != target_cpu)
		return 0;
	if (use_pidns) {
		struct bpf_pidns_info ns = {};

		if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns,
						sizeof(ns))) {
			__sync_fetch_and_add(&stats.pidns_miss, 1);
			return 0;
		}
		tgid = ns.tgid;
	}
	if (filter_pid && tgid != target_pid)
		return 0;

	__sync_fetch_and_add(&stats.events, 1);

	if (per_process) {
		key.pid = tgid;
		bpf_get_current_comm(&key.comm, sizeof(key.comm));
	} else {
		key.pid = FLARE_SC_ALL_PIDS;
	}
	/* No BPF_F_REUSE_STACKID: a colliding stack must not overwrite one
	 * that earlier keys still point to; it is counted as missed instead. */
	key.user_stack_id = user_stacks ?
		bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK) : FLARE_STACK_SKIPPED;
	key.kernel_stack_id = kernel_stacks ?
		bpf_get_stackid(ctx, &stacks, 0) : FLARE_STACK_SKIPPED;

	count = bpf_map_lookup_elem(&counts, &key);
	if (count) {
		__sync_fetch_and_add(count, 1);
		return 0;
	}
	if (bpf_map_update_elem(&counts, &key, &one, BPF_NOEXIST)) {
		/* Another CPU may have inserted the same key meanwhile. */
		count = bpf_map_lookup_elem(&counts, &key);
		if (count)
			__sync_fetch_and_add(count, 1);
		else
			__sync_fetch_and_add(&stats.hash_full, 1);
	}
	return 0;
}

SEC("uprobe")
int flare_sc_uprobe(struct pt_regs *ctx)
{
	return count_stack(ctx);
}

SEC("uprobe.multi")
int flare_sc_uprobe_multi(struct pt_regs *ctx)
{
	return count_stack(ctx);
}

SEC("usdt")
int flare_sc_usdt(struct pt_regs *ctx)
{
	return count_stack(ctx);
}

SEC("tracepoint")
int flare_sc_tracepoint(void *ctx)
{
	return count_stack(ctx);
}

SEC("kprobe")
int flare_sc_kprobe(struct pt_regs *ctx)
{
	return count_stack(ctx);
}

SEC("kprobe.multi")
int flare_sc_kprobe_multi(struct pt_regs *ctx)
{
	return count_stack(ctx);
}

/* The target is set before load; one object is loaded per function. */
SEC("fentry")
int flare_sc_fentry(void *ctx)
{
	return count_stack(ctx);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
