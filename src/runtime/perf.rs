//! A runtime's side of perf-event mode (`flare profile` without root),
//! where no BPF program reads runtime frames at the sample's moment: the
//! collector offers each runtime a sample's frames while it walks them
//! ([`PerfRuntime::stepper`], as Java's frames are stepped) and once
//! walked ([`PerfRuntime::splice`], as Python's are read from the thread
//! and put in place of the eval loop's), and keeps each runtime's
//! processes by (process id, start) as [`Procs`] here say.

use std::collections::HashMap;
use std::sync::Arc;

use crate::collect::{RawFrame, RuntimeFinds};
use crate::procmaps::Mappings;

/// The registers a step starts from and gives the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    pub pc: u64,
    pub sp: u64,
    pub bp: u64,
}

/// What is known of the interrupted (leaf) frame's registers besides pc,
/// sp and the frame pointer: the interpreter's bytecode pointer register
/// (r13 on x86-64, x22 on arm64) and arm64's link register, x30.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Leaf {
    pub bcp: u64,
    pub lr: u64,
}

/// What one sample's walk asks of a runtime: the frame at `regs`, when it
/// is the runtime's, as a stack record's words (header first) and the
/// caller's registers; `stack` reads the sample's copy of the stack.
pub trait Stepper {
    fn step(
        &mut self,
        stack: &dyn Fn(u64) -> Option<u64>,
        regs: Regs,
        return_address: bool,
    ) -> Option<([u64; 4], Regs)>;
}

/// A runtime in perf-event mode.
pub trait PerfRuntime: Send {
    /// What names its frames: the processes it found.
    fn finds(&self) -> Arc<dyn RuntimeFinds>;

    /// Whether a process mapping `mappings` runs it, as far as its file
    /// names tell: its samples then copy the most stack perf events allow.
    fn wants_whole_stack(&self, _mappings: &Mappings, _pid: u32) -> bool {
        false
    }

    /// The stepper for a sample of process `pid` (started at `start`)
    /// whose leaf's other registers are `leaf`, when its frames are
    /// stepped in the walk and it runs the runtime.
    fn stepper(
        &mut self,
        _pid: u32,
        _start: u64,
        _leaf: Leaf,
        _mappings: &Mappings,
    ) -> Option<Box<dyn Stepper + '_>> {
        None
    }

    /// The user stack `pcs` (leaf first) of a sample of thread `tid` of
    /// process `pid` (started at `start`) taken at `time` (monotonic
    /// nanoseconds) with the runtime's frames in place, when the process
    /// runs it and they could be read.
    fn splice(
        &mut self,
        _pid: u32,
        _start: u64,
        _tid: u32,
        _time: u64,
        _pcs: &[u64],
        _mappings: &Mappings,
    ) -> Option<Vec<RawFrame>> {
        None
    }
}

/// What a process is to a runtime's reader (Python's, Java's), by its
/// (process id, start).
pub enum Entry<T> {
    /// The runtime, found, and what reading it needs.
    Found(T),
    /// Not ready yet (a runtime starting): tried again after
    /// [`RETRY_GAP`](crate::runtime::tracker::RETRY_GAP), until `until`
    /// if there is one.
    Retry {
        at: std::time::Instant,
        until: Option<std::time::Instant>,
    },
    /// Native frames only.
    Native,
    /// No runtime found yet (looked at again when it maps more).
    NotYet(NoRuntime),
}

/// A runtime reader's processes, by (process id, start).
pub type Procs<T> = HashMap<(u32, u64), Entry<T>>;

impl<T> Entry<T> {
    /// Not ready: tried again after a while, for as long as it takes.
    pub fn retry() -> Self {
        Entry::Retry {
            at: std::time::Instant::now(),
            until: None,
        }
    }

    /// Whether to look at process `pid`, whose entry is `entry` (`None`:
    /// not seen yet), again.
    pub fn due(entry: Option<&mut Self>, pid: u32, mappings: &Mappings) -> bool {
        match entry {
            None => true,
            Some(Entry::Retry { at, .. }) => at.elapsed() >= crate::runtime::tracker::RETRY_GAP,
            Some(Entry::NotYet(no)) => no.due(pid, mappings),
            Some(_) => false,
        }
    }
}

/// A process in which no runtime was found, as it was mapped then: the
/// samples that come first may precede the runtime's library (a `java`
/// launcher before it loads libjvm, a program that loads libpython
/// later), so the process is looked at again, at most every
/// [`RETRY_GAP`](crate::runtime::tracker::RETRY_GAP), once it maps
/// something else.
pub struct NoRuntime {
    at: std::time::Instant,
    /// How many mappings the process had when looked at.
    objects: usize,
}

impl NoRuntime {
    /// Found none in a process of `objects` mappings.
    pub fn new(objects: usize) -> NoRuntime {
        NoRuntime {
            at: std::time::Instant::now(),
            objects,
        }
    }

    /// Whether to look at process `pid` again.
    pub fn due(&mut self, pid: u32, mappings: &Mappings) -> bool {
        if self.at.elapsed() < crate::runtime::tracker::RETRY_GAP {
            return false;
        }
        self.at = std::time::Instant::now();
        mappings.space(pid, None).map(|s| s.mappings.len()) != Some(self.objects)
    }
}

/// A runtime's processes as perf-event mode finds them, each looked at
/// with the same lifecycle: found (and put in the registry its namer
/// reads), not ready yet (tried again, until detection has spent its
/// budget on the process), unsupported (said once, native frames), none
/// yet (looked at again when the process maps more).
pub struct Finder<R: crate::runtime::Runtime, T> {
    pub registry: crate::runtime::tracker::Registry<R::Process>,
    detector: R::Detector,
    /// By (process id, start): what the runtime's reader keeps of each.
    pub procs: Procs<T>,
    said: std::collections::HashSet<String>,
    /// What detection spent on processes not ready yet.
    spent: crate::runtime::tracker::Spent,
    /// The processes found, as mapped then: found again once they map
    /// more (V8 copies its builtins beside its code after start-up).
    mapped: HashMap<(u32, u64), NoRuntime>,
}

impl<R: crate::runtime::Runtime, T> Default for Finder<R, T> {
    fn default() -> Self {
        Finder {
            registry: Default::default(),
            detector: Default::default(),
            procs: Procs::new(),
            said: Default::default(),
            spent: Default::default(),
            mapped: HashMap::new(),
        }
    }
}

impl<R: crate::runtime::Runtime, T> Finder<R, T> {
    /// What process `pid` (started at `start`) is to the runtime, looked
    /// at again when due; `found` makes the reader's entry of a process
    /// found.
    pub fn get(
        &mut self,
        pid: u32,
        start: u64,
        mappings: &Mappings,
        found: impl FnOnce(Arc<R::Process>) -> T,
    ) -> Option<&mut T> {
        let key = (pid, start);
        let again = match self.procs.get_mut(&key) {
            Some(Entry::Found(_)) => self
                .mapped
                .get_mut(&key)
                .is_some_and(|m| m.due(pid, mappings)),
            entry => Entry::due(entry, pid, mappings),
        };
        if again {
            let entry = self.look(pid, mappings, found);
            let known = matches!(self.procs.get(&key), Some(Entry::Found(_)));
            if let (Entry::Found(_), Some(space)) = (&entry, mappings.space(pid, None)) {
                self.mapped
                    .insert(key, NoRuntime::new(space.mappings.len()));
            }
            // A process found before keeps what was found then unless
            // found again.
            if !known || matches!(entry, Entry::Found(_)) {
                self.procs.insert(key, entry);
            }
        }
        match self.procs.get_mut(&(pid, start)) {
            Some(Entry::Found(t)) => Some(t),
            _ => None,
        }
    }

    fn look(
        &mut self,
        pid: u32,
        mappings: &Mappings,
        found: impl FnOnce(Arc<R::Process>) -> T,
    ) -> Entry<T> {
        use crate::runtime::tracker::Found;
        let Some(maps) = crate::unwind::procs::tracked_mappings(mappings, pid) else {
            return Entry::Native;
        };
        let mem = crate::runtime::memory::ProcessMemory { pid };
        let started = std::time::Instant::now();
        let detected = R::detect(&mut self.detector, pid, &maps, &mem);
        let took = started.elapsed();
        let entry = match detected {
            Found::Yes(p) => {
                let p = Arc::new(p);
                if let Ok(mut r) = self.registry.lock() {
                    r.insert(pid, p.clone());
                }
                Entry::Found(found(p))
            }
            Found::NotReady => match self.spent.over_budget(pid, took, R::NAME) {
                Some(why) => {
                    crate::runtime::note_unsupported::<R>(&mut self.said, why);
                    Entry::Native
                }
                None => Entry::retry(),
            },
            Found::Unsupported(why) => {
                crate::runtime::note_unsupported::<R>(&mut self.said, why);
                Entry::Native
            }
            Found::No => Entry::NotYet(NoRuntime::new(maps.len())),
        };
        if !matches!(entry, Entry::Retry { .. }) {
            self.spent.forget(pid);
        }
        entry
    }
}
