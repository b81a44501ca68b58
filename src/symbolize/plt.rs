//! PLT stubs named as perf names them (`labs@plt`). A stub has no symbol
//! of its own, so the nearest one before it named its samples (`_init`
//! on x86-64, a mapping symbol on arm64), which is wrong: the thread is on
//! its way out of the object to the function the stub jumps to. Linkers
//! lay the stubs out in `.rela.plt`'s order, so the N-th stub is the N-th
//! relocation's symbol; x86-64's `.plt.got` stubs are named by the GOT
//! slot they jump through. The code around the stubs (lazy binding's
//! resolver entry) is named `[plt]`.
//!
//! Read from files other users may own: every read is bounded, and a
//! layout that does not add up names nothing rather than a wrong stub.

use std::ops::Range;
use std::sync::Arc;

/// x86-64 and arm64 ELF machine numbers.
pub(crate) const EM_X86_64: u16 = 62;
pub(crate) const EM_AARCH64: u16 = 183;

/// A section header, as the shared ELF reader gives it.
pub(crate) type SectionHeader = crate::elf::Section;

/// A named range of PLT code (virtual addresses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stub {
    pub(crate) range: Range<u64>,
    pub(crate) name: Arc<str>,
}

/// The name of PLT code that is not one function's stub.
pub(crate) const PLT: &str = "[plt]";

/// The sections that hold PLT code.
pub(crate) const SECTIONS: [&[u8]; 4] = [b".plt", b".plt.sec", b".plt.got", b".iplt"];

/// The most bytes read of `.rela.plt`, `.dynsym` and `.dynstr` each.
const MAX_TABLE: u64 = 16 << 20;
/// `Elf64_Rela` and `Elf64_Sym`.
const RELA_SIZE: usize = 24;
const SYM_SIZE: usize = 24;

/// The stubs of a 64-bit little-endian object of machine `machine`,
/// sorted by address, given its section headers and a way to read its
/// bytes (`read(offset, len)`).
pub(crate) fn stubs(
    machine: u16,
    sections: &[SectionHeader],
    read: impl Fn(u64, usize) -> Option<Vec<u8>>,
) -> Vec<Stub> {
    let find = |name: &[u8]| sections.iter().find(|s| s.name == name);
    let mut out = Vec::new();
    let load = |s: &SectionHeader| {
        (s.size <= MAX_TABLE)
            .then(|| read(s.offset, s.size as usize))
            .flatten()
    };
    // A relocation section's symbols and their names (its sh_link and
    // that one's), read once for both relocation sections when they share
    // them, as they do.
    let symbols_of = |link: u32| {
        let syms = sections.get(link as usize)?;
        let strs = sections.get(syms.link as usize)?;
        Some((link, load(syms)?, load(strs)?))
    };
    let mut symbols: Option<(u32, Vec<u8>, Vec<u8>)> = None;
    let mut relocations = |name: &[u8]| -> Option<Vec<(u64, Arc<str>)>> {
        let rela = find(name)?;
        if symbols.as_ref().map(|s| s.0) != Some(rela.link) {
            symbols = symbols_of(rela.link);
        }
        let (_, syms, strs) = symbols.as_ref()?;
        Some(relocation_names(&load(rela)?, syms, strs))
    };
    let names: Vec<Arc<str>> = relocations(b".rela.plt")
        .unwrap_or_default()
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    if machine == EM_X86_64 {
        if let Some(got) = find(b".plt.got") {
            let slots = relocations(b".rela.dyn").unwrap_or_default();
            out.extend(plt_got_stubs(got, slots, &read));
        }
    }
    // Where the numbered stubs are: (section, header bytes, entry bytes).
    let numbered = match machine {
        EM_X86_64 => match find(b".plt.sec") {
            // IBT's second PLT: one 16-byte stub per relocation, and the
            // first .plt only for lazy binding.
            Some(sec) => Some((sec, 0, 16)),
            None => find(b".plt").map(|plt| (plt, 16, 16)),
        },
        EM_AARCH64 => find(b".plt").and_then(|plt| {
            // A 32-byte header, then 16-byte stubs (24 with BTI's landing
            // pads): what is left divided by the relocations.
            let n = names.len() as u64;
            let rest = plt.size.checked_sub(32)?;
            let entry = (n > 0 && rest % n == 0).then(|| rest / n)?;
            matches!(entry, 16 | 24).then_some((plt, 32, entry))
        }),
        _ => None,
    };
    if let Some((sec, header, entry)) = numbered {
        let fits = (header + entry * names.len() as u64) <= sec.size;
        if fits && !names.is_empty() {
            let base = sec.addr + header;
            for (i, name) in names.iter().enumerate() {
                let start = base + entry * i as u64;
                out.push(Stub {
                    range: start..start + entry,
                    name: name.clone(),
                });
            }
        }
    }
    // Everything else in the PLT sections is [plt].
    for name in SECTIONS {
        let Some(s) = find(name) else { continue };
        let mut at = s.addr;
        let end = s.addr.saturating_add(s.size);
        let mut named: Vec<&Stub> = out
            .iter()
            .filter(|t| t.range.start >= at && t.range.end <= end)
            .collect();
        named.sort_by_key(|t| t.range.start);
        let mut gaps = Vec::new();
        for t in named {
            if t.range.start > at {
                gaps.push(at..t.range.start);
            }
            at = at.max(t.range.end);
        }
        if at < end {
            gaps.push(at..end);
        }
        out.extend(gaps.into_iter().map(|range| Stub {
            range,
            name: PLT.into(),
        }));
    }
    out.sort_by_key(|t| t.range.start);
    out
}

/// x86-64's `.plt.got`: stubs of functions whose GOT slot is filled
/// at load time (their address is also taken), each `jmp *SLOT(%rip)`
/// (after `endbr64` with IBT), named by the `.rela.dyn` relocation of the
/// slot it jumps through.
fn plt_got_stubs(
    got: &SectionHeader,
    slots: Vec<(u64, Arc<str>)>,
    read: &impl Fn(u64, usize) -> Option<Vec<u8>>,
) -> Vec<Stub> {
    let entry = got.entsize;
    if !matches!(entry, 8 | 16) || got.size > MAX_TABLE || got.size % entry != 0 {
        return Vec::new();
    }
    let slots: std::collections::HashMap<u64, Arc<str>> = slots
        .into_iter()
        .filter(|(_, name)| &**name != PLT)
        .collect();
    let Some(code) = read(got.offset, got.size as usize) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, stub) in code.chunks_exact(entry as usize).enumerate() {
        let start = got.addr + entry * i as u64;
        let jump = stub.windows(2).position(|w| w == [0xff, 0x25]);
        let slot = jump.and_then(|p| {
            let disp = i32::from_le_bytes(stub.get(p + 2..p + 6)?.try_into().ok()?);
            (start + p as u64 + 6).checked_add_signed(i64::from(disp))
        });
        if let Some(name) = slot.and_then(|s| slots.get(&s)) {
            out.push(Stub {
                range: start..start + entry,
                name: name.clone(),
            });
        }
    }
    out
}

/// (where it applies, `NAME@plt`) for each entry of the relocations
/// `relocs`, in order (`[plt]` for one without a symbol, as an IRELATIVE
/// relocation of an ifunc), their symbols in `syms` and names in `strs`.
fn relocation_names(relocs: &[u8], syms: &[u8], strs: &[u8]) -> Vec<(u64, Arc<str>)> {
    let u32_at = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |b: &[u8], at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
    };
    let name_of = |sym: usize| -> Option<Arc<str>> {
        if sym == 0 {
            return None;
        }
        let at = u32_at(syms, sym.checked_mul(SYM_SIZE)?)?;
        // Looked for within a name's longest: linear in the relocations
        // however many name one huge string.
        let bytes = crate::elf::string_at(strs, at, crate::profile::MAX_NAME);
        let name = std::str::from_utf8(bytes).ok().filter(|n| !n.is_empty())?;
        Some(crate::profile::clean_name(&format!("{name}@plt")).into())
    };
    relocs
        .chunks_exact(RELA_SIZE)
        .map(|r| {
            let info = u64_at(r, 8).unwrap_or(0);
            let name = name_of((info >> 32) as usize).unwrap_or_else(|| PLT.into());
            (u64_at(r, 0).unwrap_or(0), name)
        })
        .collect()
}

/// The stub holding virtual address `vaddr`, in `stubs` (sorted).
pub(crate) fn find(stubs: &[Stub], vaddr: u64) -> Option<&Stub> {
    let i = stubs.partition_point(|s| s.range.start <= vaddr);
    stubs[..i].last().filter(|s| s.range.contains(&vaddr))
}

#[cfg(test)]
#[path = "plt_tests.rs"]
mod tests;
