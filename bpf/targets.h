/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The targets map of the tools that take -p/-t lists (profile, wallclock,
 * the off-CPU tools): process or thread ids as flare's PID namespace sees
 * them, sized and filled from user space (loader::fill_targets) before the
 * programs attach. stackcount takes one pid in its rodata instead.
 * Included after flare.bpf.h.
 */
#ifndef FLARE_TARGETS_H
#define FLARE_TARGETS_H

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 1024);
} targets SEC(".maps");

/* True when `id` (a tgid or a tid, as the tool filters) is a target. */
static __always_inline bool flare_is_target(__u32 id)
{
	return bpf_map_lookup_elem(&targets, &id) != NULL;
}

#endif /* FLARE_TARGETS_H */
