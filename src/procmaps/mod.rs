//! Which files each process has mapped where, kept after the process has
//! exited.
//!
//! flare's samples are counted in the kernel and named at the end of a
//! run; by then a short-lived process is gone, and with it
//! `/proc/PID/maps`. A [`Tracker`] records mappings as they happen — perf's
//! `mmap2`, `comm` (exec) and `fork`/`exit` records, from a dummy software
//! event on every CPU — and holds every mapped file open ([`Object`]), so
//! that the symbolizer (and the user-space unwinder) can ask for any
//! process's mappings, alive or exited ([`Mappings::space`]). Processes
//! that were already running are read from `/proc` when tracking starts.
//!
//! Without a tracker, [`Mappings::on_demand`] reads `/proc` when asked and
//! remembers what it read, so a process that exits between two reads of a
//! live view keeps its names.

mod history;
pub(crate) mod objects;
pub(crate) mod perf;
mod perfmap;
pub(crate) mod procfs;
mod tracker;

use std::sync::{Arc, Mutex, MutexGuard};

pub(crate) use objects::vdso_image;
pub use objects::Object;
pub use perfmap::PerfMap;
pub use tracker::{track, Scope, Tracker};

/// What a mapping maps.
#[derive(Clone, Debug)]
pub enum Backing {
    /// A file (an executable, a library).
    File(Arc<Object>),
    /// Memory with no file: JIT code (`//anon`, empty), `[vdso]`, ...
    Anon(Arc<str>),
}

/// One executable mapping of a process.
#[derive(Clone, Debug)]
pub struct Mapping {
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// The file offset `start` maps.
    pub offset: u64,
    pub backing: Backing,
}

impl Mapping {
    /// The mapped file, if any.
    pub fn object(&self) -> Option<&Arc<Object>> {
        match &self.backing {
            Backing::File(o) => Some(o),
            Backing::Anon(_) => None,
        }
    }

    /// The file's path, or the pseudo name of anonymous memory.
    pub fn name(&self) -> &str {
        match &self.backing {
            Backing::File(o) => o.path(),
            Backing::Anon(n) => n,
        }
    }

    /// The file offset of `addr`, an address inside the mapping.
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.offset
    }

    /// True when `addr` lies in the mapping.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }
}

/// A process's executable mappings at one moment, sorted by address.
#[derive(Clone, Debug, Default)]
pub struct Space {
    pub mappings: Vec<Mapping>,
}

impl Space {
    /// The mapping holding `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.mappings.partition_point(|m| m.start <= addr);
        self.mappings[..i].last().filter(|m| m.contains(addr))
    }
}

/// Everything known about processes' mappings.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) objects: objects::ObjectStore,
    pub(crate) history: history::History,
    pub(crate) perf_maps: perfmap::PerfMaps,
    /// Records the kernel dropped (its ring buffer was full).
    pub(crate) lost: u64,
    /// True while perf records keep `history` up to date.
    pub(crate) tracking: bool,
}

impl State {
    /// Reads `pid`'s mappings from `/proc` now and files them as its
    /// latest address space (and its JIT map, if it writes one).
    fn read_from_proc(&mut self, pid: u32) -> Option<Vec<Mapping>> {
        // Stamped before the read: an exec during the read (opening each
        // object takes a while) then comes after the snapshot, and its
        // records lay the new image over it. Stamped after, the old image
        // read outlived the exec as the latest space.
        let time = now();
        let maps = procfs::read_mappings(pid, &mut self.objects)?;
        self.perf_maps.notice(pid, &maps);
        self.history.snapshot(pid, time, maps.clone());
        Some(maps)
    }
}

pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    /// The perf ring buffers, drained by the tracker's thread and by
    /// [`Mappings::sync`].
    pub(crate) rings: Mutex<Option<perf::Rings>>,
}

impl Shared {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies every record waiting in the ring buffers.
    pub(crate) fn drain(&self) {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rings) = rings.as_mut() {
            let records = rings.read_all();
            tracker::apply(self, records);
        }
    }
}

/// A handle on the mappings of every process: cheap to clone, shared
/// between the tracker's thread, the symbolizer and the unwinder.
#[derive(Clone)]
pub struct Mappings {
    shared: Arc<Shared>,
}

/// How far what flare sees of a process may trail its start (the kernel's
/// `start_time`, `CLOCK_MONOTONIC` ns) and still be that process: its fork
/// record comes microseconds after, `/proc`'s start time is rounded to a
/// clock tick. A fork record, or a `/proc` start, later than this belongs
/// to a later process given the PID.
pub(crate) const START_SLACK: u64 = 100_000_000;

/// Monotonic time in nanoseconds (`CLOCK_MONOTONIC`, the clock the
/// tracker's perf records are stamped with).
pub fn now() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The time of clock `id` in nanoseconds.
pub(crate) fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Mappings {
    /// Mappings read from `/proc` when asked for, and remembered.
    pub fn on_demand() -> Self {
        Mappings {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                rings: Mutex::new(None),
            }),
        }
    }

    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        Mappings { shared }
    }

    /// `pid`'s executable mappings at time `at` ([`now`]'s clock), or the
    /// latest known when `None`: as recorded while the process lived, or
    /// read from `/proc` now. `None` when nothing is known of the process.
    pub fn space(&self, pid: u32, at: Option<u64>) -> Option<Space> {
        self.look_up(pid, at.is_some(), 0, |h| h.mappings(pid, at))
    }

    /// The latest executable mappings of the process `pid` that started at
    /// `start` (the kernel's `start_time`, [`now`]'s clock), not those of
    /// a later process given its PID; with `start` 0, of whichever process
    /// has the PID now ([`Mappings::space`]). `None` when nothing is known
    /// of it.
    pub fn process_space(&self, pid: u32, start: u64) -> Option<Space> {
        self.look_up(pid, false, start, |h| h.process_mappings(pid, start))
    }

    /// When the process that `pid` named at `at` ([`now`]'s clock)
    /// started, as far as its mapping records tell (0: unknown): a
    /// `start` for [`Mappings::process_space`] where the kernel's is not
    /// at hand.
    pub(crate) fn process_start(&self, pid: u32, at: u64) -> u64 {
        self.shared.state().history.process_start(pid, at)
    }

    /// What the history records (`recorded`), unless it may be out of
    /// date: then `/proc` as it reads now, when the process that has `pid`
    /// now is not younger than `start` (0: any). `pinned`: a moment was
    /// asked for, which later changes do not touch.
    fn look_up(
        &self,
        pid: u32,
        pinned: bool,
        start: u64,
        recorded: impl FnOnce(&history::History) -> Option<(Vec<Mapping>, bool)>,
    ) -> Option<Space> {
        let mut state = self.shared.state();
        let recorded = recorded(&state.history);
        let trusted = matches!(&recorded, Some((_, true))) && (state.tracking || pinned);
        if !trusted && (start == 0 || !procfs::started_after(pid, start)) {
            if let Some(mappings) = state.read_from_proc(pid) {
                return Some(Space { mappings });
            }
        }
        recorded.map(|(mappings, _)| Space { mappings })
    }

    /// `pid`'s JIT symbols (`/tmp/perf-PID.map`), when it wrote any that
    /// flare may use, as read while the process lived or now.
    pub fn perf_map(&self, pid: u32) -> Option<Arc<PerfMap>> {
        self.shared.state().perf_maps.get(pid)
    }

    /// Applies every mapping record the kernel has handed over so far
    /// (call before symbolizing, so that the last moments count).
    pub fn sync(&self) {
        self.shared.drain();
    }

    /// Mappings kept up to date by their owner rather than by a
    /// [`Tracker`]: a collector that reads the mapping records of its own
    /// perf events (perf-event mode, without the privileges a tracker's
    /// system-wide events need) hands them over with [`Mappings::apply`].
    pub(crate) fn fed() -> Self {
        Mappings {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    tracking: true,
                    ..State::default()
                }),
                rings: Mutex::new(None),
            }),
        }
    }

    /// Applies mapping records (in time order) read by the owner of a
    /// [`Mappings::fed`].
    pub(crate) fn apply(&self, records: Vec<perf::Record>) {
        tracker::apply(&self.shared, records);
    }

    /// Reads the running processes `pids` from `/proc` (before their
    /// mapping records start to come).
    pub(crate) fn snapshot(&self, pids: &[u32]) {
        tracker::snapshot(&self.shared, &Scope::Pids(pids.to_vec()));
    }

    /// A mark of the exits known now, for [`Mappings::forget_exited`].
    pub fn exits(&self) -> u64 {
        self.shared.state().history.exits()
    }

    /// Forgets the mappings (and JIT maps) of processes whose exit was
    /// known at `mark` ([`Mappings::exits`]): a periodic run no longer
    /// needs them once every sample they could have taken is named, and a
    /// run without end must not keep every process it ever saw.
    pub fn forget_exited(&self, mark: u64) {
        let mut state = self.shared.state();
        for pid in state.history.forget_exited(mark) {
            state.perf_maps.forget(pid);
        }
    }

    /// Mapping records the kernel could not hand over (its buffer was
    /// full); their processes are read from `/proc` while they live.
    pub fn lost(&self) -> u64 {
        self.shared.state().lost
    }
}
