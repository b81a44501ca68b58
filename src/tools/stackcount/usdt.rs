//! Listing the USDT (SDT) probes a binary carries, from its
//! `.note.stapsdt` ELF notes, so that `u:lib:probe` globs can be matched
//! against probe names. Attaching (addresses, semaphores) is libbpf's job.

use std::fs;
use std::path::Path;

use crate::error::{Error, Result};

/// One probe: `provider:name`. A probe used at several places in the
/// binary is listed once; libbpf attaches to every site.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct UsdtProbe {
    pub provider: String,
    pub name: String,
}

const NT_STAPSDT: u32 = 3;

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}
fn cstr(b: &[u8]) -> Option<(&str, &[u8])> {
    let end = b.iter().position(|&c| c == 0)?;
    Some((std::str::from_utf8(&b[..end]).ok()?, &b[end + 1..]))
}

/// The probes of the ELF file at `path`, sorted and deduplicated.
pub fn probes(path: &Path) -> Result<Vec<UsdtProbe>> {
    let data = fs::read(path).map_err(|source| Error::Io {
        what: format!("reading {}", path.display()),
        source,
    })?;
    parse(&data).ok_or_else(|| {
        Error::Unsupported(format!(
            "{} is not a 64-bit little-endian ELF file: cannot list its USDT probes",
            path.display()
        ))
    })
}

/// Parses the probes out of a 64-bit little-endian ELF image; `None` when
/// it is not one (or is truncated).
pub fn parse(elf: &[u8]) -> Option<Vec<UsdtProbe>> {
    if elf.get(..4)? != b"\x7fELF" || *elf.get(4)? != 2 || *elf.get(5)? != 1 {
        return None;
    }
    let shoff = u64_at(elf, 0x28)? as usize;
    let shentsize = u16_at(elf, 0x3a)? as usize;
    let shnum = u16_at(elf, 0x3c)? as usize;
    let shstrndx = u16_at(elf, 0x3e)? as usize;
    let section = |i: usize| -> Option<(u32, usize, usize)> {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        let name = u32_at(elf, h)?;
        let off = u64_at(elf, h + 0x18)? as usize;
        let size = u64_at(elf, h + 0x20)? as usize;
        Some((name, off, size))
    };
    let (_, stroff, strsize) = section(shstrndx)?;
    let strtab = elf.get(stroff..stroff.checked_add(strsize)?)?;
    let mut out = Vec::new();
    for i in 0..shnum {
        let (name, off, size) = section(i)?;
        let Some((".note.stapsdt", _)) = strtab.get(name as usize..).and_then(cstr) else {
            continue;
        };
        let notes = elf.get(off..off.checked_add(size)?)?;
        parse_notes(notes, &mut out)?;
    }
    out.sort();
    out.dedup();
    Some(out)
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn parse_notes(mut notes: &[u8], out: &mut Vec<UsdtProbe>) -> Option<()> {
    while notes.len() >= 12 {
        let namesz = u32_at(notes, 0)? as usize;
        let descsz = u32_at(notes, 4)? as usize;
        let kind = u32_at(notes, 8)?;
        let desc_at = 12 + align4(namesz);
        let owner = notes.get(12..12 + namesz)?;
        let desc = notes.get(desc_at..desc_at + descsz)?;
        if kind == NT_STAPSDT && owner == b"stapsdt\0" {
            // pc, base and semaphore addresses, then three strings.
            let (provider, rest) = cstr(desc.get(24..)?)?;
            let (name, _) = cstr(rest)?;
            out.push(UsdtProbe {
                provider: provider.to_string(),
                name: name.to_string(),
            });
        }
        notes = notes.get(desc_at + align4(descsz)..)?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(provider: &str, name: &str) -> Vec<u8> {
        let mut desc = vec![0u8; 24];
        for s in [provider, name, "-4@%edi"] {
            desc.extend_from_slice(s.as_bytes());
            desc.push(0);
        }
        let mut n = Vec::new();
        n.extend_from_slice(&8u32.to_le_bytes());
        n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        n.extend_from_slice(&NT_STAPSDT.to_le_bytes());
        n.extend_from_slice(b"stapsdt\0");
        n.extend_from_slice(&desc);
        while n.len() % 4 != 0 {
            n.push(0);
        }
        n
    }

    #[test]
    fn notes_yield_probes_once_each() {
        let mut notes = note("flare", "tick");
        notes.extend(note("flare", "tock"));
        notes.extend(note("flare", "tick"));
        let mut out = Vec::new();
        parse_notes(&notes, &mut out).unwrap();
        out.sort();
        out.dedup();
        let names: Vec<_> = out
            .iter()
            .map(|p| format!("{}:{}", p.provider, p.name))
            .collect();
        assert_eq!(names, ["flare:tick", "flare:tock"]);
    }

    #[test]
    fn not_elf_is_refused() {
        assert_eq!(parse(b"#!/bin/sh\n"), None);
        assert_eq!(parse(b""), None);
        // Truncated header.
        assert_eq!(parse(b"\x7fELF\x02\x01\x01\x00"), None);
    }
}
