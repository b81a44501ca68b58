//! Unwind tables: an object's `.eh_frame` (or `.debug_frame`) call-frame
//! information, evaluated by gimli into a sorted array of compact rows
//! that the BPF unwinder searches. A row says, from its address up to the
//! next row's, how to find the caller: the canonical frame address (CFA)
//! from the stack pointer or the frame pointer plus an offset (or the PLT
//! and signal-frame cases), where the frame pointer was saved, and on
//! arm64 where the return address is (still in x30, or saved beside x29
//! or alone). On x86-64 the return address is always at CFA - 8. Rows
//! whose rules are beyond these cases say "no information", and the
//! unwinder falls back to the frame pointer there.
//!
//! The rules are read for the ELF file's own machine (x86-64: rsp, rbp;
//! arm64: sp, x29, x30); the BPF build for the host's reads them.
//! The row layout is `struct unwind_row` in bpf/unwind_types.h.

use gimli::{
    AArch64, BaseAddresses, CfaRule, CieOrFde, DebugFrame, EhFrame, EndianSlice, LittleEndian,
    RegisterRule, UnwindContext, UnwindSection, X86_64,
};

use super::elf::{Elf, Machine};

/// No unwind information: fall back to the frame pointer.
pub const CFA_NONE: u8 = 0;
/// CFA = rsp + offset.
pub const CFA_RSP: u8 = 1;
/// CFA = rbp + offset.
pub const CFA_RBP: u8 = 2;
/// A PLT entry: CFA = rsp + 8, + 8 more once `(rip & 15) >= offset`.
pub const CFA_PLT: u8 = 3;
/// The outermost frame (the return address is undefined): stop, complete.
pub const CFA_END: u8 = 4;
/// A signal trampoline (`__restore_rt`): the interrupted registers are in
/// the `ucontext` at rsp.
pub const CFA_SIGNAL: u8 = 5;

/// rbp keeps its value in the caller.
pub const RBP_SAME: u8 = 0;
/// rbp was saved at CFA + 8 * `rbp_off`.
pub const RBP_SAVED: u8 = 1;
/// rbp's rule is beyond what the unwinder evaluates: unknown in the caller.
pub const RBP_UNKNOWN: u8 = 2;

/// arm64: the return address is still in x30 (a leaf, a prologue).
pub const RA_LR: u8 = 0;
/// arm64: saved after x29, at CFA + 8 * (`rbp_off` + 1) (a frame record).
pub const RA_AFTER_FP: u8 = 1;
/// arm64: saved at CFA + 8 * `rbp_off` (x29 not saved, or not beside it).
pub const RA_SAVED: u8 = 2;

/// One row, as BPF reads it (8 bytes, `struct unwind_row`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Row {
    /// Start address, relative to the table's base.
    pub pc: u32,
    /// The CFA offset in bytes (or the PLT threshold).
    pub cfa_off: u16,
    /// The CFA rule (low 4 bits), the rbp rule (bits 4-5) and, on
    /// arm64, the return address's (bits 6-7).
    pub kind: u8,
    /// Where rbp (arm64: x29, or x30 under [`RA_SAVED`]) was saved, in
    /// 8-byte words from the CFA.
    pub rbp_off: i8,
}

impl Row {
    pub fn cfa(&self) -> u8 {
        self.kind & 0xf
    }

    pub fn rbp(&self) -> u8 {
        (self.kind >> 4) & 3
    }

    /// arm64's return-address rule.
    pub fn ra(&self) -> u8 {
        self.kind >> 6
    }

    /// The row as the 8-byte array element BPF reads (`struct unwind_row`
    /// on a little-endian machine).
    pub fn to_bits(self) -> u64 {
        u64::from(self.pc)
            | u64::from(self.cfa_off) << 32
            | u64::from(self.kind) << 48
            | u64::from(self.rbp_off as u8) << 56
    }

    /// The same rule from `pc` on.
    fn at(pc: u32, rule: Rule) -> Row {
        Row {
            pc,
            cfa_off: rule.cfa_off,
            kind: rule.cfa | rule.rbp << 4 | rule.ra << 6,
            rbp_off: rule.rbp_off,
        }
    }
}

/// A row's rule, without its address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Rule {
    cfa: u8,
    cfa_off: u16,
    rbp: u8,
    rbp_off: i8,
    ra: u8,
}

const NONE: Rule = Rule {
    cfa: CFA_NONE,
    cfa_off: 0,
    rbp: RBP_SAME,
    rbp_off: 0,
    ra: RA_LR,
};

/// arm64 code that keeps no frame: CFA = sp, the return address in x30.
const LEAF: Rule = Rule {
    cfa: CFA_RSP,
    ..NONE
};

/// An object's rows, sorted by address; addresses are `base + pc`, in the
/// object's virtual addresses (as `.eh_frame` gives them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    pub base: u64,
    pub rows: Vec<Row>,
    /// FDEs that could not be read (their ranges have no information).
    pub bad_fdes: usize,
}

/// Why an object has no table.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    #[error("not a 64-bit x86-64 or arm64 ELF file")]
    NotElf,
    #[error("no .eh_frame or .debug_frame")]
    NoCfi,
    #[error("malformed call-frame information ({0})")]
    Malformed(String),
    #[error("code spans more than 4 GiB")]
    TooLarge,
}

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// One FDE row: an address range and its rule.
struct Span {
    start: u64,
    end: u64,
    rule: Rule,
}

impl Table {
    /// Builds the table of the ELF image in `data`.
    pub fn from_elf(data: &[u8]) -> Result<Table, TableError> {
        let elf = Elf::parse(data).ok_or(TableError::NotElf)?;
        Table::from_parsed(data, &elf)
    }

    /// Builds the table from an image already parsed.
    pub fn from_parsed(data: &[u8], elf: &Elf) -> Result<Table, TableError> {
        let mut spans = Vec::new();
        let mut bad = 0;
        if let Some(s) = &elf.eh_frame {
            let mut section = EhFrame::new(&data[s.file.clone()], LittleEndian);
            section.set_address_size(8);
            let bases = BaseAddresses::default().set_eh_frame(s.addr);
            bad += collect(&section, &bases, elf.machine, &mut spans)?;
        } else if let Some(s) = &elf.debug_frame {
            let mut section = DebugFrame::new(&data[s.file.clone()], LittleEndian);
            section.set_address_size(8);
            bad += collect(&section, &BaseAddresses::default(), elf.machine, &mut spans)?;
        } else {
            return Err(TableError::NoCfi);
        }
        // arm64's PLT stubs have no call-frame information: their callers
        // branched there with `bl`, so the return address is in x30 and
        // the CFA at sp, as in a leaf. Without these rows a sample in a
        // stub would skip its caller (or, with --unwind dwarf, end there).
        if elf.machine == Machine::Aarch64 {
            spans.extend(elf.plt.iter().map(|s| Span {
                start: s.addr,
                end: s.addr + s.file.len() as u64,
                rule: LEAF,
            }));
        }
        let mut table = rows_of(spans)?;
        table.bad_fdes = bad;
        Ok(table)
    }

    /// An arm64 table saying that every function of `elf`'s executable
    /// segments is a leaf: the return address in x30, the CFA at sp. For
    /// the vDSO, which has no call-frame information on arm64 and whose
    /// functions call nothing (its C is built with the kernel's flags,
    /// `-momit-leaf-frame-pointer` included, so frame pointers would lose
    /// the caller).
    pub fn leaves(elf: &Elf) -> Table {
        let spans = elf
            .segments
            .iter()
            .filter(|s| s.executable && s.filesz > 0)
            .map(|s| Span {
                start: s.vaddr,
                end: s.vaddr + s.filesz,
                rule: LEAF,
            })
            .collect();
        rows_of(spans).unwrap_or_default()
    }

    /// The row covering virtual address `addr`, as BPF finds it.
    pub fn lookup(&self, addr: u64) -> Option<&Row> {
        let rel = u32::try_from(addr.checked_sub(self.base)?).ok()?;
        let i = self.rows.partition_point(|r| r.pc <= rel);
        self.rows.get(i.checked_sub(1)?)
    }
}

/// The functions the call-frame information of the ELF image in `data`
/// describes: each FDE's address range (virtual addresses), sorted by
/// start. Every function a compiler emits has one, named or not, so this
/// tells where a function without a symbol begins.
pub fn function_ranges(data: &[u8]) -> Vec<std::ops::Range<u64>> {
    let Some(elf) = Elf::parse(data) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(s) = &elf.eh_frame {
        return eh_frame_ranges(&data[s.file.clone()], s.addr);
    } else if let Some(s) = &elf.debug_frame {
        let mut section = DebugFrame::new(&data[s.file.clone()], LittleEndian);
        section.set_address_size(8);
        ranges(&section, &BaseAddresses::default(), &mut out);
    }
    out.sort_by_key(|r| (r.start, r.end));
    out
}

/// The functions an `.eh_frame` section (its bytes, loaded at virtual
/// address `addr`) describes: each FDE's range, sorted by start.
pub fn eh_frame_ranges(section: &[u8], addr: u64) -> Vec<std::ops::Range<u64>> {
    let mut eh = EhFrame::new(section, LittleEndian);
    eh.set_address_size(8);
    let mut out = Vec::new();
    ranges(&eh, &BaseAddresses::default().set_eh_frame(addr), &mut out);
    out.sort_by_key(|r| (r.start, r.end));
    out
}

/// Adds the range of every FDE of `section` that can be read to `out`.
fn ranges<'a, S>(section: &S, bases: &BaseAddresses, out: &mut Vec<std::ops::Range<u64>>)
where
    S: UnwindSection<Slice<'a>>,
{
    let mut entries = section.entries(bases);
    while let Ok(Some(entry)) = entries.next() {
        if let CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(S::cie_from_offset) {
                let start = fde.initial_address();
                if fde.len() > 0 {
                    out.push(start..start.saturating_add(fde.len()));
                }
            }
        }
    }
}

/// Adds every FDE's rows in `section` to `spans`; returns how many FDEs
/// could not be read.
fn collect<'a, S>(
    section: &S,
    bases: &BaseAddresses,
    machine: Machine,
    spans: &mut Vec<Span>,
) -> Result<usize, TableError>
where
    S: UnwindSection<Slice<'a>>,
{
    let mut ctx = Box::new(UnwindContext::new());
    let mut entries = section.entries(bases);
    let mut bad = 0;
    loop {
        let entry = match entries.next() {
            Ok(Some(e)) => e,
            Ok(None) => break,
            // The section cannot be walked past a broken length.
            Err(e) if spans.is_empty() => return Err(TableError::Malformed(e.to_string())),
            Err(_) => {
                bad += 1;
                break;
            }
        };
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(S::cie_from_offset) else {
            bad += 1;
            continue;
        };
        let signal = fde.is_signal_trampoline();
        let Ok(mut rows) = fde.rows(section, bases, &mut ctx) else {
            bad += 1;
            continue;
        };
        loop {
            match rows.next_row() {
                Ok(Some(row)) => {
                    let rule = if signal {
                        Rule {
                            cfa: CFA_SIGNAL,
                            ..NONE
                        }
                    } else {
                        match machine {
                            Machine::X86_64 => rule_of(section, row),
                            Machine::Aarch64 => arm64_rule_of(row),
                        }
                    };
                    spans.push(Span {
                        start: row.start_address(),
                        end: row.end_address(),
                        rule,
                    });
                }
                Ok(None) => break,
                Err(_) => {
                    bad += 1;
                    break;
                }
            }
        }
    }
    Ok(bad)
}

/// The rule of one gimli row, or [`NONE`] where it is beyond the cases the
/// unwinder evaluates.
fn rule_of<'a, S>(section: &S, row: &gimli::UnwindTableRow<usize>) -> Rule
where
    S: UnwindSection<Slice<'a>>,
{
    match row.register(X86_64::RA) {
        Some(RegisterRule::Undefined) => {
            return Rule {
                cfa: CFA_END,
                ..NONE
            }
        }
        Some(RegisterRule::Offset(-8)) | None => {}
        Some(_) => return NONE,
    }
    let cfa = match row.cfa() {
        CfaRule::Expression(e) => e
            .get(section)
            .ok()
            .and_then(|x| plt_threshold(x.0.slice()))
            .map(|t| (CFA_PLT, t)),
        rule => register_cfa(rule, X86_64::RSP, X86_64::RBP),
    };
    let Some((cfa, cfa_off)) = cfa else {
        return NONE;
    };
    let (rbp, rbp_off) = match row.register(X86_64::RBP) {
        None | Some(RegisterRule::SameValue) | Some(RegisterRule::Undefined) => (RBP_SAME, 0),
        Some(RegisterRule::Offset(o)) => match words(o) {
            Some(w) => (RBP_SAVED, w),
            None => (RBP_UNKNOWN, 0),
        },
        Some(_) => (RBP_UNKNOWN, 0),
    };
    Rule {
        cfa,
        cfa_off,
        rbp,
        rbp_off,
        ra: RA_LR,
    }
}

/// The arm64 rule of one gimli row, or [`NONE`] where it is beyond the
/// cases the unwinder evaluates. A function's CIE leaves x30 without a
/// rule (the return address is in the register) until its prologue saves
/// it, usually beside x29 in a frame record (`stp x29, x30, [sp, #-N]!`).
fn arm64_rule_of(row: &gimli::UnwindTableRow<usize>) -> Rule {
    let ra = match row.register(AArch64::X30) {
        Some(RegisterRule::Undefined) => {
            return Rule {
                cfa: CFA_END,
                ..NONE
            }
        }
        None | Some(RegisterRule::SameValue) => None,
        Some(RegisterRule::Offset(o)) => match words(o) {
            Some(w) => Some(w),
            None => return NONE,
        },
        Some(_) => return NONE,
    };
    let Some((cfa, cfa_off)) = register_cfa(row.cfa(), AArch64::SP, AArch64::X29) else {
        return NONE;
    };
    let fp = match row.register(AArch64::X29) {
        None | Some(RegisterRule::SameValue) => Some(None),
        Some(RegisterRule::Offset(o)) => words(o).map(Some),
        Some(_) => None,
    };
    let rule = |rbp, rbp_off, ra| Rule {
        cfa,
        cfa_off,
        rbp,
        rbp_off,
        ra,
    };
    match (fp, ra) {
        (Some(None), None) => rule(RBP_SAME, 0, RA_LR),
        (Some(Some(f)), None) => rule(RBP_SAVED, f, RA_LR),
        (Some(None), Some(r)) => rule(RBP_SAME, r, RA_SAVED),
        (Some(Some(f)), Some(r)) if r == f.wrapping_add(1) => rule(RBP_SAVED, f, RA_AFTER_FP),
        // x29 apart from x30, or beyond the rules: the caller's x29 is
        // unknown, its return address still found.
        (_, Some(r)) => rule(RBP_UNKNOWN, r, RA_SAVED),
        (None, None) => rule(RBP_UNKNOWN, 0, RA_LR),
    }
}

/// A CFA of the stack pointer `sp` or the frame pointer `fp` plus an
/// offset, as a row's CFA rule and offset; `None` for any other rule.
fn register_cfa(
    rule: &CfaRule<usize>,
    sp: gimli::Register,
    fp: gimli::Register,
) -> Option<(u8, u16)> {
    let CfaRule::RegisterAndOffset { register, offset } = rule else {
        return None;
    };
    let off = u16::try_from(*offset).ok()?;
    match *register {
        r if r == sp => Some((CFA_RSP, off)),
        r if r == fp => Some((CFA_RBP, off)),
        _ => None,
    }
}

/// A save slot's offset from the CFA in 8-byte words, when it is whole
/// words within a row's `i8`.
fn words(offset: i64) -> Option<i8> {
    if offset % 8 != 0 {
        return None;
    }
    i8::try_from(offset / 8).ok()
}

/// The threshold of the CFA expression the linker writes for `.plt`:
/// `rsp + 8 + ((rip & 15) >= T ? 8 : 0)` (after the entry's `push`).
fn plt_threshold(expr: &[u8]) -> Option<u16> {
    // DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and;
    // DW_OP_lit<T>; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus
    match expr {
        [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, lit @ 0x30..=0x4f, 0x2a, 0x33, 0x24, 0x22] => {
            Some(u16::from(lit - 0x30))
        }
        _ => None,
    }
}

/// Sorted, merged rows from FDE rows; gaps between FDEs get "no
/// information" rows.
fn rows_of(mut spans: Vec<Span>) -> Result<Table, TableError> {
    spans.sort_by_key(|s| s.start);
    let Some(first) = spans.first() else {
        return Ok(Table::default());
    };
    let base = first.start;
    let rel = |a: u64| u32::try_from(a - base).map_err(|_| TableError::TooLarge);
    let mut rows: Vec<Row> = Vec::with_capacity(spans.len() + spans.len() / 4);
    let mut end = base;
    let push = |rows: &mut Vec<Row>, pc: u32, rule: Rule| match rows.last_mut() {
        Some(last) if last.pc == pc => *last = Row::at(pc, rule),
        Some(last) if Row::at(last.pc, rule) == *last => {}
        _ => rows.push(Row::at(pc, rule)),
    };
    for s in &spans {
        if s.end <= s.start {
            continue;
        }
        if s.start > end {
            push(&mut rows, rel(end)?, NONE);
        }
        push(&mut rows, rel(s.start)?, s.rule);
        end = end.max(s.end);
    }
    push(&mut rows, rel(end)?, NONE);
    Ok(Table {
        base,
        rows,
        bad_fdes: 0,
    })
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
