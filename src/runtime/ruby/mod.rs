//! Ruby frames: CRuby 3.1, 3.3 and 3.4 read from outside the process,
//! with no flag on it, interpreted and (3.1) with YJIT.
//!
//! The flow, as for every runtime (docs/ARCHITECTURE.md):
//! - [`detect`] finds the interpreter a process runs (a `libruby` library
//!   or a `ruby` executable holding `ruby_version`), its version and so
//!   its [`layout`], where the current thread's execution context lies in
//!   its thread-local storage ([`Tls`]) and the code of the interpreter's
//!   loop (`vm_exec_core`), whose activations Ruby frames replace;
//! - the unwinder's loader hands them to BPF (`rb_procs`, one
//!   [`Process::bpf_bytes`] per process), whose walk (bpf/ruby.h) puts
//!   (instruction sequence, method entry and instruction, cookie) frames
//!   where each activation of the loop ran them;
//! - [`namer`] turns those into method, file and line by reading the
//!   instruction sequences and method entries in the live process.
//!
//! In perf-event mode (no BPF: `flare profile` without root), [`perf`]
//! reads the same frames from user space right after each sample
//! ([`walk`], the thread found through glibc's thread list) and puts them
//! in the native stack as BPF would.
//!
//! Ruby keeps no introspection data and Debian strips its libraries:
//! layouts come from per-version tables, checked on the live process
//! (bpf/ruby.h checks each execution context and frame before it trusts
//! it; the namer checks each object's type).

pub mod detect;
pub mod layout;
pub mod namer;
pub mod perf;
pub mod walk;

use std::ops::Range;
use std::sync::Arc;

pub use layout::Layout;

/// Most candidate places of the execution context BPF tries.
pub const MAX_SLOTS: usize = 4;

/// Where a thread's `rb_execution_context_t *` (`ruby_current_ec`) lies
/// in its thread-local storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls {
    /// libruby's TLS module id (x86-64: BPF reads the block from the
    /// thread's DTV, `*(*(tp + 8) + 16 * modid)`), or 0 when `slots` are
    /// offsets from the thread pointer itself (arm64's TLS descriptors).
    pub modid: u64,
    /// Candidate offsets of the pointer in that block (or from the thread
    /// pointer), at most [`MAX_SLOTS`]: the one whose value checks out as
    /// an execution context is taken (a stripped libruby names none).
    pub slots: Vec<i64>,
}

/// A Ruby process as BPF walks it and the namer reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    pub layout: Arc<Layout>,
    /// `ruby_version` as the process holds it ("3.3.8").
    pub version: String,
    /// The interpreter's loop, `vm_exec_core`, in the process's
    /// addresses: each of its activations on a native stack ran Ruby
    /// frames.
    pub exec: Range<u64>,
    /// The loop's caller (`rb_vm_exec`), where the library names it
    /// (3.1), else empty: met on a stack without the loop's activation
    /// above it, it is entering one, whose first frame is already pushed.
    pub exec_caller: Range<u64>,
    pub tls: Tls,
    /// `ruby_global_symbols` in the process, which names C functions'
    /// method ids; `None` when it was not found.
    pub global_symbols: Option<u64>,
    /// Where `rb_cObject` (the `Object` class) lies in the process, which
    /// 3.1's class names are found through; `None` when not exported.
    pub object_class: Option<u64>,
}

/// The Ruby processes known, by process id: filled by the unwinder's
/// loader, read by the namer.
pub type Registry = crate::runtime::tracker::Registry<Process>;

/// Bytes of `struct rb_proc` (bpf/ruby.h).
pub const BPF_PROC_SIZE: usize = 80;

impl Process {
    /// The process as BPF reads it: `struct rb_proc` (bpf/ruby.h).
    pub fn bpf_bytes(&self) -> [u8; BPF_PROC_SIZE] {
        let mut b = [0u8; BPF_PROC_SIZE];
        let mut slots = [0i64; MAX_SLOTS];
        for (s, v) in slots.iter_mut().zip(&self.tls.slots) {
            *s = *v;
        }
        let words = [
            self.exec.start,
            self.exec.end,
            slots[0] as u64,
            slots[1] as u64,
            slots[2] as u64,
            slots[3] as u64,
            self.tls.modid,
            self.exec_caller.start,
            self.exec_caller.end,
        ];
        for (i, w) in words.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
        }
        b[72..74].copy_from_slice(&self.layout.cfp_size.to_ne_bytes());
        b[74] = self.tls.slots.len().min(MAX_SLOTS) as u8;
        b
    }
}

/// CRuby, as [`crate::runtime::ALL`] lists it.
pub struct Ruby;

impl crate::runtime::Runtime for Ruby {
    const KIND: crate::collect::Runtime = crate::collect::Runtime::Ruby;
    const NAME: &'static str = "CRuby";
    const BPF_MAP: &'static str = "rb_procs";
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
        vec![(
            crate::collect::Runtime::Ruby,
            Box::new(namer::RubyNamer::new(registry.clone())),
        )]
    }

    /// Ruby frames are read when each sample arrives, whatever walks the
    /// native stack (the frame pointers' callchain, or the copied stack).
    fn perf(_walked: bool) -> Option<Box<dyn crate::runtime::perf::PerfRuntime>> {
        Some(Box::<perf::PerfRuby>::default())
    }
}

/// The BPF frame's identifiers: `ids[0]` the instruction sequence
/// (`rb_iseq_t *`, 0 for a C function's frame), `ids[1]` the method entry
/// (`rb_callable_method_entry_t *`, 0 when none was found) in its low 48
/// bits and the instruction's index (the frame's pc, less one, in words
/// from the start of the sequence's code; 0xffff at or past it) in its top
/// 16. The cookie is the sequence's code address (`iseq_encoded`) for a
/// Ruby frame, the method's definition (`def`) for a C function's.
pub fn split_ids(ids: [u64; 2]) -> (u64, u64, u32) {
    (ids[0], ids[1] & ((1 << 48) - 1), (ids[1] >> 48) as u32)
}
