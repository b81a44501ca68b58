//! A cache of resolved user-space addresses keyed by (process, address),
//! so that a live view re-reading the same stacks every second does not
//! symbolize them again.
//!
//! A PID can be reused by a new process, and a process can `exec` another
//! program; either makes cached names wrong. Each process's entries are
//! therefore tied to its identity (start time and executable), checked once
//! per batch; a changed identity drops them. Entries of a process that has
//! exited are kept (its already-counted samples still need names) until it
//! has not been seen for [`MAX_IDLE_BATCHES`] batches. Memory is bounded by
//! [`MAX_ENTRIES`] addresses in all.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;

/// What tells one process from another that later got the same PID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    /// Start time in clock ticks after boot (`/proc/PID/stat` field 22).
    start: u64,
    /// Device and inode of the executable (`exec` changes them).
    exe: (u64, u64),
}

impl Identity {
    /// The identity of a running process, or `None` when it is gone or
    /// cannot be read.
    pub(crate) fn of(pid: u32) -> Option<Self> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name may hold spaces and parentheses; the fields
        // after its last ')' are fixed. starttime is field 22 of the line,
        // the 20th after the state.
        let rest = stat.get(stat.rfind(')')? + 2..)?;
        let start = rest.split_whitespace().nth(19)?.parse().ok()?;
        let exe = fs::metadata(format!("/proc/{pid}/exe"))
            .map(|m| (m.dev(), m.ino()))
            .unwrap_or((0, 0));
        Some(Identity { start, exe })
    }
}

/// At most this many addresses are cached over all processes; past it the
/// cache starts again from empty.
pub(crate) const MAX_ENTRIES: usize = 1 << 20;

/// A process not seen for this many batches is forgotten.
pub(crate) const MAX_IDLE_BATCHES: u64 = 120;

struct ProcessEntry<V> {
    identity: Option<Identity>,
    addrs: HashMap<u64, V>,
    last_batch: u64,
}

/// Resolved values per (PID, address).
pub(crate) struct UserCache<V> {
    procs: HashMap<u32, ProcessEntry<V>>,
    entries: usize,
    batch: u64,
    max_entries: usize,
}

impl<V: Clone> UserCache<V> {
    pub(crate) fn new() -> Self {
        Self::with_limit(MAX_ENTRIES)
    }

    pub(crate) fn with_limit(max_entries: usize) -> Self {
        UserCache {
            procs: HashMap::new(),
            entries: 0,
            batch: 0,
            max_entries,
        }
    }

    /// Starts a batch: forgets processes idle for too long.
    pub(crate) fn begin_batch(&mut self) {
        self.batch += 1;
        let batch = self.batch;
        let mut dropped = 0;
        self.procs.retain(|_, p| {
            let keep = batch - p.last_batch <= MAX_IDLE_BATCHES;
            if !keep {
                dropped += p.addrs.len();
            }
            keep
        });
        self.entries -= dropped;
    }

    /// Checks `pid`'s identity (`now`, as just read) against the cached
    /// one, dropping its entries if the PID now names another process. A
    /// process that has exited (`now == None`) keeps its entries.
    pub(crate) fn validate(&mut self, pid: u32, now: Option<Identity>) {
        let batch = self.batch;
        let entry = self.procs.entry(pid).or_insert_with(|| ProcessEntry {
            identity: now,
            addrs: HashMap::new(),
            last_batch: batch,
        });
        entry.last_batch = batch;
        if now.is_some() && entry.identity != now {
            self.entries -= entry.addrs.len();
            entry.addrs.clear();
            entry.identity = now;
        }
    }

    pub(crate) fn get(&self, pid: u32, addr: u64) -> Option<&V> {
        self.procs.get(&pid)?.addrs.get(&addr)
    }

    pub(crate) fn insert(&mut self, pid: u32, addr: u64, value: V) {
        if self.entries >= self.max_entries {
            for p in self.procs.values_mut() {
                p.addrs.clear();
            }
            self.entries = 0;
        }
        let batch = self.batch;
        let entry = self.procs.entry(pid).or_insert_with(|| ProcessEntry {
            identity: None,
            addrs: HashMap::new(),
            last_batch: batch,
        });
        if entry.addrs.insert(addr, value).is_none() {
            self.entries += 1;
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(start: u64) -> Option<Identity> {
        Some(Identity { start, exe: (1, 2) })
    }

    #[test]
    fn reused_pid_drops_entries() {
        let mut c = UserCache::new();
        c.begin_batch();
        c.validate(7, id(100));
        c.insert(7, 0x10, "a");
        assert_eq!(c.get(7, 0x10), Some(&"a"));
        c.begin_batch();
        c.validate(7, id(100));
        assert_eq!(c.get(7, 0x10), Some(&"a"), "same process keeps its names");
        c.begin_batch();
        c.validate(7, id(200));
        assert_eq!(c.get(7, 0x10), None, "a new process under the PID");
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn exited_process_keeps_entries_until_idle() {
        let mut c = UserCache::new();
        c.begin_batch();
        c.validate(7, id(100));
        c.insert(7, 0x10, "a");
        c.begin_batch();
        c.validate(7, None);
        assert_eq!(c.get(7, 0x10), Some(&"a"));
        for _ in 0..=MAX_IDLE_BATCHES {
            c.begin_batch();
        }
        assert_eq!(c.get(7, 0x10), None);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn bounded() {
        let mut c = UserCache::with_limit(3);
        c.begin_batch();
        for a in 0..3 {
            c.insert(1, a, a);
        }
        assert_eq!(c.len(), 3);
        c.insert(1, 9, 9);
        assert_eq!(c.len(), 1);
        assert_eq!(c.get(1, 9), Some(&9));
    }

    #[test]
    fn identity_of_self() {
        let me = Identity::of(std::process::id()).expect("own /proc entry");
        assert_eq!(Identity::of(std::process::id()), Some(me));
    }
}
