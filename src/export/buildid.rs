//! GNU build ids of ELF files, for pprof and OTLP mappings: servers use
//! them to find debug information and to tell builds apart.
//!
//! Read here from the note sections (owner `GNU`, type
//! `NT_GNU_BUILD_ID`). blazesym's reader matches the type alone and so
//! returns a SystemTap probe note (also type 3) as the build id of files
//! that have probes but no build id; this one checks the owner.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

const SHT_NOTE: u32 = 7;
const NT_GNU_BUILD_ID: u32 = 3;
/// Note sections larger than this are not read (build-id notes are tiny).
const MAX_NOTE: u64 = 1 << 16;

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// The build id in a note section's contents.
pub fn from_notes(mut notes: &[u8]) -> Option<Vec<u8>> {
    let align = |n: u32| (n as usize).div_ceil(4) * 4;
    while notes.len() >= 12 {
        let namesz = u32_at(notes, 0)?;
        let descsz = u32_at(notes, 4)?;
        let kind = u32_at(notes, 8)?;
        let name = notes.get(12..12 + namesz as usize)?;
        let desc_at = 12 + align(namesz);
        let desc = notes.get(desc_at..desc_at + descsz as usize)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" && !desc.is_empty() {
            return Some(desc.to_vec());
        }
        notes = notes.get(desc_at + align(descsz)..)?;
    }
    None
}

/// The GNU build id of a 64-bit little-endian ELF file, as hex.
pub fn read(path: &Path) -> Option<String> {
    let mut f = File::open(path).ok()?;
    let mut eh = [0u8; 64];
    f.read_exact(&mut eh).ok()?;
    // 64-bit (class 2), little-endian (data 1).
    if &eh[..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let shoff = u64_at(&eh, 0x28)?;
    let shentsize = u16_at(&eh, 0x3a)? as u64;
    let shnum = u16_at(&eh, 0x3c)? as u64;
    if shentsize < 64 || shnum == 0 || shnum > 4096 {
        return None;
    }
    let mut sh = vec![0u8; (shentsize * shnum) as usize];
    f.seek(SeekFrom::Start(shoff)).ok()?;
    f.read_exact(&mut sh).ok()?;
    for i in 0..shnum as usize {
        let s = &sh[i * shentsize as usize..];
        if u32_at(s, 4)? != SHT_NOTE {
            continue;
        }
        let (offset, size) = (u64_at(s, 0x18)?, u64_at(s, 0x20)?);
        if size > MAX_NOTE {
            continue;
        }
        let mut notes = vec![0u8; size as usize];
        f.seek(SeekFrom::Start(offset)).ok()?;
        f.read_exact(&mut notes).ok()?;
        if let Some(id) = from_notes(&notes) {
            return Some(id.iter().map(|b| format!("{b:02x}")).collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend((name.len() as u32).to_le_bytes());
        v.extend((desc.len() as u32).to_le_bytes());
        v.extend(kind.to_le_bytes());
        v.extend(name);
        v.resize(v.len().div_ceil(4) * 4, 0);
        v.extend(desc);
        v.resize(v.len().div_ceil(4) * 4, 0);
        v
    }

    #[test]
    fn skips_systemtap_notes_of_the_same_type() {
        let mut notes = note(b"stapsdt\0", 3, b"probe descriptor bytes");
        notes.extend(note(b"GNU\0", 1, &[0, 0, 0, 0]));
        assert_eq!(from_notes(&notes), None);
        notes.extend(note(b"GNU\0", 3, &[0xab, 0xcd, 0xef]));
        assert_eq!(from_notes(&notes), Some(vec![0xab, 0xcd, 0xef]));
    }

    #[test]
    fn matches_readelf_on_libc() {
        let libc = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
        if !libc.exists() {
            return;
        }
        let out = std::process::Command::new("readelf")
            .arg("-n")
            .arg(libc)
            .output();
        let Ok(out) = out else { return };
        let text = String::from_utf8_lossy(&out.stdout);
        let expected = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Build ID: "))
            .map(str::to_string);
        assert!(expected.is_some(), "readelf shows libc's build id");
        assert_eq!(read(libc), expected);
    }
}
