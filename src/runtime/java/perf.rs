//! Java frames in perf-event mode: no BPF program walks the stack, so a
//! sample's user stack is walked here with the user-space twin of
//! bpf/java.h's step ([`crate::runtime::java::walk`]) offered each frame, over the
//! stack the kernel copied and the JVM's live code cache. The JVMs found
//! feed the same [`Registry`] the namer reads, so naming, caching and
//! writers are as with BPF.

use std::sync::Arc;

use crate::collect::RuntimeFinds;

use crate::collect::stacks::frame_header;
use crate::collect::Runtime;
use crate::procmaps::Mappings;
use crate::runtime::java::walk::{Leaf, Regs, Walker};
use crate::runtime::java::{Java, Process};
use crate::runtime::memory::{Pages, ProcessMemory};
use crate::runtime::perf::{Finder, PerfRuntime};
use crate::runtime::Finds;

/// The perf-event collector's Java side: the JVMs found, each with its
/// walker.
#[derive(Default)]
pub struct PerfJava {
    finder: Finder<Java, (Arc<Process>, Walker)>,
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

impl PerfRuntime for PerfJava {
    fn finds(&self) -> Arc<dyn RuntimeFinds> {
        Arc::new(Finds::<Java>(self.finder.registry.clone()))
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
        let (process, walker) = self
            .finder
            .get(pid, start, mappings, |p| (p, Walker::new()))?;
        Some(Box::new(Stepper {
            process,
            walker,
            mem: Pages::new(ProcessMemory { pid }),
            leaf,
        }))
    }
}
