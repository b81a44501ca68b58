//! Language runtimes whose frames flare reads: each one folder behind
//! [`Runtime`], and [`ALL`] the one list the rest of flare iterates.
//!
//! A runtime's folder holds its detection (is this process running it,
//! where are its structures), the per-process data its BPF walk reads
//! (`bpf/<name>.h`), its user-space walk for perf-event mode and its
//! namer. What they share lives here: [`tracker`] (a runtime's BPF map and
//! registry kept in step with the processes the unwinder loads),
//! [`memory`] (reading a live process) and [`perf`] (perf-event mode's
//! side of a runtime). The unwinder knows none of them: it tells the
//! trackers of processes through [`crate::unwind::Watcher`], and the
//! runtimes name their frames through [`crate::collect::RuntimeFinds`].
//! A new runtime is a folder, a line in [`ALL`], a frame type
//! ([`crate::collect::Runtime`]) and its BPF walk.

pub mod glibc_threads;
pub mod java;
pub mod memory;
pub mod perf;
pub mod python;
pub mod ruby;
pub mod tracker;
pub mod v8;

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use libbpf_rs::MapHandle;

use crate::collect::{Namers, Runtime as Kind, RuntimeFinds, Runtimes};
use crate::unwind::procs::ExecMapping;
use crate::unwind::RuntimeHooks;

use self::memory::Memory;
use self::tracker::{Found, Registry, Tracker};

/// One runtime, as the unwinder's loader and perf-event mode use it.
pub trait Runtime: 'static {
    /// The frame type its frames carry, and its name in notes.
    const KIND: Kind;
    /// Its name in notes ("CPython", "HotSpot").
    const NAME: &'static str;
    /// The BPF map of its processes (`py_procs`), found by name.
    const BPF_MAP: &'static str;
    /// What the walk and the namer know of one of its processes.
    type Process: Send + Sync + 'static;
    /// Finds it in processes, keeping what it learnt of the files.
    type Detector: Default + Send + 'static;

    /// What process `pid`, mapping `maps`, runs as far as this runtime
    /// goes.
    fn detect(
        detector: &mut Self::Detector,
        pid: u32,
        maps: &[ExecMapping],
        mem: &dyn Memory,
    ) -> Found<Self::Process>;

    /// The process as its BPF map holds it.
    fn bpf_bytes(p: &Self::Process) -> Vec<u8>;

    /// The namers of the frames of the processes in `registry`.
    fn namers(registry: &Registry<Self::Process>) -> Namers;

    /// What a user sees instead of its frames when it is walked natively.
    const NATIVE: &'static str;

    /// Its side of perf-event mode (no BPF), for a run walking user
    /// stacks with `walked` (not frame pointers only), if it has one
    /// there.
    fn perf(walked: bool) -> Option<Box<dyn perf::PerfRuntime>>;
}

/// Says once per run and reason (`said`) that a process of runtime `R` is
/// walked natively, and why.
pub fn note_unsupported<R: Runtime>(said: &mut HashSet<String>, why: String) {
    if said.insert(why.clone()) {
        crate::notes::note(format!(
            "WARNING: {why}; its processes' stacks show {}.",
            R::NATIVE
        ));
    }
}

/// A runtime of [`ALL`], as a list can hold it.
pub struct Entry {
    pub kind: Kind,
    /// Its BPF map of processes.
    pub bpf_map: &'static str,
    /// Adds its tracker over that map, and what names its frames.
    pub bpf: fn(MapHandle, &mut RuntimeHooks),
    /// Its side of perf-event mode.
    pub perf: fn(walked: bool) -> Option<Box<dyn perf::PerfRuntime>>,
}

impl Entry {
    const fn of<R: Runtime>() -> Entry {
        Entry {
            kind: R::KIND,
            bpf_map: R::BPF_MAP,
            bpf: bpf_side::<R>,
            perf: R::perf,
        }
    }
}

fn bpf_side<R: Runtime>(map: MapHandle, hooks: &mut RuntimeHooks) {
    let registry: Registry<R::Process> = Registry::default();
    hooks
        .watchers
        .push(Box::new(Tracker::<R>::new(map, registry.clone())));
    hooks.finds.push(Arc::new(Finds::<R>(registry)));
}

/// Every runtime flare reads.
pub const ALL: &[Entry] = &[
    Entry::of::<python::Python>(),
    Entry::of::<java::Java>(),
    Entry::of::<v8::V8>(),
    Entry::of::<ruby::Ruby>(),
];

/// The processes runtime `R` found, as the symbolizer asks for them.
pub struct Finds<R: Runtime>(pub Registry<R::Process>);

impl<R: Runtime> RuntimeFinds for Finds<R> {
    fn namers(&self) -> Namers {
        R::namers(&self.0)
    }

    fn any_process(&self) -> bool {
        tracker::any_process(&self.0)
    }
}

/// The runtimes' side of a BPF tool's unwinder: a tracker for each
/// runtime on in `runtimes` (its map found by `map`, by name), and what
/// names their frames.
pub fn bpf_sides(
    runtimes: Runtimes,
    mut map: impl FnMut(&str) -> Option<MapHandle>,
) -> RuntimeHooks {
    let mut hooks = RuntimeHooks::default();
    for entry in ALL.iter().filter(|e| runtimes.on(e.kind)) {
        if let Some(handle) = map(entry.bpf_map) {
            (entry.bpf)(handle, &mut hooks);
        }
    }
    hooks
}

/// The BPF maps of every runtime, by name: with frame pointers only, each
/// is sized to one entry so that it costs nothing.
pub fn bpf_maps() -> impl Iterator<Item = &'static str> {
    ALL.iter().map(|e| e.bpf_map)
}

/// Opens the file mapped at `m` in process `pid` as the unwinder's loader
/// finds it (the run's descriptor, `map_files`, the process's root), but
/// never leaving the process's root for the host's and only a regular
/// file, without blocking.
pub fn open_mapped(pid: u32, m: &ExecMapping) -> Option<File> {
    let root = format!("/proc/{pid}/root");
    m.open_paths(pid).into_iter().find_map(|p| {
        let file = match p.strip_prefix(&root) {
            // The path as the process sees it, resolved in its root.
            Ok(inside) => {
                let inside = Path::new("/").join(inside);
                crate::untrusted::open(&inside, crate::untrusted::Resolve::InRoot(Path::new(&root)))
                    .ok()?
                    .0
            }
            // A descriptor's or a mapping's magic link: the very file.
            Err(_) => std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
                .open(&p)
                .ok()?,
        };
        file.metadata().ok()?.is_file().then_some(file)
    })
}
