//! Python frames: CPython 3.6–3.15 found in a process, its frames walked
//! in BPF (bpf/python.h) and named from the live process.
//!
//! The flow, as for every runtime (docs/ARCHITECTURE.md):
//! - [`detect`] finds the interpreter a process runs (a `python3.N`
//!   executable or a `libpython3.N` library, through the files the
//!   process maps), its version and the addresses BPF needs, and the
//!   [`layout`] of that version's structures;
//! - the unwinder's loader hands them to BPF (`py_procs`, one
//!   [`Process::bpf_bytes`] per process), whose walk puts (code object,
//!   instruction, cookie) frames where the eval loop ran them;
//! - [`namer`] turns those into function, file and line by reading the
//!   code objects in the live process ([`code`], through [`memory`]).

pub mod code;
pub mod debug_offsets;
pub mod detect;
pub mod layout;
pub mod machine_code;
pub mod namer;
pub mod perf;
#[cfg(test)]
mod tests;
pub mod walk;

use std::ops::Range;
use std::sync::Arc;

pub use layout::{FrameModel, Layout};

/// A Python process as BPF walks it and the namer reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    pub layout: Arc<Layout>,
    /// `_PyRuntime`'s address in the process.
    pub runtime: u64,
    /// `PyCode_Type`'s address: a frame's code object has it as type.
    pub code_type: u64,
    /// The eval loop (`_PyEval_EvalFrameDefault`) and its `.cold` part
    /// (empty when none), in the process's addresses.
    pub eval: [Range<u64>; 2],
    /// Where a thread's `PyThreadState *` lies, from its thread pointer
    /// (fs base): glibc's thread-specific slot of `autoTSSkey`.
    pub tstate_slot: u64,
}

/// The Python processes known, by process id: filled by the unwinder's
/// loader, read by the namer.
pub type Registry = crate::runtime::tracker::Registry<Process>;

/// The namers of a run whose Python processes are in `registry`.
pub fn namers(registry: &Registry) -> crate::collect::Namers {
    vec![(
        crate::collect::Runtime::Python,
        Box::new(namer::PythonNamer::new(registry.clone())),
    )]
}

/// CPython, as [`crate::runtime::ALL`] lists it.
pub struct Python;

impl crate::runtime::Runtime for Python {
    const KIND: crate::collect::Runtime = crate::collect::Runtime::Python;
    const NAME: &'static str = "CPython";
    const BPF_MAP: &'static str = "py_procs";
    const NATIVE: &'static str = "the interpreter's native frames";
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
        namers(registry)
    }

    /// Python frames are read when each sample arrives, whatever walks
    /// the native stack.
    fn perf(_walked: bool) -> Option<Box<dyn crate::runtime::perf::PerfRuntime>> {
        Some(Box::<perf::PerfPython>::default())
    }
}

/// The validity cookie of a code object, from fields BPF reads beside its
/// address (bpf/python.h computes the same): a code object freed and
/// another allocated at its address has a different cookie unless its
/// first line, argument count and flags are all the same.
pub fn cookie(argcount: u32, flags: u32, firstlineno: u32) -> u64 {
    (u64::from(firstlineno) << 32)
        | (u64::from(argcount & 0xff) << 24)
        | u64::from(flags & 0xff_ffff)
}

/// `cframe_current` in BPF when the thread state points at the frame.
const NO_CFRAME: u16 = 0xffff;

impl Process {
    /// The process as BPF reads it: `struct py_proc` (bpf/python.h).
    pub fn bpf_bytes(&self) -> [u8; 72] {
        let l = &self.layout;
        let mut b = [0u8; 72];
        let words = [
            self.eval[0].start,
            self.eval[0].end,
            self.eval[1].start,
            self.eval[1].end,
            self.code_type,
            self.tstate_slot,
        ];
        for (i, w) in words.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
        }
        let halves = [
            l.tstate_frame,
            l.cframe_current.unwrap_or(NO_CFRAME),
            l.frame_previous,
            l.frame_code,
            l.frame_instr,
            l.frame_entry,
            l.code_argcount,
            l.code_flags,
            l.code_firstlineno,
        ];
        for (i, h) in halves.iter().enumerate() {
            b[48 + i * 2..50 + i * 2].copy_from_slice(&h.to_ne_bytes());
        }
        b[66] = l.model.bpf_value();
        b[67] = l.owner_cstack;
        b
    }
}
