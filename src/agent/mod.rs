//! `flare agent`: continuous profiling, as a periodic run of collectors
//! through the [`crate::pipeline`] into the push exporters' sink
//! ([`crate::export::sink::PushSink`]), without end.
//!
//! The chosen [`Source`]s (CPU samples, off-CPU time, wall-clock time)
//! share one wall-clock collector when there are several ([`views`]: each
//! stack is then walked and named once, not once per profile); a single
//! one runs its own. Every interval the collector's counts are read and
//! cleared, symbolized locally and reported as one window of each chosen
//! kind, so a window of each kind reaches every destination. The
//! senders deliver on their own threads, so collection never waits for
//! a network. Long runs stay flat: each collector is
//! renewed every [`Config::renew`] (about two minutes, a whole number of
//! windows), or sooner once it has seen [`RENEW_PROCESSES`] processes or
//! a window lost stacks for want of room — a fresh BPF session, whose
//! stack storage would otherwise fill with stacks of exited processes
//! (new stacks are then lost; the CPU and wall-clock collectors also
//! delete the stacks they have not met for two windows,
//! [`crate::collect::Periodic::forgetting`]), and a fresh
//! symbolizer: blazesym keeps an entry per process and mapping it has
//! read, and the soak test saw an agent on a machine starting many short
//! processes grow by 170 KiB/s without renewal. The few milliseconds
//! between two runs are not sampled. On stop the last, partial window of
//! each kind is sent too.

mod trim;
mod views;

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libbpf_rs::OpenObject;

use crate::collect::Collector;
use crate::error::{Error, Result};
use crate::export::sink::PushSink;
use crate::pipeline::{self, Mode, Plan, Sink, Times};
use crate::profile::Kind;
use crate::symbolize;
use crate::tools::{offcpu, profile, wallclock};
use trim::{release_free_memory, Trim};

pub use views::{runs, Run, View, Views};

/// Processes a run may see before it is renewed.
pub const RENEW_PROCESSES: usize = 512;

/// One profile the agent takes, with its collector's options (their
/// durations are ignored: the agent runs until stopped).
#[derive(Clone, Debug)]
pub enum Source {
    /// CPU samples (`flare profile`).
    Cpu(profile::Config),
    /// Blocked time by the blocked thread's stacks (`flare offcputime`).
    OffCpu(offcpu::Config),
    /// Wall-clock samples, on and off the CPU (`flare wallclock`).
    Wall(wallclock::Config),
}

impl Source {
    /// Its name in `--profiles` and in messages.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Cpu(_) => "cpu",
            Source::OffCpu(_) => "off-cpu",
            Source::Wall(_) => "wall",
        }
    }

    /// The kind of the profiles it makes.
    pub fn kind(&self) -> Kind {
        match self {
            Source::Cpu(_) => Kind::Cpu,
            Source::OffCpu(_) => Kind::OffCpu,
            Source::Wall(_) => Kind::Wall,
        }
    }

    /// Whether its collector keeps each sample's time.
    pub fn set_timed(&mut self, timed: bool) {
        let recording = match self {
            Source::Cpu(c) => &mut c.recording,
            Source::OffCpu(c) => &mut c.recording,
            Source::Wall(c) => &mut c.recording,
        };
        recording.timed = timed;
    }

    /// Loads and attaches its collector, to run until stopped.
    fn start<'obj>(
        &self,
        object: &'obj mut MaybeUninit<OpenObject>,
    ) -> Result<Box<dyn Collector + 'obj>> {
        Ok(match self {
            Source::Cpu(c) => {
                let mut c = c.clone();
                c.duration = None;
                Box::new(profile::Session::start(c, object)?)
            }
            Source::OffCpu(c) => {
                let mut c = c.clone();
                c.duration = None;
                Box::new(offcpu::Session::start(c, object)?)
            }
            Source::Wall(c) => {
                let mut c = c.clone();
                c.duration = None;
                Box::new(wallclock::Session::start(c, object)?)
            }
        })
    }
}

/// What the agent does.
#[derive(Clone, Debug)]
pub struct Config {
    /// What to collect: a window of each per interval.
    pub sources: Vec<Source>,
    /// Length of a window.
    pub interval: Duration,
    /// Length of one run of a collector before it is renewed.
    pub renew: Duration,
}

impl Config {
    /// A config around `sources`, renewed every two minutes (rounded up
    /// to whole windows).
    pub fn new(sources: Vec<Source>, interval: Duration) -> Self {
        let windows = (120.0 / interval.as_secs_f64().max(0.001)).ceil().max(1.0);
        Config {
            sources,
            interval,
            renew: interval.mul_f64(windows),
        }
    }
}

/// Runs until `stop` receives (or its sender is dropped), pushing every
/// window of every source into `sink`. The caller finishes the sink
/// (flushing the senders) afterwards. A source that fails stops the
/// others; the first failure is returned.
pub fn run(config: &Config, sink: &mut PushSink, stop: Receiver<()>) -> Result<()> {
    limit_heaps();
    if config.sources.is_empty() {
        return Err(Error::Unsupported("no profile to take".into()));
    }
    // Each source's pipeline ends a run on a stop or at its duration;
    // which one is told by this flag, set before the stop is passed on.
    let stopped = Arc::new(AtomicBool::new(false));
    let runs = runs(&config.sources);
    let channels: Vec<(Sender<()>, Receiver<()>)> = runs.iter().map(|_| mpsc::channel()).collect();
    let senders: Vec<Sender<()>> = channels.iter().map(|(tx, _)| tx.clone()).collect();
    let stop_all = {
        let stopped = Arc::clone(&stopped);
        move || {
            stopped.store(true, Ordering::SeqCst);
            for tx in &senders {
                let _ = tx.send(());
            }
        }
    };
    let on_stop = stop_all.clone();
    std::thread::Builder::new()
        .name("flare-stop".into())
        .spawn(move || {
            // One stop is enough; a closed channel is one too.
            let _ = stop.recv();
            on_stop();
        })
        .map_err(|e| Error::Io {
            what: "starting a thread".into(),
            source: e,
        })?;
    let shared = Mutex::new(std::mem::replace(sink, PushSink::new(Vec::new(), "")));
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = runs
            .iter()
            .zip(channels)
            .map(|(run, (tx, rx))| {
                let (shared, stopped, stop_all) = (&shared, &*stopped, &stop_all);
                std::thread::Builder::new()
                    .name(format!("flare-{}", run.source.name()))
                    .spawn_scoped(scope, move || {
                        let r = run_source(config, run, shared, stopped, tx, &rx);
                        if r.is_err() {
                            stop_all();
                        }
                        r
                    })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(Error::Unsupported("a collector's thread panicked".into()))
                }),
                Err(e) => {
                    stop_all();
                    Err(Error::Io {
                        what: "starting a thread".into(),
                        source: e,
                    })
                }
            })
            .collect()
    });
    *sink = shared.into_inner().unwrap_or_else(|e| e.into_inner());
    results.into_iter().collect()
}

/// Held by each source from reading a window to handing it over: three
/// windows named and encoded at once tripled the agent's peak of memory
/// (306 MiB beside busy runtimes, each source's own peak 133-138 MiB).
static WINDOWS: Mutex<()> = Mutex::new(());

/// Runs one collector, renewed run after run, until the agent stops.
fn run_source(
    config: &Config,
    run: &Run,
    shared: &Mutex<PushSink>,
    stopped: &AtomicBool,
    renew: Sender<()>,
    rx: &Receiver<()>,
) -> Result<()> {
    let plan = Plan {
        duration: Some(config.renew),
        mode: Mode::Periodic {
            interval: config.interval,
            report_each: true,
        },
        symbolize: symbolize::Options::default(),
        gate: Some(&WINDOWS),
    };
    let kinds = run.kinds();
    loop {
        // A renewal asked for as the last run ended at its duration is
        // void; a stop sets the flag before its message, so draining
        // first and reading the flag after cannot lose one.
        while rx.try_recv().is_ok() {}
        if stopped.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut object = MaybeUninit::uninit();
        let collector = run.source.start(&mut object)?;
        for &kind in &kinds {
            lock(shared).restart(kind, RENEW_PROCESSES, renew.clone());
        }
        let mut sink = Shared(shared);
        let mut views = Views {
            views: &run.views,
            inner: &mut sink,
        };
        let mut trim = Trim;
        let sink: &mut dyn Sink = match run.views.is_empty() {
            true => views.inner,
            false => &mut views,
        };
        let mut sinks: [&mut dyn Sink; 2] = [sink, &mut trim];
        pipeline::run(collector, &mut sinks, &plan, rx)?;
        release_free_memory();
    }
}

/// The push sink, locked for each call: the sources' threads share it.
struct Shared<'a>(&'a Mutex<PushSink>);

/// The sink, even after a thread panicked holding it: a report only
/// queues a window, which leaves nothing half done.
fn lock(m: &Mutex<PushSink>) -> std::sync::MutexGuard<'_, PushSink> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sink for Shared<'_> {
    fn times(&self) -> Times {
        lock(self.0).times()
    }

    fn report(&mut self, profile: &crate::profile::Profile) -> Result<()> {
        lock(self.0).report(profile)
    }
}

/// Caps the C allocator's per-thread heaps: the agent's threads (sampling,
/// symbolizing, one sender per destination) would each get a heap of their
/// own, and free memory strands in each. And fixes the size from which
/// allocations are mapped of their own: left to glibc, freeing a large
/// mapped block (libbpf reading the kernel's BTF, some 5 MiB, at each
/// renewal) raises that size to the block's, and the next such blocks
/// come from the heap, where what is freed stays resident.
pub fn limit_heaps() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt has no preconditions; M_ARENA_MAX only bounds how
    // many heaps later allocations may create, M_MMAP_THRESHOLD only
    // chooses how large blocks are obtained.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}
