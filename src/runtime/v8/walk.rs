//! The user-space twin of bpf/v8.h's frame read, for perf-event mode
//! (no BPF, so no root needed): over the stack the kernel copied with the
//! sample and the live process's heap, a frame whose pc is in V8's
//! builtins or in code no file backs (V8's JIT code) is read at its frame
//! pointer, and a JavaScript frame gives the same identifiers BPF writes
//! (so one namer names both). The caller is found by the frame pointer,
//! as V8 keeps it in every frame of its own.

use std::ops::Range;

use super::heap::Heap;
use super::namer::{FrameId, Kind};
use super::process::{FIRST_WORD, FRAME_WORDS};
use super::Process;
use crate::runtime::memory::Memory;
use crate::runtime::perf::Regs;

/// User addresses' bits: arm64 keeps a return address's
/// pointer-authentication code above them (as bpf/unwind.h masks).
#[cfg(target_arch = "aarch64")]
const ADDR_MASK: u64 = 0x0000_ffff_ffff_ffff;
#[cfg(not(target_arch = "aarch64"))]
const ADDR_MASK: u64 = !0;

/// The words at the top of the stack tried as the return address of a
/// frameless builtin's call (as bpf/v8.h's V8_LEAF_WORDS).
const LEAF_WORDS: u64 = 3;

/// A JavaScript frame read: its identifiers and cookie as BPF gives them,
/// and its caller's registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub ids: [u64; 2],
    pub cookie: u64,
    pub caller: Regs,
}

/// Reads the frame at `regs` of a process running V8 (`process`, its
/// memory `mem`; `stack` reads the sample's copy of the stack first),
/// when its pc is in the builtins or in `jit` code (a pc no file backs):
/// `None` for any other frame, which the native walk steps. `lr` is
/// arm64's link register at the first frame (else 0).
pub fn step(
    process: &Process,
    mem: &dyn Memory,
    stack: &dyn Fn(u64) -> Option<u64>,
    regs: Regs,
    return_address: bool,
    lr: u64,
    jit: &dyn Fn(u64) -> bool,
) -> Option<Step> {
    let Regs { pc, bp, .. } = regs;
    // The copy of the builtins holding the pc.
    let blob = process
        .blobs
        .iter()
        .find(|r| r.contains(&pc))
        .map(|r| r.start);
    let in_builtins = blob.is_some();
    if bp == 0 || !(in_builtins || jit(pc)) {
        return None;
    }
    let word = |addr: u64| stack(addr).or_else(|| mem.read_u64(addr).ok());
    let base = bp.checked_sub(FIRST_WORD as u64 * 8)?;
    let slot = |i: u8| -> Option<u64> {
        (i32::from(i) < FRAME_WORDS)
            .then(|| word(base + u64::from(i) * 8))
            .flatten()
    };
    let [marker, function, bytecode_array, bytecode_offset] = process.slots;
    // A typed frame's marker is an even small integer: not JavaScript.
    if slot(marker)? & 1 == 0 {
        return None;
    }
    let function = slot(function)?;
    let heap = Heap::new(&process.layout, mem);
    let sfi = heap.shared(function)?;
    let caller = Regs {
        pc: word(bp.checked_add(8)?)? & ADDR_MASK,
        sp: bp.checked_add(16)?,
        bp: word(bp)?,
    };
    let types = &process.layout.types;
    let frame = |kind, offset: u64, cookie| Step {
        ids: FrameId { kind, sfi, offset }.encode(),
        cookie,
        caller,
    };
    // Interpreted: the interpreter's pc, a bytecode array and a Smi
    // offset in their slots (BPF passes the slot as it is). Code compiled
    // on stack replacement keeps the interpreter's slots: where the
    // interpreter's code is known, a first frame's pc in another builtin
    // is the interpreter's only when called from there (below).
    let array = slot(bytecode_array).unwrap_or(0);
    // A Smi's value in the slot's upper half, as BPF reads it.
    let offset = slot(bytecode_offset)
        .filter(|w| w & 0xffff_ffff == 0)
        .map(|w| (w >> 32) as u32);
    let interpreted = match offset {
        Some(offset) if in_builtins && heap.instance_type(array) == Some(types.bytecode_array) => {
            Some(frame(Kind::Interpreted, offset.into(), array))
        }
        _ => None,
    };
    let in_interpreter = |at: u64| blob.is_some_and(|b| process.in_interpreter(b, at));
    if let Some(f) = interpreted {
        if process.interpreter.is_empty() || return_address || in_interpreter(pc) {
            return Some(f);
        }
    }
    // Compiled: the pc in its function's code (a return address one byte
    // back, in its call).
    let at = if return_address { pc - 1 } else { pc };
    let dispatch = (process.dispatch != 0).then_some(process.dispatch);
    let code = heap.code(function, dispatch);
    let in_code = |at: u64| -> Option<(u64, u32)> {
        let code = code?;
        let range = heap.instructions(code)?;
        range
            .contains(&at)
            .then(|| u32::try_from(at - range.start).ok())
            .flatten()
            .map(|offset| (code, offset))
    };
    if let Some((code, offset)) = in_code(at) {
        return Some(frame(Kind::Compiled, offset.into(), code));
    }
    // Code the function does not point to (compiled on stack
    // replacement): the pc, for the namer to find the code.
    if !in_builtins {
        return Some(frame(Kind::Elsewhere, at & ADDR_MASK, function));
    }
    // The first frame's pc in a builtin that keeps no frame, called from
    // the frame's compiled code: the call's return address (arm64's link
    // register, or a word at the top of the stack) is the pc in it; in
    // other code, the first of them is taken as the pc there.
    if !return_address {
        let sp = regs.sp;
        let calls: Vec<u64> = std::iter::once(Some(lr))
            .chain((0..LEAF_WORDS).map(|i| word(sp.checked_add(i * 8)?)))
            .map_while(|w| w)
            .map(|w| w & ADDR_MASK)
            .filter(|&w| w > 0)
            .collect();
        for &w in &calls {
            if interpreted.is_some() && in_interpreter(w - 1) {
                return interpreted;
            }
            if let Some((code, offset)) = in_code(w - 1) {
                return Some(frame(Kind::Compiled, offset.into(), code));
            }
        }
        // With the interpreter's slots, only a return address outside the
        // builtins is another code's (a builtin called by another called
        // by the interpreter returns into the builtins; the pc's copy is
        // one of `blobs`).
        if let Some(&call) = calls.first() {
            if interpreted.is_none() || !in_any(&process.blobs, call - 1) {
                return Some(frame(Kind::Elsewhere, call - 1, function));
            }
        }
    }
    interpreted.or(Some(frame(Kind::Function, 0, 0)))
}

fn in_any(ranges: &[Range<u64>], pc: u64) -> bool {
    ranges.iter().any(|r| r.contains(&pc))
}
