//! Keeps a runtime's BPF process map (`py_procs`, `java_procs`) in step
//! with the processes the unwinder loads, and the registry its namer
//! reads.
//!
//! The unwinder's loader hands over each process it loads (its executable
//! mappings); [`Tracker::load`] asks the [`Runtime`] whether the
//! process runs it. A runtime not set up yet (a process just started) is
//! tried again every [`RETRY_GAP`] for as long as it lives, so that `flare
//! -- python3 app.py` gets Python frames from the first samples after
//! start-up. A version flare cannot walk is said once on stderr and
//! walked natively.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::memory::{Memory, Pages, ProcessMemory};
use super::{note_unsupported, Runtime};
use crate::collect::{Namer, RuntimeFrame};
use crate::profile::Frame;
use crate::unwind::procs::ExecMapping;
use crate::unwind::Watcher;

/// How often a runtime not set up yet is looked at again: as often as the
/// loader wakes while a tracker says it is [`Watcher::busy`].
pub const RETRY_GAP: Duration = crate::unwind::loader::BUSY_WAIT;

/// The time detection may spend on one process over all its tries (each
/// bounded: [`crate::elf`] reads, memory reads of stated sizes): past it,
/// a process still not ready is walked natively, said once. A real
/// runtime is ready within a few tries of a few milliseconds (a JVM in an
/// emulated guest: some 50 ms a try); a process that keeps detection busy
/// (many large files mapped, a runtime that never gets ready) gives up
/// no more of the loader's time than this.
pub const DETECT_BUDGET: Duration = Duration::from_secs(10);

/// What detection spent on each process still being tried.
#[derive(Default)]
pub struct Spent(HashMap<u32, Duration>);

impl Spent {
    /// Charges `took` to process `pid`; true once it is past `budget`.
    pub fn charge(&mut self, pid: u32, took: Duration, budget: Duration) -> bool {
        let spent = self.0.entry(pid).or_default();
        *spent += took;
        *spent > budget
    }

    /// What was charged to `pid`.
    pub fn of(&self, pid: u32) -> Duration {
        self.0.get(&pid).copied().unwrap_or_default()
    }

    /// Charges a try that took `took` to process `pid`, in which runtime
    /// `name` is not ready: why to give up on it once past
    /// [`DETECT_BUDGET`].
    pub fn over_budget(&mut self, pid: u32, took: Duration, name: &str) -> Option<String> {
        self.charge(pid, took, DETECT_BUDGET).then(|| {
            format!(
                "{name} in process {pid}: not set up after {:.1} s of looking (the budget is {} s: does it map many or large files?)",
                self.of(pid).as_secs_f64(),
                DETECT_BUDGET.as_secs()
            )
        })
    }

    /// Forgets process `pid` (found, refused or gone).
    pub fn forget(&mut self, pid: u32) {
        self.0.remove(&pid);
    }
}

/// What a process runs, as far as one runtime goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found<P> {
    /// The runtime's process, ready to walk.
    Yes(P),
    /// Not this runtime.
    No,
    /// This runtime, not set up yet: try later.
    NotReady,
    /// This runtime, in a version flare cannot walk, and why.
    Unsupported(String),
}

impl Found<std::convert::Infallible> {
    /// An answer that is not a process (`No`, `NotReady`, `Unsupported`),
    /// as any runtime's: a detector's steps say why they stop in it,
    /// without carrying a process's room.
    pub fn widen<P>(self) -> Found<P> {
        match self {
            Found::Yes(never) => match never {},
            Found::No => Found::No,
            Found::NotReady => Found::NotReady,
            Found::Unsupported(why) => Found::Unsupported(why),
        }
    }
}

/// A runtime's processes by process id: filled by the tracker, read by
/// the runtime's namer.
pub type Registry<P> = Arc<Mutex<HashMap<u32, Arc<P>>>>;

/// True once `registry` holds a process (a poisoned lock counts as one).
pub fn any_process<P>(registry: &Registry<P>) -> bool {
    registry.lock().map_or(true, |r| !r.is_empty())
}

/// The registry's process `pid`, if known (a poisoned lock is read as
/// it stands).
pub fn lookup<P>(registry: &Registry<P>, pid: u32) -> Option<Arc<P>> {
    registry
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&pid)
        .cloned()
}

/// A runtime's namer: it names a frame of one of its processes from the
/// process's memory. Each is a [`Namer`] that reads a window's frames of
/// a process through one [`Pages`] of its memory, so that their many
/// small reads cost a system call per page.
pub trait ProcessNamer: Send {
    /// What the registry knows of a process.
    type Process;

    /// The runtime whose frames it names.
    fn runtime(&self) -> crate::collect::Runtime;

    /// Its processes.
    fn registry(&self) -> &Registry<Self::Process>;

    /// The frames `frame` of `process` (process `pid`) stands for, as
    /// [`Namer::name`] gives them, read through `mem`.
    fn name_in(
        &mut self,
        mem: &dyn Memory,
        pid: u32,
        process: &Arc<Self::Process>,
        frame: &RuntimeFrame,
    ) -> Option<Vec<Frame>>;
}

impl<T: ProcessNamer> Namer for T {
    fn name(&mut self, pid: u32, frame: &RuntimeFrame) -> Option<Vec<Frame>> {
        self.name_all(pid, std::slice::from_ref(frame))
            .pop()
            .flatten()
    }

    fn name_all(&mut self, pid: u32, frames: &[RuntimeFrame]) -> Vec<Option<Vec<Frame>>> {
        let Some(process) = lookup(self.registry(), pid) else {
            return vec![None; frames.len()];
        };
        let mem = Pages::new(ProcessMemory { pid });
        let runtime = self.runtime();
        frames
            .iter()
            .map(|f| match f.runtime == runtime {
                true => self.name_in(&mem, pid, &process, f),
                false => None,
            })
            .collect()
    }

    fn knows(&self, pid: u32) -> bool {
        lookup(self.registry(), pid).is_some()
    }
}

/// What a namer read in its processes' memory, by (process id, address,
/// cookie): each answer (`None`: not what BPF saw) is kept with the
/// process it was read in, as a process id reused by another process is
/// another process in the registry. Answers are kept in two generations
/// of at most half of [`ReadCache::MAX`] answers and
/// [`ReadCache::MAX_BYTES`] each: when the young one is full, the old one
/// is forgotten and the young one becomes old, and an old answer used
/// again is young again. So a run without end stays flat, and what is
/// still used is not read again (clearing everything at the bound read
/// the hot answers again at once).
pub struct ReadCache<P, T> {
    young: Generation<P, T>,
    old: Generation<P, T>,
}

/// One generation of a [`ReadCache`].
struct Generation<P, T> {
    entries: HashMap<ReadKey, Entry<P, T>>,
    /// What the entries weigh ([`Weight`]).
    bytes: usize,
}

/// An answer, the process it was read in, and what it weighs.
type Entry<P, T> = (Arc<P>, Option<Arc<T>>, usize);

impl<P, T> Default for Generation<P, T> {
    fn default() -> Self {
        Generation {
            entries: HashMap::new(),
            bytes: 0,
        }
    }
}

impl<P, T> Generation<P, T> {
    fn remove(&mut self, key: &ReadKey) -> Option<Entry<P, T>> {
        let entry = self.entries.remove(key)?;
        self.bytes = self.bytes.saturating_sub(entry.2);
        Some(entry)
    }

    fn insert(&mut self, key: ReadKey, entry: Entry<P, T>) {
        self.bytes += entry.2;
        if let Some((_, _, old)) = self.entries.insert(key, entry) {
            self.bytes = self.bytes.saturating_sub(old);
        }
    }
}

/// What a value read from another process holds, in bytes: the budget of
/// a [`ReadCache`] counts it.
pub trait Weight {
    fn weight(&self) -> usize;
}

/// (process id, address, cookie).
pub type ReadKey = (u32, u64, u64);

impl<P, T> Default for ReadCache<P, T> {
    fn default() -> Self {
        ReadCache {
            young: Generation::default(),
            old: Generation::default(),
        }
    }
}

impl<P, T: Weight> ReadCache<P, T> {
    pub const MAX: usize = 1 << 16;

    /// The bytes kept at most: many times what real programs need at a
    /// time (a code object of a real Python program weighs a few hundred
    /// bytes, an optimized function of the TypeScript compiler's a few
    /// KiB; a crafted one up to its 1 MiB line table). The agent's whole
    /// budget is 30 MiB.
    pub const MAX_BYTES: usize = 4 << 20;

    /// What one entry costs besides its value: key, process, map slot.
    const ENTRY: usize = 64;

    /// The answer for `key` in `process`, read with `read` once.
    pub fn get_or_read(
        &mut self,
        key: ReadKey,
        process: &Arc<P>,
        read: impl FnOnce() -> Option<T>,
    ) -> Option<Arc<T>> {
        if let Some((p, info, _)) = self.young.entries.get(&key) {
            if Arc::ptr_eq(p, process) {
                return info.clone();
            }
        }
        // An old answer of the same process is young again; one of
        // another process under a reused id goes.
        let old = self
            .old
            .remove(&key)
            .filter(|(p, _, _)| Arc::ptr_eq(p, process));
        let entry = old.unwrap_or_else(|| {
            let info = read().map(Arc::new);
            let weight = Self::ENTRY + info.as_ref().map_or(0, |i| i.weight());
            (Arc::clone(process), info, weight)
        });
        let info = entry.1.clone();
        // An answer heavier than a generation is used, not kept.
        if entry.2 > Self::MAX_BYTES / 2 {
            return info;
        }
        if self.young.entries.len() >= Self::MAX / 2
            || self.young.bytes + entry.2 > Self::MAX_BYTES / 2
        {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(key, entry);
        info
    }

    /// The bytes its entries weigh.
    pub fn bytes(&self) -> usize {
        self.young.bytes + self.old.bytes
    }

    /// How many answers it keeps.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.young.entries.len() + self.old.entries.len()
    }
}

/// A process that maps the runtime, which was not ready.
struct Pending {
    maps: Vec<ExecMapping>,
    at: Instant,
}

/// The loader's side of one runtime.
pub struct Tracker<R: Runtime> {
    map: MapHandle,
    registry: Registry<R::Process>,
    detector: R::Detector,
    pending: HashMap<u32, Pending>,
    spent: Spent,
    said: HashSet<String>,
}

impl<R: Runtime> Tracker<R> {
    pub fn new(map: MapHandle, registry: Registry<R::Process>) -> Tracker<R> {
        Tracker {
            map,
            registry,
            detector: R::Detector::default(),
            pending: HashMap::new(),
            spent: Spent::default(),
            said: HashSet::new(),
        }
    }

    /// Looks for the runtime in process `pid`, mapping `maps`.
    pub fn load(&mut self, pid: u32, maps: &[ExecMapping]) {
        let started = Instant::now();
        let mem = Pages::new(ProcessMemory { pid });
        let mut found = R::detect(&mut self.detector, pid, maps, &mem);
        if matches!(found, Found::NotReady) {
            if let Some(why) = self.spent.over_budget(pid, started.elapsed(), R::NAME) {
                found = Found::Unsupported(why);
            }
        }
        match found {
            Found::Yes(p) => {
                self.pending.remove(&pid);
                self.spent.forget(pid);
                let ok = self
                    .map
                    .update(&pid.to_ne_bytes(), &R::bpf_bytes(&p), MapFlags::ANY)
                    .is_ok();
                if ok {
                    if let Ok(mut r) = self.registry.lock() {
                        r.insert(pid, Arc::new(p));
                    }
                }
            }
            Found::NotReady => {
                self.pending.insert(
                    pid,
                    Pending {
                        maps: maps.to_vec(),
                        at: Instant::now(),
                    },
                );
            }
            Found::Unsupported(why) => {
                note_unsupported::<R>(&mut self.said, why);
                self.forget(pid);
            }
            Found::No => self.forget(pid),
        }
    }

    /// Looks again at the processes whose runtime was not ready.
    pub fn retry(&mut self) {
        let due: Vec<(u32, Vec<ExecMapping>)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.at.elapsed() >= RETRY_GAP)
            .map(|(&pid, p)| (pid, p.maps.clone()))
            .collect();
        for (pid, maps) in due {
            self.load(pid, &maps);
        }
    }

    /// Drops process `pid` (it exited, or runs something else now).
    pub fn forget(&mut self, pid: u32) {
        self.pending.remove(&pid);
        self.spent.forget(pid);
        let known = self.registry.lock().map(|mut r| r.remove(&pid).is_some());
        if known.unwrap_or(true) {
            let _ = self.map.delete(&pid.to_ne_bytes());
        }
    }
}

impl<R: Runtime> Watcher for Tracker<R> {
    fn loaded(&mut self, pid: u32, maps: &[ExecMapping]) {
        self.load(pid, maps);
    }

    fn gone(&mut self, pid: u32) {
        self.forget(pid);
    }

    fn idle(&mut self) {
        self.retry();
    }

    /// A process whose runtime was not ready is looked at again every
    /// [`RETRY_GAP`].
    fn busy(&self) -> bool {
        !self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sized(usize);

    impl Weight for Sized {
        fn weight(&self) -> usize {
            self.0
        }
    }

    #[test]
    fn detection_stops_past_its_budget_per_process() {
        let mut spent = Spent::default();
        let budget = Duration::from_secs(10);
        let try_ = Duration::from_millis(400);
        let tries = (1..=30)
            .take_while(|_| !spent.charge(7, try_, budget))
            .count();
        assert_eq!(tries, 25, "25 tries of 0.4 s fit in 10 s, the 26th is over");
        assert!(
            !spent.charge(8, try_, budget),
            "another process has its own"
        );
        spent.forget(7);
        assert!(
            !spent.charge(7, try_, budget),
            "a forgotten process starts again"
        );
        assert_eq!(spent.of(7), try_);
    }

    #[test]
    fn a_read_cache_keeps_to_its_byte_budget() {
        type Cache = ReadCache<(), Sized>;
        let mut cache: Cache = ReadCache::default();
        let process = Arc::new(());
        let mut reads = 0;
        // Answers of a quarter of the budget, as a line table shared by
        // many code objects makes them: never more than the budget kept.
        let big = Cache::MAX_BYTES / 4;
        for round in 0..2 {
            for at in 0..200u64 {
                let got = cache.get_or_read((1, at, 0), &process, || {
                    reads += 1;
                    Some(Sized(big))
                });
                assert!(got.is_some());
                assert!(cache.bytes() <= Cache::MAX_BYTES, "{}", cache.bytes());
            }
            assert!(cache.len() <= 4, "round {round}");
        }
        assert_eq!(reads, 400);
        // Small answers are kept and read once.
        let mut cache: Cache = ReadCache::default();
        for _ in 0..3 {
            for at in 0..100u64 {
                cache.get_or_read((1, at, 0), &process, || {
                    reads += 1;
                    Some(Sized(100))
                });
            }
        }
        assert_eq!(reads, 500);
        assert_eq!(cache.bytes(), 100 * (100 + 64));
    }

    #[test]
    fn a_read_cache_keeps_what_is_used_while_the_rest_passes() {
        type Cache = ReadCache<(), Sized>;
        let mut cache: Cache = ReadCache::default();
        let process = Arc::new(());
        let mut hot_reads = 0;
        // Ten budgets' worth of answers pass, each used once; one answer
        // is used between every few of them.
        let size = 4096;
        let passing = 10 * Cache::MAX_BYTES / size;
        for at in 0..passing as u64 {
            cache.get_or_read((1, 1 << 40 | at, 0), &process, || Some(Sized(size)));
            if at % 64 == 0 {
                cache.get_or_read((1, 7, 0), &process, || {
                    hot_reads += 1;
                    Some(Sized(size))
                });
            }
            assert!(cache.bytes() <= Cache::MAX_BYTES);
        }
        assert_eq!(hot_reads, 1, "the answer in use was read again");
        // Another process under a reused id is read again.
        let other = Arc::new(());
        cache.get_or_read((1, 7, 0), &other, || {
            hot_reads += 1;
            Some(Sized(size))
        });
        assert_eq!(hot_reads, 2);
    }
}
