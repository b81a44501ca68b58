//! The queue of encoded windows a destination has not yet taken: in
//! memory, or on disk (`--spool-dir`) so that it also outlives a restart.
//! Either way it is bounded in bytes: when a new window would not fit, the
//! oldest are dropped (and counted) to make room. Windows leave oldest
//! first.
//!
//! On disk, each window is one file `<sequence>.win` (20 digits, so names
//! sort in order) holding the start and end times (little-endian u64
//! nanoseconds) and the body, written to a temporary file and renamed, so
//! a crash leaves whole files only. A window that cannot be written (the
//! disk is full, the directory was removed) is kept in memory instead,
//! within the same bound, and the error handed back so that the caller can
//! say so: a failing disk must not cost windows a healthy server would
//! take.
//!
//! Every window has a sequence number, so that the sender can deliver the
//! oldest without holding the spool (windows keep arriving meanwhile) and
//! then take out exactly that one.

use std::collections::VecDeque;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Payload;
use crate::profile::Kind;

/// Version 2 holds the profile's kind after the times, then the length
/// of its service's name (u32, 0 for none) and the name; version 1 (CPU
/// windows of no service) is still read.
const MAGIC: &[u8; 8] = b"FLARESP2";
const MAGIC_V1: &[u8; 8] = b"FLARESP1";
const HEADER: usize = 8 + 24;
const HEADER_V1: usize = 8 + 16;

/// The kinds as the spool writes them: codes never reused.
const KINDS: [(Kind, u64); 6] = [
    (Kind::Cpu, 0),
    (Kind::OffCpu, 1),
    (Kind::Wakeup, 2),
    (Kind::OffWake, 3),
    (Kind::Count, 4),
    (Kind::Wall, 5),
];

/// A bounded FIFO of payloads.
pub struct Spool {
    /// Oldest first.
    entries: VecDeque<Entry>,
    /// The directory of a disk spool.
    dir: Option<PathBuf>,
    /// The sequence number of the next window.
    next: u64,
    max_bytes: u64,
    bytes: u64,
    /// Windows dropped to respect the bound, since the start.
    pub dropped: u64,
    /// Windows whose spool file could not be read back.
    pub lost: u64,
}

/// One window: in memory, or in its file.
struct Entry {
    seq: u64,
    size: u64,
    held: Option<Payload>,
}

impl Spool {
    /// A spool in memory.
    pub fn memory(max_bytes: u64) -> Self {
        Spool {
            entries: VecDeque::new(),
            dir: None,
            next: 0,
            max_bytes,
            bytes: 0,
            dropped: 0,
            lost: 0,
        }
    }

    /// A spool in `dir` (created if needed), taking over the windows a
    /// previous run left there.
    pub fn disk(dir: &Path, max_bytes: u64) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let mut entries = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(seq) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".win"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            let size = entry.metadata()?.len();
            entries.push(Entry {
                seq,
                size,
                held: None,
            });
        }
        entries.sort_by_key(|e| e.seq);
        let mut spool = Spool::memory(max_bytes);
        spool.next = entries.last().map_or(0, |e| e.seq + 1);
        spool.bytes = entries.iter().map(|e| e.size).sum();
        spool.entries = entries.into();
        spool.dir = Some(dir.to_path_buf());
        spool.make_room(0);
        Ok(spool)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True for a spool on disk (it outlives the process).
    pub fn is_disk(&self) -> bool {
        self.dir.is_some()
    }

    /// True when every window held is in a file (none would be lost with
    /// the process).
    pub fn all_on_disk(&self) -> bool {
        self.entries.iter().all(|e| e.held.is_none())
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn size(p: &Payload) -> u64 {
        (HEADER + 4 + p.service.as_deref().map_or(0, str::len) + p.body.len()) as u64
    }

    /// Drops the oldest windows until `incoming` more bytes fit.
    fn make_room(&mut self, incoming: u64) {
        while self.bytes + incoming > self.max_bytes && !self.is_empty() {
            self.drop_front();
            self.dropped += 1;
        }
    }

    fn drop_front(&mut self) {
        if let Some(e) = self.entries.pop_front() {
            self.bytes -= e.size;
            if let (None, Some(dir)) = (&e.held, &self.dir) {
                let _ = fs::remove_file(file(dir, e.seq));
            }
        }
    }

    /// Adds a window at the back, dropping the oldest to stay within the
    /// bound (a window larger than the whole bound is dropped itself).
    /// Returns the error of a disk spool that could not write the window,
    /// which is then kept in memory.
    #[must_use]
    pub fn push(&mut self, p: Payload) -> Option<io::Error> {
        let size = Self::size(&p);
        if size > self.max_bytes {
            self.dropped += 1;
            return None;
        }
        self.make_room(size);
        let seq = self.next;
        self.next += 1;
        let (held, error) = match &self.dir {
            None => (Some(p), None),
            Some(dir) => match write(dir, seq, &p) {
                Ok(()) => (None, None),
                Err(e) => (Some(p), Some(e)),
            },
        };
        self.entries.push_back(Entry { seq, size, held });
        self.bytes += size;
        error
    }

    /// The oldest window and its sequence number, without removing it. A
    /// spool file that cannot be read is dropped (counted in
    /// [`Spool::lost`], with a message) and the next one tried.
    pub fn front(&mut self) -> Option<(u64, Payload)> {
        loop {
            let e = self.entries.front()?;
            let seq = e.seq;
            let read = match (&e.held, &self.dir) {
                (Some(p), _) => Ok(p.clone()),
                (None, Some(dir)) => read(&file(dir, seq)),
                (None, None) => Err(io::Error::other("no spool directory")),
            };
            match read {
                Ok(p) => return Some((seq, p)),
                Err(e) => {
                    if let Some(dir) = &self.dir {
                        crate::notes::note(format!(
                            "flare: cannot read the spooled window {}: {e}; it is lost",
                            file(dir, seq).display()
                        ));
                    }
                    self.drop_front();
                    self.lost += 1;
                }
            }
        }
    }

    /// Removes window `seq` (after it was delivered or refused). One that
    /// was dropped for room meanwhile is no longer counted as dropped.
    pub fn remove(&mut self, seq: u64) {
        if self.entries.front().is_some_and(|e| e.seq == seq) {
            self.drop_front();
        } else if !self.entries.iter().any(|e| e.seq == seq) {
            self.dropped = self.dropped.saturating_sub(1);
        }
    }
}

/// Writes window `seq` into `dir`, whole or not at all.
fn write(dir: &Path, seq: u64, p: &Payload) -> io::Result<()> {
    let mut tmp = tempfile::Builder::new().prefix(".spool").tempfile_in(dir)?;
    tmp.write_all(MAGIC)?;
    tmp.write_all(&p.start_ns.to_le_bytes())?;
    tmp.write_all(&p.end_ns.to_le_bytes())?;
    let code = KINDS
        .iter()
        .find(|(k, _)| *k == p.kind)
        .map_or(0, |&(_, c)| c);
    tmp.write_all(&code.to_le_bytes())?;
    let service = p.service.as_deref().unwrap_or("").as_bytes();
    tmp.write_all(&(service.len() as u32).to_le_bytes())?;
    tmp.write_all(service)?;
    tmp.write_all(&p.body)?;
    tmp.persist(file(dir, seq)).map_err(|e| e.error)?;
    Ok(())
}

fn file(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.win"))
}

fn read(path: &Path) -> io::Result<Payload> {
    let data = fs::read(path)?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "not a flare spool file");
    let v1 = data.get(..8) == Some(MAGIC_V1);
    let header = if v1 { HEADER_V1 } else { HEADER };
    if data.len() < header || !(v1 || &data[..8] == MAGIC) {
        return Err(bad());
    }
    let word = |at: usize| data[at..at + 8].try_into().map(u64::from_le_bytes);
    let kind = match v1 {
        true => Kind::Cpu,
        false => {
            let code = word(24).map_err(|_| bad())?;
            KINDS
                .iter()
                .find(|&&(_, c)| c == code)
                .map(|&(k, _)| k)
                .ok_or_else(bad)?
        }
    };
    let (service, body) = match v1 {
        true => (None, &data[header..]),
        false => {
            let rest = &data[header..];
            let len = rest
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes)
                .ok_or_else(bad)? as usize;
            let name = rest.get(4..4 + len).ok_or_else(bad)?;
            let name = std::str::from_utf8(name).map_err(|_| bad())?;
            (
                (!name.is_empty()).then(|| Arc::from(name)),
                &rest[4 + len..],
            )
        }
    };
    Ok(Payload {
        start_ns: word(8).map_err(|_| bad())?,
        end_ns: word(16).map_err(|_| bad())?,
        kind,
        service,
        body: body.to_vec(),
    })
}
