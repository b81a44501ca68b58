//! Just enough ELF reading for unwind tables: the load segments (to turn a
//! mapping's file offset into the object's virtual addresses), the
//! sections holding call-frame information, and the GNU build id that
//! names an object across paths and runs. 64-bit little-endian x86-64
//! and arm64 only (the unwinder's machines); anything else is an error,
//! never a panic.

use std::ops::Range;

/// A loadable segment (`PT_LOAD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub executable: bool,
}

impl From<&crate::elf::Segment> for Segment {
    fn from(s: &crate::elf::Segment) -> Segment {
        Segment {
            offset: s.offset,
            vaddr: s.vaddr,
            filesz: s.filesz,
            executable: s.executable(),
        }
    }
}

/// A section's place in the file and in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub addr: u64,
    pub file: Range<usize>,
}

/// The architectures whose call-frame information the unwinder reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Machine {
    #[default]
    X86_64,
    Aarch64,
}

impl Machine {
    /// The machine flare runs on: the only one whose processes it walks.
    #[cfg(target_arch = "aarch64")]
    pub const HOST: Machine = Machine::Aarch64;
    #[cfg(not(target_arch = "aarch64"))]
    pub const HOST: Machine = Machine::X86_64;

    /// A return address as the machine stores it, made an address: arm64
    /// user addresses have 48 bits, and a return address's bits above
    /// hold its pointer-authentication code (bpf/unwind.h
    /// UNWIND_ADDR_MASK).
    pub fn strip_return_address(self, ra: u64) -> u64 {
        match self {
            Machine::Aarch64 => ra & ((1 << 48) - 1),
            Machine::X86_64 => ra,
        }
    }
}

/// What the unwinder needs from one ELF file.
#[derive(Clone, Debug, Default)]
pub struct Elf {
    pub machine: Machine,
    pub segments: Vec<Segment>,
    pub eh_frame: Option<Section>,
    pub debug_frame: Option<Section>,
    /// `.plt` and `.iplt`: their stubs jump with x30 untouched, and
    /// arm64's linkers write no call-frame information for them.
    pub plt: Vec<Section>,
    pub build_id: Option<Vec<u8>>,
}

impl Elf {
    /// Reads the headers of an ELF image held in `d` (a mapped file, or
    /// the vDSO's bytes). `None` when it is not a 64-bit little-endian
    /// x86-64 or arm64 ELF file or its headers are cut short.
    pub fn parse(d: &[u8]) -> Option<Elf> {
        let file = crate::elf::Elf::parse(d)?;
        if file.layout != crate::elf::Layout::HOST {
            return None;
        }
        let machine = match file.machine {
            crate::elf::EM_X86_64 => Machine::X86_64,
            crate::elf::EM_AARCH64 => Machine::Aarch64,
            _ => return None,
        };
        let mut elf = Elf {
            machine,
            segments: file.loads().map(Segment::from).collect(),
            build_id: file.build_id(),
            ..Elf::default()
        };
        for s in file.sections.iter().filter(|s| s.has_bytes()) {
            let (Ok(off), Ok(size)) = (usize::try_from(s.offset), usize::try_from(s.size)) else {
                continue;
            };
            let Some(end) = off.checked_add(size).filter(|&end| end <= d.len()) else {
                continue;
            };
            let section = Some(Section {
                addr: s.addr,
                file: off..end,
            });
            match s.name.as_slice() {
                b".eh_frame" => elf.eh_frame = section,
                b".debug_frame" => elf.debug_frame = section,
                b".plt" | b".iplt" => elf.plt.extend(section),
                _ => {}
            }
        }
        Some(elf)
    }

    /// The virtual address the byte at file offset `offset` is loaded at.
    pub fn vaddr_of_offset(&self, offset: u64) -> Option<u64> {
        vaddr_of_offset(&self.segments, offset)
    }
}

/// The virtual address file offset `offset` is loaded at, from the load
/// segment holding it. A mapping starts at a page boundary, which may be
/// before its segment's first byte (lld pads segments apart in memory but
/// not in the file), so segments are taken from their page's start;
/// executable segments win where two share a page.
pub fn vaddr_of_offset(segments: &[Segment], offset: u64) -> Option<u64> {
    let holds = |s: &&Segment| offset >= s.offset & !0xfff && offset < s.offset + s.filesz.max(1);
    let s = segments
        .iter()
        .filter(|s| s.executable)
        .find(holds)
        .or_else(|| segments.iter().find(holds))?;
    Some(s.vaddr.wrapping_sub(s.offset).wrapping_add(offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_addresses_lose_arm64_pointer_authentication_codes() {
        // A PAC-signed return address (code in bits 48-54, as
        // -mbranch-protection=standard leaves it in x30 and on the stack).
        let signed = 0x007f_aaaa_dead_beefu64;
        assert_eq!(
            Machine::Aarch64.strip_return_address(signed),
            0x0000_aaaa_dead_beef
        );
        assert_eq!(Machine::X86_64.strip_return_address(signed), signed);
    }

    #[test]
    fn libc_has_segments_eh_frame_and_build_id() {
        let d = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6").expect("libc");
        let elf = Elf::parse(&d).expect("libc is ELF");
        assert!(elf.segments.iter().any(|s| s.executable));
        let eh = elf.eh_frame.as_ref().expect(".eh_frame");
        assert!(eh.file.len() > 1000);
        assert_eq!(elf.build_id.as_ref().map(Vec::len), Some(20));
        // An offset in the text segment maps back into it.
        let text = elf.segments.iter().find(|s| s.executable).unwrap();
        assert_eq!(elf.vaddr_of_offset(text.offset + 16), Some(text.vaddr + 16));
    }

    #[test]
    fn a_mapping_may_start_before_its_segment() {
        // lld: text at file 0x18670, vaddr 0x19670; mapped from 0x18000.
        let segs = [
            Segment {
                offset: 0,
                vaddr: 0,
                filesz: 0x1866c,
                executable: false,
            },
            Segment {
                offset: 0x18670,
                vaddr: 0x19670,
                filesz: 0x452d0,
                executable: true,
            },
        ];
        assert_eq!(vaddr_of_offset(&segs, 0x18000), Some(0x19000));
        assert_eq!(vaddr_of_offset(&segs, 0), Some(0));
    }

    #[test]
    fn garbage_is_not_elf() {
        assert!(Elf::parse(b"").is_none());
        assert!(Elf::parse(b"\x7fELF\x02\x01").is_none());
        let mut cut = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6").expect("libc");
        cut.truncate(200);
        // Cut headers: either None or no sections, never a panic.
        if let Some(e) = Elf::parse(&cut) {
            assert!(e.eh_frame.is_none());
        }
    }
}
