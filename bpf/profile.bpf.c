// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * flare profile: timed sampling of stack traces, counted in the kernel.
 *
 * Attached to software CPU clock perf events (one per CPU, or one per
 * target thread). Each sample that passes the filters bumps the counter of
 * its (pid, tid, comm, user stack id, kernel stack id) key; stacks live in a
 * stack-trace map. User space reads both once at the end.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "profile.h"

/* Knobs fixed for a run, set before load. */
const volatile bool filter_pid = false;	/* tgid must be in `targets` */
const volatile bool filter_tid = false;	/* tid must be in `targets` */
const volatile bool per_thread = false;	/* keep tids apart in keys */
const volatile bool include_idle = false;
const volatile bool user_stacks = true;
const volatile bool kernel_stacks = true;
const volatile bool filter_cgroup = false;
const volatile bool filter_mntns = false;
const volatile bool use_pidns = false;	/* flare runs in a child PID ns */
const volatile __u64 pidns_dev = 0;
const volatile __u64 pidns_ino = 0;

struct profile_stats stats = {};
/* Present so that the skeleton generates the key type for Rust. */
struct profile_key profile_key_type = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct profile_key);
	__type(value, __u64);
	__uint(max_entries, 40960);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, FLARE_MAX_STACK_DEPTH * sizeof(__u64));
	__uint(max_entries, 16384);
} stacks SEC(".maps");

/* PIDs (-p) or TIDs (-L) to sample, as flare's PID namespace sees them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 1024);
} targets SEC(".maps");

/*
 * The user's pinned filter sets (--cgroupmap, --mntnsmap): hash maps keyed
 * by a 64-bit cgroup id or mount-namespace inode. Each is reached through a
 * one-slot map-of-maps, so that the user's map keeps its own name and stays
 * live (entries added during the run take effect at once). The template is
 * replaced by the user's map before load, so only key and value sizes and
 * flags need to match.
 */
struct filter_set {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, __u64);
	__uint(max_entries, 1);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct filter_set);
} cgroup_sets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct filter_set);
} mntns_sets SEC(".maps");

static __always_inline bool in_set(void *sets, __u64 key)
{
	__u32 zero = 0;
	void *set = bpf_map_lookup_elem(sets, &zero);

	return set && bpf_map_lookup_elem(set, &key);
}

static __always_inline bool mntns_allowed(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	return in_set(&mntns_sets, BPF_CORE_READ(task, nsproxy, mnt_ns, ns.inum));
}

SEC("perf_event")
int flare_profile_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 tid = (__u32)id;
	struct profile_key key = {};
	__u64 one = 1, *count;

	/* The idle task is thread 0 on every CPU. */
	if (!include_idle && tid == 0)
		return 0;

	if (use_pidns) {
		struct bpf_pidns_info ns = {};

		if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns,
						sizeof(ns))) {
			__sync_fetch_and_add(&stats.pidns_miss, 1);
			return 0;
		}
		tgid = ns.tgid;
		tid = ns.pid;
	}

	if (filter_pid && !bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	if (filter_tid && !bpf_map_lookup_elem(&targets, &tid))
		return 0;
	if (filter_cgroup && !in_set(&cgroup_sets, bpf_get_current_cgroup_id()))
		return 0;
	if (filter_mntns && !mntns_allowed())
		return 0;

	__sync_fetch_and_add(&stats.samples, 1);

	key.pid = tgid;
	key.tid = per_thread ? tid : 0;
	bpf_get_current_comm(&key.comm, sizeof(key.comm));
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

char LICENSE[] SEC("license") = "Dual BSD/GPL";
