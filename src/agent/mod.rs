//! `flare agent`: continuous profiling, as a periodic run of the profile
//! collector through the [`crate::pipeline`] into the push exporters'
//! sink ([`crate::export::sink::PushSink`]), without end.
//!
//! Each interval's counts are read and cleared, symbolized locally and
//! reported as one window; the senders deliver on their own threads, so
//! collection never waits for a network. Long runs stay flat: the run is
//! renewed every [`Config::renew`] (about two minutes, a whole number of
//! windows), or sooner once it has seen [`RENEW_PROCESSES`] processes —
//! a fresh BPF session, whose stack storage would otherwise fill with stacks
//! of exited processes (new stacks are then lost), and a fresh
//! symbolizer: blazesym keeps an entry per process and mapping it has
//! read, and the soak test saw an agent on a machine starting many short
//! processes grow by 170 KiB/s without renewal. The few milliseconds
//! between two runs are not sampled. On stop the last,
//! partial window is sent too.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::export::sink::PushSink;
use crate::pipeline::{self, Mode, Plan, Sink};
use crate::symbolize;
use crate::tools::profile::{Config as ProfileConfig, Session};

/// Processes a run may see before it is renewed.
pub const RENEW_PROCESSES: usize = 512;

/// What the agent does.
#[derive(Clone, Debug)]
pub struct Config {
    /// What to sample (the duration is ignored: the agent runs until
    /// stopped).
    pub profile: ProfileConfig,
    /// Length of a window.
    pub interval: Duration,
    /// Length of one run of the collector before it is renewed.
    pub renew: Duration,
}

impl Config {
    /// A config around `profile`, renewed every two minutes (rounded up
    /// to whole windows).
    pub fn new(profile: ProfileConfig, interval: Duration) -> Self {
        let windows = (120.0 / interval.as_secs_f64().max(0.001)).ceil().max(1.0);
        Config {
            profile,
            interval,
            renew: interval.mul_f64(windows),
        }
    }
}

/// Runs until `stop` receives (or its sender is dropped), pushing every
/// window into `sink`. The caller finishes the sink (flushing the
/// senders) afterwards.
pub fn run(config: &Config, sink: &mut PushSink, stop: Receiver<()>) -> Result<()> {
    limit_heaps();
    // The pipeline ends a run on a stop or at its duration; which one is
    // told by this flag, set by a thread that passes the stop on.
    let stopped = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let flag = Arc::clone(&stopped);
    sink.renew_after(RENEW_PROCESSES, tx.clone());
    std::thread::Builder::new()
        .name("flare-stop".into())
        .spawn(move || {
            // One stop is enough; a closed channel is one too.
            let _ = stop.recv();
            flag.store(true, Ordering::SeqCst);
            let _ = tx.send(());
        })
        .map_err(|e| crate::error::Error::Io {
            what: "starting a thread".into(),
            source: e,
        })?;
    let plan = Plan {
        duration: Some(config.renew),
        mode: Mode::Periodic {
            interval: config.interval,
            report_each: true,
        },
        symbolize: symbolize::Options::default(),
    };
    let mut profile = config.profile.clone();
    profile.duration = None;
    loop {
        // A renewal asked for as the last run ended at its duration is
        // void; a stop sets the flag before its message, so draining
        // first and reading the flag after cannot lose one.
        while rx.try_recv().is_ok() {}
        if stopped.load(Ordering::SeqCst) {
            break;
        }
        let mut object = MaybeUninit::uninit();
        let session = Session::start(profile.clone(), &mut object)?;
        sink.restart();
        let mut trim = Trim;
        let mut sinks: [&mut dyn Sink; 2] = [sink, &mut trim];
        pipeline::run(Box::new(session), &mut sinks, &plan, &rx)?;
        release_free_memory();
    }
    Ok(())
}

/// Gives the allocator's free memory back to the system after each
/// window. Symbolizing a window and building unwind tables for the
/// processes that appeared in it allocate and free megabytes at a time;
/// without this, the freed pages stay in the process's heaps and the
/// agent's RSS climbs to the largest such moment and stays there.
struct Trim;

impl Sink for Trim {
    fn report(&mut self, _profile: &crate::profile::Profile) -> Result<()> {
        release_free_memory();
        Ok(())
    }
}

/// Asks the C allocator to give free memory back to the system.
pub fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions; it only releases free
    // memory of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
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
