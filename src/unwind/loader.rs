//! Keeps the unwinder's BPF maps in step with the processes it meets.
//!
//! Each process gets a slice of `unwind_mappings` (its executable
//! mappings, sorted, each with its object's table and load bias) and an
//! `unwind_procs` entry pointing at it. Processes are loaded when BPF
//! reports one it does not know (ring buffer `unwind_events`), reloaded
//! when it reports an address outside every mapping (a library loaded
//! since) or the executable changes (exec), and dropped when they exit.
//! Targets named on the command line are loaded before sampling starts.
//! The work runs on a thread of its own ([`Unwinder`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use libbpf_rs::{Map, MapCore, MapFlags, MapHandle, RingBufferBuilder};

use super::cache::DiskCache;
use super::elf::vaddr_of_offset;
use super::objects::{Object, Objects, Stats};
use super::procs::{exec_mappings, tracked_mappings, Backing, ExecMapping};
use crate::collect::RuntimeFinds;
use crate::procmaps::Mappings;

/// Mirrors unwind_types.h.
const NO_TABLE: u32 = u32::MAX;
const MAX_MAPS: usize = 1 << 10;
const EVENT_PC: u32 = 2;

/// The unwinder's maps of a loaded tool, as descriptors of their own.
pub struct Maps {
    procs: MapHandle,
    mappings: MapHandle,
    tables: MapHandle,
    events: MapHandle,
    /// When BPF last reported each process (unwind.h's rate limit).
    reported: MapHandle,
}

impl Maps {
    pub fn new(
        procs: &Map,
        mappings: &Map,
        tables: &Map,
        events: &Map,
        reported: &Map,
    ) -> libbpf_rs::Result<Maps> {
        Ok(Maps {
            procs: MapHandle::try_from(procs)?,
            mappings: MapHandle::try_from(mappings)?,
            tables: MapHandle::try_from(tables)?,
            events: MapHandle::try_from(events)?,
            reported: MapHandle::try_from(reported)?,
        })
    }
}

/// One entry of `unwind_mappings` (struct unwind_mapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub start: u64,
    pub end: u64,
    pub bias: u64,
    pub table: u32,
    pub rows: u32,
    /// Page index entries before the rows.
    pub pages: u32,
}

impl Entry {
    fn bytes(&self) -> [u8; 40] {
        let mut b = [0u8; 40];
        b[..8].copy_from_slice(&self.start.to_ne_bytes());
        b[8..16].copy_from_slice(&self.end.to_ne_bytes());
        b[16..24].copy_from_slice(&self.bias.to_ne_bytes());
        b[24..28].copy_from_slice(&self.table.to_ne_bytes());
        b[28..32].copy_from_slice(&self.rows.to_ne_bytes());
        b[32..36].copy_from_slice(&self.pages.to_ne_bytes());
        b
    }
}

/// The entry for mapping `m` of `object`: table rows are found at
/// `address - bias`.
pub fn entry(m: &ExecMapping, object: Option<&Object>) -> Entry {
    let none = Entry {
        start: m.start,
        end: m.end,
        bias: 0,
        table: NO_TABLE,
        rows: 0,
        pages: 0,
    };
    let Some(o) = object else { return none };
    let Some(t) = o.table else { return none };
    // The virtual address the mapping's first byte has in the object.
    let Some(vaddr) = vaddr_of_offset(&o.segments, m.offset) else {
        return none;
    };
    Entry {
        bias: m.start.wrapping_sub(vaddr).wrapping_add(t.base),
        table: t.id,
        rows: t.rows,
        pages: t.pages,
        ..none
    }
}

/// Free ranges of `unwind_mappings`.
#[derive(Debug)]
struct Slices {
    free: Vec<Range<u32>>,
}

impl Slices {
    fn new(len: u32) -> Slices {
        Slices {
            free: std::iter::once(0..len).collect(),
        }
    }

    fn alloc(&mut self, n: u32) -> Option<Range<u32>> {
        let i = self.free.iter().position(|r| r.len() >= n as usize)?;
        let r = &mut self.free[i];
        let got = r.start..r.start + n;
        r.start += n;
        if r.start >= r.end {
            self.free.remove(i);
        }
        Some(got)
    }

    fn release(&mut self, r: Range<u32>) {
        if r.start < r.end {
            self.free.push(r);
            self.free.sort_by_key(|r| r.start);
            // Merge neighbours.
            let mut merged: Vec<Range<u32>> = Vec::with_capacity(self.free.len());
            for r in self.free.drain(..) {
                match merged.last_mut() {
                    Some(last) if last.end == r.start => last.end = r.end,
                    _ => merged.push(r),
                }
            }
            self.free = merged;
        }
    }
}

struct Loaded {
    slice: Range<u32>,
    exe: (u64, u64),
    ranges: Vec<Range<u64>>,
    at: Instant,
    /// The last reload did not find the address it was read again for
    /// (code outside every mapping: JIT code without a perf map, say).
    fruitless: bool,
}

/// The maps' user-space side.
pub struct Loader {
    maps: Maps,
    objects: Objects,
    slices: Slices,
    procs: HashMap<u32, Loaded>,
    /// Slices freed at the last tick: BPF may still be reading them.
    retired: Vec<Range<u32>>,
    /// The run's record of mappings, once the pipeline has one: read
    /// instead of `/proc/PID/maps`, which costs the kernel 50-200 us a
    /// process (a fork storm's worth of it showed in its wall time).
    tracked: Arc<OnceLock<Mappings>>,
    /// Told of each process loaded and gone: the runtimes' trackers,
    /// which find the processes running them.
    watchers: Vec<Box<dyn Watcher>>,
}

/// What follows the processes the loader loads besides the loader: each
/// runtime's tracker ([`crate::runtime::tracker`]), told of each process
/// loaded with its executable mappings and of each gone, and given the
/// loader's idle moments between BPF's reports.
pub trait Watcher: Send {
    /// Process `pid` was loaded (again), mapping `maps`.
    fn loaded(&mut self, pid: u32, maps: &[ExecMapping]);
    /// Process `pid` exited.
    fn gone(&mut self, pid: u32);
    /// Between reports: at least every [`BUSY_WAIT`] while a watcher is
    /// [`Watcher::busy`], else every [`IDLE_WAIT`].
    fn idle(&mut self);
    /// Whether it has work for its idle turns soon (a process to look at
    /// again): the loader then waits [`BUSY_WAIT`] at most for reports.
    fn busy(&self) -> bool {
        false
    }
}

/// How long the loader waits for BPF's reports while a watcher is busy
/// (the runtime trackers look at a pending process again this often).
pub const BUSY_WAIT: Duration = Duration::from_millis(100);
/// How long it waits otherwise (and how long a stop may take): reports
/// wake it at once.
pub const IDLE_WAIT: Duration = Duration::from_millis(250);

fn exe_id(pid: u32) -> (u64, u64) {
    std::fs::metadata(format!("/proc/{pid}/exe")).map_or((0, 0), |m| (m.dev(), m.ino()))
}

impl Loader {
    /// A loader of `maps`, telling `watchers` of the processes it loads.
    pub fn new(
        maps: Maps,
        cache: DiskCache,
        watchers: Vec<Box<dyn Watcher>>,
    ) -> std::io::Result<Loader> {
        let cap = maps.mappings.max_entries();
        let tables = MapHandle::try_from(&maps.tables).map_err(std::io::Error::other)?;
        let objects = Objects::new(tables, cache);
        Ok(Loader {
            watchers,
            maps,
            objects,
            slices: Slices::new(cap),
            procs: HashMap::new(),
            retired: Vec::new(),
            tracked: Arc::default(),
        })
    }

    pub fn stats(&self) -> &Stats {
        &self.objects.stats
    }

    /// Loads `pid` if every table it needs is in the disk cache already
    /// (a background scan must not hold up the processes BPF reports
    /// while it builds tables for others).
    pub fn load_cached(&mut self, pid: u32) -> bool {
        self.objects.cache_only = true;
        self.objects.missed = false;
        let loaded = self.load(pid);
        self.objects.cache_only = false;
        loaded
    }

    /// Reads process `pid`'s mappings and puts them in BPF. False when
    /// the process is gone or there is no room (or, while loading from
    /// the cache only, a table is not there).
    pub fn load(&mut self, pid: u32) -> bool {
        let maps = match self.tracked.get() {
            Some(tracked) => tracked_mappings(tracked, pid),
            None => exec_mappings(pid).ok(),
        };
        let Some(maps) = maps else {
            return false;
        };
        let mut entries = Vec::with_capacity(maps.len());
        for m in maps.iter().take(MAX_MAPS) {
            let object = match &m.backing {
                Backing::File(path) => self.objects.by_inode(m.dev_ino).or_else(|| {
                    m.open_paths(pid)
                        .iter()
                        .find_map(|p| self.objects.file(p, path))
                }),
                Backing::Vdso => self.objects.vdso(),
                Backing::Other => None,
            };
            entries.push(entry(m, object.as_deref()));
        }
        if self.objects.cache_only && self.objects.missed {
            return false;
        }
        let Some(slice) = self.slices.alloc(entries.len() as u32) else {
            return false;
        };
        for (i, e) in (slice.start..).zip(&entries) {
            if self
                .maps
                .mappings
                .update(&i.to_ne_bytes(), &e.bytes(), MapFlags::ANY)
                .is_err()
            {
                self.slices.release(slice);
                return false;
            }
        }
        let mut proc_value = [0u8; 8];
        proc_value[..4].copy_from_slice(&slice.start.to_ne_bytes());
        proc_value[4..].copy_from_slice(&(entries.len() as u32).to_ne_bytes());
        if self
            .maps
            .procs
            .update(&pid.to_ne_bytes(), &proc_value, MapFlags::ANY)
            .is_err()
        {
            self.slices.release(slice);
            return false;
        }
        for w in &mut self.watchers {
            w.loaded(pid, &maps);
        }
        let loaded = Loaded {
            slice,
            exe: exe_id(pid),
            ranges: entries.iter().map(|e| e.start..e.end).collect(),
            at: Instant::now(),
            fruitless: false,
        };
        if let Some(old) = self.procs.insert(pid, loaded) {
            self.retired.push(old.slice);
        }
        true
    }

    /// Handles one report from BPF: a process or an address it has no
    /// mapping for.
    ///
    /// A load that finds what was reported lets BPF report the process
    /// again at once, without its 20 ms rate limit: a program starting up
    /// maps libc and its other libraries one after another, and each of
    /// them would otherwise cost 20 ms of incomplete stacks. A reload
    /// that does not find the address keeps the limit.
    pub fn on_event(&mut self, pid: u32, kind: u32, pc: u64) {
        match self.procs.get(&pid) {
            None => {
                if self.load(pid) {
                    self.rearm(pid);
                }
            }
            Some(l) if kind == EVENT_PC => {
                let known = |l: &Loaded| l.ranges.iter().any(|r| r.contains(&pc));
                if known(l) {
                    // Loaded since BPF looked.
                    self.rearm(pid);
                    return;
                }
                // Reloaded at once after an exec (the loaded mappings are
                // the old program's) or a load that found what it was
                // asked for, else at most every RELOAD_GAP.
                let due = !l.fruitless || l.at.elapsed() > RELOAD_GAP || exe_id(pid) != l.exe;
                if due && self.load(pid) {
                    if let Some(l) = self.procs.get_mut(&pid) {
                        l.fruitless = !known(l);
                        if !l.fruitless {
                            self.rearm(pid);
                        }
                    }
                }
            }
            Some(_) => {}
        }
    }

    /// Lets BPF report `pid` again without waiting out its rate limit.
    fn rearm(&self, pid: u32) {
        let _ = self.maps.reported.delete(&pid.to_ne_bytes());
    }

    /// Drops processes that exited, reloads those that exec'd, and frees
    /// the slices retired at the previous tick.
    pub fn tick(&mut self) {
        for r in std::mem::take(&mut self.retired) {
            self.slices.release(r);
        }
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            let exe = exe_id(pid);
            if exe == (0, 0) {
                let _ = self.maps.procs.delete(&pid.to_ne_bytes());
                for w in &mut self.watchers {
                    w.gone(pid);
                }
                if let Some(l) = self.procs.remove(&pid) {
                    self.retired.push(l.slice);
                }
            } else if self.procs.get(&pid).is_some_and(|l| l.exe != exe) {
                self.load(pid);
            }
        }
    }
}

/// A process whose code runs outside every known mapping is read again
/// at most this often (as unwind.h reports it at most every 20 ms).
const RELOAD_GAP: Duration = Duration::from_millis(20);

/// The loader at work on a thread of its own, until dropped.
pub struct Unwinder {
    stop: Arc<AtomicBool>,
    /// What names the runtime frames of the processes loaded.
    finds: Vec<Arc<dyn RuntimeFinds>>,
    tracked: Arc<OnceLock<Mappings>>,
    thread: Option<JoinHandle<Stats>>,
}

impl Unwinder {
    /// Loads `preload` (the targets) now, then serves BPF's reports on a
    /// thread; with `scan_all`, that thread first loads every process
    /// running (between reports), so that short-lived bursts of known
    /// processes do not wait for a report. `watchers` are told of each
    /// process loaded; `finds` name the runtime frames they find.
    pub fn start(
        maps: Maps,
        preload: &[u32],
        scan_all: bool,
        watchers: Vec<Box<dyn Watcher>>,
        finds: Vec<Arc<dyn RuntimeFinds>>,
    ) -> std::io::Result<Unwinder> {
        let mut loader = Loader::new(maps, DiskCache::from_env(), watchers)?;
        for &pid in preload {
            loader.load(pid);
        }
        loader.objects.wait_placed();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let tracked = loader.tracked.clone();
        let thread = std::thread::Builder::new()
            .name("flare-unwind".into())
            .spawn(move || serve(loader, flag, scan_all))?;
        Ok(Unwinder {
            stop,
            finds,
            tracked,
            thread: Some(thread),
        })
    }

    /// From now on, processes' mappings come from `mappings` (the run's
    /// tracker) rather than from `/proc`.
    pub fn use_mappings(&self, mappings: Mappings) {
        let _ = self.tracked.set(mappings);
    }

    /// The namers of the runtime frames this unwinder's stacks hold.
    pub fn namers(&self) -> crate::collect::Namers {
        self.finds.iter().flat_map(|f| f.namers()).collect()
    }

    /// True once a process with runtime frames (Python, Java) was found.
    pub fn has_runtime_frames(&self) -> bool {
        self.finds.iter().any(|f| f.any_process())
    }

    /// Stops the thread; returns what it built.
    pub fn finish(mut self) -> Stats {
        self.stop_thread()
    }

    fn stop_thread(&mut self) -> Stats {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Unwinder {
    /// Tells the thread to stop without waiting for it: it may be in the
    /// middle of loading a process, which nobody needs any more, and the
    /// output should not wait for that. Its map handles keep what it
    /// still touches alive until it ends.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take();
    }
}

fn serve(mut loader: Loader, stop: Arc<AtomicBool>, scan_all: bool) -> Stats {
    let events: Rc<RefCell<Vec<(u32, u32, u64)>>> = Rc::default();
    let sink = events.clone();
    let mut builder = RingBufferBuilder::new();
    let ring = match MapHandle::try_from(&loader.maps.events) {
        Ok(map) => map,
        Err(_) => return loader.stats().clone(),
    };
    let added = builder.add(&ring, move |d: &[u8]| {
        if d.len() >= 16 {
            let pid = u32::from_ne_bytes([d[0], d[1], d[2], d[3]]);
            let kind = u32::from_ne_bytes([d[4], d[5], d[6], d[7]]);
            let pc = u64::from_ne_bytes(d[8..16].try_into().unwrap_or([0; 8]));
            sink.borrow_mut().push((pid, kind, pc));
        }
        0
    });
    if added.is_err() {
        return loader.stats().clone();
    }
    let Ok(ring) = builder.build() else {
        return loader.stats().clone();
    };
    let handle = |loader: &mut Loader| {
        let batch = std::mem::take(&mut *events.borrow_mut());
        for (pid, kind, pc) in batch {
            loader.on_event(pid, kind, pc);
        }
    };
    if scan_all {
        for pid in super::procs::all_pids() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let _ = ring.consume();
            handle(&mut loader);
            if !loader.procs.contains_key(&pid) {
                loader.load_cached(pid);
            }
        }
    }
    let mut last_tick = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let busy = loader.watchers.iter().any(|w| w.busy());
        let _ = ring.poll(if busy { BUSY_WAIT } else { IDLE_WAIT });
        handle(&mut loader);
        for w in &mut loader.watchers {
            w.idle();
        }
        if last_tick.elapsed() > Duration::from_secs(1) {
            loader.tick();
            last_tick = Instant::now();
        }
    }
    loader.stats().clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::elf::Segment;
    use crate::unwind::objects::Installed;

    #[test]
    fn bias_takes_the_mapping_to_table_rows() {
        // A PIE's text: file offset 0x1000 loaded at vaddr 0x1000, mapped
        // at 0x5555_5555_5000; its table starts at vaddr 0x1040.
        let object = Object {
            segments: vec![Segment {
                offset: 0x1000,
                vaddr: 0x1000,
                filesz: 0x2000,
                executable: true,
            }],
            table: Some(Installed {
                id: 3,
                rows: 10,
                pages: 0,
                base: 0x1040,
            }),
        };
        let m = ExecMapping {
            start: 0x5555_5555_5000,
            end: 0x5555_5555_7000,
            offset: 0x1000,
            backing: Backing::File("/x".into()),
            dev_ino: (0, 0),
            opened: None,
        };
        let e = entry(&m, Some(&object));
        assert_eq!(e.table, 3);
        // vaddr 0x1040 is at 0x5555_5555_5040, row pc 0.
        assert_eq!(0x5555_5555_5040 - e.bias, 0);
        assert_eq!(entry(&m, None).table, NO_TABLE);
    }

    #[test]
    fn slices_are_reused_and_merged() {
        let mut s = Slices::new(10);
        let a = s.alloc(4).unwrap();
        let b = s.alloc(4).unwrap();
        assert_eq!((a.clone(), b.clone()), (0..4, 4..8));
        assert!(s.alloc(3).is_none());
        s.release(a);
        s.release(b);
        assert_eq!(s.free, Slices::new(10).free);
    }
}
