//! Naming file offsets object by object, each object parsed once for the
//! run however many processes map it, with results cached per (object,
//! offset): the same libc of 500 processes is one cache.
//!
//! Names come from the object's own symbols, and from its separate debug
//! file when there is one for what those lack (its full symbol table names
//! the local functions a stripped library has no symbol for); source lines
//! and inlined functions (when asked for) come from DWARF in the same
//! files.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};

use super::elf::Layout;
use super::plt::Stub;
use super::symtab::{SymbolIndex, MIN_INDEXED};
use super::{convert, debug, offset_into, symbol_frame, Options, Resolved};
use crate::procmaps::Object;
use crate::profile::{Frame, FrameKind, ObjectRef};

/// What is known of one object.
struct Entry {
    /// Held so the object (and its descriptor) stays open while cached.
    object: Arc<Object>,
    reference: Arc<ObjectRef>,
    layout: Option<Layout>,
    debug_file: Option<debug::DebugFile>,
    /// Frames by file offset (looked-up offset; `addr` is that offset).
    resolved: HashMap<u64, Resolved>,
    /// The object's functions from its call-frame information, read when
    /// the first address without a symbol is met (`None` until then).
    functions: Option<Vec<Range<u64>>>,
    /// Its PLT stubs, read when the first address in the PLT is met.
    plt: Option<Vec<Stub>>,
    /// Its symbols indexed by flare (a large symbol table), when names
    /// alone are first looked up in it (`None` until then; `Some(None)`
    /// for an object blazesym names).
    index: Option<Option<SymbolIndex>>,
}

/// At most this many offsets are cached over all objects.
const MAX_ENTRIES: usize = 1 << 20;

/// Per-object symbol caches.
#[derive(Default)]
pub(crate) struct ObjectCache {
    entries: HashMap<u64, Entry>,
    count: usize,
}

impl ObjectCache {
    /// Names `offsets` of `object`, keyed by offset.
    pub(crate) fn resolve(
        &mut self,
        inner: &blazesym::symbolize::Symbolizer,
        options: Options,
        object: &Arc<Object>,
        offsets: &BTreeSet<u64>,
    ) -> HashMap<u64, Resolved> {
        if self.count >= MAX_ENTRIES {
            self.entries.clear();
            self.count = 0;
        }
        let entry = self.entries.entry(object.id()).or_insert_with(|| {
            let layout = object.file().and_then(Layout::read);
            let debug_file =
                debug::find(object, layout.as_ref().and_then(|l| l.debuglink.as_ref()));
            Entry {
                object: object.clone(),
                reference: object.reference(),
                layout,
                debug_file,
                resolved: HashMap::new(),
                functions: None,
                plt: None,
                index: None,
            }
        });
        let missing: Vec<u64> = offsets
            .iter()
            .copied()
            .filter(|o| !entry.resolved.contains_key(o))
            .collect();
        if !missing.is_empty() {
            let found = symbolize(inner, options, entry, &missing);
            for (off, r) in missing.into_iter().zip(found) {
                if entry.resolved.insert(off, r).is_none() {
                    self.count += 1;
                }
            }
        }
        offsets
            .iter()
            .filter_map(|o| Some((*o, entry.resolved.get(o)?.clone())))
            .collect()
    }

    /// The number of objects with cached names.
    #[cfg(test)]
    pub(crate) fn objects(&self) -> usize {
        self.entries.len()
    }

    /// Parses `object`'s symbols now, so that later lookups are quick.
    pub(crate) fn warm(
        &mut self,
        inner: &blazesym::symbolize::Symbolizer,
        options: Options,
        object: &Arc<Object>,
        offset: u64,
    ) {
        let _ = self.resolve(inner, options, object, &BTreeSet::from([offset]));
    }
}

fn elf(path: PathBuf, debug_syms: bool) -> Source<'static> {
    let mut e = Elf::new(path);
    e.debug_syms = debug_syms;
    Source::Elf(e)
}

/// Runs one blazesym batch over `input`, whose entries stand for the
/// offsets `offsets`, retrying without DWARF if DWARF fails (a broken or
/// mismatched debug link must not cost the names). `None` entries were
/// not found.
fn run(
    inner: &blazesym::symbolize::Symbolizer,
    options: Options,
    path: PathBuf,
    dwarf: bool,
    input: Input<&[u64]>,
    offsets: &[u64],
) -> Vec<Option<Resolved>> {
    let once = |dwarf: bool| -> Option<Vec<Option<Resolved>>> {
        let syms: Vec<Symbolized<'_>> = inner.symbolize(&elf(path.clone(), dwarf), input).ok()?;
        Some(
            syms.into_iter()
                .zip(offsets)
                .map(|(s, &off)| convert(off, s, FrameKind::Native, options))
                .collect(),
        )
    };
    once(dwarf)
        .or_else(|| if dwarf { once(false) } else { None })
        .unwrap_or_else(|| vec![None; offsets.len()])
}

/// Names `offsets` (sorted) of one object. Names alone come from the
/// object's own symbols first (an exported function keeps its public name,
/// `read`, not an internal alias such as `__GI___libc_read`), then from its
/// debug file for what is left (local functions a stripped library lacks).
/// With source lines or inlined functions asked for, the debug file's
/// DWARF comes first.
fn symbolize(
    inner: &blazesym::symbolize::Symbolizer,
    options: Options,
    entry: &mut Entry,
    offsets: &[u64],
) -> Vec<Resolved> {
    let dwarf = options.code_info || options.inlined;
    let own_dwarf = dwarf && entry.debug_file.is_none();
    if !own_dwarf && entry.index.is_none() {
        let index = entry
            .object
            .file()
            .and_then(|f| SymbolIndex::read(f, MIN_INDEXED));
        entry.index = Some(index);
    }
    // PLT stubs first: no symbol names them, and the nearest one before
    // them would.
    let mut out: Vec<Option<Resolved>> = offsets.iter().map(|&off| plt_frame(entry, off)).collect();
    let from_debug_file = |out: &mut Vec<Option<Resolved>>| {
        let (Some(dbg), Some(layout)) = (&entry.debug_file, &entry.layout) else {
            return;
        };
        let (idx, vaddrs): (Vec<usize>, Vec<u64>) = (0..offsets.len())
            .filter(|&i| out[i].is_none())
            .filter_map(|i| Some((i, layout.vaddr(offsets[i])?)))
            .unzip();
        if idx.is_empty() {
            return;
        }
        let offs: Vec<u64> = idx.iter().map(|&i| offsets[i]).collect();
        let found = run(
            inner,
            options,
            dbg.path.clone(),
            dwarf,
            Input::VirtOffset(&vaddrs),
            &offs,
        );
        for (i, r) in idx.into_iter().zip(found) {
            out[i] = r;
        }
    };
    let from_object = |out: &mut Vec<Option<Resolved>>| {
        let Some(path) = entry.object.open_path() else {
            return;
        };
        let idx: Vec<usize> = (0..offsets.len()).filter(|&i| out[i].is_none()).collect();
        if idx.is_empty() {
            return;
        }
        // Names alone of a large symbol table: from flare's index.
        if let (false, Some(Some(index)), Some(file), Some(layout)) =
            (own_dwarf, &entry.index, entry.object.file(), &entry.layout)
        {
            for i in idx {
                let off = offsets[i];
                out[i] = layout
                    .vaddr(off)
                    .and_then(|v| Some((v, index.find(file, v)?)))
                    .and_then(|(v, (start, name))| {
                        symbol_frame(off, offset_into(v, start), &name, FrameKind::Native)
                    })
                    .map(|f| vec![f]);
            }
            return;
        }
        let rest: Vec<u64> = idx.iter().map(|&i| offsets[i]).collect();
        let found = run(
            inner,
            options,
            path,
            own_dwarf,
            Input::FileOffset(&rest),
            &rest,
        );
        for (i, r) in idx.into_iter().zip(found) {
            out[i] = r;
        }
    };
    if dwarf {
        from_debug_file(&mut out);
        from_object(&mut out);
    } else {
        from_object(&mut out);
        from_debug_file(&mut out);
    }
    out.into_iter()
        .zip(offsets)
        .map(|(r, &off)| {
            let r = r.unwrap_or_else(|| vec![unnamed(entry, off)]);
            with_object(r, &entry.reference, off)
        })
        .collect()
}

/// The frame of the PLT stub at file offset `off` (`labs@plt`), if it
/// lies in one.
fn plt_frame(entry: &mut Entry, off: u64) -> Option<Resolved> {
    let layout = entry.layout.as_ref()?;
    let vaddr = layout.vaddr(off).filter(|&v| layout.in_plt(v))?;
    let object = &entry.object;
    let stubs = entry.plt.get_or_insert_with(|| {
        object
            .file()
            .map(|f| layout.plt_stubs(f))
            .unwrap_or_default()
    });
    let stub = super::plt::find(stubs, vaddr)?;
    Some(vec![Frame {
        addr: off,
        offset: u32::try_from(vaddr - stub.range.start).unwrap_or(u32::MAX),
        ..Frame::named(stub.name.clone(), FrameKind::Native)
    }])
}

/// The frame of a function without a symbol at file offset `off`: named
/// `object+0xSTART`, START the virtual address its function starts at
/// (from the call-frame information; the address itself where no FDE
/// covers it), so that each unnamed function is a frame of its own.
fn unnamed(entry: &mut Entry, off: u64) -> Frame {
    let Some(vaddr) = entry.layout.as_ref().and_then(|l| l.vaddr(off)) else {
        return Frame::unknown(off, FrameKind::Native);
    };
    let object = &entry.object;
    let functions = entry.functions.get_or_insert_with(|| {
        let Some(file) = object.file() else {
            return Vec::new();
        };
        // SAFETY: the map is only read, and dropped before this returns.
        // A file truncated while mapped would fault; executables and
        // libraries in use are replaced by rename, not rewritten in place.
        match unsafe { memmap2::Mmap::map(file) } {
            Ok(data) => crate::unwind::table::function_ranges(&data),
            Err(_) => Vec::new(),
        }
    });
    let start = function_start(functions, vaddr).unwrap_or(vaddr);
    let path = &*entry.reference.path;
    let base = path.rsplit('/').next().unwrap_or(path);
    Frame {
        name: crate::profile::clean_name(&format!("{base}+0x{start:x}")).into(),
        ..Frame::unknown(off, FrameKind::Native)
    }
}

/// The start of the function in `functions` (sorted by start) that holds
/// `vaddr`.
fn function_start(functions: &[Range<u64>], vaddr: u64) -> Option<u64> {
    let i = functions.partition_point(|r| r.start <= vaddr);
    // Nested or overlapping ranges are rare; the nearest start wins.
    functions[..i]
        .iter()
        .rev()
        .take(4)
        .find(|r| r.contains(&vaddr))
        .map(|r| r.start)
}

/// Marks resolved frames as lying in `object` at `offset`.
fn with_object(mut r: Resolved, object: &Arc<ObjectRef>, offset: u64) -> Resolved {
    for f in &mut r {
        f.object = Some(object.clone());
        f.file_offset = offset;
    }
    r
}
