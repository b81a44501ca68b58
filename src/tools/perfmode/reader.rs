//! Reading perf-event mode's ring buffers in two steps, on two threads:
//! one empties the kernel's buffers into memory as soon as they fill,
//! doing nothing else; the other walks what was read. Walking a sample
//! (unwind tables built on first use, Python and Java frames read from
//! the target) can take far longer than the kernel takes to fill a
//! buffer (1 MiB held some 60 samples of 16 KiB stacks): on an emulated
//! CPU, one reader doing both lost most of a second's samples.
//! Copied out, samples wait in memory instead, up to [`MAX_PENDING`]
//! bytes; past that, samples (never mapping records) are dropped and
//! counted as lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use libbpf_rs::libbpf_sys as sys;

use super::{lock, sample, State, POLL_MS};
use crate::error::{Error, Result};
use crate::procmaps::perf::{self as records, Record, Ring};
use crate::procmaps::Mappings;

/// Bytes of records read but not yet walked, at most (some 4,000 samples
/// with 16 KiB stacks: seconds of every CPU's samples).
const MAX_PENDING: usize = 64 << 20;

/// Records copied out of the buffers, not yet walked.
#[derive(Default)]
struct Pending {
    records: Vec<Vec<u8>>,
    bytes: usize,
    /// Samples dropped for want of room.
    dropped: u64,
}

/// The ring buffers, what was read from them, and what it came to;
/// shared by the two threads and [`crate::collect::Collector::collect`].
pub(super) struct Reader {
    rings: Mutex<Vec<Ring>>,
    /// The events without a buffer of their own (open as long as the
    /// reader lives).
    _redirected: Vec<std::os::fd::OwnedFd>,
    pending: Mutex<Pending>,
    /// Signalled when records arrive in `pending`.
    arrived: Condvar,
    pub(super) state: Mutex<State>,
    pub(super) mappings: Mappings,
}

impl Reader {
    pub(super) fn new(
        rings: Vec<Ring>,
        redirected: Vec<std::os::fd::OwnedFd>,
        state: State,
        mappings: Mappings,
    ) -> Reader {
        Reader {
            rings: Mutex::new(rings),
            _redirected: redirected,
            pending: Mutex::new(Pending::default()),
            arrived: Condvar::new(),
            state: Mutex::new(state),
            mappings,
        }
    }

    /// Copies every waiting record out of the buffers; whether any came.
    fn fetch(&self) -> bool {
        let mut pending = lock(&self.pending);
        let before = pending.records.len();
        for ring in lock(&self.rings).iter_mut() {
            ring.read_raw(|rec| {
                let sample = sample::kind(rec) == Some(sys::PERF_RECORD_SAMPLE);
                if sample && pending.bytes + rec.len() > MAX_PENDING {
                    pending.dropped += 1;
                    return;
                }
                pending.bytes += rec.len();
                pending.records.push(rec.to_vec());
            });
        }
        pending.records.len() > before
    }

    /// Walks every record fetched so far: mapping records first (in time
    /// order), then names and samples, each sample walked against the
    /// mappings of its moment. Batches are taken under the state's lock,
    /// so they are walked in the order they were read.
    fn walk(&self) {
        let mut state = lock(&self.state);
        let Pending {
            mut records,
            dropped,
            ..
        } = std::mem::take(&mut *lock(&self.pending));
        state.lost.samples += dropped;
        if records.is_empty() {
            return;
        }
        records.sort_by_key(|r| sample::time(r));
        let mut maps = Vec::new();
        for rec in &records {
            match records::parse(rec) {
                Some(Record::Lost(n)) => state.lost.samples += n,
                Some(r) => maps.push(r),
                None => {}
            }
        }
        self.mappings.apply(maps);
        for rec in &records {
            state.record(rec, &self.mappings);
        }
    }

    /// Holds the walk back for `pause` (see [`super::Session::pause_walking`]).
    pub(super) fn pause_walking(self: &Arc<Self>, pause: Duration) {
        let (held, wait) = std::sync::mpsc::channel();
        let reader = self.clone();
        std::thread::spawn(move || {
            let _state = lock(&reader.state);
            let _ = held.send(());
            std::thread::sleep(pause);
        });
        let _ = wait.recv();
    }

    /// Reads and walks everything the kernel has written so far.
    pub(super) fn drain(&self) {
        self.fetch();
        self.walk();
    }
}

/// The two threads, stopped and joined when dropped.
pub(super) struct Threads {
    stop: Arc<AtomicBool>,
    reader: Arc<Reader>,
    handles: Vec<JoinHandle<()>>,
}

impl Threads {
    /// Starts the thread that empties the buffers (`fds`: theirs) and the
    /// one that walks what it read.
    pub(super) fn start(reader: &Arc<Reader>, fds: Vec<i32>) -> Result<Threads> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Threads {
            stop: stop.clone(),
            reader: reader.clone(),
            handles: Vec::new(),
        };
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(|source| Error::Io {
                    what: "starting the perf-event reader".into(),
                    source,
                })
        };
        let (r, s) = (reader.clone(), stop.clone());
        threads.handles.push(spawn(
            "flare-perf",
            Box::new(move || fetch_until(&r, &s, &fds)),
        )?);
        let (r, s) = (reader.clone(), stop);
        threads
            .handles
            .push(spawn("flare-walk", Box::new(move || walk_until(&r, &s)))?);
        Ok(threads)
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.reader.arrived.notify_all();
        for t in self.handles.drain(..) {
            let _ = t.join();
        }
    }
}

/// Empties the buffers whenever one fills past its watermark, or every
/// [`POLL_MS`].
fn fetch_until(reader: &Reader, stop: &AtomicBool, fds: &[i32]) {
    records::poll_until(fds, stop, POLL_MS, || {
        if reader.fetch() {
            reader.arrived.notify_one();
        }
    });
}

/// Walks records as they arrive.
fn walk_until(reader: &Reader, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        {
            let pending = lock(&reader.pending);
            if pending.records.is_empty() {
                let wait = Duration::from_millis(POLL_MS as u64);
                drop(
                    reader
                        .arrived
                        .wait_timeout(pending, wait)
                        .unwrap_or_else(|e| e.into_inner()),
                );
            }
        }
        reader.walk();
    }
}
