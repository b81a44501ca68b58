//! Line tables shared by every collector's V8 namer. A script's line
//! table is counted from its source, read out of the process: for the
//! TypeScript compiler, 9 MiB of UTF-16 read and scanned per process.
//! The agent runs a collector per profile (CPU, off-CPU, wall-clock),
//! each with its namer, and each read it again: 10 % of the agent's time
//! beside a tsc loop. Here it is read once per process and script, kept
//! under what identifies them across collectors — pid, the process's
//! start (`/proc/PID/stat`), the script's address and its source's word —
//! never under the file or the text, which another process may fake.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::heap::LineTable;
use crate::runtime::tracker::Weight;

/// (pid, process start in ticks, script, its source's word).
type Key = (u32, u64, u64, u64);

/// Past this many bytes of tables, all are forgotten: a few processes'
/// worth of the largest real scripts (tsc's: 1.1 MiB of line ends).
const MAX_BYTES: usize = 16 << 20;

/// What one entry costs besides its table.
const ENTRY: usize = 64;

#[derive(Default)]
struct Shared {
    tables: HashMap<Key, Option<Arc<LineTable>>>,
    bytes: usize,
}

static SHARED: Mutex<Option<Shared>> = Mutex::new(None);

/// The table of `key`'s script, read with `read` by the first namer that
/// asks. The lock is held while it reads: a second collector asking for
/// the same script waits for the answer rather than read it too.
pub fn get_or_read(key: Key, read: impl FnOnce() -> Option<LineTable>) -> Option<Arc<LineTable>> {
    let mut guard = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    let shared = guard.get_or_insert_with(Shared::default);
    if let Some(known) = shared.tables.get(&key) {
        return known.clone();
    }
    let table = read().map(Arc::new);
    let weight = ENTRY + table.as_ref().map_or(0, |t| t.weight());
    if shared.bytes + weight > MAX_BYTES {
        shared.tables.clear();
        shared.bytes = 0;
    }
    shared.tables.insert(key, table.clone());
    shared.bytes += weight;
    table
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
}
