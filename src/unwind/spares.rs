//! Row maps placed in `unwind_tables` before any object needs them.
//!
//! Putting a map into a map-of-maps makes the kernel wait for an RCU grace
//! period before the update returns (so that no BPF program still sees the
//! old slot): 5–25 ms on a busy machine, during which a process that has
//! just started, with an object flare has not installed yet, gets stacks
//! that stop at that object. So a few empty maps of fixed sizes are kept
//! installed: a new object whose rows fit one is copied into it and in use
//! at once, and a short-lived thread installs a replacement, paying the
//! grace period where nobody waits for it. Larger objects get a map of
//! their own, which another such thread places in its slot
//! ([`Spares::place`]): until then BPF finds the slot empty and walks that
//! object's frames as it would without a table, but the loader goes on
//! serving other processes instead of waiting. Waits on concurrent threads
//! overlap, so installing the 30 objects of a start-up scan takes one grace
//! period, not 30.
//!
//! Slot ids come from one counter shared with the loader.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use libbpf_rs::libbpf_sys as sys;
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

/// Sizes (in 8-byte entries) of the maps kept ready: 32 KiB, 256 KiB and
/// 2 MiB, most programs' and small libraries' tables.
pub const CLASSES: [u32; 3] = [1 << 12, 1 << 15, 1 << 18];

/// An empty row map already in slot `id` of `unwind_tables`.
pub struct Spare {
    pub id: u32,
    pub map: MapHandle,
    pub entries: u32,
}

/// The spares ready, and what makes more.
pub struct Spares {
    ready: Vec<Spare>,
    made: Receiver<Spare>,
    made_tx: Sender<Spare>,
    tables: Arc<MapHandle>,
    flags: u32,
    next_id: Arc<AtomicU32>,
}

impl Spares {
    /// Asks for one map of each class. `flags`: the row maps' flags;
    /// `next_id`: the slot counter.
    pub fn start(tables: &MapHandle, flags: u32, next_id: Arc<AtomicU32>) -> Option<Spares> {
        let tables = Arc::new(MapHandle::try_from(tables).ok()?);
        let (made_tx, made) = mpsc::channel();
        let spares = Spares {
            ready: Vec::new(),
            made,
            made_tx,
            tables,
            flags,
            next_id,
        };
        for c in CLASSES {
            spares.request(c);
        }
        Some(spares)
    }

    /// Makes a spare of `entries` on a thread of its own: each waits for a
    /// grace period, and waits that overlap end together.
    fn request(&self, entries: u32) {
        let (tables, next_id, tx, flags) = (
            self.tables.clone(),
            self.next_id.clone(),
            self.made_tx.clone(),
            self.flags,
        );
        let _ = std::thread::Builder::new()
            .name("flare-spare".into())
            .spawn(move || {
                if let Some(spare) = make(&tables, flags, entries, &next_id) {
                    let _ = tx.send(spare);
                }
            });
    }

    /// Takes the smallest ready spare that holds `entries`, and asks for
    /// its replacement.
    pub fn take(&mut self, entries: u32) -> Option<Spare> {
        self.ready.extend(self.made.try_iter());
        let (i, _) = self
            .ready
            .iter()
            .enumerate()
            .filter(|(_, s)| s.entries >= entries)
            .min_by_key(|(_, s)| s.entries)?;
        let spare = self.ready.swap_remove(i);
        self.request(spare.entries);
        Some(spare)
    }

    /// Puts `map` in slot `id` on a thread of its own (so that the grace
    /// periods of many such puts overlap); `None` when no thread could be
    /// started.
    pub fn place(&self, id: u32, map: &Arc<MapHandle>) -> Option<JoinHandle<()>> {
        let (tables, map) = (self.tables.clone(), map.clone());
        std::thread::Builder::new()
            .name("flare-place".into())
            .spawn(move || {
                let _ = put(&tables, id, &map);
            })
            .ok()
    }
}

/// Puts `map` in slot `id` of `tables` (waits for a grace period).
pub fn put(tables: &MapHandle, id: u32, map: &MapHandle) -> libbpf_rs::Result<()> {
    let fd = map.as_fd().as_raw_fd() as u32;
    tables.update(&id.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
}

/// Creates an empty row map of `entries` and installs it in the next slot.
fn make(tables: &MapHandle, flags: u32, entries: u32, next_id: &AtomicU32) -> Option<Spare> {
    let opts = sys::bpf_map_create_opts {
        sz: std::mem::size_of::<sys::bpf_map_create_opts>() as _,
        map_flags: flags,
        ..Default::default()
    };
    let map = MapHandle::create(MapType::Array, Some("flare_rows"), 4, 8, entries, &opts).ok()?;
    let id = take_slot(next_id, tables.max_entries())?;
    put(tables, id, &map).ok()?;
    Some(Spare { id, map, entries })
}

/// The next free slot of `slots`, or None when all are taken.
pub fn take_slot(next_id: &AtomicU32, slots: u32) -> Option<u32> {
    next_id
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |id| {
            (id < slots).then_some(id + 1)
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_run_out_without_wrapping() {
        let next = AtomicU32::new(0);
        assert_eq!(take_slot(&next, 2), Some(0));
        assert_eq!(take_slot(&next, 2), Some(1));
        assert_eq!(take_slot(&next, 2), None);
        assert_eq!(next.load(Ordering::Relaxed), 2);
    }
}
