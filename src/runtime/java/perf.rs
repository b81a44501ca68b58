//! Java frames in perf-event mode: no BPF program walks the stack, so a
//! sample's user stack is walked here with the user-space twin of
//! bpf/java.h's step ([`crate::runtime::java::walk`]) offered each frame, over the
//! stack the kernel copied and the JVM's live code cache. The JVMs found
//! feed the same [`Registry`] the namer reads, so naming, caching and
//! writers are as with BPF.

use std::collections::HashSet;
use std::sync::Arc;

use crate::collect::RuntimeFinds;

use crate::collect::stacks::frame_header;
use crate::collect::Runtime;
use crate::procmaps::Mappings;
use crate::runtime::java::detect::Detector;
use crate::runtime::java::walk::{Leaf, Regs, Walker};
use crate::runtime::java::{Java, Process, Registry};
use crate::runtime::memory::{Pages, ProcessMemory};
use crate::runtime::perf::{Entry, NoRuntime, PerfRuntime, Procs};
use crate::runtime::tracker::Found;
use crate::runtime::{note_unsupported, Finds};

/// The perf-event collector's Java side.
#[derive(Default)]
pub struct PerfJava {
    registry: Registry,
    detector: Detector,
    /// By (process id, start).
    procs: Procs<(Arc<Process>, Walker)>,
    said: HashSet<String>,
    /// What detection spent on processes not ready yet.
    spent: crate::runtime::tracker::Spent,
}

/// Steps Java frames of one sample: what [`PerfJava::stepper`] gives.
pub struct Stepper<'a> {
    process: &'a Process,
    walker: &'a mut Walker,
    /// The sample's reads, a page at a time.
    mem: Pages<ProcessMemory>,
    leaf: Leaf,
}

impl crate::runtime::perf::Stepper for Stepper<'_> {
    fn step(
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
                    note_unsupported::<Java>(&mut self.said, why);
                    Entry::Native
                }
                None => Entry::retry(),
            },
            Found::Unsupported(why) => {
                note_unsupported::<Java>(&mut self.said, why);
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

impl PerfRuntime for PerfJava {
    fn finds(&self) -> Arc<dyn RuntimeFinds> {
        Arc::new(Finds::<Java>(self.registry.clone()))
    }

    fn wants_whole_stack(&self, mappings: &Mappings, pid: u32) -> bool {
        mappings.space(pid, None).is_some_and(|space| {
            space.mappings.iter().any(|m| match &m.backing {
                crate::procmaps::Backing::File(o) => {
                    crate::runtime::java::detect::is_libjvm(o.path())
                }
                _ => false,
            })
        })
    }

    fn stepper(
        &mut self,
        pid: u32,
        start: u64,
        leaf: Leaf,
        mappings: &Mappings,
    ) -> Option<Box<dyn crate::runtime::perf::Stepper + '_>> {
        if Entry::due(self.procs.get_mut(&(pid, start)), pid, mappings) {
            self.look(pid, start, mappings);
        }
        match self.procs.get_mut(&(pid, start)) {
            Some(Entry::Found((process, walker))) => Some(Box::new(Stepper {
                process,
                walker,
                mem: Pages::new(ProcessMemory { pid }),
                leaf,
            })),
            _ => None,
        }
    }
}
