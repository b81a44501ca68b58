//! Java frames in perf-event mode: no BPF program walks the stack, so a
//! sample's user stack is walked here with the user-space twin of
//! bpf/java.h's step ([`crate::java::walk`]) offered each frame, over the
//! stack the kernel copied and the JVM's live code cache. The JVMs found
//! feed the same [`Registry`] the namer reads, so naming, caching and
//! writers are as with BPF.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::{Entry, NoRuntime, Procs};
use crate::collect::stacks::frame_header;
use crate::collect::Runtime;
use crate::java::detect::Detector;
use crate::java::walk::{Leaf, Regs, Walker};
use crate::java::{Process, Registry};
use crate::procmaps::Mappings;
use crate::python::memory::{Pages, ProcessMemory};
use crate::unwind::runtimes::Found;

/// The perf-event collector's Java side.
pub struct PerfJava {
    registry: Registry,
    detector: Detector,
    /// By (process id, start).
    procs: Procs<(Arc<Process>, Walker)>,
    said: HashSet<String>,
    /// What detection spent on processes not ready yet.
    spent: crate::unwind::runtimes::Spent,
}

/// Steps Java frames of one sample: what [`PerfJava::stepper`] gives.
pub struct Stepper<'a> {
    process: &'a Process,
    walker: &'a mut Walker,
    /// The sample's reads, a page at a time.
    mem: Pages<ProcessMemory>,
    leaf: Leaf,
}

impl Stepper<'_> {
    /// The runtime frame's words and the caller's registers, for the
    /// frame at `regs`, when it is a Java frame; `stack` reads the copy.
    pub fn step(
        &mut self,
        stack: &dyn Fn(u64) -> Option<u64>,
        regs: Regs,
        return_address: bool,
    ) -> Option<([u64; 4], Regs)> {
        let s = self.walker.step(
            self.process,
            &self.mem,
            stack,
            regs,
            return_address,
            self.leaf,
        )?;
        let header = frame_header(Runtime::Java.frame_type(), 3);
        Some(([header, s.ids[0], s.ids[1], s.cookie], s.caller))
    }
}

impl PerfJava {
    pub fn new() -> Self {
        PerfJava {
            registry: Arc::new(Mutex::new(HashMap::new())),
            detector: Detector::new(),
            procs: HashMap::new(),
            said: HashSet::new(),
            spent: Default::default(),
        }
    }

    /// The processes found, for the namer.
    pub fn registry(&self) -> Registry {
        self.registry.clone()
    }

    /// The stepper for a sample of process `pid` (started at `start`)
    /// whose leaf's other registers are `leaf`, when it runs a JVM flare
    /// can walk.
    pub fn stepper(
        &mut self,
        pid: u32,
        start: u64,
        leaf: Leaf,
        mappings: &Mappings,
    ) -> Option<Stepper<'_>> {
        if Entry::due(self.procs.get_mut(&(pid, start)), pid, mappings) {
            self.look(pid, start, mappings);
        }
        match self.procs.get_mut(&(pid, start)) {
            Some(Entry::Found((process, walker))) => Some(Stepper {
                process,
                walker,
                mem: Pages::new(ProcessMemory { pid }),
                leaf,
            }),
            _ => None,
        }
    }

    /// Looks for a JVM in process `pid`.
    fn look(&mut self, pid: u32, start: u64, mappings: &Mappings) {
        let Some(maps) = crate::unwind::procs::tracked_mappings(mappings, pid) else {
            self.procs.insert((pid, start), Entry::Native);
            return;
        };
        let mem = ProcessMemory { pid };
        let started = std::time::Instant::now();
        let found = self.detector.detect(pid, &maps, &mem);
        let took = started.elapsed();
        let entry = match found {
            Found::Yes(p) => {
                let p = Arc::new(p);
                if let Ok(mut r) = self.registry.lock() {
                    r.insert(pid, p.clone());
                }
                Entry::Found((p, Walker::new()))
            }
            Found::NotReady => match self.spent.over_budget(pid, took, "HotSpot") {
                Some(why) => {
                    crate::java::note_unsupported(&mut self.said, why);
                    Entry::Native
                }
                None => Entry::retry(),
            },
            Found::Unsupported(why) => {
                crate::java::note_unsupported(&mut self.said, why);
                Entry::Native
            }
            Found::No => Entry::NotYet(NoRuntime::new(maps.len())),
        };
        if !matches!(entry, Entry::Retry { .. }) {
            self.spent.forget(pid);
        }
        self.procs.insert((pid, start), entry);
    }
}
