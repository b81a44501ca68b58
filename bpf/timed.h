/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Time-stamped samples (`-o NAME.json.gz`, heat maps, the live page's
 * timeline): with `timed` set, a tool sends each sample or blocked period
 * to the `timed_events` ring buffer as a small record (its time, thread,
 * CPU and value, then the tool's own key, which names its stacks by id:
 * stacks are still stored once) instead of counting it in its hash map.
 * User space (src/collect/timed.rs) builds the counts from the records,
 * so the aggregate and the timeline always agree. Without `timed` the
 * ring is one page and nothing is sent.
 */
#ifndef FLARE_TIMED_H
#define FLARE_TIMED_H

#include "common.h"

/* Send records instead of counting in the kernel. Set before load. */
const volatile bool timed = false;
/* The ring's size in bytes (its max_entries, set before load). */
const volatile __u64 timed_ring_size = 4096;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	/* Replaced before load: one page unless timed. */
	__uint(max_entries, 4096);
} timed_events SEC(".maps");

/*
 * Reserves a record of `size` bytes (a struct beginning with a
 * flare_timed_hdr) and fills its header; NULL when the ring is full,
 * counted in `*full`.
 */
static __always_inline void *flare_timed_reserve(__u64 size, __u64 time_ns, __u64 value,
						 __u32 tid, __u64 *full)
{
	struct flare_timed_hdr *h = bpf_ringbuf_reserve(&timed_events, size, 0);

	if (!h) {
		__sync_fetch_and_add(full, 1);
		return NULL;
	}
	h->time_ns = time_ns;
	h->value = value;
	h->tid = tid;
	h->cpu = bpf_get_smp_processor_id();
	return h;
}

/*
 * Sends a reserved record. User space reads the ring every few
 * milliseconds on its own, so records are sent without waking it,
 * unless the ring is more than half full.
 */
static __always_inline void flare_timed_submit(void *rec)
{
	__u64 flags = BPF_RB_NO_WAKEUP;

	if (bpf_ringbuf_query(&timed_events, BPF_RB_AVAIL_DATA) > timed_ring_size / 2)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(rec, flags);
}

#endif /* FLARE_TIMED_H */
