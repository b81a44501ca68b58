//! JIT symbol maps (`/tmp/perf-PID.map`, perf's convention: one
//! `START SIZE name` line per function, hexadecimal), which JIT compilers
//! (the JVM with an agent, node `--perf-basic-prof`, LuaJIT, ...) write for
//! code that has no file.
//!
//! The map is looked for under the process's own root and with its own PID
//! (a process in a container writes its namespace's `/tmp`), and opened
//! while the process lives: the open descriptor still reads it after the
//! process, its `/tmp` and its namespace are gone. As perf does, a map
//! owned by anyone but the process's user or root is not trusted: it is
//! ignored, with a note on stderr.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::procfs::{effective_uid, namespace_pid};
use super::{Backing, Mapping};
use crate::untrusted::{self, Resolve};

/// A process's JIT symbols, sorted by address.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PerfMap {
    entries: Vec<(u64, u64, Arc<str>)>,
}

impl PerfMap {
    /// Parses a map's text; lines that are not `START SIZE name` are
    /// skipped. A later line for the same start wins (code was replaced).
    pub fn parse(text: &str) -> Self {
        let mut by_start: HashMap<u64, (u64, Arc<str>)> = HashMap::new();
        for line in text.lines() {
            let mut f = line.splitn(3, ' ');
            let (Some(start), Some(size), Some(name)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
            let (Some(start), Some(size)) = (hex(start), hex(size)) else {
                continue;
            };
            let name = crate::profile::clean_name(name.trim_end());
            by_start.insert(start, (start.saturating_add(size), name.into()));
        }
        let mut entries: Vec<(u64, u64, Arc<str>)> =
            by_start.into_iter().map(|(s, (e, n))| (s, e, n)).collect();
        entries.sort_by_key(|e| e.0);
        PerfMap { entries }
    }

    /// The function holding `addr`: its start and name.
    pub fn find(&self, addr: u64) -> Option<(u64, &Arc<str>)> {
        let i = self.entries.partition_point(|e| e.0 <= addr);
        let (start, end, name) = self.entries[..i].last()?;
        (addr < *end).then_some((*start, name))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A map file held open, and what was last read from it.
struct Open {
    file: File,
    read: Option<(u64, Arc<PerfMap>)>,
}

/// A perf map larger than this is not read (a large JVM's is tens of MB).
const MAX_PERF_MAP: u64 = 256 << 20;

/// At most this many processes are waited on for a map to appear.
const MAX_PENDING: usize = 1024;

/// The perf maps of every process that has JIT code.
#[derive(Default)]
pub(crate) struct PerfMaps {
    open: HashMap<u32, Open>,
    /// Processes with anonymous executable memory and no map found yet.
    pending: HashSet<u32>,
    /// Processes whose map was refused (noted once).
    refused: HashSet<u32>,
    /// When the pending processes were last looked at.
    retried: Option<Instant>,
    /// Each process's pid in its own namespace (what its map is named
    /// by), read once: a pending JVM was read again every retry.
    nspids: HashMap<u32, u32>,
}

/// Past this many namespace pids kept, all are forgotten.
const MAX_NSPIDS: usize = 4096;

/// Pending processes are looked at again at most this often: a JIT
/// runtime without a perf map (qemu, a JVM without an agent) would
/// otherwise cost two reads of /proc at every poll of the tracker.
const RETRY_GAP: Duration = Duration::from_millis(250);

/// True for a mapping of anonymous executable memory (where JIT code is).
fn is_jit(m: &Mapping) -> bool {
    matches!(&m.backing, Backing::Anon(n) if n.is_empty() || n.starts_with("//anon") || n.starts_with("[anon"))
}

impl PerfMaps {
    /// Looks for `pid`'s map if it has JIT code among `maps`.
    pub(crate) fn notice(&mut self, pid: u32, maps: &[Mapping]) {
        if maps.iter().any(is_jit) {
            self.want(pid);
        }
    }

    /// `pid` has JIT code: its map is looked for now and, until found,
    /// again at each [`PerfMaps::retry`] while the process lives.
    pub(crate) fn want(&mut self, pid: u32) {
        if self.open.contains_key(&pid) || self.refused.contains(&pid) {
            return;
        }
        if !self.try_open(pid) && self.pending.len() < MAX_PENDING {
            self.pending.insert(pid);
        }
    }

    /// Looks again for the maps of processes that have none yet.
    pub(crate) fn retry(&mut self) {
        if self.pending.is_empty() || self.retried.is_some_and(|t| t.elapsed() < RETRY_GAP) {
            return;
        }
        self.retried = Some(Instant::now());
        let pending: Vec<u32> = self.pending.iter().copied().collect();
        for pid in pending {
            let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
            if !alive || self.try_open(pid) || self.refused.contains(&pid) {
                self.pending.remove(&pid);
            }
            if !alive {
                self.nspids.remove(&pid);
            }
        }
    }

    /// `pid` now names a new process: forget its old map.
    pub(crate) fn forget(&mut self, pid: u32) {
        self.open.remove(&pid);
        self.pending.remove(&pid);
        self.refused.remove(&pid);
        self.nspids.remove(&pid);
    }

    /// `pid`'s pid in its own namespace.
    fn namespace_pid(&mut self, pid: u32) -> Option<u32> {
        if let Some(&n) = self.nspids.get(&pid) {
            return Some(n);
        }
        let n = namespace_pid(pid)?;
        if self.nspids.len() >= MAX_NSPIDS {
            self.nspids.clear();
        }
        self.nspids.insert(pid, n);
        Some(n)
    }

    /// Opens `pid`'s map if it exists and may be used: a regular file,
    /// reached without a symbolic link out of the process's root or at the
    /// end ([`crate::untrusted`]), owned by the process's user or root.
    fn try_open(&mut self, pid: u32) -> bool {
        let Some(nspid) = self.namespace_pid(pid) else {
            return false;
        };
        let root = format!("/proc/{pid}/root");
        let path = format!("/tmp/perf-{nspid}.map");
        let (file, meta) =
            match untrusted::open(Path::new(&path), Resolve::InRoot(Path::new(&root))) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
                Err(e) => {
                    if self.refused.insert(pid) {
                        crate::notes::note(format!(
                            "flare: ignoring /tmp/perf-{nspid}.map of PID {pid}: {e}"
                        ));
                    }
                    return false;
                }
            };
        let Some(uid) = effective_uid(pid) else {
            return false;
        };
        if meta.uid() != 0 && meta.uid() != uid {
            if self.refused.insert(pid) {
                crate::notes::note(format!(
                    "flare: ignoring /tmp/perf-{nspid}.map of PID {pid}: owned by uid {}, not by the process's user (uid {uid}) or root",
                    meta.uid()
                ));
            }
            return false;
        }
        self.open.insert(pid, Open { file, read: None });
        true
    }

    /// `pid`'s map as it reads now (re-read when it has grown).
    pub(crate) fn get(&mut self, pid: u32) -> Option<Arc<PerfMap>> {
        if !self.open.contains_key(&pid) && !self.refused.contains(&pid) {
            self.try_open(pid);
        }
        let open = self.open.get_mut(&pid)?;
        let len = open.file.metadata().map(|m| m.len()).unwrap_or(0);
        match &open.read {
            Some((read_len, map)) if *read_len == len => Some(map.clone()),
            _ => {
                open.file.seek(SeekFrom::Start(0)).ok()?;
                let bytes = match untrusted::read_bounded(&open.file, MAX_PERF_MAP) {
                    Ok(b) => b,
                    Err(e) => {
                        crate::notes::note(format!(
                            "flare: ignoring the perf map of PID {pid}: {e}"
                        ));
                        self.open.remove(&pid);
                        self.refused.insert(pid);
                        return None;
                    }
                };
                // A line that is not UTF-8 is named as best it can be.
                let map = Arc::new(PerfMap::parse(&String::from_utf8_lossy(&bytes)));
                open.read = Some((len, map.clone()));
                Some(map)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_finds() {
        let m = PerfMap::parse(
            "7f0000001000 20 LazyCompile:~add app.js:1\n\
             bad line\n\
             0x7f0000002000 0x10 jit_spin\n\
             7f0000001000 30 replaced\n",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m.find(0x7f0000001000).map(|s| &**s.1), Some("replaced"));
        assert_eq!(m.find(0x7f000000102f).map(|s| &**s.1), Some("replaced"));
        assert_eq!(m.find(0x7f0000001030), None);
        assert_eq!(m.find(0x7f000000200f).map(|s| &**s.1), Some("jit_spin"));
        assert_eq!(m.find(0x10), None);
    }
}
