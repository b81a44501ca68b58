// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * flare profile: timed sampling of stack traces, counted in the kernel.
 *
 * Attached to software CPU clock perf events (one per CPU, or one per
 * target thread). Each sample that passes the filters bumps the counter of
 * its (pid, process start, tid, comm, user stack id, kernel stack id)
 * key; stacks live in
 * flare's stack storage (stacks.h). User space reads both once at the end.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "flare.bpf.h"
#include "profile.h"
#include "targets.h"

/* Knobs fixed for a run, set before load. */
const volatile bool filter_pid = false;	/* tgid must be in `targets` */
const volatile bool filter_tid = false;	/* tid must be in `targets` */
const volatile bool per_thread = false;	/* keep tids apart in keys */
const volatile bool include_idle = false;
const volatile bool filter_cgroup = false;
const volatile bool filter_mntns = false;

struct profile_stats stats = {};
/* Present so that the skeletons generate the key and record types. */
struct profile_key profile_key_type = {};
struct profile_timed profile_timed_type = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct profile_key);
	__type(value, __u64);
	__uint(max_entries, 40960);
} counts SEC(".maps");

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
	struct profile_key key = {};
	__u64 now = timed ? bpf_ktime_get_ns() : 0;	/* before the stacks are walked */
	__u32 tgid, tid;

	/* The idle task is thread 0 on every CPU. */
	if (!include_idle && (__u32)bpf_get_current_pid_tgid() == 0)
		return 0;
	if (!flare_current_ids(&tgid, &tid)) {
		__sync_fetch_and_add(&stats.pidns_miss, 1);
		return 0;
	}

	if (flare_is_self(tgid))
		return 0;
	if (filter_pid && !flare_is_target(tgid) && !flare_follows_current())
		return 0;
	if (filter_tid && !flare_is_target(tid))
		return 0;
	if (filter_cgroup && !in_set(&cgroup_sets, bpf_get_current_cgroup_id()))
		return 0;
	if (filter_mntns && !mntns_allowed())
		return 0;

	__sync_fetch_and_add(&stats.samples, 1);

	key.pid = tgid;
	key.start = flare_current_start();
	key.tid = per_thread ? tid : 0;
	bpf_get_current_comm(&key.comm, sizeof(key.comm));
	flare_capture_stacks(ctx, &key.user_stack_id, &key.kernel_stack_id);

	if (timed) {
		struct profile_timed *rec = flare_timed_reserve(sizeof(*rec), now, 1,
								tid, &stats.ring_full);

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

char LICENSE[] SEC("license") = "Dual BSD/GPL";
