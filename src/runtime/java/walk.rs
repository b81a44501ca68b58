//! The user-space twin of bpf/java.h's step, for perf-event mode, where no
//! BPF program walks the stack: a pc in a JVM's code cache is stepped
//! through as the BPF side does (the code blob from the code heap's
//! segment map; interpreted, compiled, native-wrapper and stub frames
//! each by its own layout) and gives the same runtime frame, so that the
//! namer, the model and every writer see one kind of Java frame.
//!
//! The stack is the copy the kernel took at the sample (its words are
//! what BPF would have read then); code blobs, methods and code bytes are
//! read from the live process. Code blobs are kept for a second
//! ([`BLOB_TTL`]): a blob is read once for many samples, and one freed
//! and reused meanwhile misleads the walk for at most that long (as a
//! freed one misleads BPF's read of it for the moment it takes).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::arm64;
use super::method::{half, int, word};
use super::{FrameId, Kind, Process, BLOB_HEADER, NO_BCI};
use crate::runtime::memory::Memory;
use crate::unwind::elf::Machine;

/// How long a code blob read is trusted.
pub const BLOB_TTL: Duration = Duration::from_secs(1);

/// Hops back through a segment map at most (bpf/java.h).
const SEGMAP_HOPS: usize = 64;
/// Bytes of segment map read at once.
const SEGMAP_CHUNK: u64 = 256;
/// Words above a compiled frame searched for its return address.
const RA_SLOTS: u64 = 6;
/// A frame larger than this is not one.
const MAX_FRAME: u64 = 0x10_0000;

/// The first four bytes of a code blob's name (bpf/java.h JAVA_NAME_*).
const NAME_NMETHOD: u32 = u32::from_le_bytes(*b"nmet");
const NAME_NATIVE: u32 = u32::from_le_bytes(*b"nati");
const NAME_INTERPRETER: u32 = u32::from_le_bytes(*b"Inte");
const NAME_VTABLE: u32 = u32::from_le_bytes(*b"vtab");

pub use crate::runtime::perf::{Leaf, Regs};

/// Where the caller of a leaf frame is: what its prologue or epilogue
/// has built of its frame (bpf/java.h JAVA_LEAF_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafFrame {
    /// The frame is built: its size gives the caller, whose return
    /// address and frame pointer are saved at its top.
    Built,
    /// x86-64: only the return address is on the stack, at sp.
    RaAtSp,
    /// Only the frame record stands at sp (saved frame pointer, then the
    /// return address): the caller's sp is 16 above.
    RecordAtSp,
    /// arm64: no frame stands: the caller's sp is sp, its pc in x30.
    LrAtSp,
    /// arm64: the frame's space stands but not its record: the caller's
    /// sp is sp plus the frame size, its pc in x30.
    LrAbove,
}

/// A Java frame stepped through: its identifiers and cookie (a runtime
/// frame's three words) and its caller's registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stepped {
    pub ids: [u64; 2],
    pub cookie: u64,
    pub caller: Regs,
}

/// A code blob as read: where it ends, its header, its name's first
/// bytes.
struct Blob {
    end: u64,
    header: Vec<u8>,
    name: u32,
    read: Instant,
}

/// Steps through Java frames of one JVM, keeping the code blobs read.
pub struct Walker {
    blobs: BTreeMap<u64, Blob>,
    /// Whose frame layouts: this machine's, but for tests.
    machine: Machine,
}

impl Default for Walker {
    fn default() -> Self {
        Self::for_machine(Machine::HOST)
    }
}

impl Walker {
    pub fn new() -> Self {
        Self::default()
    }

    /// A walker of `machine`'s frames.
    pub fn for_machine(machine: Machine) -> Self {
        Walker {
            blobs: BTreeMap::new(),
            machine,
        }
    }

    /// Steps through the frame at `regs` of a thread of `p` (`mem` its
    /// live memory, `stack` the words of its stack at the sample; `leaf`
    /// the leaf's other registers, `return_address` whether `regs.pc` is
    /// one, when `leaf` is not this frame's). `None` when the pc is in no
    /// code blob or the caller cannot be found: the walk then takes it as
    /// native, as BPF does.
    pub fn step(
        &mut self,
        p: &Process,
        mem: &dyn Memory,
        stack: &dyn Fn(u64) -> Option<u64>,
        regs: Regs,
        return_address: bool,
        leaf: Leaf,
    ) -> Option<Stepped> {
        let machine = self.machine;
        let arm64 = machine == Machine::Aarch64;
        if !p.cache.contains(&regs.pc) {
            return None;
        }
        let l = &p.layout;
        let look = if return_address { regs.pc - 1 } else { regs.pc };
        let blob = self.blob(p, mem, look)?;
        let (start, b) = (blob.0, blob.1);
        let code_begin = if l.blob_offsets {
            start.checked_add(u64::from(int(&b.header, l.blob_code_begin)? as u32))?
        } else {
            word(&b.header, l.blob_code_begin)?
        };
        let frame_size = i64::from(int(&b.header, l.blob_frame_size)?) * 8;
        let frame_size = u64::try_from(frame_size).ok().filter(|&s| s <= MAX_FRAME)?;
        // An int, or an int16_t from JDK 23: its low half either way.
        let complete = i64::from(half(&b.header, l.blob_frame_complete)? as i16);
        let complete_at = code_begin.wrapping_add_signed(complete);
        let Regs { mut pc, sp, bp } = regs;
        let mut caller_bp = bp;
        // The caller's pc came from x30 (arm64's leaf).
        let mut used_lr = false;
        let (kind, ptr, offset, cookie, caller_sp, mut ra);
        let in_cache = |a: u64| p.cache.contains(&a);
        let strip = |ra: u64| machine.strip_return_address(ra);
        if b.name == NAME_INTERPRETER {
            if bp < sp || bp >= sp + MAX_FRAME {
                return None;
            }
            let slot = |i: i8| stack(bp.wrapping_add_signed(i64::from(i) * 8));
            let method = slot(l.interp_method)?;
            caller_sp = slot(l.interp_sender_sp)?;
            caller_bp = slot(0)?;
            ra = slot(1)?;
            let bcp = if return_address {
                slot(l.interp_bcp)?
            } else {
                leaf.bcp
            };
            let cm = mem
                .read_u64(method.checked_add(u64::from(l.method_const))?)
                .ok()?;
            let mut size = [0u8; 2];
            mem.read(cm.checked_add(u64::from(l.const_code_size))?, &mut size)
                .ok()?;
            let code = cm.checked_add(u64::from(l.const_size))?;
            offset = match bcp.checked_sub(code) {
                Some(bci) if bci < u64::from(u16::from_ne_bytes(size)) => bci as u32,
                _ => NO_BCI,
            };
            (kind, ptr, cookie) = (Kind::Interpreted, method, cm);
        } else if b.name == NAME_NMETHOD || b.name == NAME_NATIVE {
            // A deoptimized frame returns to the deopt handler; the pc it
            // had is saved in the frame.
            let deopt = if l.blob_offsets {
                start.wrapping_add(u64::from(int(&b.header, l.nm_deopt)? as u32))
            } else {
                word(&b.header, l.nm_deopt)?
            };
            if pc == deopt {
                let saved = sp.wrapping_add_signed(i64::from(int(&b.header, l.nm_orig_pc)?));
                if let Some(orig) = stack(saved).filter(|&o| o >= code_begin) {
                    pc = orig;
                }
            }
            // A leaf in its prologue or epilogue: where its caller is.
            let state = match (return_address, arm64) {
                (true, _) => LeafFrame::Built,
                (false, true) => arm64_leaf(mem, pc, complete_at),
                (false, false) => x86_leaf(mem, pc, complete_at),
            };
            // The return address, up to RA_SLOTS words above the frame
            // size.
            let built = || {
                (0..RA_SLOTS)
                    .map(|i| sp + frame_size + i * 8)
                    .find_map(|at| Some((at, stack(at - 8)?)).filter(|&(_, r)| in_cache(strip(r))))
            };
            match state {
                LeafFrame::Built => {
                    (caller_sp, ra) = built()?;
                    caller_bp = stack(caller_sp - 16)?;
                }
                LeafFrame::LrAtSp | LeafFrame::LrAbove => {
                    caller_sp = match state {
                        LeafFrame::LrAbove => sp + frame_size,
                        _ => sp,
                    };
                    (ra, used_lr) = (leaf.lr, true);
                }
                LeafFrame::RaAtSp => {
                    caller_sp = sp + 8;
                    ra = stack(sp)?;
                }
                LeafFrame::RecordAtSp => {
                    caller_sp = sp + 16;
                    ra = stack(sp + 8)?;
                    caller_bp = stack(sp)?;
                }
            }
            kind = if b.name == NAME_NATIVE {
                Kind::Native
            } else {
                Kind::Compiled
            };
            ptr = start;
            cookie = u64::from(int(&b.header, l.nm_compile_id)? as u32);
            offset = pc.wrapping_sub(code_begin) as u32;
        } else {
            if b.name == NAME_VTABLE || (!return_address && pc < complete_at) {
                // No frame yet: the return address is on the stack
                // (x86-64) or in x30 (arm64).
                if arm64 {
                    (caller_sp, ra, used_lr) = (sp, leaf.lr, true);
                } else {
                    caller_sp = sp + 8;
                    ra = stack(caller_sp - 8)?;
                }
            } else if frame_size == 0 {
                // Stubs without a frame size keep the frame pointer (the
                // call stub) once they have saved a frame record. On
                // arm64 a leaf that has not (a copy routine called with
                // bl) has its return address in x30, which the record
                // would hold too.
                let record_ra = (bp >= sp).then(|| stack(bp + 8)).flatten();
                if arm64 && !return_address && leaf.lr != 0 && record_ra.map(strip) != Some(leaf.lr)
                {
                    (caller_sp, ra, used_lr) = (sp, leaf.lr, true);
                } else {
                    if bp < sp {
                        return None;
                    }
                    caller_bp = stack(bp)?;
                    caller_sp = bp + 16;
                    ra = stack(caller_sp - 8)?;
                }
            } else {
                caller_sp = sp + frame_size;
                if frame_size >= 16 {
                    caller_bp = stack(caller_sp - 16)?;
                }
                ra = stack(caller_sp - 8)?;
            }
            kind = Kind::Stub;
            ptr = start;
            cookie = u64::from(b.name);
            offset = pc.wrapping_sub(code_begin) as u32;
        }
        // The caller's frame is above; or, where the return address is
        // still in arm64's x30, at the same sp (once: x30 is the leaf's).
        ra = strip(ra);
        if caller_sp < sp || (caller_sp == sp && !used_lr) || ra == 0 {
            return None;
        }
        let id = FrameId {
            kind,
            pointer: ptr,
            offset,
            return_address,
        };
        Some(Stepped {
            ids: id.encode(),
            cookie,
            caller: Regs {
                pc: ra,
                sp: caller_sp,
                bp: caller_bp,
            },
        })
    }

    /// The code blob holding `pc` (its start and what was read of it).
    fn blob(&mut self, p: &Process, mem: &dyn Memory, pc: u64) -> Option<(u64, &Blob)> {
        let cached = self
            .blobs
            .range(..=pc)
            .next_back()
            .filter(|(_, b)| pc < b.end && b.read.elapsed() < BLOB_TTL)
            .map(|(&start, _)| start);
        let start = match cached {
            Some(start) => start,
            None => {
                let start = find_blob(p, mem, pc)?;
                let blob = read_blob(p, mem, start)?;
                if pc >= blob.end {
                    return None;
                }
                // Blobs it overlaps are gone.
                let stale: Vec<u64> = self
                    .blobs
                    .range(..blob.end)
                    .filter(|(&s, b)| b.end > start && s < blob.end)
                    .map(|(&s, _)| s)
                    .collect();
                for s in stale {
                    self.blobs.remove(&s);
                }
                self.blobs.insert(start, blob);
                start
            }
        };
        self.blobs.get(&start).map(|b| (start, b))
    }
}

/// The start of the code blob holding `pc`: back through its code heap's
/// segment map, each byte the number of segments to step back (0 at a
/// block's first segment, 0xff where no block is).
fn find_blob(p: &Process, mem: &dyn Memory, pc: u64) -> Option<u64> {
    let heap = p.heaps.iter().find(|h| h.range.contains(&pc))?;
    if heap.log2_segment > 16 {
        return None;
    }
    let shift = heap.log2_segment;
    let mut segment = (pc - heap.range.start) >> shift;
    // The map's bytes from `base` on, read a chunk at a time.
    let mut chunk = [0u8; SEGMAP_CHUNK as usize];
    let mut base = u64::MAX;
    for _ in 0..SEGMAP_HOPS {
        if segment < base || segment >= base + SEGMAP_CHUNK {
            base = segment.saturating_sub(SEGMAP_CHUNK - 1);
            let n = (segment - base + 1) as usize;
            mem.read(heap.segmap.checked_add(base)?, &mut chunk[..n])
                .ok()?;
        }
        let tag = u64::from(chunk[(segment - base) as usize]);
        if tag == 0 {
            return (heap.range.start + (segment << shift))
                .checked_add(u64::from(p.layout.heap_block));
        }
        if tag == 0xff || tag > segment {
            return None;
        }
        segment -= tag;
    }
    None
}

/// Reads the code blob at `start`: its header and name.
fn read_blob(p: &Process, mem: &dyn Memory, start: u64) -> Option<Blob> {
    let l = &p.layout;
    let mut header = vec![0u8; BLOB_HEADER];
    mem.read(start, &mut header).ok()?;
    let size = u64::try_from(int(&header, l.blob_size)?).ok()?;
    let mut name = [0u8; 4];
    mem.read(word(&header, l.blob_name)?, &mut name).ok()?;
    Some(Blob {
        end: start.checked_add(size.max(1))?,
        header,
        name: u32::from_le_bytes(name),
        read: Instant::now(),
    })
}

/// Where the caller of a leaf compiled frame is on x86-64 (bpf/java.h):
/// in the prologue the frame is not built (the return address alone on
/// the stack, or with the saved rbp below it just before the frame's
/// completion); in the epilogue, as [`epilogue`] tells.
fn x86_leaf(mem: &dyn Memory, pc: u64, complete_at: u64) -> LeafFrame {
    let adjust = if pc < complete_at {
        if pc + 4 >= complete_at {
            16
        } else {
            8
        }
    } else {
        epilogue(mem, pc)
    };
    match adjust {
        8 => LeafFrame::RaAtSp,
        16 => LeafFrame::RecordAtSp,
        _ => LeafFrame::Built,
    }
}

/// Where the caller of a leaf compiled frame is on arm64, from the code
/// around its pc ([`arm64::leaf_frame`]).
fn arm64_leaf(mem: &dyn Memory, pc: u64, complete_at: u64) -> LeafFrame {
    let mut bytes = [0u8; arm64::WORDS * 4];
    let from = pc.wrapping_sub(arm64::BEFORE as u64 * 4);
    if mem.read(from, &mut bytes).is_err() {
        return LeafFrame::Built;
    }
    let code: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    arm64::leaf_frame(&code, pc, complete_at, pc < complete_at)
}
/// The caller of a leaf compiled frame stopped in its epilogue, as a
/// stack adjustment (bpf/java.h java_epilogue): 8 (only the return
/// address is left: on `ret`, or past `pop rbp`), 16 (on `pop rbp`), or
/// 0 (not in an epilogue, as far as its bytes tell).
fn epilogue(mem: &dyn Memory, pc: u64) -> u64 {
    let mut code = [0u8; 16];
    if mem.read(pc.wrapping_sub(1), &mut code).is_err() {
        return 0;
    }
    if code[1] == 0xc3 {
        return 8;
    }
    match code[2..].iter().position(|&c| c == 0xc3) {
        Some(_) if code[1] == 0x5d => 16,
        Some(_) if code[0] == 0x5d || code[0] == 0xc9 => 8,
        _ => 0,
    }
}

#[cfg(test)]
#[path = "walk_tests.rs"]
mod tests;
