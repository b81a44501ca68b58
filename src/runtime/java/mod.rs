//! Java frames: HotSpot JVMs found in a process, their frames walked in
//! BPF (bpf/java.h) and named from the live process.
//!
//! The flow, as for Python (docs/ARCHITECTURE.md):
//! - [`detect`] finds a mapped `libjvm.so`, reads its Serviceability
//!   Agent tables ([`vmstructs`]) for the [`layout`] of its structures
//!   and the code heaps BPF looks code blobs up in;
//! - the unwinder's loader hands them to BPF (`java_procs`, one
//!   [`Process::bpf_bytes`] per process), whose walk puts a frame for each
//!   interpreted, compiled, native-wrapper or stub frame it steps through
//!   (what [`FrameId`] decodes);
//! - the namer turns those into class, method, file and line by reading
//!   the JVM's metadata in the live process, expanding what the JIT
//!   inlined.

pub mod arm64;
pub mod detect;
pub mod layout;
pub mod method;
pub mod namer;
pub mod perf;
pub mod scopes;
pub mod vmstructs;
pub mod walk;

use std::ops::Range;
use std::sync::Arc;

pub use layout::Layout;

/// Code heaps BPF looks in at most (a JVM has 1 or 3).
pub const MAX_HEAPS: usize = 4;

/// Bytes of a code blob's header (an nmethod's included) read at once,
/// by BPF (bpf/java.h JAVA_BLOB_READ), the user-space step and the namer:
/// every member of it flare reads lies in them ([`layout`] checks).
pub const BLOB_HEADER: usize = 336;

/// A code heap: where its blocks lie and its segment map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Heap {
    pub range: Range<u64>,
    pub segmap: u64,
    pub log2_segment: u8,
}

/// A JVM process as BPF walks it and the namer reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    pub layout: Arc<Layout>,
    pub heaps: Vec<Heap>,
    /// The code cache: every heap lies in it.
    pub cache: Range<u64>,
}

/// The JVM processes known, by process id: filled by the unwinder's
/// loader, read by the namer.
pub type Registry = crate::runtime::tracker::Registry<Process>;

/// HotSpot, as [`crate::runtime::ALL`] lists it.
pub struct Java;

impl crate::runtime::Runtime for Java {
    const KIND: crate::collect::Runtime = crate::collect::Runtime::Java;
    const NAME: &'static str = "HotSpot";
    const BPF_MAP: &'static str = "java_procs";
    const NATIVE: &'static str = "Java code as unnamed JIT frames";
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
        namer::namers(registry)
    }

    /// Java frames are stepped in the walk of the copied stack, which
    /// frame pointers alone do not do.
    fn perf(walked: bool) -> Option<Box<dyn crate::runtime::perf::PerfRuntime>> {
        walked
            .then(|| Box::<perf::PerfJava>::default() as Box<dyn crate::runtime::perf::PerfRuntime>)
    }
}

/// What kind of frame BPF met (the top byte of a frame's second
/// identifier; bpf/java.h JAVA_KIND_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Interpreted: a `Method*` and a bytecode index.
    Interpreted,
    /// JIT-compiled: an `nmethod*` and a pc offset in its code.
    Compiled,
    /// The wrapper of a native method: an `nmethod*` and a pc offset.
    Native,
    /// Any other code blob (stubs, adapters): the blob and a pc offset.
    Stub,
}

/// A Java frame's identifiers as BPF wrote them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameId {
    pub kind: Kind,
    /// `Method*` (interpreted) or the code blob (the others).
    pub pointer: u64,
    /// Bytecode index (0xffff: unknown) or pc offset from the code start.
    pub offset: u32,
    /// The pc is a return address (a call's), not the sampled one.
    pub return_address: bool,
}

/// No bytecode index could be read.
pub const NO_BCI: u32 = 0xffff;

impl FrameId {
    /// Decodes a frame's identifiers (`ids` of a runtime frame).
    pub fn decode(ids: [u64; 2]) -> Option<FrameId> {
        let kind = match ids[1] >> 56 {
            1 => Kind::Interpreted,
            2 => Kind::Compiled,
            3 => Kind::Native,
            4 => Kind::Stub,
            _ => return None,
        };
        Some(FrameId {
            kind,
            pointer: ids[0],
            offset: ids[1] as u32,
            return_address: ids[1] >> 55 & 1 == 1,
        })
    }

    /// The identifiers BPF writes for this frame.
    pub fn encode(&self) -> [u64; 2] {
        let kind: u64 = match self.kind {
            Kind::Interpreted => 1,
            Kind::Compiled => 2,
            Kind::Native => 3,
            Kind::Stub => 4,
        };
        [
            self.pointer,
            kind << 56 | u64::from(self.return_address) << 55 | u64::from(self.offset),
        ]
    }
}

/// Size of `struct java_proc` (bpf/java.h).
pub const BPF_PROC_SIZE: usize = 144;

impl Process {
    /// The process as BPF reads it: `struct java_proc` (bpf/java.h).
    pub fn bpf_bytes(&self) -> [u8; BPF_PROC_SIZE] {
        let mut b = [0u8; BPF_PROC_SIZE];
        let mut put = |at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        for (i, h) in self.heaps.iter().take(MAX_HEAPS).enumerate() {
            put(i * 8, h.range.start);
            put(32 + i * 8, h.range.end);
            put(64 + i * 8, h.segmap);
        }
        put(96, self.cache.start);
        put(104, self.cache.end);
        let l = &self.layout;
        let halves = [
            l.blob_name,
            l.blob_code_begin,
            l.blob_frame_size,
            l.blob_frame_complete,
            l.nm_compile_id,
            l.nm_orig_pc,
            l.nm_deopt,
            l.method_const,
            l.const_size,
            l.const_code_size,
            l.heap_block,
        ];
        for (i, h) in halves.iter().enumerate() {
            b[112 + i * 2..114 + i * 2].copy_from_slice(&h.to_ne_bytes());
        }
        for (i, h) in self.heaps.iter().take(MAX_HEAPS).enumerate() {
            b[136 + i] = h.log2_segment;
        }
        b[140] = l.interp_sender_sp as u8;
        b[141] = l.interp_method as u8;
        b[142] = l.interp_bcp as u8;
        b[143] = u8::from(l.blob_offsets);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_ids_round_trip() {
        for kind in [Kind::Interpreted, Kind::Compiled, Kind::Native, Kind::Stub] {
            for return_address in [false, true] {
                let f = FrameId {
                    kind,
                    pointer: 0x7f00_1234_5678,
                    offset: 0x1_2345,
                    return_address,
                };
                assert_eq!(FrameId::decode(f.encode()), Some(f));
            }
        }
        assert_eq!(FrameId::decode([1, 9 << 56]), None);
    }

    /// What BPF reads of a blob and the proc flag are the C header's.
    #[test]
    fn the_blob_header_and_flags_match_bpf_java_h() {
        let c = include_str!("../../../bpf/java.h");
        let define = |name: &str| -> usize {
            c.lines()
                .find_map(|l| l.strip_prefix(&format!("#define {name}")))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or_else(|| panic!("{name} not in java.h"))
        };
        assert_eq!(define("JAVA_BLOB_READ"), BLOB_HEADER);
        assert_eq!(define("JAVA_MAX_HEAPS"), MAX_HEAPS);
        let mut l = Layout {
            blob_offsets: true,
            ..Layout::default()
        };
        let p = Process {
            layout: Arc::new(l.clone()),
            heaps: Vec::new(),
            cache: 0..0,
        };
        assert_eq!(p.bpf_bytes()[143] as usize, define("JAVA_BLOB_OFFSETS"));
        l.blob_offsets = false;
        let p = Process {
            layout: Arc::new(l),
            ..p
        };
        assert_eq!(p.bpf_bytes()[143], 0);
    }
}
