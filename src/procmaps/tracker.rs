//! The tracker's thread: reads the perf records as they come, opens each
//! newly mapped file while its process still lives, and snapshots the
//! processes that were running before tracking began.

use std::fs::{self, File};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::objects::{Object, ObjectStore};
use super::perf::{Record, Rings};
use super::procfs::{is_file_path, open_mapped};
use super::{Backing, Mapping, Mappings, Shared, State};
use crate::error::{Error, Result};

/// Which running processes to read from `/proc` when tracking starts
/// (processes started later are always tracked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every process on the system.
    All,
    /// These processes only.
    Pids(Vec<u32>),
}

/// Records mappings as they happen, until dropped. What it recorded stays
/// readable through [`Tracker::mappings`] handles after that.
pub struct Tracker {
    mappings: Mappings,
    stop: Arc<AtomicBool>,
    /// Written to wake the thread at once when it should stop.
    wake: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

/// How long the thread sleeps when no records come: records that fill a
/// buffer past its watermark wake it, a stop wakes it at once (`wake`),
/// and perf maps are looked for again no more often than this
/// (src/procmaps/perfmap.rs RETRY_GAP).
const POLL_MS: i32 = 250;

impl Tracker {
    /// Opens the perf events on every online CPU and starts the thread.
    pub fn start(scope: Scope) -> Result<Tracker> {
        crate::system::raise_nofile();
        let (cpus, _) = crate::system::online_cpus()?;
        let rings = Rings::open(&cpus).map_err(|source| Error::PerfEvent {
            what: "mapping-tracking (software dummy)".into(),
            source,
            hint: " (flare needs CAP_PERFMON to follow processes' mappings)",
        })?;
        let fds = rings.fds();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                tracking: true,
                ..State::default()
            }),
            rings: Mutex::new(Some(rings)),
        });
        let stop = Arc::new(AtomicBool::new(false));
        // SAFETY: eventfd takes no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        // SAFETY: a non-negative result is a new descriptor owned here alone.
        let wake = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        let thread = {
            let shared = shared.clone();
            let stop = stop.clone();
            let mut fds = fds;
            fds.extend(wake.as_ref().map(|w| w.as_raw_fd()));
            thread::Builder::new()
                .name("flare-procmaps".into())
                .spawn(move || run(&shared, &stop, &fds, &scope))
                .map_err(|e| Error::Io {
                    what: "starting the mapping tracker".into(),
                    source: e,
                })?
        };
        Ok(Tracker {
            mappings: Mappings::from_shared(shared),
            stop,
            wake,
            thread: Some(thread),
        })
    }

    /// A handle to ask for processes' mappings.
    pub fn mappings(&self) -> Mappings {
        self.mappings.clone()
    }
}

/// Starts a tracker for `scope`, or, where perf events cannot be opened,
/// says so on stderr and falls back to reading `/proc` at the end (when
/// processes that exited show `[unknown]` frames). The tracker records
/// until dropped.
pub fn track(scope: Scope) -> (Option<Tracker>, Mappings) {
    match Tracker::start(scope) {
        Ok(t) => {
            let m = t.mappings();
            (Some(t), m)
        }
        Err(e) => {
            crate::notes::note(format!(
                "WARNING: {e}; processes that exit before the end will show [unknown] frames"
            ));
            (None, Mappings::on_demand())
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = &self.wake {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes 8 bytes from a live buffer to an eventfd this
            // tracker owns; failure only means the thread wakes by timeout.
            let _ = unsafe { libc::write(w.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Records up to now still count.
        self.mappings.sync();
        let lost = self.mappings.lost();
        if lost > 0 {
            crate::notes::note(format!(
                "WARNING: {lost} mapping records were lost (the kernel's buffer was full); processes that exited meanwhile may show [unknown] frames"
            ));
        }
    }
}

fn run(shared: &Shared, stop: &AtomicBool, fds: &[i32], scope: &Scope) {
    snapshot(shared, scope);
    super::perf::poll_until(fds, stop, POLL_MS, || {
        shared.drain();
        shared.state().perf_maps.retry();
    });
}

/// Reads the running processes in `scope` from `/proc`.
pub(crate) fn snapshot(shared: &Shared, scope: &Scope) {
    let pids: Vec<u32> = match scope {
        Scope::Pids(p) => p.clone(),
        Scope::All => fs::read_dir("/proc")
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default(),
    };
    let me = std::process::id();
    for pid in pids {
        if pid == me {
            continue;
        }
        // Records drained between two processes keep the buffers free.
        shared.drain();
        shared.state().read_from_proc(pid);
        // Let records in between: the snapshot must not starve them.
        thread::sleep(Duration::ZERO);
    }
}

/// Applies records, in time order, to what is known.
pub(crate) fn apply(shared: &Shared, records: Vec<Record>) {
    if records.is_empty() {
        return;
    }
    let mut state = shared.state();
    let state = &mut *state;
    for r in records {
        match r {
            Record::Mmap {
                pid,
                time,
                start,
                len,
                pgoff,
                build_id,
                inode,
                path,
            } => {
                let backing = if is_file_path(&path) {
                    let path = path.strip_suffix(" (deleted)").unwrap_or(&path);
                    let id = build_id.as_deref();
                    Backing::File(object(&mut state.objects, pid, start, len, path, id, inode))
                } else {
                    Backing::Anon(path.as_str().into())
                };
                let m = Mapping {
                    start,
                    end: start.saturating_add(len),
                    offset: pgoff,
                    backing,
                };
                state.perf_maps.notice(pid, std::slice::from_ref(&m));
                state.history.map(pid, time, m);
            }
            Record::Exec { pid, time } => {
                state.history.exec(pid, time);
                state.perf_maps.forget(pid);
            }
            Record::Fork { pid, ppid, time } => {
                state.history.fork(pid, ppid, time);
                state.perf_maps.forget(pid);
            }
            Record::Exit { pid, tid, time } if pid == tid => state.history.exit(pid, time),
            Record::Exit { .. } => {}
            Record::Lost(n) => state.lost += n,
        }
    }
}

/// The object of a new mapping: a known one (by build id, else by device
/// and inode), else the file opened through the process while it lives,
/// else the path opened in flare's namespace if it is provably the same
/// file (same build id, or same device and inode).
fn object(
    store: &mut ObjectStore,
    pid: u32,
    start: u64,
    len: u64,
    path: &str,
    build_id: Option<&[u8]>,
    inode: Option<(u64, u64)>,
) -> Arc<Object> {
    if let Some(o) = build_id.and_then(|id| store.by_build_id(id)) {
        return o;
    }
    if let Some(o) = inode.and_then(|(d, i)| store.by_inode(d, i)) {
        return o;
    }
    let same = |f: &File| match (build_id, inode) {
        (Some(id), _) => {
            let fd_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(f));
            blazesym::helper::read_elf_build_id(&fd_path)
                .ok()
                .flatten()
                .is_some_and(|b| &*b == id)
        }
        (None, Some((dev, ino))) => f.metadata().is_ok_and(|m| (m.dev(), m.ino()) == (dev, ino)),
        (None, None) => true,
    };
    // The PID may already name another process: check what was opened.
    let file = open_mapped(pid, start, start.saturating_add(len), path)
        .filter(same)
        .or_else(|| File::open(path).ok().filter(same));
    store.intern(path, file, build_id)
}
