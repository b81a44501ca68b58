//! ELF symbol tables (`.dynsym`, `.symtab`), read entry by entry. A
//! name's end is looked for within [`MAX_SYMBOL_NAME`] bytes: looking
//! no further keeps a scan linear when a file's many symbols all name
//! one huge string (which made it quadratic: hours for 100,000 symbols
//! of a 16 MB name).

use super::Layout;

/// The longest symbol name looked at: every name flare looks up is far
/// shorter.
pub const MAX_SYMBOL_NAME: usize = 256;

/// A symbol of an ELF symbol table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbol<'a> {
    /// Its name, without the NUL that ends it.
    pub name: &'a [u8],
    /// Defined in this object (not an import).
    pub defined: bool,
    pub value: u64,
    pub size: u64,
}

/// Calls `f` with each symbol of the entries `syms` (laid out as
/// `layout` says) whose names are in `strs`; an entry or a name that does
/// not fit (a name without its NUL, or longer than [`MAX_SYMBOL_NAME`])
/// is skipped.
pub fn each_symbol(layout: Layout, syms: &[u8], strs: &[u8], mut f: impl FnMut(Symbol<'_>)) {
    let l = layout;
    let entry = if l.is64 { 24 } else { 16 };
    for e in syms.chunks_exact(entry) {
        let fields = if l.is64 {
            (l.u32(e, 0), l.u16(e, 6), l.u64(e, 8), l.u64(e, 16))
        } else {
            let wide = |v: Option<u32>| v.map(u64::from);
            (
                l.u32(e, 0),
                l.u16(e, 14),
                wide(l.u32(e, 4)),
                wide(l.u32(e, 8)),
            )
        };
        let (Some(name), Some(shndx), Some(value), Some(size)) = fields else {
            continue;
        };
        let Some(at) = usize::try_from(name).ok().and_then(|n| strs.get(n..)) else {
            continue;
        };
        let head = &at[..at.len().min(MAX_SYMBOL_NAME + 1)];
        let Some(end) = head.iter().position(|&b| b == 0) else {
            continue;
        };
        f(Symbol {
            name: &at[..end],
            defined: shndx != 0,
            value,
            size,
        });
    }
}
