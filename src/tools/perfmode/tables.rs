//! Unwind tables in flare's own memory, for the user-space walk: each
//! object a process maps (as [`crate::procmaps`] holds it open) gets its
//! rows once — from the disk cache, else built and cached
//! ([`crate::unwind::objects::load_table`], as the BPF loader does) — and
//! every process mapping it shares them. [`Tables::row`] answers the
//! walk's question: the row covering an address of a process.

use std::collections::HashMap;
use std::sync::Arc;

use crate::procmaps::vdso_image;
use crate::procmaps::{Backing, Mapping, Object, Space};
use crate::unwind::cache::{self, DiskCache};
use crate::unwind::elf::{vaddr_of_offset, Elf, Segment};
use crate::unwind::objects::{load_table, vdso_key, FramePointerNotes, Stats};
use crate::unwind::table::{Row, Table};

/// An object's rows and the segments that place them.
#[derive(Debug)]
struct Loaded {
    table: Table,
    segments: Vec<Segment>,
}

/// Every object's table met in this run.
pub struct Tables {
    cache: DiskCache,
    /// By [`Object::id`]; `None`: no usable table (frame pointers).
    objects: HashMap<u64, Option<Arc<Loaded>>>,
    /// The same file under two objects (two paths) shares its table.
    by_key: HashMap<String, Option<Arc<Loaded>>>,
    vdso: Option<Option<Arc<Loaded>>>,
    warned: FramePointerNotes,
    pub stats: Stats,
}

impl Tables {
    pub fn new(cache: DiskCache) -> Tables {
        Tables {
            cache,
            objects: HashMap::new(),
            by_key: HashMap::new(),
            vdso: None,
            warned: FramePointerNotes::default(),
            stats: Stats::default(),
        }
    }

    /// The row covering `addr` in a process whose mappings are `space`.
    pub fn row(&mut self, space: &Space, addr: u64) -> Option<Row> {
        let m = space.find(addr)?;
        let loaded = match &m.backing {
            Backing::File(o) => self.object(o)?,
            Backing::Anon(name) if &**name == "[vdso]" => self.vdso()?,
            Backing::Anon(_) => return None,
        };
        let vaddr = vaddr_of(m, &loaded.segments, addr)?;
        loaded.table.lookup(vaddr).copied()
    }

    fn object(&mut self, o: &Arc<Object>) -> Option<Arc<Loaded>> {
        if let Some(t) = self.objects.get(&o.id()) {
            return t.clone();
        }
        let t = self.load(o);
        self.objects.insert(o.id(), t.clone());
        t
    }

    fn load(&mut self, o: &Object) -> Option<Arc<Loaded>> {
        let file = o.file()?;
        let meta = file.metadata().ok()?;
        // SAFETY: the map is only read. A file truncated while mapped
        // would fault; executables and libraries in use are replaced by
        // rename, not rewritten in place.
        let data = unsafe { memmap2::Mmap::map(file) }.ok()?;
        let Some(elf) = Elf::parse(&data) else {
            self.warn(o.path(), "not a 64-bit x86-64 ELF file");
            return None;
        };
        let key = cache::key(elf.build_id.as_deref(), &meta);
        self.loaded(&key, o.path(), &data, elf)
    }

    fn vdso(&mut self) -> Option<Arc<Loaded>> {
        if let Some(v) = &self.vdso {
            return v.clone();
        }
        let v = vdso_image().and_then(|data| {
            let elf = Elf::parse(data)?;
            self.loaded(&vdso_key(&elf), "[vdso]", data, elf)
        });
        self.vdso = Some(v.clone());
        v
    }

    fn loaded(&mut self, key: &str, name: &str, data: &[u8], elf: Elf) -> Option<Arc<Loaded>> {
        if let Some(t) = self.by_key.get(key) {
            return t.clone();
        }
        let t = match load_table(&self.cache, key, data, &elf, &mut self.stats, false) {
            Some(Ok(t)) if !t.rows.is_empty() => Some(Arc::new(Loaded {
                table: t,
                segments: elf.segments,
            })),
            Some(Ok(_)) => {
                self.warn(name, "no unwind rows");
                None
            }
            Some(Err(e)) => {
                self.warn(name, &e.to_string());
                None
            }
            None => None,
        };
        self.by_key.insert(key.to_string(), t.clone());
        t
    }

    fn warn(&mut self, name: &str, why: &str) {
        self.warned.note(name, why);
    }
}

/// The object's virtual address of `addr`, an address in mapping `m`.
fn vaddr_of(m: &Mapping, segments: &[Segment], addr: u64) -> Option<u64> {
    let first = vaddr_of_offset(segments, m.offset)?;
    Some(first.wrapping_add(addr - m.start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procmaps::Mappings;

    #[test]
    fn this_process_s_own_code_has_rows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut tables = Tables::new(DiskCache::at(dir.path()));
        let space = Mappings::on_demand()
            .space(std::process::id(), None)
            .expect("own mappings");
        let here = this_process_s_own_code_has_rows as *const () as u64;
        let row = tables.row(&space, here).expect("a row for the test itself");
        assert_ne!(row.cfa(), crate::unwind::table::CFA_NONE);
        assert_eq!(tables.stats.built, 1, "built once, then cached");
        let mut again = Tables::new(DiskCache::at(dir.path()));
        assert!(again.row(&space, here).is_some());
        assert_eq!(again.stats.from_cache, 1);
    }
}
