//! The queue of encoded windows a destination has not yet taken: in
//! memory, or on disk (`--spool-dir`) so that it also outlives a restart.
//! Either way it is bounded in bytes: when a new window would not fit, the
//! oldest are dropped (and counted) to make room. Windows leave oldest
//! first.
//!
//! On disk, each window is one file `<sequence>.win` (20 digits, so names
//! sort in order) holding the start and end times (little-endian u64
//! nanoseconds) and the body, written to a temporary file and renamed, so
//! a crash leaves whole files only.

use std::collections::VecDeque;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::Payload;

const MAGIC: &[u8; 8] = b"FLARESP1";
const HEADER: usize = 8 + 16;

/// A bounded FIFO of payloads.
pub struct Spool {
    store: Store,
    max_bytes: u64,
    bytes: u64,
    /// Windows dropped to respect the bound, since the start.
    pub dropped: u64,
}

enum Store {
    Memory(VecDeque<Payload>),
    Disk {
        dir: PathBuf,
        /// (sequence, file size), oldest first.
        files: VecDeque<(u64, u64)>,
        next: u64,
    },
}

impl Spool {
    /// A spool in memory.
    pub fn memory(max_bytes: u64) -> Self {
        Spool {
            store: Store::Memory(VecDeque::new()),
            max_bytes,
            bytes: 0,
            dropped: 0,
        }
    }

    /// A spool in `dir` (created if needed), taking over the windows a
    /// previous run left there.
    pub fn disk(dir: &Path, max_bytes: u64) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let mut files = Vec::new();
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
            files.push((seq, entry.metadata()?.len()));
        }
        files.sort();
        let next = files.last().map_or(0, |f| f.0 + 1);
        let bytes = files.iter().map(|f| f.1).sum();
        let mut spool = Spool {
            store: Store::Disk {
                dir: dir.to_path_buf(),
                files: files.into(),
                next,
            },
            max_bytes,
            bytes,
            dropped: 0,
        };
        spool.make_room(0);
        Ok(spool)
    }

    pub fn len(&self) -> usize {
        match &self.store {
            Store::Memory(q) => q.len(),
            Store::Disk { files, .. } => files.len(),
        }
    }

    /// True for a spool on disk (it outlives the process).
    pub fn is_disk(&self) -> bool {
        matches!(self.store, Store::Disk { .. })
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn size(p: &Payload) -> u64 {
        (HEADER + p.body.len()) as u64
    }

    /// Drops the oldest windows until `incoming` more bytes fit.
    fn make_room(&mut self, incoming: u64) {
        while self.bytes + incoming > self.max_bytes && !self.is_empty() {
            self.drop_front();
            self.dropped += 1;
        }
    }

    fn drop_front(&mut self) {
        match &mut self.store {
            Store::Memory(q) => {
                if let Some(p) = q.pop_front() {
                    self.bytes -= Self::size(&p);
                }
            }
            Store::Disk { dir, files, .. } => {
                if let Some((seq, size)) = files.pop_front() {
                    let _ = fs::remove_file(file(dir, seq));
                    self.bytes -= size;
                }
            }
        }
    }

    /// Adds a window at the back, dropping the oldest to stay within the
    /// bound (a window larger than the whole bound is dropped itself).
    pub fn push(&mut self, p: Payload) -> io::Result<()> {
        let size = Self::size(&p);
        if size > self.max_bytes {
            self.dropped += 1;
            return Ok(());
        }
        self.make_room(size);
        match &mut self.store {
            Store::Memory(q) => q.push_back(p),
            Store::Disk { dir, files, next } => {
                let mut tmp = tempfile::Builder::new()
                    .prefix(".spool")
                    .tempfile_in(&*dir)?;
                tmp.write_all(MAGIC)?;
                tmp.write_all(&p.start_ns.to_le_bytes())?;
                tmp.write_all(&p.end_ns.to_le_bytes())?;
                tmp.write_all(&p.body)?;
                tmp.persist(file(dir, *next)).map_err(|e| e.error)?;
                files.push_back((*next, size));
                *next += 1;
            }
        }
        self.bytes += size;
        Ok(())
    }

    /// The oldest window, without removing it. A spool file that cannot be
    /// read is dropped (and counted) and the next one tried.
    pub fn front(&mut self) -> Option<Payload> {
        loop {
            match &self.store {
                Store::Memory(q) => return q.front().cloned(),
                Store::Disk { dir, files, .. } => {
                    let &(seq, _) = files.front()?;
                    match read(&file(dir, seq)) {
                        Some(p) => return Some(p),
                        None => {
                            self.drop_front();
                            self.dropped += 1;
                        }
                    }
                }
            }
        }
    }

    /// Removes the oldest window (after it was delivered).
    pub fn pop(&mut self) {
        self.drop_front();
    }
}

fn file(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.win"))
}

fn read(path: &Path) -> Option<Payload> {
    let data = fs::read(path).ok()?;
    if data.len() < HEADER || &data[..8] != MAGIC {
        return None;
    }
    let start_ns = u64::from_le_bytes(data[8..16].try_into().ok()?);
    let end_ns = u64::from_le_bytes(data[16..24].try_into().ok()?);
    Some(Payload {
        start_ns,
        end_ns,
        body: data[HEADER..].to_vec(),
    })
}
