//! When the live store's samples happened: per interval, its timed events
//! in a compact form, and the threads they ran on, so that the page can
//! draw samples over time (a strip, a heat map) and the flame graph of any
//! time range, filtered by process, thread or function.
//!
//! A profile's [`Timeline`] holds one [`crate::profile::Event`] per sample
//! (32 bytes with its CPU); the store keeps 16 bytes of each: its time in
//! microseconds from its interval's base, its interned stack, its thread
//! and its value. Times are dropped with their interval (past
//! `--serve-keep`), and each interval keeps at most its share of
//! [`super::Limits::max_events`] (by its length): the events past it, the
//! latest of the interval, are counted with the span they fell in, never
//! silently lost. Times are offsets from the run's start (the timeline's
//! `origin_ns`, the same for every interval of a run).

use std::time::Duration;

use super::fxhash::FxMap;
use super::window::Store;
use crate::profile::{Sample, Timeline};

/// Threads named in the store; later ones are counted, not named.
pub const MAX_THREADS: usize = 100_000;
/// However short an interval, it may keep this many events.
pub const MIN_EVENTS_PER_INTERVAL: usize = 100;

/// One timed sample (or blocked period) as the store keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimedEvent {
    /// Microseconds after its interval's [`IntervalTimes::base_us`].
    pub(crate) at: u32,
    /// The stack's id in the store.
    pub(crate) stack: u32,
    pub(crate) tid: u32,
    /// Its value (a larger one is split into several events).
    pub(crate) value: u32,
}

/// Events an interval did not keep: how many, their value, and the span
/// they fell in (microseconds from the run's start).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    pub events: u64,
    pub value: u64,
    pub from_us: u64,
    pub to_us: u64,
}

/// The times of one interval's samples.
#[derive(Debug, Default)]
pub(crate) struct IntervalTimes {
    /// Microseconds from the run's start that event times count from.
    pub(crate) base_us: u64,
    /// In time order.
    pub(crate) events: Vec<TimedEvent>,
    pub(crate) dropped: Dropped,
    /// The kept events' values by thread (tid, value), so that listing
    /// threads does not read every event.
    pub(crate) threads: Vec<(u32, u64)>,
}

impl IntervalTimes {
    /// An event's time in microseconds from the run's start.
    pub(crate) fn time_us(&self, e: &TimedEvent) -> u64 {
        self.base_us + u64::from(e.at)
    }

    /// The events from `from_us` up to `to_us` (excluded).
    pub(crate) fn between(&self, from_us: u64, to_us: u64) -> &[TimedEvent] {
        let lo = self.events.partition_point(|e| self.time_us(e) < from_us);
        let hi = self.events.partition_point(|e| self.time_us(e) < to_us);
        &self.events[lo..hi.max(lo)]
    }

    /// The time of the first and of the last event.
    pub(crate) fn bounds_us(&self) -> Option<(u64, u64)> {
        Some((
            self.time_us(self.events.first()?),
            self.time_us(self.events.last()?),
        ))
    }
}

/// A thread seen in the times: its name (a string of the store) and
/// process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Thread {
    pub(crate) comm: u32,
    pub(crate) pid: Option<u32>,
}

/// What the store knows of time across intervals.
#[derive(Debug, Default)]
pub(crate) struct Times {
    /// `CLOCK_MONOTONIC` ns at the run's start, from the first timeline.
    pub(crate) origin_ns: Option<u64>,
    /// Thread id -> its latest name and process.
    pub(crate) threads: FxMap<u32, Thread>,
    /// Threads seen past [`MAX_THREADS`], left unnamed.
    pub(crate) unnamed_threads: u64,
}

/// Which events a time query counts. `stacks` is a mask by stack id
/// (process and search), `None` for all.
#[derive(Debug, Default)]
pub(crate) struct EventFilter {
    pub(crate) stacks: Option<Vec<bool>>,
    pub(crate) tid: Option<u32>,
}

impl EventFilter {
    pub(crate) fn passes(&self, e: &TimedEvent) -> bool {
        self.tid.is_none_or(|t| t == e.tid)
            && self
                .stacks
                .as_ref()
                .is_none_or(|m| m.get(e.stack as usize).copied().unwrap_or(false))
    }

    /// True when it lets everything through.
    pub(crate) fn is_all(&self) -> bool {
        self.stacks.is_none() && self.tid.is_none()
    }
}

/// Values by stack id, sorted by id.
pub(crate) type Counts = Vec<(u32, u64)>;

/// Events per slice: of everything, and of what a filter lets through.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Slices {
    pub(crate) all: Vec<u64>,
    pub(crate) matched: Vec<u64>,
}

impl Store {
    /// Whether any interval kept times (the run's collector keeps them).
    pub fn timed(&self) -> bool {
        self.times.origin_ns.is_some()
    }

    /// The compact times of `timeline`, whose events point at `samples`,
    /// which the store gave the stack ids `ids`.
    pub(crate) fn ingest_times(
        &mut self,
        timeline: &Timeline,
        samples: &[Sample],
        ids: &[u32],
        length: Duration,
    ) -> IntervalTimes {
        let origin = *self.times.origin_ns.get_or_insert(timeline.origin_ns);
        let keep = self.limits.keep.as_secs_f64();
        let share = if keep > 0.0 {
            (length.as_secs_f64() / keep).min(1.0)
        } else {
            1.0
        };
        let cap = ((self.limits.max_events as f64 * share) as usize).max(MIN_EVENTS_PER_INTERVAL);
        // (microseconds from the start, stack, tid, value)
        let mut all: Vec<(u64, u32, u32, u64)> = Vec::with_capacity(timeline.events.len());
        let mut last_tid = None;
        for e in &timeline.events {
            let i = e.sample as usize;
            let (Some(&stack), Some(sample)) = (ids.get(i), samples.get(i)) else {
                continue;
            };
            if e.value == 0 {
                continue;
            }
            if last_tid != Some((e.tid, i)) {
                last_tid = Some((e.tid, i));
                self.name_thread(e.tid, sample);
            }
            let us = e.time_ns.saturating_sub(origin) / 1000;
            all.push((us, stack, e.tid, e.value));
        }
        all.sort_by_key(|e| e.0);
        let mut times = IntervalTimes {
            base_us: all.first().map_or(0, |e| e.0),
            ..IntervalTimes::default()
        };
        let skip = |d: &mut Dropped, us: u64, value: u64| {
            if d.events == 0 {
                d.from_us = us;
            }
            d.events += 1;
            d.value += value;
            d.to_us = d.to_us.max(us + 1);
        };
        for (us, stack, tid, mut value) in all {
            let at = u32::try_from(us - times.base_us).ok();
            let Some(at) = at.filter(|_| times.events.len() < cap) else {
                skip(&mut times.dropped, us, value);
                continue;
            };
            // A blocked period longer than u32::MAX µs (71 minutes) takes
            // more than one event.
            while value > 0 {
                let v = value.min(u64::from(u32::MAX));
                times.events.push(TimedEvent {
                    at,
                    stack,
                    tid,
                    value: v as u32,
                });
                value -= v;
            }
        }
        let mut by: FxMap<u32, u64> = FxMap::default();
        for e in &times.events {
            *by.entry(e.tid).or_default() += u64::from(e.value);
        }
        times.threads = by.into_iter().collect();
        times
    }

    fn name_thread(&mut self, tid: u32, sample: &Sample) {
        let comm = self.strings.id(&*sample.task.comm);
        let thread = Thread {
            comm,
            pid: sample.task.pid,
        };
        let full = self.times.threads.len() >= MAX_THREADS;
        match self.times.threads.get_mut(&tid) {
            Some(t) => *t = thread,
            None if full => self.times.unnamed_threads += 1,
            None => {
                self.times.threads.insert(tid, thread);
            }
        }
    }

    /// The span of the kept times in microseconds from the run's start:
    /// from the start of the oldest kept interval (or its first event, if
    /// earlier) to the end of the run (or the last event, if later,
    /// excluded).
    pub(crate) fn kept_us(&self) -> (u64, u64) {
        let mut from = self
            .intervals
            .front()
            .map_or(self.elapsed(), |iv| iv.start)
            .as_micros() as u64;
        let mut to = self.elapsed().as_micros() as u64;
        for t in self.intervals.iter().filter_map(|iv| iv.times.as_ref()) {
            if let Some((a, b)) = t.bounds_us() {
                from = from.min(a);
                to = to.max(b + 1);
            }
        }
        (from, to)
    }

    /// What the kept intervals dropped, in time order.
    pub(crate) fn dropped(&self) -> impl Iterator<Item = &Dropped> {
        self.intervals
            .iter()
            .filter_map(|iv| iv.times.as_ref())
            .map(|t| &t.dropped)
            .filter(|d| d.events > 0)
    }

    /// The kept events from `from_us` up to `to_us` (excluded).
    fn events_between(&self, from_us: u64, to_us: u64) -> impl Iterator<Item = (u64, &TimedEvent)> {
        self.intervals
            .iter()
            .filter_map(|iv| iv.times.as_ref())
            .flat_map(move |t| t.between(from_us, to_us).iter().map(|e| (t.time_us(e), e)))
    }

    /// A mask of the stacks of process `pid` with a frame whose name
    /// holds `search` (ignoring case); `None` when neither is given.
    pub(crate) fn stack_mask(&self, pid: Option<u32>, search: Option<&str>) -> Option<Vec<bool>> {
        if pid.is_none() && search.is_none() {
            return None;
        }
        let hit: Option<Vec<bool>> = search.map(|needle| {
            let needle = needle.to_lowercase();
            let label_hit: Vec<bool> = (0..self.labels() as u32)
                .map(|l| self.label(l).0.to_lowercase().contains(&needle))
                .collect();
            // A node is a hit when it or an ancestor matches: parents are
            // visited before their children.
            let trie = &self.trie;
            let mut hit = vec![false; trie.len()];
            let mut todo = vec![0u32];
            while let Some(n) = todo.pop() {
                for &c in &trie.children[n as usize] {
                    let own = label_hit
                        .get(trie.label[c as usize] as usize)
                        .copied()
                        .unwrap_or(false);
                    hit[c as usize] = hit[n as usize] || own;
                    todo.push(c);
                }
            }
            hit
        });
        Some(
            self.stacks
                .iter()
                .map(|s| {
                    pid.is_none_or(|p| s.pid == Some(p))
                        && hit
                            .as_ref()
                            .is_none_or(|h| s.nodes.last().is_some_and(|&n| h[n as usize]))
                })
                .collect(),
        )
    }

    /// Sums of event values in `n` slices of `slice_us` from `from_us`.
    pub(crate) fn slices(
        &self,
        from_us: u64,
        slice_us: u64,
        n: usize,
        filter: &EventFilter,
    ) -> Slices {
        let mut s = Slices {
            all: vec![0; n],
            matched: vec![0; n],
        };
        let slice_us = slice_us.max(1);
        let to_us = from_us.saturating_add(slice_us.saturating_mul(n as u64));
        // Events are in time order within an interval: the slice moves
        // forward, without a division per event.
        for t in self.intervals.iter().filter_map(|iv| iv.times.as_ref()) {
            let events = t.between(from_us, to_us);
            let Some(first) = events.first() else {
                continue;
            };
            let mut i = ((t.time_us(first) - from_us) / slice_us) as usize;
            let mut next = from_us + (i as u64 + 1) * slice_us;
            for e in events {
                let at = t.time_us(e);
                while at >= next {
                    i += 1;
                    next += slice_us;
                }
                if let Some(a) = s.all.get_mut(i) {
                    *a += u64::from(e.value);
                    if filter.passes(e) {
                        s.matched[i] += u64::from(e.value);
                    }
                }
            }
        }
        s
    }

    /// Sums by stack of the events `filter` lets through: those from
    /// `from_us` up to `to_us` (excluded), and the others kept (the rest
    /// of the run), both sorted by stack id.
    pub(crate) fn range_counts(
        &self,
        from_us: u64,
        to_us: u64,
        filter: &EventFilter,
    ) -> (Counts, Counts) {
        // Dense sums by stack id: no hashing per event.
        let mut inside = vec![0u64; self.stacks.len()];
        let mut rest = vec![0u64; self.stacks.len()];
        for (t, e) in self.events_between(0, u64::MAX) {
            if !filter.passes(e) {
                continue;
            }
            let into = if t >= from_us && t < to_us {
                &mut inside
            } else {
                &mut rest
            };
            if let Some(v) = into.get_mut(e.stack as usize) {
                *v += u64::from(e.value);
            }
        }
        let sparse = |m: Vec<u64>| -> Counts {
            m.into_iter()
                .enumerate()
                .filter(|c| c.1 > 0)
                .map(|(id, v)| (id as u32, v))
                .collect()
        };
        (sparse(inside), sparse(rest))
    }

    /// Sums by thread of the kept events (of process `pid`'s threads
    /// only, when given), largest first: tid and value.
    pub(crate) fn thread_values(&self, pid: Option<u32>) -> Vec<(u32, u64)> {
        let mut by: FxMap<u32, u64> = FxMap::default();
        for t in self.intervals.iter().filter_map(|iv| iv.times.as_ref()) {
            for &(tid, v) in &t.threads {
                *by.entry(tid).or_default() += v;
            }
        }
        let mut v: Vec<(u32, u64)> = by
            .into_iter()
            .filter(|&(tid, _)| {
                pid.is_none() || self.times.threads.get(&tid).is_some_and(|t| t.pid == pid)
            })
            .collect();
        v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    /// A kept thread's name and process.
    pub(crate) fn thread(&self, tid: u32) -> Option<(&str, Option<u32>)> {
        let t = self.times.threads.get(&tid)?;
        Some((self.string(t.comm), t.pid))
    }

    /// The losses of the intervals that overlap `from_us..to_us`.
    pub(crate) fn lost_between(&self, from_us: u64, to_us: u64) -> crate::profile::Lost {
        let mut lost = crate::profile::Lost::default();
        for iv in &self.intervals {
            let (a, b) = (iv.start.as_micros() as u64, iv.end.as_micros() as u64);
            if a < to_us && b > from_us {
                lost.add(&iv.lost);
            }
        }
        lost
    }
}
