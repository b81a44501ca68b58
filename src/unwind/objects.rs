//! Objects and their tables in BPF. Each object (by build id, else by
//! file identity) gets its rows once, in an array map in the
//! `unwind_tables` map-of-maps (a spare one already there when it fits,
//! see [`super::spares`], else one of its own size), and every process mapping
//! it shares that table. Tables come from the disk cache or are built and
//! stored there. An object without usable call-frame information gets no
//! table (frame pointers there) and one warning.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libbpf_rs::libbpf_sys as sys;
use libbpf_rs::{MapCore, MapHandle, MapType};

use super::cache::{self, DiskCache};
use super::elf::{Elf, Machine, Segment};
use super::spares::{self, Spares};
use super::table::{Row, Table, TableError};
use crate::procmaps::vdso_image;
use std::thread::JoinHandle;

/// Mirrors unwind_types.h.
pub const MAX_ROWS: usize = 1 << 23;
/// Flags of the rows template in unwind.h (BPF_F_INNER_MAP | BPF_F_MMAPABLE).
const ROWS_FLAGS: u32 = sys::BPF_F_INNER_MAP | sys::BPF_F_MMAPABLE;

/// An object's table in BPF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Installed {
    pub id: u32,
    pub rows: u32,
    /// Page index entries before the rows ([`page_index`]).
    pub pages: u32,
    pub base: u64,
}

/// What a mapping needs of its object.
#[derive(Debug)]
pub struct Object {
    pub segments: Vec<Segment>,
    pub table: Option<Installed>,
}

/// Figures for the benchmark and the end-of-run summary.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub objects: usize,
    pub rows: u64,
    pub built: usize,
    pub from_cache: usize,
    pub build_time: Duration,
    pub cache_time: Duration,
}

/// A table that is not in the disk cache, asked for while loading from
/// the cache only.
#[derive(Clone, Copy, Debug)]
struct Missed;

/// Every object seen in this run.
pub struct Objects {
    cache: DiskCache,
    tables: MapHandle,
    by_file: HashMap<(u64, u64, u64, i64), Arc<Object>>,
    /// The same objects by device and inode alone: how a process's
    /// mappings find them without opening each file again.
    by_inode: HashMap<(u64, u64), Arc<Object>>,
    by_key: HashMap<String, Option<Installed>>,
    /// The next free slot of `unwind_tables` (shared with `spares`).
    next_id: Arc<AtomicU32>,
    /// Row maps installed ahead of need (none if their thread failed).
    spares: Option<Spares>,
    /// Tables still being placed in `unwind_tables` on threads of their
    /// own.
    placing: Vec<JoinHandle<()>>,
    warned: FramePointerNotes,
    pub stats: Stats,
    /// Use tables from the disk cache only: an object that would have to
    /// be built sets `missed` and is left for later.
    pub cache_only: bool,
    pub missed: bool,
}

impl Objects {
    /// `tables`: the `unwind_tables` map-of-maps.
    pub fn new(tables: MapHandle, cache: DiskCache) -> Objects {
        let next_id = Arc::new(AtomicU32::new(0));
        let spares = Spares::start(&tables, ROWS_FLAGS, next_id.clone());
        Objects {
            cache,
            tables,
            by_file: HashMap::new(),
            by_inode: HashMap::new(),
            by_key: HashMap::new(),
            next_id,
            spares,
            placing: Vec::new(),
            warned: FramePointerNotes::default(),
            stats: Stats::default(),
            cache_only: false,
            missed: false,
        }
    }

    /// The object already read from the file with this device and inode.
    pub fn by_inode(&self, dev_ino: (u64, u64)) -> Option<Arc<Object>> {
        if dev_ino.1 == 0 {
            return None;
        }
        self.by_inode.get(&dev_ino).cloned()
    }

    /// The object in the file at `path` (`name`: how to call it in a
    /// warning). `None` when the file cannot be read as ELF.
    pub fn file(&mut self, path: &Path, name: &str) -> Option<Arc<Object>> {
        let file = File::open(path).ok()?;
        let meta = file.metadata().ok()?;
        let id = (meta.dev(), meta.ino(), meta.size(), meta.mtime());
        if let Some(o) = self.by_file.get(&id) {
            self.by_inode.insert((id.0, id.1), o.clone());
            return Some(o.clone());
        }
        // SAFETY: the map is only read. A file truncated while mapped
        // would fault; executables and libraries in use are replaced by
        // rename, not rewritten in place.
        let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let elf = Elf::parse(&data).filter(|e| e.machine == Machine::HOST)?;
        let key = cache::key(elf.build_id.as_deref(), &meta);
        let table = self.table(&key, name, &data, &elf);
        let object = Arc::new(Object {
            segments: elf.segments,
            table: table.unwrap_or(None),
        });
        if table.is_ok() {
            self.by_file.insert(id, object.clone());
            self.by_inode.insert((id.0, id.1), object.clone());
        }
        Some(object)
    }

    /// The vDSO: the same image in every process, read from flare's own.
    pub fn vdso(&mut self) -> Option<Arc<Object>> {
        let key = (u64::MAX, 0, 0, 0);
        if let Some(o) = self.by_file.get(&key) {
            return Some(o.clone());
        }
        let data = vdso_image()?;
        let elf = Elf::parse(data)?;
        let table = self.table(&vdso_key(&elf), "[vdso]", data, &elf);
        let object = Arc::new(Object {
            segments: elf.segments,
            table: table.unwrap_or(None),
        });
        if table.is_ok() {
            self.by_file.insert(key, object.clone());
        }
        Some(object)
    }

    /// The table of the object `key`, installed in BPF on first use.
    /// `Err(Missed)` while loading from the cache only and it is not
    /// there (sets `missed`): the object must not be remembered without
    /// its table, or a later full load would find it so.
    fn table(
        &mut self,
        key: &str,
        name: &str,
        data: &[u8],
        elf: &Elf,
    ) -> Result<Option<Installed>, Missed> {
        if let Some(t) = self.by_key.get(key) {
            return Ok(*t);
        }
        let Some(table) = load_table(
            &self.cache,
            key,
            data,
            elf,
            &mut self.stats,
            self.cache_only,
        ) else {
            self.missed = true;
            return Err(Missed);
        };
        let installed = match table {
            Ok(t) if t.rows.len() > MAX_ROWS => {
                self.warn(
                    name,
                    &format!("{} unwind rows, more than {MAX_ROWS}", t.rows.len()),
                );
                None
            }
            Ok(t) if t.rows.is_empty() => {
                self.warn(name, "no unwind rows");
                None
            }
            Ok(t) => match self.install(&t) {
                Ok(i) => Some(i),
                Err(e) => {
                    self.warn(name, &format!("cannot load its unwind table ({e})"));
                    None
                }
            },
            Err(e) => {
                self.warn(name, &e.to_string());
                None
            }
        };
        self.by_key.insert(key.to_string(), installed);
        Ok(installed)
    }

    /// Waits until every table is in place: the targets named on the
    /// command line are loaded before sampling starts, and their first
    /// events must find their tables (stackcount's counts per caller are
    /// exact from the first call). Their puts overlap: one grace period.
    pub fn wait_placed(&mut self) {
        for h in self.placing.drain(..) {
            let _ = h.join();
        }
    }

    fn warn(&mut self, name: &str, why: &str) {
        self.warned.note(name, why);
    }

    /// Puts `t`'s rows in a spare row map, or in a new one placed in
    /// `unwind_tables`.
    fn install(&mut self, t: &Table) -> io::Result<Installed> {
        let index = page_index(&t.rows);
        let n = (index.len() + t.rows.len()) as u32;
        let mut entries: Vec<u64> = index.iter().map(|&i| u64::from(i)).collect();
        entries.extend(t.rows.iter().map(|r| r.to_bits()));
        // The start-up scan of running processes (cache_only) leaves the
        // spares to processes that BPF reports, which are waiting.
        let spare = match &mut self.spares {
            Some(s) if !self.cache_only => s.take(n),
            _ => None,
        };
        let id = match spare {
            Some(spare) => {
                fill(&spare.map, &entries)?;
                spare.id
            }
            None => {
                let slots = self.tables.max_entries();
                let id = spares::take_slot(&self.next_id, slots).ok_or_else(|| {
                    io::Error::other(format!("all {slots} table slots are taken"))
                })?;
                let opts = sys::bpf_map_create_opts {
                    sz: std::mem::size_of::<sys::bpf_map_create_opts>() as _,
                    map_flags: ROWS_FLAGS,
                    ..Default::default()
                };
                let map = MapHandle::create(MapType::Array, Some("flare_rows"), 4, 8, n, &opts)
                    .map_err(io::Error::other)?;
                fill(&map, &entries)?;
                // Placed on a thread of its own (a grace period nobody
                // here waits for), else now.
                let map = Arc::new(map);
                self.placing.retain(|h| !h.is_finished());
                match self.spares.as_ref().and_then(|s| s.place(id, &map)) {
                    Some(placing) => self.placing.push(placing),
                    None => spares::put(&self.tables, id, &map).map_err(io::Error::other)?,
                }
                id
            }
        };
        self.stats.objects += 1;
        self.stats.rows += t.rows.len() as u64;
        Ok(Installed {
            id,
            rows: t.rows.len() as u32,
            pages: index.len() as u32,
            base: t.base,
        })
    }
}

/// What starts the vDSO's key in the table cache.
const VDSO_KEY: &str = "vdso-";

/// The vDSO's key in the table cache: its build id, else (without one)
/// the kernel's release, which names its vDSO.
pub fn vdso_key(elf: &Elf) -> String {
    let id: String = match &elf.build_id {
        Some(id) => id.iter().map(|b| format!("{b:02x}")).collect(),
        None => std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
    };
    format!("{VDSO_KEY}{id}")
}

/// The table of object `key` (its image `data`, parsed as `elf`): from
/// the disk cache, else built and stored there (the cache is best effort:
/// one that cannot be written only costs time). `None` when `cache_only`
/// and it is not cached. Shared by the BPF unwinder's loader and the
/// user-space walk of perf-event mode.
pub fn load_table(
    cache: &DiskCache,
    key: &str,
    data: &[u8],
    elf: &Elf,
    stats: &mut Stats,
    cache_only: bool,
) -> Option<Result<Table, TableError>> {
    let t0 = Instant::now();
    match cache.load(key) {
        Some(t) => {
            stats.from_cache += 1;
            stats.cache_time += t0.elapsed();
            Some(Ok(t))
        }
        None if cache_only => None,
        None => {
            let built = match Table::from_parsed(data, elf) {
                // arm64's vDSO has no call-frame information; its
                // functions are leaves (clock_gettime and the like).
                Err(TableError::NoCfi)
                    if key.starts_with(VDSO_KEY) && elf.machine == Machine::Aarch64 =>
                {
                    Ok(Table::leaves(elf))
                }
                built => built,
            };
            stats.build_time += t0.elapsed();
            if let Ok(t) = &built {
                stats.built += 1;
                cache.store(key, t);
            }
            Some(built)
        }
    }
}

/// Index entries per row at most: past it (rows spread thin over a large
/// range) the table goes without an index.
const MAX_PAGES_PER_ROW: usize = 4;

/// The page index of `rows` (sorted by pc): entry `p` is the position of
/// the row covering the first address of page `p` (`pc >>
/// UNWIND_PAGE_SHIFT`), one entry past the last page so that every page
/// has an end. The BPF walker searches only a page's rows. Empty when it
/// would cost more than it saves.
pub fn page_index(rows: &[Row]) -> Vec<u32> {
    let Some(last) = rows.last() else {
        return Vec::new();
    };
    let pages = (last.pc >> PAGE_SHIFT) as usize + 2;
    if pages > rows.len() * MAX_PAGES_PER_ROW {
        return Vec::new();
    }
    let mut index = Vec::with_capacity(pages);
    let mut at = 0usize;
    for p in 0..pages as u64 {
        let start = p << PAGE_SHIFT;
        while at + 1 < rows.len() && u64::from(rows[at + 1].pc) <= start {
            at += 1;
        }
        index.push(at as u32);
    }
    index
}

/// Mirrors UNWIND_PAGE_SHIFT in unwind_types.h.
const PAGE_SHIFT: u32 = 12;

/// Copies `entries` into the mmapable array `map` (one copy, no syscall
/// per entry).
fn fill(map: &MapHandle, entries: &[u64]) -> io::Result<()> {
    let len = std::mem::size_of_val(entries);
    // SAFETY: a shared, writable mapping of the map's whole value area
    // (len bytes: one 8-byte element per entry, as the map was created); it is
    // written within bounds and unmapped before return.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            map.as_fd().as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        std::ptr::copy_nonoverlapping(entries.as_ptr().cast::<u8>(), p.cast::<u8>(), len);
        libc::munmap(p, len);
    }
    Ok(())
}

/// The note that an object's frames are walked by frame pointers (no
/// table could be made for it), given once per object: by the BPF
/// unwinder's loader here and by perf-event mode's user-space walker.
#[derive(Debug, Default)]
pub struct FramePointerNotes {
    noted: HashSet<String>,
}

impl FramePointerNotes {
    /// Notes, once for `name`, why its frames are walked by frame
    /// pointers.
    pub fn note(&mut self, name: &str, why: &str) {
        if self.noted.insert(name.to_string()) {
            crate::notes::note(format!(
                "WARNING: {name}: {why}; its frames are walked by frame pointers."
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(pcs: &[u32]) -> Vec<Row> {
        pcs.iter()
            .map(|&pc| Row {
                pc,
                ..Row::default()
            })
            .collect()
    }

    /// The row covering `key` as unwind.h finds it: a binary search of
    /// `[lo, hi)` for one past the last row at or below `key`.
    fn search(rows: &[Row], mut lo: usize, mut hi: usize, key: u32) -> Option<usize> {
        while lo < hi {
            let mid = (lo + hi) / 2;
            if rows[mid].pc <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
    }

    /// As unwind_find_row: the page's range when the index has it.
    fn find(rows: &[Row], index: &[u32], key: u32) -> Option<usize> {
        let page = (key >> PAGE_SHIFT) as usize;
        match (index.get(page), index.get(page + 1)) {
            (Some(&at), Some(&next)) => search(rows, at as usize, next as usize + 1, key),
            _ => search(rows, 0, rows.len(), key),
        }
    }

    #[test]
    fn page_index_points_at_the_row_covering_each_page() {
        let r = rows(&[0x10, 0x800, 0x1000, 0x1010, 0x3500]);
        assert_eq!(page_index(&r), [0, 2, 3, 3, 4]);
        assert!(page_index(&[]).is_empty());
        // Two rows 64 MiB apart: an index would be mostly empty.
        assert!(page_index(&rows(&[0, 1 << 26])).is_empty());
    }

    #[test]
    fn a_page_search_finds_what_a_whole_search_finds() {
        let mut pcs = vec![0x40];
        let mut pc = 0x40u32;
        for i in 0..5000u32 {
            pc += 1 + (i.wrapping_mul(2_654_435_761) >> 20) % 300;
            pcs.push(pc);
        }
        let r = rows(&pcs);
        let index = page_index(&r);
        assert!(!index.is_empty());
        for key in (0..pc + 0x2000).step_by(7) {
            assert_eq!(
                find(&r, &index, key),
                search(&r, 0, r.len(), key),
                "{key:#x}"
            );
        }
    }

    #[test]
    fn the_vdso_has_call_frame_information() {
        let d = vdso_image().expect("vdso");
        let t = Table::from_elf(d).expect("vdso table");
        assert!(!t.rows.is_empty());
    }
}
