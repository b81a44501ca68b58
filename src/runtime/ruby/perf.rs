//! Ruby frames in perf-event mode (`flare profile` without root), where
//! no BPF program reads them at the sample's moment: each sample's thread
//! has its control frames read from user space as soon as the sample
//! arrives (every sample of a run with runtime readers wakes the reader),
//! and put in place of the interpreter loop's activations of the native
//! stack where both agree ([`crate::runtime::ruby::walk`]). The thread's
//! execution context is found through its thread pointer, which glibc's
//! own thread list gives ([`crate::runtime::glibc_threads`]). The
//! processes found feed the same registry the namer reads, so naming,
//! caching and writers are as with BPF.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use super::walk::{at_sample, frames, over_root, splice, AtSample, Code, Threads};
use super::Ruby;
use crate::collect::{RawFrame, RuntimeFinds};
use crate::procmaps::Mappings;
use crate::runtime::glibc_threads;
use crate::runtime::memory::{Pages, ProcessMemory};
use crate::runtime::perf::{late_now, Finder, Leaf, PerfRuntime};
use crate::runtime::{note_unsupported, Finds};

/// Samples older than this when read keep their native frames: the
/// thread's frames now say little of what it ran then, and a backlog of
/// samples read at once would all get the same frames. On a machine as
/// fast as the one measured below; a slower one scales it
/// ([`crate::runtime::perf::late`]). Tighter than
/// Python's 5 ms: rbservice.rb's leaves run about a millisecond each
/// under Ruby 3.1, and most samples are read 0.1-0.5 ms after they were
/// taken (3,373 of 3,566 in one run beside a parallel build; 190 came
/// later than 1 ms, in bursts of a backlog).
const MAX_LAG_NS: u64 = 2_000_000;

/// The perf-event collector's Ruby side.
#[derive(Default)]
pub struct PerfRuby {
    finder: Finder<Ruby, Found>,
    glibc: glibc_threads::Finder,
    said: HashSet<String>,
}

/// A Ruby process found: its threads (`None`: glibc's thread tables could
/// not be read, so it is walked natively), and the code files back in it
/// as it was mapped then (any other is JIT code, which has no unwind
/// table). The finder finds the process again once it maps more.
struct Found {
    threads: Option<Threads>,
    files: Vec<Range<u64>>,
}

impl PerfRuntime for PerfRuby {
    fn finds(&self) -> Arc<dyn RuntimeFinds> {
        Arc::new(Finds::<Ruby>(self.finder.registry.clone()))
    }

    fn splice(
        &mut self,
        pid: u32,
        start: u64,
        tid: u32,
        time: u64,
        pcs: &[u64],
        leaf: Leaf,
        mappings: &Mappings,
    ) -> Option<Vec<RawFrame>> {
        let (glibc, said) = (&mut self.glibc, &mut self.said);
        let found = self.finder.get(pid, start, mappings, |process| {
            let threads = crate::unwind::procs::tracked_mappings(mappings, pid)
                .ok_or_else(|| "its mappings are gone".to_string())
                .and_then(|maps| glibc.find(pid, &maps));
            let threads = match threads {
                Ok(t) => Some(Threads::new(process, t)),
                Err(why) => {
                    note_unsupported::<Ruby>(
                        said,
                        format!(
                            "CRuby: its threads cannot be found in glibc's thread tables ({why})"
                        ),
                    );
                    None
                }
            };
            Found {
                threads,
                files: file_code(mappings, pid),
            }
        })?;
        let threads = found.threads.as_mut()?;
        // Late: not worth reading.
        if late_now(time, MAX_LAG_NS) {
            return None;
        }
        // Whole pages, each read once: a deep stack's frames in a few
        // system calls.
        let mem = Pages::new(ProcessMemory { pid });
        let mut stack = threads.stack(tid, &mem)?;
        let p = &threads.process;
        // A sample in the loop tells which frame ran: the thread ran on
        // while the sample came, for 0.1-0.5 ms. Frames it pushed since
        // are dropped. A frame it returned from leaves the frames as read,
        // as Python's are: the thread's within the lag bound. Dropping
        // those samples (native frames only) lost the short calls' only,
        // rbservice.rb's blocks and mix: a quarter of its samples, and
        // parse_request 2-4 points under its own clock on a busy host
        // (4.4 in one CI run); read as they are, within 1.5 points on
        // every version, busy or not.
        if pcs.first().is_some_and(|pc| p.exec.contains(pc)) {
            if let AtSample::From(then) = at_sample(p, stack, leaf.ruby_pc, leaf.ruby_cfp, &mem) {
                stack = then;
            }
        }
        let items = frames(p, stack, &mem);
        let files = &found.files;
        let jit = |pc: u64| !files.iter().any(|r| r.contains(&pc));
        let code = Code {
            exec: p.exec.clone(),
            caller: p.exec_caller.clone(),
            jit: &jit,
        };
        splice(pcs, &code, &items).or_else(|| over_root(pcs, &code, &items))
    }
}

/// The code of process `pid` with an unwind table as `mappings` has it
/// now: its files' and the vDSO's.
fn file_code(mappings: &Mappings, pid: u32) -> Vec<Range<u64>> {
    use crate::procmaps::Backing;
    mappings
        .space(pid, None)
        .map(|space| {
            space
                .mappings
                .iter()
                .filter(|m| match &m.backing {
                    Backing::File(_) => true,
                    Backing::Anon(name) => &**name == "[vdso]",
                })
                .map(|m| m.start..m.end)
                .collect()
        })
        .unwrap_or_default()
}
