//! The live page's time views as JSON: samples per slice over the kept
//! run (the strip and the heat map), and the flame graph of a time range,
//! alone or compared with the rest of the run. What the store keeps of
//! time is [`super::times`]; this module only answers queries on it, with
//! every answer's size bounded whatever the query asks.

use std::fmt::Write as _;
use std::time::Duration;

use super::times::{Counts, EventFilter};
use super::tree::{json_str, Tree};
use super::window::Store;
use super::{unit_name, write_snapshot, View};
use crate::profile::Profile;

/// The most slices one timeline answer holds; a longer run gives its
/// latest ones.
pub const MAX_SLICES: usize = 20_000;
/// Threads listed for the thread filter.
pub const MAX_THREADS_LISTED: usize = 200;
/// Spans of dropped events listed (the counts cover them all).
const MAX_DROPPED_LISTED: usize = 1_000;

/// A query on the store's times: the timeline's slices, or a range's
/// flame graph. Times are milliseconds from the run's start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TimeQuery {
    /// The timeline's slice width.
    pub slice_ms: u64,
    /// Range start; for the timeline, where its slices start.
    pub from_ms: Option<u64>,
    /// Range end (excluded).
    pub to_ms: Option<u64>,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    /// A function name part (ignoring case), for the timeline.
    pub search: Option<String>,
    /// Compare the range with the rest of the run.
    pub compare: bool,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// The timeline: values per slice of `q.slice_ms` over the kept run (or
/// from `q.from_ms` to `q.to_ms`), of everything and of what the query's
/// process, thread and search let through; the threads; what was dropped.
pub fn timeline_json(store: &Store, q: &TimeQuery) -> String {
    let mut out = String::with_capacity(1024);
    let _ = write!(
        out,
        "{{\"timed\":{},\"seq\":{},\"unit\":\"{}\",\"elapsed\":{:.3}",
        store.timed(),
        store.seq(),
        unit_name(store.meta.unit),
        store.elapsed().as_secs_f64()
    );
    let Some(origin) = store.times.origin_ns else {
        out.push('}');
        return out;
    };
    let slice_us = q.slice_ms.max(1).saturating_mul(1000);
    let (kept_from, kept_to) = store.kept_us();
    let from = q.from_ms.map_or(kept_from, |f| f.saturating_mul(1000));
    let to = q.to_ms.map_or(kept_to, |t| t.saturating_mul(1000));
    let mut start = from / slice_us * slice_us;
    let mut n = to.saturating_sub(start).div_ceil(slice_us);
    if n > MAX_SLICES as u64 {
        start += (n - MAX_SLICES as u64) * slice_us;
        n = MAX_SLICES as u64;
    }
    let filter = EventFilter {
        stacks: store.stack_mask(q.pid, q.search.as_deref()),
        tid: q.tid,
    };
    let slices = store.slices(start, slice_us, n as usize, &filter);
    let total: u64 = slices.all.iter().sum();
    let matched: u64 = slices.matched.iter().sum();
    let _ = write!(
        out,
        ",\"origin_ns\":{origin},\"slice\":{},\"from\":{},\"kept\":[{:.3},{:.3}],\
         \"total\":{total},\"matched\":{matched},\"filtered\":{},\"all\":",
        slice_us / 1000,
        start / 1000,
        ms(kept_from),
        ms(kept_to),
        !filter.is_all(),
    );
    write_list(&mut out, &slices.all);
    if !filter.is_all() {
        out.push_str(",\"counts\":");
        write_list(&mut out, &slices.matched);
    }
    let (mut events, mut value) = (0u64, 0u64);
    out.push_str(",\"dropped\":{\"spans\":[");
    for (i, d) in store.dropped().enumerate() {
        events += d.events;
        value += d.value;
        if i < MAX_DROPPED_LISTED {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "[{:.3},{:.3}]", ms(d.from_us), ms(d.to_us));
        }
    }
    let _ = write!(
        out,
        "],\"events\":{events},\"value\":{value}}},\"threads\":["
    );
    for (i, (tid, v)) in store
        .thread_values(q.pid)
        .into_iter()
        .take(MAX_THREADS_LISTED)
        .enumerate()
    {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "[{tid},");
        match store.thread(tid) {
            Some((name, pid)) => {
                json_str(&mut out, name);
                match pid {
                    Some(p) => {
                        let _ = write!(out, ",{p}");
                    }
                    None => out.push_str(",null"),
                }
            }
            None => out.push_str("null,null"),
        }
        let _ = write!(out, ",{v}]");
    }
    let _ = write!(
        out,
        "],\"unnamed_threads\":{}}}",
        store.times.unnamed_threads
    );
    out
}

fn write_list(out: &mut String, values: &[u64]) {
    out.push('[');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{v}");
    }
    out.push(']');
}

/// The range `q.from_ms..q.to_ms` as a view (of `q.pid`'s and `q.tid`'s
/// events), and with `q.compare` the counts of the rest of the kept run
/// under the same filters. `None` when the run keeps no times.
fn range_view(store: &Store, q: &TimeQuery) -> Option<(View, Option<Counts>)> {
    store.times.origin_ns?;
    let from = q.from_ms.unwrap_or(0).saturating_mul(1000);
    let to = q.to_ms.map_or(u64::MAX, |t| t.saturating_mul(1000));
    let filter = EventFilter {
        stacks: None,
        tid: q.tid,
    };
    let (inside, rest) = store.range_counts(from, to, &filter);
    let (kept_from, kept_to) = store.kept_us();
    let span = to.min(kept_to).saturating_sub(from.max(kept_from));
    let view = store.finish_view(
        inside,
        Duration::from_micros(span),
        store.lost_between(from, to),
        q.pid,
    );
    let before = q.compare.then(|| {
        rest.into_iter()
            .filter(|&(id, _)| {
                q.pid
                    .is_none_or(|p| store.stacks[id as usize].pid == Some(p))
            })
            .collect()
    });
    Some((view, before))
}

/// The snapshot JSON (as [`super::snapshot_json`]'s) of a time range,
/// differential against the rest of the run with `q.compare`. `None` when
/// the run keeps no times.
pub fn range_json(store: &Store, q: &TimeQuery, min_share: f64) -> Option<String> {
    let (view, before) = range_view(store, q)?;
    let min_value = (view.total() as f64 * min_share).floor() as u64;
    let tree = Tree::build_counts(store, &view.counts, before.as_deref(), min_value);
    let rest: u64 = before.iter().flatten().map(|c| c.1).sum();
    let mut extra = String::new();
    let _ = write!(
        extra,
        ",\"range\":[{},{}],\"tid\":{},\"compare\":{},\"rest_total\":{rest}",
        q.from_ms.unwrap_or(0),
        q.to_ms.map_or("null".to_string(), |t| t.to_string()),
        q.tid.map_or("null".to_string(), |t| t.to_string()),
        q.compare,
    );
    Some(write_snapshot(store, &view, q.pid, None, &tree, &extra))
}

/// A time range as a [`Profile`], for downloads.
pub fn range_profile(store: &Store, q: &TimeQuery) -> Option<Profile> {
    let (view, _) = range_view(store, q)?;
    Some(store.profile_of(&view))
}
