//! Line tables shared by every collector's V8 namer. A script's line
//! table is counted from its source, read out of the process: for the
//! TypeScript compiler, 9 MiB of UTF-16 read and scanned per process.
//! Every collector of the flare process (the agent's, run after run as
//! it renews them) has its own namer, and each read it again: 10 % of
//! the agent's time beside a tsc loop when it ran three. Here it is read
//! once per process and script, kept under what identifies them across
//! collectors — pid, the process's start (`/proc/PID/stat`), the
//! script's address and its source's word — never under the file or the
//! text, which another process may fake. Tables of processes that exited
//! go first when they add up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::heap::LineTable;
use crate::runtime::tracker::Weight;

/// (pid, process start in ticks, script, its source's word).
type Key = (u32, u64, u64, u64);

/// Past this many bytes of tables, all are forgotten: a few processes'
/// worth of the largest real scripts (tsc's: 1.1 MiB of line ends).
const MAX_BYTES: usize = 16 << 20;

/// Past this many bytes, the tables of processes that exited are
/// forgotten first: once a process is gone nothing more of it can be
/// read to name, so its tables only hold memory (a tsc loop leaves one
/// 1.1 MiB table per run).
const PRUNE_BYTES: usize = MAX_BYTES / 4;

/// What one entry costs besides its table.
const ENTRY: usize = 64;

#[derive(Default)]
struct Shared {
    tables: HashMap<Key, Option<Arc<LineTable>>>,
    bytes: usize,
    /// The bytes the last pruning left: the next waits for a quarter of
    /// [`PRUNE_BYTES`] more, so that live processes' tables past the
    /// bound are not checked again at every new table.
    pruned: usize,
}

impl Shared {
    /// [`get_or_read`], with `alive` telling whether the process of a
    /// pid and start is still there.
    fn get_or_read(
        &mut self,
        key: Key,
        read: impl FnOnce() -> Option<LineTable>,
        alive: impl Fn(u32, u64) -> bool,
    ) -> Option<Arc<LineTable>> {
        if let Some(known) = self.tables.get(&key) {
            return known.clone();
        }
        let table = read().map(Arc::new);
        let weight = weight(&table);
        if self.bytes + weight > PRUNE_BYTES.max(self.pruned + PRUNE_BYTES / 4) {
            self.prune(&alive);
            self.pruned = self.bytes + weight;
        }
        if self.bytes + weight > MAX_BYTES {
            self.tables.clear();
            self.bytes = 0;
            self.pruned = 0;
        }
        self.tables.insert(key, table.clone());
        self.bytes += weight;
        table
    }

    /// Forgets the tables of processes no longer `alive`.
    fn prune(&mut self, alive: &impl Fn(u32, u64) -> bool) {
        let mut checked: HashMap<(u32, u64), bool> = HashMap::new();
        let mut freed = 0;
        self.tables.retain(|&(pid, start, _, _), table| {
            let keep = *checked
                .entry((pid, start))
                .or_insert_with(|| alive(pid, start));
            if !keep {
                freed += weight(table);
            }
            keep
        });
        self.bytes = self.bytes.saturating_sub(freed);
    }
}

/// What an entry holding `table` costs.
fn weight(table: &Option<Arc<LineTable>>) -> usize {
    ENTRY + table.as_ref().map_or(0, |t| t.weight())
}

static SHARED: Mutex<Option<Shared>> = Mutex::new(None);

/// The table of `key`'s script, read with `read` by the first namer that
/// asks. The lock is held while it reads: a second collector asking for
/// the same script waits for the answer rather than read it too.
pub fn get_or_read(key: Key, read: impl FnOnce() -> Option<LineTable>) -> Option<Arc<LineTable>> {
    let mut guard = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    let shared = guard.get_or_insert_with(Shared::default);
    shared.get_or_read(key, read, |pid, start| {
        crate::procmaps::procfs::start_ticks(pid) == Some(start)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_read_once_per_process_and_script() {
        let reads = std::cell::Cell::new(0);
        let get = |key| {
            get_or_read(key, || {
                reads.set(reads.get() + 1);
                None
            })
        };
        // A pid no test process has, with made-up starts.
        let (pid, start) = (u32::MAX - 7, 1);
        get((pid, start, 0x1000, 0x2000));
        get((pid, start, 0x1000, 0x2000));
        assert_eq!(reads.get(), 1, "the second asker shares the answer");
        get((pid, start + 1, 0x1000, 0x2000));
        assert_eq!(reads.get(), 2, "a later process with the pid reads its own");
        get((pid, start, 0x1000, 0x3000));
        assert_eq!(reads.get(), 3, "a new source of the script is read");
    }

    #[test]
    fn tables_of_exited_processes_go_first() {
        let mut shared = Shared::default();
        // A table of `n` lines.
        let table = |n: usize| move || Some(super::super::heap::count_lines(&vec![0x0a; n], true));
        // About a third of the pruning bound each: the third is over it.
        let n = PRUNE_BYTES / 3 / 4;
        let alive = |pid: u32, _| pid != 1;
        shared.get_or_read((1, 5, 0x10, 0x20), table(n), alive);
        shared.get_or_read((2, 5, 0x10, 0x20), table(n), alive);
        assert_eq!(shared.tables.len(), 2);
        shared.get_or_read((3, 5, 0x10, 0x20), table(n), alive);
        let mut pids: Vec<u32> = shared.tables.keys().map(|k| k.0).collect();
        pids.sort();
        assert_eq!(
            pids,
            [2, 3],
            "the exited process's table went, not the live one's"
        );
        let weights: usize = shared.tables.values().map(weight).sum();
        assert_eq!(shared.bytes, weights, "the count follows what is kept");
    }

    #[test]
    fn live_tables_past_the_bound_are_not_checked_at_every_table() {
        let mut shared = Shared::default();
        let table = |n: usize| move || Some(super::super::heap::count_lines(&vec![0x0a; n], true));
        let n = PRUNE_BYTES / 3 / 4;
        let checks = std::cell::Cell::new(0);
        let alive = |_: u32, _| {
            checks.set(checks.get() + 1);
            true
        };
        for pid in 1..=3 {
            shared.get_or_read((pid, 5, 0x10, 0x20), table(n), alive);
        }
        assert_eq!(checks.get(), 2, "the third table pruned, checking both");
        // Small tables after it: no pruning until a quarter more is kept.
        for pid in 4..=10 {
            shared.get_or_read((pid, 5, 0x10, 0x20), table(16), alive);
        }
        assert_eq!(checks.get(), 2, "a fruitless pruning is not redone");
        shared.get_or_read((11, 5, 0x10, 0x20), table(PRUNE_BYTES / 4 / 4), alive);
        assert!(checks.get() > 2, "a quarter more prunes again");
        assert_eq!(shared.tables.len(), 11, "every live table is kept");
    }
}
