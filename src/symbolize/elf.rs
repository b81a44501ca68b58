//! The little of ELF the symbolizer reads itself: the loadable segments
//! (to turn a file offset into the virtual address that symbols and a
//! separate debug file use), the `.gnu_debuglink` section and the PLT's
//! stubs ([`super::plt`]).

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::plt::{self, SectionHeader, Stub};

/// A `PT_LOAD` segment: file range and where it is loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    offset: u64,
    filesz: u64,
    vaddr: u64,
}

/// The parts of an ELF file's headers the symbolizer needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Layout {
    segments: Vec<Segment>,
    /// `.gnu_debuglink`: the debug file's name and CRC-32.
    pub(crate) debuglink: Option<(String, u32)>,
    /// The machine, for a 64-bit little-endian object (the only ones
    /// whose PLT stubs are named).
    machine: Option<u16>,
    /// The section headers, kept for naming PLT stubs when a sample
    /// first lands in the PLT.
    sections: Vec<SectionHeader>,
}

fn read(file: &File, at: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, at).ok()?;
    Some(buf)
}

struct Reader {
    is64: bool,
    le: bool,
}

impl Reader {
    fn u16(&self, b: &[u8], at: usize) -> Option<u64> {
        let a: [u8; 2] = b.get(at..at + 2)?.try_into().ok()?;
        Some(if self.le {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        } as u64)
    }
    fn u32(&self, b: &[u8], at: usize) -> Option<u64> {
        let a: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(if self.le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        } as u64)
    }
    fn u64(&self, b: &[u8], at: usize) -> Option<u64> {
        let a: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
        Some(if self.le {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        })
    }
    /// An address-sized field (`Elf32_Addr`/`Elf64_Addr`, `_Off`).
    fn word(&self, b: &[u8], at32: usize, at64: usize) -> Option<u64> {
        if self.is64 {
            self.u64(b, at64)
        } else {
            self.u32(b, at32)
        }
    }
}

const PT_LOAD: u64 = 1;

impl Layout {
    /// Reads the layout of an ELF file; `None` for anything else.
    pub(crate) fn read(file: &File) -> Option<Layout> {
        let ehdr = read(file, 0, 64)?;
        if ehdr.get(..4)? != b"\x7fELF" {
            return None;
        }
        let r = Reader {
            is64: ehdr[4] == 2,
            le: ehdr[5] == 1,
        };
        let phoff = r.word(&ehdr, 28, 32)?;
        let (phentsize, phnum) = if r.is64 {
            (r.u16(&ehdr, 54)?, r.u16(&ehdr, 56)?)
        } else {
            (r.u16(&ehdr, 42)?, r.u16(&ehdr, 44)?)
        };
        let phdrs = read(file, phoff, (phentsize * phnum) as usize)?;
        let mut segments = Vec::new();
        for i in 0..phnum as usize {
            let p = &phdrs[i * phentsize as usize..];
            if r.u32(p, 0)? != PT_LOAD {
                continue;
            }
            segments.push(if r.is64 {
                Segment {
                    offset: r.u64(p, 8)?,
                    vaddr: r.u64(p, 16)?,
                    filesz: r.u64(p, 32)?,
                }
            } else {
                Segment {
                    offset: r.u32(p, 4)?,
                    vaddr: r.u32(p, 8)?,
                    filesz: r.u32(p, 16)?,
                }
            });
        }
        let sections = sections(file, &r, &ehdr).unwrap_or_default();
        let debuglink = debuglink(file, &r, &sections);
        let machine = r.u16(&ehdr, 18).filter(|_| r.is64 && r.le);
        Some(Layout {
            segments,
            debuglink,
            machine: machine.map(|m| m as u16),
            sections,
        })
    }

    /// True when virtual address `vaddr` lies in a PLT section of a
    /// 64-bit little-endian object.
    pub(crate) fn in_plt(&self, vaddr: u64) -> bool {
        self.machine.is_some()
            && self.sections.iter().any(|s| {
                plt::SECTIONS.contains(&s.name.as_slice())
                    && (s.addr..s.addr.saturating_add(s.size)).contains(&vaddr)
            })
    }

    /// The PLT's stubs, sorted, read from `file` (this layout's).
    pub(crate) fn plt_stubs(&self, file: &File) -> Vec<Stub> {
        match self.machine {
            Some(machine) => plt::stubs(machine, &self.sections, |at, len| read(file, at, len)),
            None => Vec::new(),
        }
    }

    /// The virtual address a file offset is loaded at.
    pub(crate) fn vaddr(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| (s.offset..s.offset + s.filesz).contains(&offset))
            .map(|s| offset - s.offset + s.vaddr)
    }
}

/// The section headers, with their names (at most 4096 sections).
fn sections(file: &File, r: &Reader, ehdr: &[u8]) -> Option<Vec<SectionHeader>> {
    let shoff = r.word(ehdr, 32, 40)?;
    let (shentsize, shnum, shstrndx) = if r.is64 {
        (r.u16(ehdr, 58)?, r.u16(ehdr, 60)?, r.u16(ehdr, 62)?)
    } else {
        (r.u16(ehdr, 46)?, r.u16(ehdr, 48)?, r.u16(ehdr, 50)?)
    };
    if shoff == 0 || shnum == 0 || shnum > 4096 {
        return None;
    }
    let shdrs = read(file, shoff, (shentsize * shnum) as usize)?;
    // Section `i`, its name the offset in the string table for now.
    let section = |i: u64| -> Option<(u64, SectionHeader)> {
        let s = shdrs.get((i * shentsize) as usize..)?;
        let header = SectionHeader {
            name: Vec::new(),
            addr: r.word(s, 12, 16)?,
            offset: r.word(s, 16, 24)?,
            size: r.word(s, 20, 32)?,
            link: r.u32(s, if r.is64 { 40 } else { 24 })? as u32,
            entsize: r.word(s, 36, 56)?,
        };
        Some((r.u32(s, 0)?, header))
    };
    let (_, strtab) = section(shstrndx)?;
    let names = read(file, strtab.offset, strtab.size.min(1 << 20) as usize)?;
    (0..shnum)
        .map(|i| {
            let (name, header) = section(i)?;
            let name = names
                .get(name as usize..)
                .and_then(|n| n.split(|&c| c == 0).next())
                .unwrap_or_default()
                .to_vec();
            Some(SectionHeader { name, ..header })
        })
        .collect()
}

/// The `.gnu_debuglink` section: a file name, padding, a CRC-32.
fn debuglink(file: &File, r: &Reader, sections: &[SectionHeader]) -> Option<(String, u32)> {
    let s = sections.iter().find(|s| s.name == b".gnu_debuglink")?;
    let data = read(file, s.offset, s.size.min(4096) as usize)?;
    let end = data.iter().position(|&c| c == 0)?;
    let name = String::from_utf8(data[..end].to_vec()).ok()?;
    let crc_at = (end + 4) & !3;
    Some((name, r.u32(&data, crc_at)? as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_text_is_loaded() {
        let exe = std::env::current_exe().expect("own executable");
        let file = File::open(exe).expect("open own executable");
        let layout = Layout::read(&file).expect("an ELF file");
        assert!(!layout.segments.is_empty());
        // The first loadable segment starts at offset 0.
        let first = layout.segments[0];
        assert_eq!(layout.vaddr(first.offset), Some(first.vaddr));
        assert_eq!(layout.vaddr(u64::MAX / 2), None);
    }
}
