//! The one pipeline every tool runs through: collect → symbolize → model
//! → sinks.
//!
//! [`run`] takes any started [`Collector`] and any set of [`Sink`]s. In
//! [`Mode::Once`] it waits for the duration or a stop, reads once,
//! symbolizes (warmed up while collecting), lets the collector tidy,
//! merges identical stacks and sorts, and hands the profile to every sink.
//! In [`Mode::Periodic`] it reads what came in every interval (clearing
//! reads), symbolizes only stacks not seen before ([`resolve`]), gives each
//! interval to the sinks as an update, and reports either every interval
//! (stackcount's `-i`) or the whole run at the end. Sinks never learn
//! which tool made a profile; collectors never learn where it goes.

mod resolve;
#[cfg(test)]
mod tests;

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::collect::{Collection, Collector};
use crate::error::Result;
use crate::procmaps::{self, Mappings, Scope};
use crate::profile::{Event, Meta, Profile, Sample, Timeline};
use crate::symbolize::{self, Background};

pub use resolve::Resolver;

/// How often the collector is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Once, at the end.
    Once,
    /// Every `interval`. With `report_each`, every interval is a report of
    /// its own; otherwise the whole run is reported at the end.
    Periodic {
        interval: Duration,
        report_each: bool,
    },
}

/// How to run a collector.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// `None`: until a stop arrives.
    pub duration: Option<Duration>,
    pub mode: Mode,
    pub symbolize: symbolize::Options,
    /// Held by a periodic run from reading an interval to reporting it:
    /// runs sharing one gate name and encode one interval at a time, so
    /// that their peaks of memory do not add up (the agent's sources).
    pub gate: Option<&'static std::sync::Mutex<()>>,
}

/// Where a sink needs each sample's time ([`Sink::times`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Times {
    /// In the intervals' updates (the live page's timeline).
    pub updates: bool,
    /// In reports (files with times, OTLP's sample timestamps): a
    /// periodic run then keeps the whole run's times for the last one.
    pub reports: bool,
}

impl Times {
    /// True when the run must keep times at all.
    pub fn any(self) -> bool {
        self.updates || self.reports
    }
}

/// Where profiles go: a printer, files, the live view, a push exporter.
/// Every method has a default that does nothing, so a sink implements
/// only what it needs.
pub trait Sink {
    /// Whether the sink shows when samples happened: a run whose sinks
    /// need no times counts in the kernel.
    fn times(&self) -> Times {
        Times::default()
    }

    /// Once, when the collector is attached: what is measured, and bcc's
    /// header line for the run.
    fn begin(&mut self, _meta: &Meta, _header: &str, _notes: &[String]) -> Result<()> {
        Ok(())
    }

    /// What came in one interval of a periodic run (`length` long).
    fn update(&mut self, _delta: &Profile, _length: Duration) -> Result<()> {
        Ok(())
    }

    /// A finished profile: the whole run, or one interval when every
    /// interval is reported.
    fn report(&mut self, _profile: &Profile) -> Result<()> {
        Ok(())
    }

    /// Once, at the very end.
    fn end(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Calls `f` on every sink, each even when an earlier one failed; the
/// first failure is returned.
fn each(sinks: &mut [&mut dyn Sink], mut f: impl FnMut(&mut dyn Sink) -> Result<()>) -> Result<()> {
    let mut first = Ok(());
    for s in sinks.iter_mut() {
        let r = f(&mut **s);
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// Merges and sorts tidied samples into a profile, with their `events`
/// (if the collector kept times) on a timeline that starts at `origin`.
fn finish(
    mut meta: Meta,
    samples: Vec<Sample>,
    c_lost: crate::profile::Lost,
    duration: Duration,
    events: Option<Vec<Event>>,
    origin: &Timeline,
) -> Profile {
    meta.duration = duration;
    meta.lost = c_lost;
    let mut profile = Profile::untimed(meta, samples);
    profile.timeline = events.map(|events| Timeline {
        events,
        ..origin.clone_empty()
    });
    profile.merge_identical();
    profile.sort_ascending();
    profile
}

/// Waits until `deadline` (or forever) unless a stop arrives first; true
/// when stopped.
fn wait(stop: &Receiver<()>, deadline: Option<Instant>) -> bool {
    match deadline {
        Some(d) => stop
            .recv_timeout(d.saturating_duration_since(Instant::now()))
            .is_ok(),
        // A closed channel means nobody can stop us any more: treat it
        // as a stop rather than wait forever.
        None => {
            let _ = stop.recv();
            true
        }
    }
}

/// How often a one-shot run whose collector has runtime frames reads it
/// while collecting, so that they are named while their processes live:
/// what a process runs in its last quarter second before it exits stays
/// unnamed.
const LEARN_EVERY: Duration = Duration::from_millis(250);

/// How often a periodic run (the agent) whose collector has runtime
/// frames reads it between its windows, for the same reason: a process
/// that lives less than a window (a compiler, a test, a script run by
/// cron) is otherwise named only after it is gone.
const LEARN_PERIODIC: Duration = Duration::from_secs(1);

/// [`wait`], reading `collector` (without clearing) `every` so often and
/// handing what it read to `learn`, which names its runtime frames: a
/// process that exits before the end is named from its memory while it
/// was there. A read that fails is left to the final one.
fn wait_learning(
    stop: &Receiver<()>,
    deadline: Option<Instant>,
    collector: &mut dyn Collector,
    every: Duration,
    learn: &mut dyn FnMut(Vec<crate::collect::RawSample>),
) -> bool {
    loop {
        let tick = Instant::now() + every;
        // Which timer this wait is for decides what its end means, not
        // the clock read after it (a late wake-up still reads at a tick).
        let last = deadline.is_some_and(|d| d <= tick);
        let until = deadline.map_or(tick, |d| d.min(tick));
        match stop.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(()) => return true,
            Err(RecvTimeoutError::Disconnected) => return wait(stop, deadline),
            Err(RecvTimeoutError::Timeout) if last => return false,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if !collector.has_runtime_frames() {
            continue;
        }
        if let Ok(read) = collector.collect(false) {
            learn(read.samples);
        }
    }
}

/// Runs `collector` to the end of `plan` (its duration, or a message on
/// `stop`), feeding `sinks`. A one-shot run's collector is dropped —
/// detached — once the output is written.
pub fn run(
    collector: Box<dyn Collector + '_>,
    sinks: &mut [&mut dyn Sink],
    plan: &Plan,
    stop: &Receiver<()>,
) -> Result<()> {
    // Mappings are recorded as they happen, so that processes that exit
    // before the end are named.
    let warm = collector.warm_up();
    let (_tracker, mappings) = match collector.mappings() {
        Some(m) => (None, m),
        None => procmaps::track(match warm.pids.is_empty() {
            true => Scope::All,
            false => Scope::Pids(warm.pids),
        }),
    };
    collector.share_mappings(&mappings);
    match plan.mode {
        Mode::Once => once(collector, sinks, plan, stop, mappings),
        Mode::Periodic {
            interval,
            report_each,
        } => periodic(
            collector,
            sinks,
            plan,
            stop,
            interval,
            report_each,
            mappings,
        ),
    }
}

fn once(
    mut collector: Box<dyn Collector + '_>,
    sinks: &mut [&mut dyn Sink],
    plan: &Plan,
    stop: &Receiver<()>,
    mappings: Mappings,
) -> Result<()> {
    let meta = collector.meta();
    // Symbolization warms up (kallsyms, the targets' binaries) while the
    // collector counts.
    let warm = collector.warm_up();
    let namers = collector.namers();
    let learn = !namers.is_empty();
    let symbolizer =
        Background::with_mappings(plan.symbolize, mappings, warm.kernel, warm.pids, namers);
    let started = Instant::now();
    let origin = Timeline::starting_now();
    each(sinks, |s| {
        s.begin(&meta, &collector.header(), &collector.notes())
    })?;
    let deadline = plan.duration.and_then(|d| started.checked_add(d));
    if learn {
        wait_learning(stop, deadline, &mut *collector, LEARN_EVERY, &mut |raw| {
            symbolizer.learn(raw)
        });
    } else {
        wait(stop, deadline);
    }
    let elapsed = started.elapsed();
    let Collection {
        samples,
        lost,
        events,
    } = collector.collect(false)?;
    let mut samples = symbolizer.resolve(samples);
    collector.tidy(&mut samples);
    let profile = finish(meta, samples, lost, elapsed, events, &origin);
    let reported = each(sinks, |s| s.report(&profile));
    let ended = each(sinks, |s| s.end());
    // Detaching (closing the BPF objects and perf events) takes a while
    // on a busy machine: after the output, not before it.
    drop(collector);
    reported.and(ended)
}

fn periodic(
    mut collector: Box<dyn Collector + '_>,
    sinks: &mut [&mut dyn Sink],
    plan: &Plan,
    stop: &Receiver<()>,
    interval: Duration,
    report_each: bool,
    mappings: Mappings,
) -> Result<()> {
    let meta = collector.meta();
    let namers = collector.namers();
    let learn = !namers.is_empty();
    let mut resolver = Resolver::new(plan.symbolize, mappings, namers);
    let started = Instant::now();
    let origin = Timeline::starting_now();
    // A duration or interval too long to add to the clock is forever.
    let end = plan.duration.and_then(|d| started.checked_add(d));
    each(sinks, |s| {
        s.begin(&meta, &collector.header(), &collector.notes())
    })?;
    let mut whole = Profile::new(meta.clone());
    // The whole run's times are kept only for a sink that reports them.
    let whole_times = sinks.iter().any(|s| s.times().reports);
    let mut last_read = started;
    let mut next = started.checked_add(interval);
    loop {
        let tick = match (end, next) {
            (Some(e), Some(n)) => Some(e.min(n)),
            (e, n) => e.or(n),
        };
        let waited = match learn {
            true => wait_learning(stop, tick, &mut *collector, LEARN_PERIODIC, &mut |raw| {
                resolver.learn(&raw)
            }),
            false => wait(stop, tick),
        };
        let stopped = waited || end.is_some_and(|e| Instant::now() >= e);
        // Before the clock is read: a wait here lengthens this interval.
        let gate = plan
            .gate
            .map(|g| g.lock().unwrap_or_else(|e| e.into_inner()));
        let now = Instant::now();
        let length = now - last_read;
        last_read = now;
        let Collection {
            samples,
            lost,
            events,
        } = collector.collect(true)?;
        // Tidied by the resolver, once per stack it names.
        let samples = resolver.resolve(&*collector, samples);
        let delta = finish(meta.clone(), samples, lost, length, events, &origin);
        each(sinks, |s| s.update(&delta, length))?;
        if report_each {
            each(sinks, |s| s.report(&delta))?;
            drop(delta);
            drop(gate);
        } else {
            whole.meta.lost.add(&delta.meta.lost);
            let mut delta = delta;
            if !whole_times {
                delta.timeline = None;
            }
            whole.absorb(delta);
        }
        if stopped {
            break;
        }
        next = next.and_then(|n| n.checked_add(interval));
        // After a slow read, skip ticks rather than read back to back.
        while let Some(n) = next.filter(|&n| n <= Instant::now()) {
            next = n.checked_add(interval);
        }
    }
    drop(collector);
    let reported = if report_each {
        Ok(())
    } else {
        whole.meta.duration = started.elapsed();
        whole.sort_ascending();
        each(sinks, |s| s.report(&whole))
    };
    let ended = each(sinks, |s| s.end());
    reported.and(ended)
}
