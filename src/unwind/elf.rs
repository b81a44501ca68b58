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

const PT_LOAD: u32 = 1;
const PF_X: u32 = 1;
const SHT_NOBITS: u32 = 8;
const SHF_COMPRESSED: u64 = 0x800;
const NT_GNU_BUILD_ID: u32 = 3;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

fn u16_at(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(d: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(d.get(at..at + 8)?.try_into().ok()?))
}

impl Elf {
    /// Reads the headers of an ELF image held in `d` (a mapped file, or
    /// the vDSO's bytes). `None` when it is not a 64-bit little-endian
    /// x86-64 or arm64 ELF file or its headers are cut short.
    pub fn parse(d: &[u8]) -> Option<Elf> {
        if d.get(..4)? != b"\x7fELF" || *d.get(4)? != 2 || *d.get(5)? != 1 {
            return None;
        }
        let machine = match u16_at(d, 18)? {
            EM_X86_64 => Machine::X86_64,
            EM_AARCH64 => Machine::Aarch64,
            _ => return None,
        };
        let phoff = u64_at(d, 32)? as usize;
        let shoff = u64_at(d, 40)? as usize;
        let phentsize = u16_at(d, 54)? as usize;
        let phnum = u16_at(d, 56)? as usize;
        let shentsize = u16_at(d, 58)? as usize;
        let shnum = u16_at(d, 60)? as usize;
        let shstrndx = u16_at(d, 62)? as usize;
        let mut elf = Elf {
            machine,
            ..Elf::default()
        };
        for i in 0..phnum {
            let p = phoff.checked_add(i.checked_mul(phentsize)?)?;
            let kind = u32_at(d, p)?;
            let flags = u32_at(d, p + 4)?;
            if kind == PT_LOAD {
                elf.segments.push(Segment {
                    offset: u64_at(d, p + 8)?,
                    vaddr: u64_at(d, p + 16)?,
                    filesz: u64_at(d, p + 32)?,
                    executable: flags & PF_X != 0,
                });
            } else if kind == 4 && elf.build_id.is_none() {
                // PT_NOTE: the build id is found here even without
                // section headers (as in the vDSO of some kernels).
                let off = u64_at(d, p + 8)? as usize;
                let size = u64_at(d, p + 32)? as usize;
                elf.build_id = d.get(off..off.checked_add(size)?).and_then(build_id);
            }
        }
        if shoff == 0 || shnum == 0 || shentsize < 64 {
            return Some(elf);
        }
        let sh = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
        let strtab = sh(shstrndx)?;
        let str_off = u64_at(d, strtab + 24)? as usize;
        for i in 0..shnum {
            let s = sh(i)?;
            let name_at = str_off.checked_add(u32_at(d, s)? as usize)?;
            let name = d.get(name_at..)?.split(|&b| b == 0).next()?;
            let kind = u32_at(d, s + 4)?;
            let flags = u64_at(d, s + 8)?;
            let addr = u64_at(d, s + 16)?;
            let off = u64_at(d, s + 24)? as usize;
            let size = u64_at(d, s + 32)? as usize;
            if kind == SHT_NOBITS || flags & SHF_COMPRESSED != 0 {
                continue;
            }
            let file = off..off.checked_add(size)?;
            if file.end > d.len() {
                continue;
            }
            let section = Some(Section { addr, file });
            match name {
                b".eh_frame" => elf.eh_frame = section,
                b".debug_frame" => elf.debug_frame = section,
                b".plt" | b".iplt" => elf.plt.extend(section),
                b".note.gnu.build-id" if elf.build_id.is_none() => {
                    elf.build_id = section.and_then(|s| build_id(&d[s.file]));
                }
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

/// The GNU build id among the notes in `notes`.
fn build_id(notes: &[u8]) -> Option<Vec<u8>> {
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let namesz = u32_at(notes, at)? as usize;
        let descsz = u32_at(notes, at + 4)? as usize;
        let kind = u32_at(notes, at + 8)?;
        let name_at = at + 12;
        let desc_at = name_at.checked_add(namesz.checked_add(3)? & !3)?;
        let next = desc_at.checked_add(descsz.checked_add(3)? & !3)?;
        if kind == NT_GNU_BUILD_ID && notes.get(name_at..name_at + namesz)? == b"GNU\0" {
            return notes.get(desc_at..desc_at + descsz).map(<[u8]>::to_vec);
        }
        at = next;
    }
    None
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
