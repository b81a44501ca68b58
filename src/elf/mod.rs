//! One ELF reader for the whole tree, bounded for files flare does not
//! trust: any user's mapped executables and libraries are read by a root
//! profiler. Headers, section names, notes, symbol tables and data are
//! read in pieces of stated sizes at most ([`MAX_HEADERS`], a caller's
//! `max` for data), names are looked for within [`MAX_NAME`] bytes, and
//! every offset and count is checked: a lying file gives `None` or fewer
//! answers, never a panic, a huge allocation or a quadratic scan.
//!
//! The `object` crate was weighed and left: its string tables search a
//! name's end through the whole rest of the table, the quadratic scan a
//! file of 100,000 symbols naming one 16 MB string turns into hours.
//!
//! The bytes come from a [`Source`]: a file read piece by piece, or an
//! image already in memory (a mapped file, the vDSO) read in place.

mod notes;
mod symbols;

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;

pub use notes::{build_id_in_notes, Note, Notes};
pub use symbols::{each_symbol, Symbol, MAX_SYMBOL_NAME};

/// Program and section headers read of a file at most.
pub const MAX_HEADERS: u64 = 4 << 20;
/// The longest section name looked at.
pub const MAX_NAME: usize = 256;
/// Section header table's names read at most.
const MAX_SECTION_NAMES: u64 = 1 << 20;

pub const PT_LOAD: u32 = 1;
pub const PT_NOTE: u32 = 4;
pub const PF_X: u32 = 1;
pub const SHT_SYMTAB: u32 = 2;
pub const SHT_NOTE: u32 = 7;
pub const SHT_NOBITS: u32 = 8;
pub const SHT_DYNSYM: u32 = 11;
pub const SHF_COMPRESSED: u64 = 0x800;
pub const EM_X86_64: u16 = 62;
pub const EM_AARCH64: u16 = 183;
/// The host's machine (the only one whose processes flare walks).
pub const EM_HOST: u16 = if cfg!(target_arch = "aarch64") {
    EM_AARCH64
} else {
    EM_X86_64
};

/// Where an ELF file's bytes come from.
pub trait Source {
    /// The file's size in bytes.
    fn size(&self) -> u64;
    /// `len` bytes from `offset`: `None` past the end or on an error.
    fn bytes(&self, offset: u64, len: u64) -> Option<Cow<'_, [u8]>>;
}

impl Source for [u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }

    fn bytes(&self, offset: u64, len: u64) -> Option<Cow<'_, [u8]>> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.get(start..end).map(Cow::Borrowed)
    }
}

impl<T: Source + ?Sized> Source for &T {
    fn size(&self) -> u64 {
        (**self).size()
    }

    fn bytes(&self, offset: u64, len: u64) -> Option<Cow<'_, [u8]>> {
        (**self).bytes(offset, len)
    }
}

/// A file, read with `pread` piece by piece.
pub struct FileSource<'f> {
    file: &'f File,
    size: u64,
}

impl<'f> FileSource<'f> {
    pub fn new(file: &'f File) -> Option<FileSource<'f>> {
        let size = file.metadata().ok()?.len();
        Some(FileSource { file, size })
    }
}

impl Source for FileSource<'_> {
    fn size(&self) -> u64 {
        self.size
    }

    fn bytes(&self, offset: u64, len: u64) -> Option<Cow<'_, [u8]>> {
        if offset.checked_add(len)? > self.size {
            return None;
        }
        let mut buf = vec![0u8; usize::try_from(len).ok()?];
        self.file.read_exact_at(&mut buf, offset).ok()?;
        Some(Cow::Owned(buf))
    }
}

/// How the file's words are laid out: its class and byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub is64: bool,
    pub little: bool,
}

impl Layout {
    /// The layout of the host's objects (x86-64 and arm64 alike): 64-bit,
    /// little-endian.
    pub const HOST: Layout = Layout {
        is64: true,
        little: true,
    };

    pub fn u16(self, b: &[u8], at: usize) -> Option<u16> {
        let a: [u8; 2] = b.get(at..at.checked_add(2)?)?.try_into().ok()?;
        Some(if self.little {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        })
    }

    pub fn u32(self, b: &[u8], at: usize) -> Option<u32> {
        let a: [u8; 4] = b.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if self.little {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        })
    }

    pub fn u64(self, b: &[u8], at: usize) -> Option<u64> {
        let a: [u8; 8] = b.get(at..at.checked_add(8)?)?.try_into().ok()?;
        Some(if self.little {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        })
    }

    /// An address-sized field: at `at32` in a 32-bit file, `at64` in a
    /// 64-bit one.
    pub fn word(self, b: &[u8], at32: usize, at64: usize) -> Option<u64> {
        if self.is64 {
            self.u64(b, at64)
        } else {
            self.u32(b, at32).map(u64::from)
        }
    }
}

/// A program header (`PT_LOAD`, `PT_NOTE`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub kind: u32,
    pub flags: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
}

impl Segment {
    pub fn executable(&self) -> bool {
        self.flags & PF_X != 0
    }
}

/// A section header, with its name (cut at [`MAX_NAME`] bytes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Section {
    pub name: Vec<u8>,
    pub kind: u32,
    pub flags: u64,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
    pub entsize: u64,
}

impl Section {
    /// Whether the file holds the section's bytes as they are loaded
    /// (not `SHT_NOBITS`, not compressed).
    pub fn has_bytes(&self) -> bool {
        self.kind != SHT_NOBITS && self.flags & SHF_COMPRESSED == 0
    }
}

/// A symbol table's entries and the strings its names are in.
pub type SymbolTable<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

/// An ELF file's headers, read from a [`Source`].
pub struct Elf<S> {
    src: S,
    pub layout: Layout,
    /// `e_type`: 2 an executable, 3 a shared object (or PIE).
    pub kind: u16,
    pub machine: u16,
    pub segments: Vec<Segment>,
    pub sections: Vec<Section>,
}

impl<S: Source> Elf<S> {
    /// The headers of the ELF file in `src` (any class, byte order and
    /// machine); `None` if it is not one, or its ELF header is cut short.
    /// Program or section headers past the bounds are left out.
    pub fn parse(src: S) -> Option<Elf<S>> {
        let ident = src.bytes(0, 16)?;
        if ident.get(..4)? != b"\x7fELF" {
            return None;
        }
        let layout = Layout {
            is64: match ident[4] {
                1 => false,
                2 => true,
                _ => return None,
            },
            little: match ident[5] {
                1 => true,
                2 => false,
                _ => return None,
            },
        };
        drop(ident);
        let h = src
            .bytes(0, if layout.is64 { 64 } else { 52 })?
            .into_owned();
        let l = layout;
        let kind = l.u16(&h, 16)?;
        let machine = l.u16(&h, 18)?;
        let (phoff, shoff) = (l.word(&h, 28, 32)?, l.word(&h, 32, 40)?);
        let at = |a32: usize, a64: usize| l.u16(&h, if l.is64 { a64 } else { a32 });
        let (phentsize, phnum) = (u64::from(at(42, 54)?), u64::from(at(44, 56)?));
        let (shentsize, shnum, shstrndx) = (at(46, 58)?, at(48, 60)?, at(50, 62)?);
        let mut elf = Elf {
            src,
            layout,
            kind,
            machine,
            segments: Vec::new(),
            sections: Vec::new(),
        };
        let (ph_min, sh_min) = if l.is64 { (56, 64) } else { (32, 40) };
        if phentsize >= ph_min && phnum > 0 {
            if let Some(ph) = elf.bounded(phoff, phentsize * phnum, MAX_HEADERS) {
                elf.segments = ph
                    .chunks_exact(phentsize as usize)
                    .filter_map(|p| segment(l, p))
                    .collect();
            }
        }
        if shoff != 0 && u64::from(shentsize) >= sh_min && shnum > 0 {
            let len = u64::from(shentsize) * u64::from(shnum);
            if let Some(sh) = elf.bounded(shoff, len, MAX_HEADERS) {
                let raw: Vec<(u32, Section)> = sh
                    .chunks_exact(usize::from(shentsize))
                    .filter_map(|s| section(l, s))
                    .collect();
                let names = raw
                    .get(usize::from(shstrndx))
                    .and_then(|(_, s)| elf.bounded(s.offset, s.size, MAX_SECTION_NAMES))
                    .map(Cow::into_owned)
                    .unwrap_or_default();
                elf.sections = raw
                    .into_iter()
                    .map(|(name, s)| Section {
                        name: name_at(&names, name).to_vec(),
                        ..s
                    })
                    .collect();
            }
        }
        Some(elf)
    }

    /// `len` bytes from `offset` if `len` is at most `max`.
    pub fn bounded(&self, offset: u64, len: u64, max: u64) -> Option<Cow<'_, [u8]>> {
        if len > max {
            return None;
        }
        self.src.bytes(offset, len)
    }

    /// The first section named `name`.
    pub fn section(&self, name: &[u8]) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// A section's bytes, if the file holds them and they are at most
    /// `max` bytes.
    pub fn data(&self, s: &Section, max: u64) -> Option<Cow<'_, [u8]>> {
        if !s.has_bytes() {
            return None;
        }
        self.bounded(s.offset, s.size, max)
    }

    /// A symbol table (`SHT_DYNSYM`, `SHT_SYMTAB`) and the string table
    /// it links to, each at most `max` bytes.
    pub fn symbol_table(&self, kind: u32, max: u64) -> Option<SymbolTable<'_>> {
        let s = self.sections.iter().find(|s| s.kind == kind)?;
        let strings = self.sections.get(usize::try_from(s.link).ok()?)?;
        Some((self.data(s, max)?, self.data(strings, max)?))
    }

    /// The loadable segments.
    pub fn loads(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter().filter(|s| s.kind == PT_LOAD)
    }

    /// The GNU build id: from the note segments (there even without
    /// section headers, as in some kernels' vDSO), else the note
    /// sections; each note area read up to `MAX_NOTES` bytes.
    pub fn build_id(&self) -> Option<Vec<u8>> {
        const MAX_NOTES: u64 = 1 << 20;
        let in_segments = self
            .segments
            .iter()
            .filter(|s| s.kind == PT_NOTE)
            .filter_map(|s| self.bounded(s.offset, s.filesz, MAX_NOTES));
        let in_sections = self
            .sections
            .iter()
            .filter(|s| s.kind == SHT_NOTE)
            .filter_map(|s| self.data(s, MAX_NOTES));
        in_segments
            .chain(in_sections)
            .find_map(|notes| build_id_in_notes(self.layout, &notes))
    }

    /// `len` bytes (at most `max`) from virtual address `vaddr`, from the
    /// file's bytes of the load segment holding it.
    pub fn bytes_at_vaddr(&self, vaddr: u64, len: u64, max: u64) -> Option<Cow<'_, [u8]>> {
        let at = file_offset(self.loads(), vaddr)?;
        self.bounded(at, len, max)
    }

    /// Eight bytes at virtual address `vaddr`, from the file's bytes of
    /// the load segment holding it.
    pub fn u64_at_vaddr(&self, vaddr: u64) -> Option<u64> {
        let at = file_offset(self.loads(), vaddr)?;
        self.layout.u64(&self.src.bytes(at, 8)?, 0)
    }
}

/// The file offset of virtual address `vaddr`, in a load segment's file
/// bytes.
pub fn file_offset<'a>(loads: impl IntoIterator<Item = &'a Segment>, vaddr: u64) -> Option<u64> {
    loads.into_iter().find_map(|s| {
        let rel = vaddr.checked_sub(s.vaddr)?;
        (rel < s.filesz)
            .then(|| s.offset.checked_add(rel))
            .flatten()
    })
}

fn segment(l: Layout, p: &[u8]) -> Option<Segment> {
    Some(if l.is64 {
        Segment {
            kind: l.u32(p, 0)?,
            flags: l.u32(p, 4)?,
            offset: l.u64(p, 8)?,
            vaddr: l.u64(p, 16)?,
            filesz: l.u64(p, 32)?,
        }
    } else {
        Segment {
            kind: l.u32(p, 0)?,
            offset: l.u32(p, 4)?.into(),
            vaddr: l.u32(p, 8)?.into(),
            filesz: l.u32(p, 16)?.into(),
            flags: l.u32(p, 24)?,
        }
    })
}

/// A section header and the offset of its name.
fn section(l: Layout, s: &[u8]) -> Option<(u32, Section)> {
    let header = Section {
        name: Vec::new(),
        kind: l.u32(s, 4)?,
        flags: l.word(s, 8, 8)?,
        addr: l.word(s, 12, 16)?,
        offset: l.word(s, 16, 24)?,
        size: l.word(s, 20, 32)?,
        link: l.u32(s, if l.is64 { 40 } else { 24 })?,
        entsize: l.word(s, 36, 56)?,
    };
    Some((l.u32(s, 0)?, header))
}

/// The NUL-ended name at `at` of a string table, looked for within
/// [`MAX_NAME`] bytes (empty if none ends there).
pub fn name_at(strings: &[u8], at: u32) -> &[u8] {
    string_at(strings, at, MAX_NAME)
}

/// The NUL-ended string at `at` of a string table, looked for within
/// `max` bytes (empty if none ends there).
pub fn string_at(strings: &[u8], at: u32, max: usize) -> &[u8] {
    let Some(rest) = usize::try_from(at).ok().and_then(|a| strings.get(a..)) else {
        return &[];
    };
    let head = &rest[..rest.len().min(max.saturating_add(1))];
    match head.iter().position(|&b| b == 0) {
        Some(end) => &rest[..end],
        None => &[],
    }
}

#[cfg(test)]
mod tests;
