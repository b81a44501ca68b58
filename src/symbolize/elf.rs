//! The little of ELF the symbolizer reads itself: the loadable segments
//! (to turn a file offset into the virtual address that symbols and a
//! separate debug file use), the `.gnu_debuglink` section and the PLT's
//! stubs ([`super::plt`]).

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::plt::{self, SectionHeader, Stub};
use crate::elf::{Elf, FileSource, Segment};

/// What the symbolizer knows of an ELF file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The `PT_LOAD` segments.
    segments: Vec<Segment>,
    /// `.gnu_debuglink`: a separate debug file's name and CRC.
    pub(crate) debuglink: Option<(String, u32)>,
    /// The machine, for a 64-bit little-endian object (whose PLT stubs
    /// [`plt`] reads).
    machine: Option<u16>,
    sections: Vec<SectionHeader>,
}

/// `len` bytes of `file` from `at`.
fn read(file: &File, at: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, at).ok()?;
    Some(buf)
}

impl Layout {
    /// The layout of ELF file `file`; `None` if it is not one.
    pub(crate) fn read(file: &File) -> Option<Layout> {
        let elf = Elf::parse(FileSource::new(file)?)?;
        let debuglink = elf
            .section(b".gnu_debuglink")
            .and_then(|s| elf.bounded(s.offset, s.size.min(4096), 4096))
            .and_then(|data| {
                let end = data.iter().position(|&c| c == 0)?;
                let name = String::from_utf8(data[..end].to_vec()).ok()?;
                let crc_at = (end + 4) & !3;
                Some((name, elf.layout.u32(&data, crc_at)?))
            });
        let machine = (elf.layout == crate::elf::Layout::HOST).then_some(elf.machine);
        Some(Layout {
            segments: elf.loads().copied().collect(),
            debuglink,
            machine,
            sections: elf.sections,
        })
    }

    /// Whether virtual address `vaddr` lies in a PLT section.
    pub(crate) fn in_plt(&self, vaddr: u64) -> bool {
        self.machine.is_some()
            && self.sections.iter().any(|s| {
                plt::SECTIONS.contains(&s.name.as_slice())
                    && (s.addr..s.addr.saturating_add(s.size)).contains(&vaddr)
            })
    }

    /// The PLT's stubs, named by the symbols they jump to.
    pub(crate) fn plt_stubs(&self, file: &File) -> Vec<Stub> {
        match self.machine {
            Some(machine) => plt::stubs(machine, &self.sections, |at, len| read(file, at, len)),
            None => Vec::new(),
        }
    }

    /// The virtual address of file offset `offset`.
    pub(crate) fn vaddr(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| (s.offset..s.offset.saturating_add(s.filesz)).contains(&offset))
            .map(|s| offset - s.offset + s.vaddr)
    }
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
