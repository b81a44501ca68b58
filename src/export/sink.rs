//! The push exporters as one pipeline sink: every report (each interval
//! of a periodic run, or a one-shot run's whole profile) becomes a
//! [`Window`] — labelled with each process's executable, cgroup and
//! container and the host name — handed to every destination's sender.
//! Reports return at once: the senders encode and deliver on their own
//! threads.

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use super::labels::Labeller;
use super::sender::{after, Report, Sender};
use super::Window;
use crate::error::Result;
use crate::pipeline::{Sink, Times};
use crate::profile::Profile;

/// Pushes each report to every sender.
pub struct PushSink {
    senders: Vec<Sender>,
    host: String,
    labeller: Labeller,
    /// The end of the previous window, so that consecutive windows of a
    /// periodic run tile exactly.
    last_end: Option<SystemTime>,
    /// Windows and samples handed over.
    pub windows: u64,
    pub samples: u64,
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
            last_end: None,
            windows: 0,
            samples: 0,
            renew: None,
            pids: HashSet::new(),
            renew_asked: false,
        }
    }

    /// Sends on `tx` (once per run) when more than `processes` processes
    /// have been reported since the run began: the agent then renews the
    /// run, and with it the symbolizer's per-process caches.
    pub fn renew_after(&mut self, processes: usize, tx: mpsc::Sender<()>) {
        self.renew = Some((tx, processes));
    }

    /// The names of the destinations.
    pub fn names(&self) -> Vec<String> {
        self.senders.iter().map(|s| s.name().to_string()).collect()
    }

    /// Starts a new run: its first window does not continue the last one.
    pub fn restart(&mut self) {
        self.last_end = None;
        self.pids.clear();
        self.renew_asked = false;
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
        let start = self
            .last_end
            .unwrap_or_else(|| end - profile.meta.duration.min(Duration::from_secs(1 << 32)));
        self.last_end = Some(end);
        let processes = self
            .labeller
            .window(profile.samples.iter().filter_map(|s| s.task.pid));
        if let Some((tx, limit)) = &self.renew {
            self.pids
                .extend(profile.samples.iter().filter_map(|s| s.task.pid));
            if self.pids.len() > *limit && !self.renew_asked {
                self.renew_asked = true;
                let _ = tx.send(());
            }
        }
        self.windows += 1;
        self.samples += profile.total();
        let window = Window {
            profile: profile.clone(),
            start,
            end,
            host: self.host.clone(),
            processes,
        };
        for s in &mut self.senders {
            s.submit(&window);
        }
        Ok(())
    }
}
