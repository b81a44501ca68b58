//! Node.js's JavaScript frames: V8 read from outside the process, with no
//! flag (no `--perf-basic-prof`, no inspector), as official Node.js 20,
//! 22, 24 and 26 builds run (x86-64 and arm64).
//!
//! Every official node binary carries V8's postmortem constants
//! (`v8dbg_*`: field offsets, instance types, frame types) and its
//! version among its symbols. The flow: [`symbols`] reads them of the
//! file; [`layout`] turns them into the [`layout::Layout`] a walk and a
//! namer read that V8 with (`constants` reads them, a constant a V8
//! lacks taken only from a fallback checked on that V8, else the layout
//! refused; [`source`] where positions are kept); [`heap`] reads a live
//! process's heap objects with it: a function's shared function info,
//! name, script, lines and code. [`detect`] finds V8 in a process: its
//! binary, where its builtins run and (leaptiering) its dispatch table,
//! which [`machine_code`] finds in V8's own code; the [`Process`] it
//! gives is what BPF reads ([`Process::bpf_bytes`]) and what [`namer`]
//! names frames with; BPF reads JavaScript frames at the frame pointer
//! (bpf/v8.h). [`inlining`] reads what optimized code inlined, so the
//! namer gives each inlined function a frame.

mod constants;
pub mod detect;
pub mod heap;
pub mod inlining;
pub mod layout;
mod lines;
pub mod machine_code;
pub mod namer;
pub mod perf;
pub mod process;
pub mod source;
pub mod symbols;
mod units;
pub mod walk;

pub use process::Process;

/// The Node.js processes known, by process id: filled by the unwinder's
/// loader, read by the namer.
pub type Registry = crate::runtime::tracker::Registry<Process>;

/// V8, as [`crate::runtime::ALL`] lists it.
pub struct V8;

impl crate::runtime::Runtime for V8 {
    const KIND: crate::collect::Runtime = crate::collect::Runtime::V8;
    const NAME: &'static str = "V8";
    const BPF_MAP: &'static str = "v8_procs";
    const NATIVE: &'static str = "V8's native frames";
    type Process = Process;
    type Detector = detect::Detector;

    fn detect(
        detector: &mut detect::Detector,
        pid: u32,
        maps: &[crate::unwind::procs::ExecMapping],
        mem: &dyn crate::runtime::memory::Memory,
    ) -> detect::Detected {
        detector.detect(pid, maps, mem)
    }

    fn bpf_bytes(p: &Process) -> Vec<u8> {
        p.bpf_bytes().to_vec()
    }

    fn namers(registry: &Registry) -> crate::collect::Namers {
        namer::namers(registry, Self::KIND)
    }

    /// JavaScript frames are stepped in the walk of a sample's stack
    /// (by the frame pointer, as V8 keeps it: whatever walks the native
    /// frames).
    fn perf(_walked: bool) -> Option<Box<dyn crate::runtime::perf::PerfRuntime>> {
        Some(Box::<perf::PerfV8>::default())
    }
}

#[cfg(test)]
mod live_tests;
