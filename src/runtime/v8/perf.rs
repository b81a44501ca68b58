//! JavaScript frames in perf-event mode: no BPF program reads them at the
//! sample, so a sample's user stack is walked here with the user-space
//! twin of bpf/v8.h's frame read ([`super::walk`]) offered each frame,
//! over the stack the kernel copied and the live heap. The Node.js
//! processes found feed the same registry the namer reads, so naming,
//! caching and writers are as with BPF.

use std::ops::Range;
use std::sync::Arc;

use super::{walk, Process, V8};
use crate::collect::stacks::frame_header;
use crate::collect::RuntimeFinds;
use crate::procmaps::Mappings;
use crate::runtime::memory::{Pages, ProcessMemory};
use crate::runtime::perf::{Finder, Leaf, PerfRuntime, Regs};
use crate::runtime::{Finds, Runtime};

/// The perf-event collector's V8 side.
#[derive(Default)]
pub struct PerfV8 {
    finder: Finder<V8, Found>,
}

/// A Node.js process found: it, and the code files back in it as it was
/// mapped then (any other code is V8's). Read once, not at each sample:
/// the finder finds the process again once it maps more.
struct Found {
    process: Arc<Process>,
    files: Vec<Range<u64>>,
}

/// Steps JavaScript frames of one sample: what [`PerfV8::stepper`] gives.
struct Stepper<'a> {
    process: &'a Process,
    /// The sample's reads, a page at a time.
    mem: Pages<ProcessMemory>,
    /// The process's code that files back: any other is V8's.
    files: &'a [Range<u64>],
    /// arm64's link register at the first frame (else 0).
    lr: u64,
}

impl crate::runtime::perf::Stepper for Stepper<'_> {
    fn step(
        &mut self,
        stack: &dyn Fn(u64) -> Option<u64>,
        regs: Regs,
        return_address: bool,
    ) -> Option<([u64; 4], Regs)> {
        let files = self.files;
        let jit = |pc: u64| !files.iter().any(|r| r.contains(&pc));
        let lr = if return_address { 0 } else { self.lr };
        let s = walk::step(
            self.process,
            &self.mem,
            stack,
            regs,
            return_address,
            lr,
            &jit,
        )?;
        let header = frame_header(V8::KIND.frame_type(), 3);
        Some(([header, s.ids[0], s.ids[1], s.cookie], s.caller))
    }
}

impl PerfRuntime for PerfV8 {
    fn finds(&self) -> Arc<dyn RuntimeFinds> {
        Arc::new(Finds::<V8>(self.finder.registry.clone()))
    }

    fn stepper(
        &mut self,
        pid: u32,
        start: u64,
        leaf: Leaf,
        mappings: &Mappings,
    ) -> Option<Box<dyn crate::runtime::perf::Stepper + '_>> {
        let found = self.finder.get(pid, start, mappings, |process| Found {
            process,
            files: file_code(mappings, pid),
        })?;
        Some(Box::new(Stepper {
            process: &found.process,
            mem: Pages::new(ProcessMemory { pid }),
            files: &found.files,
            lr: leaf.lr,
        }))
    }
}

/// The code of process `pid` that files back, as `mappings` has it now.
fn file_code(mappings: &Mappings, pid: u32) -> Vec<Range<u64>> {
    mappings
        .space(pid, None)
        .map(|space| {
            space
                .mappings
                .iter()
                .filter(|m| matches!(m.backing, crate::procmaps::Backing::File(_)))
                .map(|m| m.start..m.end)
                .collect()
        })
        .unwrap_or_default()
}
