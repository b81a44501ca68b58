//! Listing the USDT (SDT) probes a binary carries, from its
//! `.note.stapsdt` ELF notes, so that `u:lib:probe` globs can be matched
//! against probe names. Attaching (addresses, semaphores) is libbpf's job.

use std::fs::File;
use std::path::Path;

use crate::elf::{Elf, FileSource, Layout, Notes, Source};
use crate::error::{Error, Result};

/// One probe: `provider:name`. A probe used at several places in the
/// binary is listed once; libbpf attaches to every site.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct UsdtProbe {
    pub provider: String,
    pub name: String,
}

const NT_STAPSDT: u32 = 3;
/// A `.note.stapsdt` section read at most (some 100 bytes a probe site).
const MAX_NOTES: u64 = 16 << 20;

fn cstr(b: &[u8]) -> Option<(&str, &[u8])> {
    let end = b.iter().position(|&c| c == 0)?;
    Some((std::str::from_utf8(&b[..end]).ok()?, &b[end + 1..]))
}

/// The probes of the ELF file at `path`, sorted and deduplicated.
pub fn probes(path: &Path) -> Result<Vec<UsdtProbe>> {
    let file = File::open(path).map_err(|source| Error::Io {
        what: format!("reading {}", path.display()),
        source,
    })?;
    FileSource::new(&file).and_then(parse).ok_or_else(|| {
        Error::Unsupported(format!(
            "{} is not an ELF file: cannot list its USDT probes",
            path.display()
        ))
    })
}

/// Parses the probes out of an ELF file; `None` when it is not one.
pub fn parse(src: impl Source) -> Option<Vec<UsdtProbe>> {
    let elf = Elf::parse(src)?;
    let mut out = Vec::new();
    for s in elf.sections.iter().filter(|s| s.name == b".note.stapsdt") {
        if let Some(notes) = elf.data(s, MAX_NOTES) {
            parse_notes(elf.layout, &notes, &mut out);
        }
    }
    out.sort();
    out.dedup();
    Some(out)
}

fn parse_notes(layout: Layout, notes: &[u8], out: &mut Vec<UsdtProbe>) {
    let probes =
        Notes::new(layout, notes).filter(|n| n.kind == NT_STAPSDT && n.owner == b"stapsdt");
    for n in probes {
        // pc, base and semaphore addresses (words of the file's class),
        // then three strings.
        let words = if layout.is64 { 24 } else { 12 };
        let Some((provider, rest)) = n.desc.get(words..).and_then(cstr) else {
            continue;
        };
        let Some((name, _)) = cstr(rest) else {
            continue;
        };
        out.push(UsdtProbe {
            provider: provider.to_string(),
            name: name.to_string(),
        });
    }
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
        parse_notes(Layout::HOST, &notes, &mut out);
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
        assert_eq!(parse(&b"#!/bin/sh\n"[..]), None);
        assert_eq!(parse(&b""[..]), None);
        // Truncated header.
        assert_eq!(parse(&b"\x7fELF\x02\x01\x01\x00"[..]), None);
    }
}
