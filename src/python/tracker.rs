//! Keeps BPF's `py_procs` (bpf/python.h) in step with the Python
//! processes the unwinder loads, and the [`Registry`] the namer reads.
//!
//! The unwinder's loader hands over each process it loads (its executable
//! mappings); [`Tracker::load`] finds CPython in it. A CPython whose
//! interpreter is not set up yet (a process just started) is tried again
//! every [`RETRY_GAP`] for as long as it lives, so that `flare -- python3
//! app.py` gets Python frames from the first samples after start-up. A
//! version flare cannot walk is said once on stderr and walked natively.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::detect::{Detected, Detector};
use super::memory::ProcessMemory;
use super::Registry;
use crate::unwind::procs::ExecMapping;

/// How often a CPython not set up yet is looked at again.
pub const RETRY_GAP: Duration = Duration::from_millis(100);

/// A process that maps CPython whose interpreter was not ready.
struct Pending {
    maps: Vec<ExecMapping>,
    at: Instant,
}

/// The loader's Python side.
pub struct Tracker {
    map: MapHandle,
    registry: Registry,
    detector: Detector,
    pending: HashMap<u32, Pending>,
    said: HashSet<String>,
}

impl Tracker {
    pub fn new(map: MapHandle, registry: Registry) -> Tracker {
        Tracker {
            map,
            registry,
            detector: Detector::new(),
            pending: HashMap::new(),
            said: HashSet::new(),
        }
    }

    /// Looks for CPython in process `pid`, mapping `maps`.
    pub fn load(&mut self, pid: u32, maps: &[ExecMapping]) {
        match self.detector.detect(pid, maps, &ProcessMemory { pid }) {
            Detected::Python(p) => {
                self.pending.remove(&pid);
                let ok = self
                    .map
                    .update(&pid.to_ne_bytes(), &p.bpf_bytes(), MapFlags::ANY)
                    .is_ok();
                if ok {
                    if let Ok(mut r) = self.registry.lock() {
                        r.insert(pid, Arc::new(p));
                    }
                }
            }
            Detected::NotReady => {
                self.pending.insert(
                    pid,
                    Pending {
                        maps: maps.to_vec(),
                        at: Instant::now(),
                    },
                );
            }
            Detected::Unsupported(why) => {
                super::note_unsupported(&mut self.said, why);
                self.forget(pid);
            }
            Detected::NotPython => self.forget(pid),
        }
    }

    /// Looks again at the processes whose CPython was not ready.
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
        let known = self.registry.lock().map(|mut r| r.remove(&pid).is_some());
        if known.unwrap_or(true) {
            let _ = self.map.delete(&pid.to_ne_bytes());
        }
    }
}
