//! A Node.js process as the walk and the namer read it: its V8's layout,
//! where its builtins run, its dispatch table, and the record BPF reads
//! of it (`struct v8_proc`, [`Process::bpf_bytes`]).

use std::ops::Range;
use std::sync::Arc;

use super::layout::{FrameSlots, FunctionCode, Layout};

/// Size of `struct v8_proc`.
pub const BPF_PROC_SIZE: usize = 104;

/// Ranges of the interpreter's code `struct v8_proc` holds.
pub const BPF_INTERP_RANGES: usize = super::symbols::MAX_INTERPRETER_RANGES;

/// `flags`: `off_start` is a field holding the address of the Code's
/// first instruction (V8 11.1.204 on), not where the instructions start.
pub const V8_START_IS_FIELD: u8 = 1;
/// `flags`: a JSFunction holds a dispatch handle at `off_code`, its Code
/// in the dispatch table (leaptiering, V8 13 on).
pub const V8_DISPATCH: u8 = 2;

/// Words BPF reads of a frame, from [`FIRST_WORD`] words below its frame
/// pointer: a frame slot is an index into them.
pub const FRAME_WORDS: i32 = 8;
pub const FIRST_WORD: i32 = 6;

/// A Node.js process, as the walk and the namer read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    pub layout: Arc<Layout>,
    /// Where the embedded builtins run: V8's copy of them beside its code
    /// when it made one (`--short-builtin-calls`, on by default where the
    /// heap may be large), else the binary's own.
    pub blob: Range<u64>,
    /// Every mapping of the builtins in the process: the binary's own,
    /// then V8's copy if any ([`Process::blob`] is one of them).
    pub blobs: Vec<Range<u64>>,
    /// The JS dispatch table (leaptiering): 0 where there is none, or
    /// where it could not be found (frames are then named by their
    /// function alone).
    pub dispatch: u64,
    /// The frame slots BPF reads, as indices ([`bpf_slots`]): marker,
    /// function, bytecode array, bytecode offset.
    pub slots: [u8; 4],
    /// The code that runs on an interpreted frame (the interpreter's
    /// trampolines and bytecode handlers), as offsets in the builtins
    /// (any copy of them); empty where the binary has no labels for it.
    /// A first frame's pc in another builtin is then the interpreter's
    /// only when called from there: code compiled on stack replacement
    /// keeps the interpreter's frame slots.
    pub interpreter: Vec<Range<u32>>,
    /// When the process started (`/proc/PID/stat` ticks; 0 unknown): with
    /// the pid, what tells it apart for what every collector's namer
    /// shares ([`crate::runtime::v8::namer`]'s line tables).
    pub started: u64,
}

/// `slots` as indices into the [`FRAME_WORDS`] words BPF reads from
/// [`FIRST_WORD`] words below the frame pointer (`FIRST_WORD + offset /
/// 8`: the function's -16 is 4); an error naming a slot outside them.
pub fn bpf_slots(slots: &FrameSlots) -> Result<[u8; 4], String> {
    let mut out = [0u8; 4];
    let named = [
        ("context/marker", slots.context),
        ("function", slots.function),
        ("bytecode array", slots.bytecode_array),
        ("bytecode offset", slots.bytecode_offset),
    ];
    for (o, (what, offset)) in out.iter_mut().zip(named) {
        let index = FIRST_WORD + offset / 8;
        if offset % 8 != 0 || !(0..FRAME_WORDS).contains(&index) {
            return Err(format!(
                "the frame's {what} slot at {offset} is outside the words the walk reads"
            ));
        }
        *o = index as u8;
    }
    Ok(out)
}

impl Process {
    /// The process as BPF reads it: `struct v8_proc` (natural alignment,
    /// the host's byte order):
    /// ```c
    /// struct v8_proc {
    ///     __u64 blob_low, blob_high, dispatch;
    ///     __u16 jsfunc_first, jsfunc_last, type_sfi, type_code;
    ///     __u16 type_bytecode, off_map, off_type, off_shared;
    ///     __u16 off_code, off_start, off_size, pad0;
    ///     __u8 slot_marker, slot_function, slot_bytecode_array,
    ///          slot_bytecode_offset, flags, pad1[3];
    ///     __u64 other_low, other_high;
    ///     __u32 interp[4 * 2];  /* low, high offsets in the builtins */
    /// };
    /// ```
    pub fn bpf_bytes(&self) -> [u8; BPF_PROC_SIZE] {
        let mut b = [0u8; BPF_PROC_SIZE];
        for (i, v) in [self.blob.start, self.blob.end, self.dispatch]
            .iter()
            .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_ne_bytes());
        }
        let l = &self.layout;
        let (off_code, dispatch) = match l.function_code {
            FunctionCode::Pointer(offset) => (offset, false),
            FunctionCode::DispatchHandle { offset } => (offset, true),
        };
        let halves = [
            *l.types.js_function.start(),
            *l.types.js_function.end(),
            l.types.shared_function_info,
            l.types.code,
            l.types.bytecode_array,
            l.heap_object_map,
            l.map_instance_type,
            l.function_shared,
            off_code,
            l.code.instruction_start,
            l.code.instruction_size,
        ];
        for (i, h) in halves.iter().enumerate() {
            b[24 + i * 2..26 + i * 2].copy_from_slice(&h.to_ne_bytes());
        }
        b[48..52].copy_from_slice(&self.slots);
        // Every layout flare reads has the address in a field: the
        // constants name `Code::instruction_start` an `Address` (V8 12.4,
        // 13.6, 14.6), and V8 11.3's fallback (+40) is one too (read in a
        // live Node 20: the first instruction's address, in the JIT
        // mapping or the builtins). Layouts without it are refused.
        let mut flags = V8_START_IS_FIELD;
        if dispatch {
            flags |= V8_DISPATCH;
        }
        b[52] = flags;
        let other = self.other_blob();
        b[56..64].copy_from_slice(&other.start.to_ne_bytes());
        b[64..72].copy_from_slice(&other.end.to_ne_bytes());
        for (i, r) in self.interpreter.iter().take(BPF_INTERP_RANGES).enumerate() {
            let at = 72 + i * 8;
            b[at..at + 4].copy_from_slice(&r.start.to_ne_bytes());
            b[at + 4..at + 8].copy_from_slice(&r.end.to_ne_bytes());
        }
        b
    }

    /// Whether `addr` lies in the interpreter's code of the copy of the
    /// builtins starting at `blob` (false where that code is not known).
    pub fn in_interpreter(&self, blob: u64, addr: u64) -> bool {
        addr.checked_sub(blob)
            .and_then(|off| u32::try_from(off).ok())
            .is_some_and(|off| self.interpreter.iter().any(|r| r.contains(&off)))
    }

    /// The mapping of the builtins other than [`Process::blob`] (empty
    /// when there is none): V8 runs some of them there too (Node 20's
    /// interpreter the binary's own, its baseline code's calls the copy).
    pub fn other_blob(&self) -> std::ops::Range<u64> {
        self.blobs
            .iter()
            .find(|b| **b != self.blob)
            .cloned()
            .unwrap_or(0..0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_slots_index_the_words_bpf_reads() {
        let slots = FrameSlots {
            context: -8,
            function: -16,
            bytecode_array: -32,
            bytecode_offset: -40,
        };
        assert_eq!(bpf_slots(&slots), Ok([5, 4, 2, 1]));
        let far = FrameSlots {
            bytecode_offset: -56,
            ..slots
        };
        let why = bpf_slots(&far).unwrap_err();
        assert!(why.contains("bytecode offset slot at -56"), "{why}");
        let above = FrameSlots {
            context: 16,
            ..slots
        };
        assert!(bpf_slots(&above).is_err());
    }
}
