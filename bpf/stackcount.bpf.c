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
 * id, kernel stack id) key; stacks live in flare's stack storage (stacks.h).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>
#include "flare.bpf.h"
#include "stackcount.h"

/* Knobs fixed for a run, set before load. */
const volatile bool filter_pid = false;	/* tgid must be target_pid (-p) */
const volatile __u32 target_pid = 0;
const volatile bool filter_cpu = false;	/* event must be on target_cpu (-c) */
const volatile __u32 target_cpu = 0;
const volatile bool per_process = true;	/* keep processes apart in keys */

struct stackcount_stats stats = {};
/* Present so that the skeleton generates the key type for Rust. */
struct stackcount_key stackcount_key_type = {};
struct stackcount_timed stackcount_timed_type = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct stackcount_key);
	__type(value, __u64);
	__uint(max_entries, 40960);
} counts SEC(".maps");

static __always_inline int count_stack(void *ctx)
{
	struct stackcount_key key = {};
	__u64 now = timed ? bpf_ktime_get_ns() : 0;	/* before the stacks are walked */
	__u32 tgid, tid;

	if (filter_cpu && bpf_get_smp_processor_id() != target_cpu)
		return 0;
	if (!flare_current_ids(&tgid, &tid)) {
		__sync_fetch_and_add(&stats.pidns_miss, 1);
		return 0;
	}
	if (flare_is_self(tgid))
		return 0;
	if (filter_pid && tgid != target_pid && !flare_follows_current())
		return 0;

	__sync_fetch_and_add(&stats.events, 1);

	if (per_process) {
		key.pid = tgid;
		key.start = flare_current_start();
		bpf_get_current_comm(&key.comm, sizeof(key.comm));
	} else {
		key.pid = FLARE_SC_ALL_PIDS;
	}
	flare_capture_stacks(ctx, &key.user_stack_id, &key.kernel_stack_id);

	if (timed) {
		struct stackcount_timed *rec = flare_timed_reserve(sizeof(*rec), now,
								   1, tid, &stats.ring_full);

		if (rec) {
			rec->key = key;
			flare_timed_submit(rec);
		}
		return 0;
	}
	if (!flare_count(&counts, &key, 1))
		__sync_fetch_and_add(&stats.hash_full, 1);
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
