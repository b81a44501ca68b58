//! ELF notes (`SHT_NOTE` sections, `PT_NOTE` segments): the GNU build id
//! that names a file across paths and runs, and SystemTap's USDT probes.
//! A note's owner is checked with its type: a SystemTap probe note has
//! type 3 too, and is no build id.

use super::Layout;

/// `NT_GNU_BUILD_ID`, with owner "GNU".
pub const NT_GNU_BUILD_ID: u32 = 3;

/// One note: its owner's name (without the NUL), type and contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Note<'a> {
    pub owner: &'a [u8],
    pub kind: u32,
    pub desc: &'a [u8],
}

/// The notes of a note area, in order, up to the first that does not
/// fit in it.
pub struct Notes<'a> {
    layout: Layout,
    rest: &'a [u8],
}

impl<'a> Notes<'a> {
    pub fn new(layout: Layout, area: &'a [u8]) -> Notes<'a> {
        Notes { layout, rest: area }
    }
}

impl<'a> Iterator for Notes<'a> {
    type Item = Note<'a>;

    fn next(&mut self) -> Option<Note<'a>> {
        let l = self.layout;
        let b = self.rest;
        let namesz = usize::try_from(l.u32(b, 0)?).ok()?;
        let descsz = usize::try_from(l.u32(b, 4)?).ok()?;
        let kind = l.u32(b, 8)?;
        let align = |n: usize| n.checked_add(3).map(|n| n & !3);
        let name = b.get(12..12usize.checked_add(namesz)?)?;
        let desc_at = 12usize.checked_add(align(namesz)?)?;
        let desc = b.get(desc_at..desc_at.checked_add(descsz)?)?;
        self.rest = b
            .get(desc_at.checked_add(align(descsz)?)?..)
            .unwrap_or_default();
        let owner = name.strip_suffix(b"\0").unwrap_or(name);
        Some(Note { owner, kind, desc })
    }
}

/// The GNU build id among the notes of `area`.
pub fn build_id_in_notes(layout: Layout, area: &[u8]) -> Option<Vec<u8>> {
    Notes::new(layout, area)
        .find(|n| n.kind == NT_GNU_BUILD_ID && n.owner == b"GNU" && !n.desc.is_empty())
        .map(|n| n.desc.to_vec())
}
