//! When each sample happened: the part of a profile that time-aware
//! outputs (the Firefox Profiler's files, heat maps, the live page's
//! strip) read and aggregate outputs ignore.
//!
//! A [`Timeline`] is a list of [`Event`]s, each one sample or blocked
//! period at a time on a CPU by a thread, pointing at the
//! [`super::Sample`] that holds its stacks: stacks are kept once, however
//! many times they were seen. Its events' values add up to the samples'
//! (a timed collection builds the counts from the events), so a range of
//! the timeline is a profile of its own ([`super::Profile::range`]).

/// The timed events of a profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// `CLOCK_MONOTONIC` in nanoseconds (the clock of BPF's
    /// `bpf_ktime_get_ns` and of perf events' times) at the start of the
    /// profile: event times are on this clock.
    pub origin_ns: u64,
    /// The same instant as Unix time in nanoseconds, for files that give
    /// the profile's start as a date.
    pub origin_unix_ns: u64,
    /// Events in the order they were collected (each CPU's in time order;
    /// [`Timeline::sort`] orders them all).
    pub events: Vec<Event>,
}

/// One timed sample, or one blocked period for the off-CPU family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// When it happened (a blocked period: when it began), on the
    /// `CLOCK_MONOTONIC` clock in nanoseconds.
    pub time_ns: u64,
    /// What it adds to its sample's value: 1 for a timer sample; the
    /// blocked time (and so the period's length) in microseconds.
    pub value: u64,
    /// The index of its [`super::Sample`] in the profile.
    pub sample: u32,
    /// The thread it happened on (the sample may count a process's
    /// threads together).
    pub tid: u32,
    /// The CPU it happened on, or [`UNKNOWN_CPU`].
    pub cpu: u32,
}

/// [`Event::cpu`] of an event whose CPU is not known (a period still
/// running when read).
pub const UNKNOWN_CPU: u32 = u32::MAX;

impl Timeline {
    /// An empty timeline that starts now.
    pub fn starting_now() -> Self {
        Timeline {
            origin_ns: monotonic_ns(),
            origin_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            events: Vec::new(),
        }
    }

    /// A timeline with this one's origins and no events.
    pub fn clone_empty(&self) -> Self {
        Timeline {
            origin_ns: self.origin_ns,
            origin_unix_ns: self.origin_unix_ns,
            events: Vec::new(),
        }
    }

    /// Nanoseconds from the profile's start to `e` (0 for an event
    /// collected just before it).
    pub fn offset_ns(&self, e: &Event) -> u64 {
        e.time_ns.saturating_sub(self.origin_ns)
    }

    /// Orders the events by time (a stable sort: ties keep their order).
    pub fn sort(&mut self) {
        self.events.sort_by_key(|e| e.time_ns);
    }

    /// Points every event at its sample's new index: `map[old] = new`.
    /// Events whose sample is gone (`map` too short) are dropped.
    pub(super) fn remap(&mut self, map: &[u32]) {
        self.events
            .retain_mut(|e| match map.get(e.sample as usize) {
                Some(&new) => {
                    e.sample = new;
                    true
                }
                None => false,
            });
    }

    /// The time of the last event, as an offset from the start.
    pub fn end_ns(&self) -> u64 {
        self.events
            .iter()
            .map(|e| self.offset_ns(e))
            .max()
            .unwrap_or(0)
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock BPF programs and
/// perf events stamp events with.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer;
    // CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
