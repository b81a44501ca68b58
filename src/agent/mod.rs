//! `flare agent`: continuous profiling. The profile collector runs without
//! end; every interval its counts are read (and cleared), symbolized
//! locally, labelled with each process's executable, cgroup and container
//! and the host name, and handed to every destination's
//! [`crate::export::sender::Sender`] — which never makes collection wait.
//!
//! Long runs stay flat: each window's counts are cleared from the kernel
//! map; every [`Config::renew_every`] windows the BPF session is started
//! afresh, which empties the kernel's stack map (otherwise it fills with
//! stacks of exited processes and new stacks are lost); and the symbolizer
//! is replaced every [`Config::symbolizer_every`] windows or once it has
//! seen [`SYMBOLIZER_PROCESSES`] processes, since blazesym keeps an entry
//! per process and mapping it has read, and flare's cache keeps exited
//! processes' names for a while (a machine that starts many short
//! processes grew by 170 KiB/s without this). On stop the last, partial
//! window is sent too.
//!
//! When the pipeline lands, this loop is a periodic run of the profile
//! collector with the exporters as sinks.

pub mod labels;

use std::mem::MaybeUninit;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::error::Result;
use crate::export::sender::{Report, Sender};
use crate::export::Window;
use crate::profile::Profile;
use crate::symbolize::{self, Symbolizer};
use crate::tools::profile::{Config as ProfileConfig, Session};

/// Processes a symbolizer serves before it is replaced.
pub const SYMBOLIZER_PROCESSES: usize = 512;

/// What the agent does.
#[derive(Clone, Debug)]
pub struct Config {
    /// What to sample (the duration is ignored: the agent runs until
    /// stopped).
    pub profile: ProfileConfig,
    /// Length of a window.
    pub interval: Duration,
    /// Windows after which the BPF session (and symbolizer) is renewed.
    pub renew_every: u64,
    /// Windows after which the symbolizer is replaced.
    pub symbolizer_every: u64,
    /// How long to keep trying to deliver queued windows at exit.
    pub flush_timeout: Duration,
    /// The host name the windows are labelled with.
    pub host: String,
}

impl Config {
    /// Defaults around a profile config: BPF session renewed about
    /// hourly, symbolizer every two minutes, 10 s to flush at exit.
    pub fn new(profile: ProfileConfig, interval: Duration) -> Self {
        let secs = interval.as_secs_f64().max(0.001);
        Config {
            profile,
            interval,
            renew_every: (3600.0 / secs).ceil().max(1.0) as u64,
            symbolizer_every: (120.0 / secs).ceil().max(1.0) as u64,
            flush_timeout: Duration::from_secs(10),
            host: labels::hostname(),
        }
    }
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Summary {
    pub windows: u64,
    pub samples: u64,
    pub reports: Vec<Report>,
}

/// Whether the loop should go on.
enum Next {
    Renew,
    Stop,
}

/// Runs until `stop` receives (or its sender is dropped), then sends the
/// last window and flushes every sender.
pub fn run(config: &Config, senders: Vec<Sender>, stop: &Receiver<()>) -> Result<Summary> {
    let mut state = State {
        config,
        senders,
        labeller: labels::Labeller::default(),
        summary: Summary::default(),
        own_pid: std::process::id(),
    };
    let result = loop {
        match state.generation(stop) {
            Ok(Next::Renew) => continue,
            Ok(Next::Stop) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    let mut summary = std::mem::take(&mut state.summary);
    summary.reports = state
        .senders
        .into_iter()
        .map(|s| s.finish(config.flush_timeout))
        .collect();
    result.map(|()| summary)
}

struct State<'c> {
    config: &'c Config,
    senders: Vec<Sender>,
    labeller: labels::Labeller,
    summary: Summary,
    own_pid: u32,
}

impl State<'_> {
    /// One BPF session and symbolizer, for up to `renew_every` windows.
    fn generation(&mut self, stop: &Receiver<()>) -> Result<Next> {
        let mut object = MaybeUninit::uninit();
        let mut session = Session::start(self.config.profile.clone(), &mut object)?;
        let mut symbolizer = Symbolizer::new(symbolize::Options::default());
        let mut symbolizer_windows = 0;
        let mut symbolizer_pids = std::collections::HashSet::new();
        let mut start = SystemTime::now();
        let mut started = Instant::now();
        let mut next = started + self.config.interval;
        for _ in 0..self.config.renew_every {
            let stopped = match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(()) | Err(RecvTimeoutError::Disconnected) => true,
                Err(RecvTimeoutError::Timeout) => false,
            };
            let end = SystemTime::now();
            let collection = session.collect(true)?;
            let mut meta = session.meta(started.elapsed());
            meta.lost = collection.lost;
            started = Instant::now();
            let raw: Vec<_> = collection
                .samples
                .into_iter()
                .filter(|s| s.task.pid != self.own_pid)
                .collect();
            symbolizer_pids.extend(raw.iter().map(|s| s.task.pid));
            symbolizer_windows += 1;
            if symbolizer_windows > self.config.symbolizer_every
                || symbolizer_pids.len() > SYMBOLIZER_PROCESSES
            {
                symbolizer = Symbolizer::new(symbolize::Options::default());
                symbolizer_windows = 1;
                symbolizer_pids.clear();
                symbolizer_pids.extend(raw.iter().map(|s| s.task.pid));
            }
            let mut profile = Profile::new(meta);
            profile.samples = symbolizer.resolve(raw);
            profile.merge_identical();
            self.send(profile, start, end);
            start = end;
            if stopped {
                return Ok(Next::Stop);
            }
            next += self.config.interval;
            // After a slow window, skip ticks rather than read back to back.
            while next <= Instant::now() {
                next += self.config.interval;
            }
        }
        Ok(Next::Renew)
    }

    fn send(&mut self, profile: Profile, start: SystemTime, end: SystemTime) {
        let processes = self
            .labeller
            .window(profile.samples.iter().map(|s| s.task.pid));
        self.summary.windows += 1;
        self.summary.samples += profile.total();
        let window = Arc::new(Window {
            profile,
            start,
            end,
            host: self.config.host.clone(),
            processes,
        });
        for s in &self.senders {
            s.submit(Arc::clone(&window));
        }
    }
}
