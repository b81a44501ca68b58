//! The push exporters as one pipeline sink: every report (each interval
//! of a periodic run, or a one-shot run's whole profile) becomes a
//! [`Window`] — labelled with each process's executable, cgroup and
//! container and the host name — handed to every destination's sender.
//! Reports return at once: the senders encode and deliver on their own
//! threads. Profiles of several kinds (the agent's CPU, off-CPU and
//! wall-clock collectors) pass through one sink, each kind's windows
//! tiling its own time line.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime};

use super::labels::Labeller;
use super::sender::{after, Report, Sender};
use super::{ProcessLabels, Window};
use crate::error::Result;
use crate::pipeline::{Sink, Times};
use crate::profile::{Event, Kind, Profile, Sample};

/// Pushes each report to every sender.
pub struct PushSink {
    senders: Vec<Sender>,
    host: String,
    labeller: Labeller,
    /// Each kind's run: where its last window ended, and when to renew.
    runs: HashMap<Kind, Run>,
    /// Windows and samples handed over.
    pub windows: u64,
    pub samples: u64,
    /// Runs asked to end early, and why.
    pub early: Early,
}

/// Why runs were asked to end before their length: how often a run's
/// stack storage was full, and how often it had seen too many processes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Early {
    pub full: u64,
    pub processes: u64,
}

/// What the sink keeps of one kind's run.
#[derive(Default)]
struct Run {
    /// The end of the previous window, so that consecutive windows of a
    /// periodic run tile exactly.
    last_end: Option<SystemTime>,
    /// Asks the run to end (and be renewed) once this many processes
    /// have been seen since [`PushSink::restart`].
    renew: Option<(mpsc::Sender<()>, usize)>,
    pids: HashSet<u32>,
    renew_asked: bool,
}

impl PushSink {
    pub fn new(senders: Vec<Sender>, host: &str) -> Self {
        PushSink {
            senders,
            host: host.to_string(),
            labeller: Labeller::default(),
            runs: HashMap::new(),
            windows: 0,
            samples: 0,
            early: Early::default(),
        }
    }

    /// The names of the destinations.
    pub fn names(&self) -> Vec<String> {
        self.senders.iter().map(|s| s.name().to_string()).collect()
    }

    /// Starts a new run of profiles of `kind`: its first window does not
    /// continue the last one, and it is asked to end on `tx` (once) when
    /// it has reported more than `processes` processes, or a window lost
    /// stacks for lack of room in the stack storage: the agent then
    /// renews it, and with it the symbolizer's per-process caches and the
    /// storage, which keeps every stack of the run. (Off-CPU stacks of
    /// real runtimes, javac, tsc and pylint in loops, filled the 16,384
    /// stacks in 30 s, and every new stack of the next 90 s was lost.)
    pub fn restart(&mut self, kind: Kind, processes: usize, tx: mpsc::Sender<()>) {
        self.runs.insert(
            kind,
            Run {
                renew: Some((tx, processes)),
                ..Run::default()
            },
        );
    }

    /// Delivers what is queued and stops the senders, all within
    /// `timeout` (and a moment) whatever the servers do.
    pub fn finish(self, timeout: Duration) -> Vec<Report> {
        let deadline = after(timeout);
        for s in &self.senders {
            s.stop(deadline);
        }
        self.senders.into_iter().map(|s| s.wait(deadline)).collect()
    }
}

impl Sink for PushSink {
    fn times(&self) -> Times {
        Times {
            updates: false,
            reports: self.senders.iter().any(Sender::keeps_time),
        }
    }

    fn report(&mut self, profile: &Profile) -> Result<()> {
        let end = SystemTime::now();
        let run = self.runs.entry(profile.meta.kind).or_default();
        let start = run
            .last_end
            .unwrap_or_else(|| end - profile.meta.duration.min(Duration::from_secs(1 << 32)));
        run.last_end = Some(end);
        if let Some((tx, limit)) = &run.renew {
            run.pids
                .extend(profile.samples.iter().filter_map(|s| s.task.pid));
            let full = profile.meta.lost.stacks_enomem;
            let many = run.pids.len() > *limit;
            if (many || full) && !run.renew_asked {
                run.renew_asked = true;
                match full {
                    true => self.early.full += 1,
                    false => self.early.processes += 1,
                }
                let _ = tx.send(());
            }
        }
        let processes = self
            .labeller
            .window(profile.samples.iter().filter_map(|s| s.task.pid));
        self.windows += 1;
        self.samples += profile.total();
        for (service, part) in by_service(profile, &processes) {
            let window = Window {
                profile: part,
                start,
                end,
                host: self.host.clone(),
                processes: processes.clone(),
                service,
            };
            for s in &mut self.senders {
                s.submit(&window);
            }
        }
        Ok(())
    }
}

/// `profile` split by the service of each sample's process (its
/// `processes` labels): a fleet finds profiles by service, and Pyroscope
/// and OTLP name one service per profile. Samples of processes that name
/// none come first, under `None`; a profile of one service is not copied
/// apart. Each part keeps its samples' events.
fn by_service<'a>(
    profile: &'a Profile,
    processes: &HashMap<u32, ProcessLabels>,
) -> Vec<(Option<Arc<str>>, Cow<'a, Profile>)> {
    let service = |s: &Sample| {
        s.task
            .pid
            .and_then(|pid| processes.get(&pid))
            .and_then(|l| l.service.clone())
    };
    let mut order: Vec<Option<Arc<str>>> = Vec::new();
    let mut part_of = Vec::with_capacity(profile.samples.len());
    for s in &profile.samples {
        let name = service(s);
        let i = match order.iter().position(|o| *o == name) {
            Some(i) => i,
            None => {
                order.push(name);
                order.len() - 1
            }
        };
        part_of.push(i);
    }
    if order.len() <= 1 {
        let name = order.pop().flatten();
        return vec![(name, Cow::Borrowed(profile))];
    }
    let mut parts: Vec<Profile> = order
        .iter()
        .map(|_| Profile {
            meta: profile.meta.clone(),
            samples: Vec::new(),
            timeline: profile.timeline.as_ref().map(|t| t.clone_empty()),
        })
        .collect();
    // Each sample's index within its part, for its events.
    let mut index = Vec::with_capacity(profile.samples.len());
    for (s, &i) in profile.samples.iter().zip(&part_of) {
        index.push(parts[i].samples.len() as u32);
        parts[i].samples.push(s.clone());
    }
    if let Some(t) = &profile.timeline {
        for e in &t.events {
            let at = e.sample as usize;
            if let (Some(&i), Some(&n)) = (part_of.get(at), index.get(at)) {
                if let Some(pt) = parts[i].timeline.as_mut() {
                    pt.events.push(Event { sample: n, ..*e });
                }
            }
        }
    }
    let mut out: Vec<(Option<Arc<str>>, Cow<'a, Profile>)> = order
        .into_iter()
        .zip(parts.into_iter().map(Cow::Owned))
        .collect();
    // Unnamed first, then by name: the same order every window.
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Sink;
    use crate::profile::{Meta, Profile};

    fn window(full: bool) -> Profile {
        let mut meta = Meta::new(Kind::OffCpu, "sched_switch");
        meta.lost.stacks = u64::from(full);
        meta.lost.stacks_enomem = full;
        Profile {
            meta,
            samples: Vec::new(),
            timeline: None,
        }
    }

    #[test]
    fn a_window_that_lost_stacks_for_room_renews_its_run_once() {
        let mut sink = PushSink::new(Vec::new(), "host");
        let (tx, rx) = mpsc::channel();
        sink.restart(Kind::OffCpu, 512, tx);
        sink.report(&window(false)).expect("a report");
        assert!(rx.try_recv().is_err(), "renewed with room to spare");
        sink.report(&window(true)).expect("a report");
        assert!(
            rx.try_recv().is_ok(),
            "not renewed when the storage was full"
        );
        sink.report(&window(true)).expect("a report");
        assert!(rx.try_recv().is_err(), "asked twice in one run");
        assert_eq!(
            sink.early,
            Early {
                full: 1,
                processes: 0
            }
        );
    }
}
