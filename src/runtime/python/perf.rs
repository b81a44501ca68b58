//! Python frames in perf-event mode, where no BPF program reads them at
//! the sample's moment: each sample's thread has its Python frames read
//! from user space as soon as the sample arrives (every sample of a run
//! with Python frames wakes the reader), and put in place of the native
//! stack's eval-loop frames when both agree ([`crate::runtime::python::walk`]).
//! The processes found feed the same [`Registry`] the namer reads, so
//! naming, caching and writers are as with BPF.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::collect::RawFrame;
use crate::collect::RuntimeFinds;
use crate::procmaps::Mappings;
use crate::runtime::memory::{Pages, ProcessMemory};
use crate::runtime::perf::{late_now, Entry, Leaf, NoRuntime, PerfRuntime, Procs};
use crate::runtime::python::detect::Detector;
use crate::runtime::python::walk::{over_root, splice, Threads};
use crate::runtime::python::Python;
use crate::runtime::python::Registry;
use crate::runtime::tracker::Found;
use crate::runtime::{note_unsupported, Finds};

/// Samples older than this when read keep their native frames: the
/// thread's frames now say little of what it ran then, and a backlog of
/// samples read at once would all get the same frames. On a machine as
/// fast as the one measured; a slower one scales it
/// ([`crate::runtime::perf::late`]).
const MAX_LAG_NS: u64 = 5_000_000;

/// How long a CPython whose threads cannot be told apart is tried again.
const GIVE_UP: Duration = Duration::from_secs(5);

/// The perf-event collector's Python side.
#[derive(Default)]
pub struct PerfPython {
    registry: Registry,
    detector: Detector,
    /// By (process id, start).
    procs: Procs<Threads>,
    said: HashSet<String>,
    /// What detection spent on processes not ready yet.
    spent: crate::runtime::tracker::Spent,
}

impl PerfPython {
    /// Looks for CPython in process `pid`.
    fn look(&mut self, pid: u32, start: u64, mappings: &Mappings) {
        let Some(maps) = crate::unwind::procs::tracked_mappings(mappings, pid) else {
            self.procs.insert((pid, start), Entry::Native);
            return;
        };
        let mem = ProcessMemory { pid };
        let retry_until = |procs: &Procs<Threads>| match procs.get(&(pid, start)) {
            Some(Entry::Retry { until, .. }) => *until,
            _ => None,
        };
        let started = Instant::now();
        let detected = self.detector.detect(pid, &maps, &mem);
        let took = started.elapsed();
        let entry = match detected {
            Found::Yes(p) => {
                let p = Arc::new(p);
                let tids = crate::system::threads(pid).unwrap_or_default();
                match Threads::new(p.clone(), pid, &tids, &mem) {
                    Some(t) => {
                        if let Ok(mut r) = self.registry.lock() {
                            r.insert(pid, p);
                        }
                        Entry::Found(t)
                    }
                    None => {
                        let until =
                            retry_until(&self.procs).unwrap_or_else(|| Instant::now() + GIVE_UP);
                        if until <= Instant::now() {
                            self.say("CPython: its threads' ids could not be found in glibc's thread structures".into());
                            Entry::Native
                        } else {
                            Entry::Retry {
                                at: Instant::now(),
                                until: Some(until),
                            }
                        }
                    }
                }
            }
            Found::NotReady => match self.spent.over_budget(pid, took, "CPython") {
                Some(why) => {
                    self.say(why);
                    Entry::Native
                }
                None => Entry::retry(),
            },
            Found::Unsupported(why) => {
                self.say(why);
                Entry::Native
            }
            Found::No => Entry::NotYet(NoRuntime::new(maps.len())),
        };
        if !matches!(entry, Entry::Retry { .. }) {
            self.spent.forget(pid);
        }
        self.procs.insert((pid, start), entry);
    }

    fn say(&mut self, why: String) {
        note_unsupported::<Python>(&mut self.said, why);
    }
}

impl PerfRuntime for PerfPython {
    fn finds(&self) -> Arc<dyn RuntimeFinds> {
        Arc::new(Finds::<Python>(self.registry.clone()))
    }

    fn splice(
        &mut self,
        pid: u32,
        start: u64,
        tid: u32,
        time: u64,
        pcs: &[u64],
        _leaf: Leaf,
        mappings: &Mappings,
    ) -> Option<Vec<RawFrame>> {
        if Entry::due(self.procs.get_mut(&(pid, start)), pid, mappings) {
            self.look(pid, start, mappings);
        }
        let Some(Entry::Found(threads)) = self.procs.get_mut(&(pid, start)) else {
            return None;
        };
        // Late: not worth reading.
        if late_now(time, MAX_LAG_NS) {
            return None;
        }
        // Whole pages, each read once: a deep stack's frames in a few
        // system calls, not thousands (the reader keeps up with samples).
        let mem = Pages::new(ProcessMemory { pid });
        // Stacks that disagree (the thread entered or left an eval call
        // before its frames were read: in call-heavy code such as pylint's
        // half the samples) get the Python frames read over the sample's
        // native root.
        let calls = threads.eval_calls(tid, &mem)?;
        let eval = &threads.process.eval;
        splice(pcs, eval, &calls, false).or_else(|| over_root(pcs, eval, &calls))
    }
}
