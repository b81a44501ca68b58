//! A large object's ELF symbols indexed by flare, for names without
//! DWARF: each symbol's address, size and where its name lies, on the
//! heap; the names read from the file (`pread`) when first needed.
//!
//! blazesym looks symbols up in the file as it maps it: its binary search
//! reads a symbol table entry per probe, and each page it touches is
//! resident in flare's memory, the kernel mapping 64 KiB around each
//! fault. A window naming new functions of `node` (a 2.6 MB `.symtab`,
//! 7.5 MB of names) and `libjvm.so` touched 13 MiB of them, counted in
//! the agent's RSS until its trim dropped them. Read with `pread`, no
//! page of the file is ever counted.
//!
//! The answers are blazesym's, which names the rest: symbols of any
//! function, object or untyped kind in the symbol table, ordered by
//! address and, at one address, larger first (with the same unstable
//! sort over the same positions, so that aliases resolve alike); the
//! first of those at the greatest address at or below the one looked up
//! that holds it (a sizeless symbol holds everything up to the next),
//! and where the symbol table has none, the dynamic one's, sizeless
//! symbols there only at their own address.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

use crate::elf::{Elf, FileSource, Layout, Section, Source, SHT_DYNSYM, SHT_SYMTAB};

/// Objects whose symbol table is at least this big are indexed by flare;
/// smaller ones cost little to blazesym's mapping.
pub(crate) const MIN_INDEXED: u64 = 1 << 20;

/// The largest symbol table indexed (read whole while indexing, with
/// about twice as much again of working memory); larger ones are left
/// to blazesym.
const MAX_TABLE: u64 = 8 << 20;

/// The longest name read.
const MAX_NAME: usize = 64 << 10;

/// Set in [`Sym::name`] for a symbol of no section (an import): never
/// an answer, but in its place in the order.
const UNDEFINED: u32 = 1 << 31;

/// A symbol: its address (from its table's base), size (0: unknown,
/// past `u32::MAX` cut to it) and its name's offset in the string table,
/// with [`UNDEFINED`]: 12 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sym {
    value: u32,
    size: u32,
    name: u32,
}

impl Sym {
    fn value(&self, base: u64) -> u64 {
        base + u64::from(self.value)
    }
}

/// One symbol table, ordered as blazesym orders it.
#[derive(Debug)]
struct Table {
    /// The lowest symbol's address: symbols lie within 4 GiB of it.
    base: u64,
    syms: Vec<Sym>,
    /// Where its string table lies in the file: offset and size.
    strings: (u64, u64),
    /// The dynamic table: sizeless symbols hold only their own address.
    dynamic: bool,
}

/// An object's symbols, indexed.
#[derive(Debug)]
pub(crate) struct SymbolIndex {
    symtab: Table,
    /// The dynamic symbol table, indexed when first needed.
    dynsym: OnceLock<Option<Table>>,
    /// Its section header, to index it then.
    dynsym_at: Option<(Layout, Section, Section)>,
}

/// A symbol found: its address and name.
pub(crate) type Found = (u64, String);

impl SymbolIndex {
    /// The index of `file`'s symbols, when its symbol table is at least
    /// `min` bytes (and at most [`MAX_TABLE`]); `None` otherwise, or when
    /// it is no ELF file.
    pub(crate) fn read(file: &File, min: u64) -> Option<SymbolIndex> {
        let elf = Elf::parse(FileSource::new(file)?)?;
        let (symtab, strings) = table_sections(&elf, SHT_SYMTAB)?;
        if symtab.size < min {
            return None;
        }
        let symtab = Table::read(&elf, &symtab, &strings, false)?;
        let dynsym_at = table_sections(&elf, SHT_DYNSYM).map(|(s, t)| (elf.layout, s, t));
        Some(SymbolIndex {
            symtab,
            dynsym: OnceLock::new(),
            dynsym_at,
        })
    }

    /// The symbol holding virtual address `addr` of `file` (the file
    /// indexed), and its name.
    pub(crate) fn find(&self, file: &File, addr: u64) -> Option<Found> {
        if let Some(s) = self.symtab.find(addr) {
            return self.symtab.named(file, s);
        }
        let dynsym = self.dynsym.get_or_init(|| {
            let (layout, syms, strings) = self.dynsym_at.as_ref()?;
            let elf = Elf::parse(FileSource::new(file)?)?;
            if elf.layout != *layout {
                return None;
            }
            Table::read(&elf, syms, strings, true)
        });
        let table = dynsym.as_ref()?;
        table.named(file, table.find(addr)?)
    }
}

/// The section of the symbol table of `kind` and of its strings.
fn table_sections<S: Source>(elf: &Elf<S>, kind: u32) -> Option<(Section, Section)> {
    let s = elf.sections.iter().find(|s| s.kind == kind)?;
    let strings = elf.sections.get(usize::try_from(s.link).ok()?)?;
    (s.has_bytes() && strings.has_bytes()).then(|| (s.clone(), strings.clone()))
}

impl Table {
    /// Indexes the symbol table `syms` with strings `strings` of `elf`.
    fn read<S: Source>(
        elf: &Elf<S>,
        syms: &Section,
        strings: &Section,
        dynamic: bool,
    ) -> Option<Table> {
        let data = elf.data(syms, MAX_TABLE)?;
        let l = elf.layout;
        let entry = if l.is64 { 24 } else { 16 };
        // The symbols blazesym looks at, in the file's order: address,
        // size and name.
        let mut rows: Vec<(u64, u64, u32)> = Vec::new();
        for e in data.chunks_exact(entry) {
            let fields = if l.is64 {
                (
                    l.u32(e, 0),
                    e.get(4).copied(),
                    l.u16(e, 6),
                    l.u64(e, 8),
                    l.u64(e, 16),
                )
            } else {
                let wide = |v: Option<u32>| v.map(u64::from);
                (
                    l.u32(e, 0),
                    e.get(12).copied(),
                    l.u16(e, 14),
                    wide(l.u32(e, 4)),
                    wide(l.u32(e, 8)),
                )
            };
            let (Some(name), Some(info), Some(shndx), Some(value), Some(size)) = fields else {
                continue;
            };
            // Functions (and GNU indirect ones), objects, untyped.
            if !matches!(info & 0xf, 0 | 1 | 2 | 10) || name & UNDEFINED != 0 {
                continue;
            }
            let undefined = if shndx == 0 { UNDEFINED } else { 0 };
            rows.push((value, size, name | undefined));
        }
        // blazesym's order: its sort of the same positions, so that
        // symbols of one address and size come out as its do.
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_unstable_by(|&a, &b| {
            let (a, b) = (&rows[a], &rows[b]);
            a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1).reverse())
        });
        let base = order.first().map_or(0, |&i| rows[i].0);
        let syms = order
            .into_iter()
            .map(|i| {
                let (value, size, name) = rows[i];
                Some(Sym {
                    value: u32::try_from(value - base).ok()?,
                    size: u32::try_from(size).unwrap_or(u32::MAX),
                    name,
                })
            })
            .collect::<Option<Vec<Sym>>>()?;
        Some(Table {
            base,
            syms,
            strings: (strings.offset, strings.size),
            dynamic,
        })
    }

    /// The symbol holding `addr`.
    fn find(&self, addr: u64) -> Option<&Sym> {
        let rel = addr.checked_sub(self.base)?;
        let start = lower_bound(&self.syms, rel)?;
        for s in &self.syms[start..] {
            let value = u64::from(s.value);
            if value > rel {
                break;
            }
            let holds = match s.size {
                0 => !self.dynamic || rel == value,
                size => rel < value + u64::from(size),
            };
            if s.name & UNDEFINED == 0 && holds {
                return Some(s);
            }
        }
        None
    }

    /// `sym` with its name, read from `file`.
    fn named(&self, file: &File, sym: &Sym) -> Option<Found> {
        let (at, size) = self.strings;
        let off = u64::from(sym.name);
        if off >= size {
            return None;
        }
        let most = usize::try_from(size - off)
            .unwrap_or(usize::MAX)
            .min(MAX_NAME);
        let mut name = Vec::new();
        let mut chunk = 128usize;
        while name.len() < most {
            let len = chunk.min(most - name.len());
            let mut buf = vec![0u8; len];
            file.read_exact_at(&mut buf, at + off + name.len() as u64)
                .ok()?;
            if let Some(end) = buf.iter().position(|&b| b == 0) {
                name.extend_from_slice(&buf[..end]);
                let name = demangled(String::from_utf8(name).ok()?);
                return Some((sym.value(self.base), name));
            }
            name.extend_from_slice(&buf);
            chunk *= 2;
        }
        None
    }
}

/// `name` demangled as blazesym demangles a symbol of unknown language:
/// as Rust's, else as C++'s, else as it is.
fn demangled(name: String) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(&name) {
        return format!("{d:#}");
    }
    cpp_demangle::Symbol::new(name.as_str())
        .ok()
        .and_then(|s| s.demangle().ok())
        .unwrap_or(name)
}

/// Where blazesym starts looking for the symbol of `addr` in `syms`: the
/// first of those at `addr`, else the first of those at the greatest
/// address below it, but the last of them when they begin the table (its
/// search back through equal addresses stops short of the first).
fn lower_bound(syms: &[Sym], addr: u64) -> Option<usize> {
    let i = syms.partition_point(|s| u64::from(s.value) < addr);
    if syms.get(i).is_some_and(|s| u64::from(s.value) == addr) {
        return Some(i);
    }
    let last = i.checked_sub(1)?;
    let value = syms[last].value;
    match syms[..last].partition_point(|s| s.value < value) {
        0 => Some(last),
        first => Some(first),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(value: u32, size: u32, name: u32) -> Sym {
        Sym { value, size, name }
    }

    fn table(syms: Vec<Sym>, dynamic: bool) -> Table {
        Table {
            base: 0,
            syms,
            strings: (0, 1 << 20),
            dynamic,
        }
    }

    /// Names of a large object's code as blazesym gives them, offset by
    /// offset; how many offsets were compared, `None` when the object
    /// has no symbol table to index.
    fn same_as_blazesym(path: &std::path::Path) -> Option<usize> {
        use blazesym::symbolize::source::{Elf as BzElf, Source as BzSource};
        use blazesym::symbolize::{Input, Symbolizer};
        let file = File::open(path).expect("the object");
        let index = SymbolIndex::read(&file, 0)?;
        let elf = Elf::parse(FileSource::new(&file).expect("size")).expect("ELF");
        // Every 61st byte of its code, and each symbol's first and second.
        let mut offsets: Vec<u64> = Vec::new();
        for seg in elf.loads().filter(|s| s.executable()) {
            offsets.extend((seg.offset..seg.offset + seg.filesz).step_by(61));
            for s in &index.symtab.syms {
                let value = s.value(index.symtab.base);
                if value >= seg.vaddr && value < seg.vaddr + seg.filesz {
                    let off = value - seg.vaddr + seg.offset;
                    offsets.extend([off, off + 1]);
                }
            }
        }
        let vaddr = |off: u64| {
            elf.loads()
                .find(|s| (s.offset..s.offset + s.filesz).contains(&off))
                .map(|s| off - s.offset + s.vaddr)
        };
        let mut src = BzElf::new(path);
        src.debug_syms = false;
        let symbolizer = Symbolizer::new();
        let want = symbolizer
            .symbolize(&BzSource::Elf(src), Input::FileOffset(&offsets))
            .expect("blazesym names it");
        let mut differ = Vec::new();
        for (&off, w) in offsets.iter().zip(want) {
            let w = w.as_sym().map(|s| (s.addr, s.name.to_string()));
            let got = vaddr(off).and_then(|v| index.find(&file, v));
            if got != w {
                differ.push(format!("{off:#x}: {got:?}, blazesym {w:?}"));
            }
        }
        assert!(
            differ.is_empty(),
            "{path:?}: {} of {} differ: {:?}",
            differ.len(),
            offsets.len(),
            &differ[..differ.len().min(8)]
        );
        Some(offsets.len())
    }

    /// This test binary (a large symbol table of Rust and C symbols,
    /// nested and aliased ones among them), and libjvm.so where a JDK is
    /// installed: every answer is blazesym's.
    #[test]
    fn large_objects_are_named_as_blazesym_names_them() {
        let exe = std::env::current_exe().expect("own executable");
        let n = same_as_blazesym(&exe).expect("a symbol table");
        assert!(n > 100_000, "{n} offsets");
        let jdks = std::fs::read_dir("/usr/lib/jvm")
            .into_iter()
            .flatten()
            .flatten();
        for jdk in jdks {
            let jvm = jdk.path().join("lib/server/libjvm.so");
            if jvm.exists() && !jdk.file_type().is_ok_and(|t| t.is_symlink()) {
                same_as_blazesym(&jvm);
            }
        }
    }

    #[test]
    fn a_symbol_holds_its_size_or_up_to_the_next() {
        let t = table(
            vec![sym(0x100, 0x10, 1), sym(0x200, 0, 2), sym(0x300, 0x10, 3)],
            false,
        );
        let name = |a| t.find(a).map(|s| s.name);
        assert_eq!(name(0x100), Some(1));
        assert_eq!(name(0x10f), Some(1));
        assert_eq!(name(0x110), None, "past its size, before the next");
        assert_eq!(name(0x2ff), Some(2), "sizeless: up to the next");
        assert_eq!(name(0x305), Some(3));
        assert_eq!(name(0xff), None);
        // In the dynamic table a sizeless symbol holds its address only.
        let d = table(vec![sym(0x200, 0, 2)], true);
        assert_eq!(d.find(0x200).map(|s| s.name), Some(2));
        assert_eq!(d.find(0x201), None);
    }

    #[test]
    fn a_nested_symbol_is_looked_past_only_forward() {
        // A big function at 0x100 holding a small one at 0x180: past the
        // small one's end the big one is not looked at again (blazesym's
        // walk goes forward from the nearest start), so nothing names it.
        let t = table(vec![sym(0x100, 0x1000, 1), sym(0x180, 0x10, 2)], false);
        assert_eq!(t.find(0x150).map(|s| s.name), Some(1));
        assert_eq!(t.find(0x185).map(|s| s.name), Some(2));
        assert_eq!(t.find(0x200).map(|s| s.name), None);
        // Imports hold nothing, but keep their place.
        let u = table(vec![sym(0x100, 0, 1), sym(0x180, 0, 2 | UNDEFINED)], false);
        assert_eq!(u.find(0x190).map(|s| s.name), None);
        assert_eq!(u.find(0x170).map(|s| s.name), Some(1));
    }

    #[test]
    fn of_symbols_at_one_address_the_first_is_looked_at_first() {
        let s = vec![
            sym(0x10, 0, 9),
            sym(0x100, 0x20, 1),
            sym(0x100, 0x10, 2),
            sym(0x100, 0x10, 3),
        ];
        assert_eq!(lower_bound(&s, 0x100), Some(1));
        assert_eq!(lower_bound(&s, 0x118), Some(1));
        // At the table's start, blazesym's walk back ends on the last.
        assert_eq!(lower_bound(&s[1..], 0x118), Some(2));
        assert_eq!(lower_bound(&s[1..], 0x100), Some(0));
        assert_eq!(lower_bound(&s, 0x5), None);
    }
}
