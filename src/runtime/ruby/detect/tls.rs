//! Where a Ruby thread's execution context lies in its thread-local
//! storage: what libruby's file says (its TLS relocations and symbols),
//! and what the dynamic loader wrote in the process (the module id in
//! the GOT on x86-64, the TLS descriptors' offsets on arm64). A stripped
//! libruby names no variable: every candidate goes to BPF, which keeps
//! the one whose value checks out as an execution context.

use super::{
    DynSyms, NotFound, Rela, RubyFile, ET_EXEC, MAX_TLS_VALUE, PT_INTERP, PT_TLS,
    R_AARCH64_TLSDESC, R_X86_64_DTPMOD64, R_X86_64_DTPOFF64,
};
use crate::elf::{Elf, Source};
use crate::runtime::memory::Memory;
use crate::runtime::ruby::{Tls, MAX_SLOTS};
use crate::runtime::tracker::Found;
use crate::unwind::elf::Machine;

/// What the file of a Ruby interpreter says of its thread-local
/// storage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct FileTls {
    /// x86-64: the GOT slots (virtual addresses) the loader writes
    /// libruby's module id in, symbol-less ones first.
    pub(super) modid_slots: Vec<u64>,
    /// arm64: the GOT TLS descriptors (virtual addresses) whose second
    /// word the loader sets to the variable's offset from the thread
    /// pointer.
    pub(super) descriptors: Vec<u64>,
    /// The candidate offsets known from the file: in the block (x86-64),
    /// or from the thread pointer (arm64 with no descriptors).
    pub(super) slots: Vec<i64>,
    /// An executable with no TLS relocations: its own block, glibc's
    /// module 1 (x86-64), at a fixed place after the thread pointer
    /// (arm64, `slots`).
    pub(super) own: bool,
}

/// Where the execution context lies, from the file's `FileTls` and what
/// the loader wrote in the process (libruby loaded with bias `bias`):
/// `Err` with what to answer when it cannot be said now.
pub(super) fn live_tls(file: &RubyFile, bias: u64, mem: &dyn Memory) -> Result<Tls, NotFound> {
    let t = &file.tls;
    match file.machine {
        Machine::X86_64 => {
            let modid = if t.own {
                1
            } else {
                t.modid_slots
                    .iter()
                    .filter_map(|&slot| mem.read_u64(bias.wrapping_add(slot)).ok())
                    .find(|&v| v != 0 && v < MAX_TLS_VALUE)
                    .ok_or(Found::NotReady)?
            };
            if t.slots.is_empty() {
                return Err(Found::Unsupported(format!(
                    "Ruby {}: no thread-local variable found in its object",
                    file.version
                )));
            }
            Ok(Tls {
                modid,
                slots: t.slots.clone(),
            })
        }
        Machine::Aarch64 => {
            if t.descriptors.is_empty() {
                if t.slots.is_empty() {
                    return Err(Found::Unsupported(format!(
                        "Ruby {}: no thread-local variable found in its object",
                        file.version
                    )));
                }
                return Ok(Tls {
                    modid: 0,
                    slots: t.slots.clone(),
                });
            }
            let mut slots = Vec::new();
            for &d in &t.descriptors {
                let off = mem
                    .read_u64(bias.wrapping_add(d).wrapping_add(8))
                    .map_err(|_| Found::NotReady)?;
                if off == 0 {
                    return Err(Found::NotReady);
                }
                // Else a pointer to the loader's data: TLS allocated on
                // demand (a dlopen'd libruby), not at a fixed place.
                if off < MAX_TLS_VALUE && !slots.contains(&(off as i64)) {
                    slots.push(off as i64);
                }
            }
            slots.truncate(MAX_SLOTS);
            if slots.is_empty() {
                return Err(Found::Unsupported(format!(
                    "Ruby {}: its thread-local storage is not static (a dlopen'd libruby?)",
                    file.version
                )));
            }
            Ok(Tls { modid: 0, slots })
        }
    }
}

/// The size and alignment of `elf`'s `PT_TLS` segment, read from its
/// program headers.
fn tls_segment<S: Source>(elf: &Elf<S>) -> Option<(u64, u64)> {
    let l = crate::elf::Layout::HOST;
    let h = elf.bounded(0, 64, 64)?;
    let (phoff, phentsize, phnum) = (l.u64(&h, 32)?, l.u16(&h, 54)?, l.u16(&h, 56)?);
    if phentsize < 56 {
        return None;
    }
    let len = u64::from(phentsize) * u64::from(phnum);
    let ph = elf.bounded(phoff, len, crate::elf::MAX_HEADERS)?;
    ph.chunks_exact(usize::from(phentsize))
        .find_map(|p| (l.u32(p, 0)? == PT_TLS).then_some((l.u64(p, 40)?, l.u64(p, 48)?)))
}

/// What `elf` says of its thread-local storage, from its relocations
/// `relas` and symbols `syms`.
pub(super) fn file_tls<S: Source>(
    elf: &Elf<S>,
    machine: Machine,
    relas: &[Rela],
    syms: &DynSyms,
) -> FileTls {
    let mut t = FileTls::default();
    let ec = syms.current_ec;
    let sym_value = |r: &Rela| syms.values.get(r.sym as usize).copied().unwrap_or(0);
    let executable = elf.kind == ET_EXEC || elf.segments.iter().any(|s| s.kind == PT_INTERP);
    let (memsz, align) = tls_segment(elf).unwrap_or((0, 1));
    // Every word of the block, for want of better.
    let words = |base: i64| -> Vec<i64> {
        (0..memsz / 8)
            .map(|i| base.wrapping_add((i * 8) as i64))
            .take(MAX_SLOTS)
            .collect()
    };
    match machine {
        Machine::X86_64 => {
            let mut modids: Vec<&Rela> = relas
                .iter()
                .filter(|r| r.kind == R_X86_64_DTPMOD64)
                .collect();
            modids.sort_by_key(|r| r.sym != 0);
            t.modid_slots = modids.iter().map(|r| r.offset).collect();
            t.own = t.modid_slots.is_empty() && executable;
            let mut slots: Vec<i64> = Vec::new();
            if let Some(ec) = ec {
                slots.push(ec.value as i64);
            } else {
                let dtpoffs: Vec<&Rela> = relas
                    .iter()
                    .filter(|r| r.kind == R_X86_64_DTPOFF64)
                    .collect();
                for r in &modids {
                    let second = r.offset.wrapping_add(8);
                    if r.sym != 0 || dtpoffs.iter().any(|d| d.offset == second) {
                        continue;
                    }
                    // General-dynamic pair of a hidden variable: its
                    // offset fixed at link time, in the file.
                    if let Some(off) = elf.u64_at_vaddr(second) {
                        slots.push(off as i64);
                    }
                }
                for d in dtpoffs {
                    slots.push(sym_value(d).wrapping_add(d.addend as u64) as i64);
                }
            }
            let mut unique: Vec<i64> = Vec::new();
            for s in slots {
                if !unique.contains(&s) {
                    unique.push(s);
                }
            }
            unique.truncate(MAX_SLOTS);
            t.slots = if unique.is_empty() { words(0) } else { unique };
        }
        Machine::Aarch64 => {
            let descs: Vec<&Rela> = relas
                .iter()
                .filter(|r| r.kind == R_AARCH64_TLSDESC)
                .collect();
            let naming: Vec<&&Rela> = match ec {
                Some(ec) => descs
                    .iter()
                    .filter(|r| r.sym == ec.index || (r.sym == 0 && r.addend as u64 == ec.value))
                    .collect(),
                None => Vec::new(),
            };
            t.descriptors = if naming.is_empty() {
                descs.iter().map(|r| r.offset).collect()
            } else {
                naming.iter().map(|r| r.offset).collect()
            };
            t.descriptors.truncate(MAX_SLOTS);
            t.own = t.descriptors.is_empty() && executable;
            if t.own {
                // Local-exec: the executable's block follows the thread
                // control block (16 bytes), aligned.
                let first = 16u64.checked_next_multiple_of(align.max(1)).unwrap_or(16) as i64;
                t.slots = match ec {
                    Some(ec) => vec![first.wrapping_add(ec.value as i64)],
                    None => words(first),
                };
            }
        }
    }
    t
}
