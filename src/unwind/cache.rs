//! Unwind tables kept on disk between runs, so that an object's
//! call-frame information is evaluated once per build, not once per run.
//! Files are named by the object's key (its GNU build id, else device,
//! inode, size and modification time) and hold the table's rows as BPF
//! reads them. A file that is short, foreign or unsorted is ignored and
//! rebuilt; a cache that cannot be written only costs time.

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::table::{Row, Table};

const MAGIC: &[u8; 8] = b"FLAREUW1";
const HEADER: usize = 8 + 8 + 8;

/// The name of an object's table: its build id, or what identifies the
/// file it was read from.
pub fn key(build_id: Option<&[u8]>, meta: &fs::Metadata) -> String {
    match build_id {
        Some(id) if !id.is_empty() => id.iter().map(|b| format!("{b:02x}")).collect(),
        _ => format!(
            "f-{:x}-{:x}-{:x}-{:x}",
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime()
        ),
    }
}

/// A directory of tables.
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: Option<PathBuf>,
}

impl DiskCache {
    /// The cache at `$FLARE_CACHE_DIR`, else `$XDG_CACHE_HOME/flare`, else
    /// `/var/cache/flare` for root and `~/.cache/flare` for others.
    pub fn from_env() -> DiskCache {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let root = env("FLARE_CACHE_DIR")
            .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("flare")))
            .or_else(|| {
                // SAFETY: geteuid has no preconditions.
                if unsafe { libc::geteuid() } == 0 {
                    Some(PathBuf::from("/var/cache/flare"))
                } else {
                    env("HOME").map(|h| h.join(".cache/flare"))
                }
            });
        DiskCache {
            // v2: arm64 tables gained rows for PLT stubs.
            dir: root.map(|r| r.join("unwind-v2")),
        }
    }

    /// A cache in `dir` (tests).
    pub fn at(dir: &Path) -> DiskCache {
        DiskCache {
            dir: Some(dir.to_path_buf()),
        }
    }

    /// No cache at all.
    pub fn none() -> DiskCache {
        DiskCache { dir: None }
    }

    fn path(&self, key: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(format!("{key}.rows")))
    }

    /// The table stored under `key`, if there is a valid one.
    pub fn load(&self, key: &str) -> Option<Table> {
        let data = fs::read(self.path(key)?).ok()?;
        decode(&data)
    }

    /// Stores `table` under `key` (best effort: errors are ignored).
    pub fn store(&self, key: &str, table: &Table) {
        let (Some(dir), Some(path)) = (self.dir.as_ref(), self.path(key)) else {
            return;
        };
        if fs::create_dir_all(dir).is_err() {
            return;
        }
        let Ok(mut tmp) = tempfile::NamedTempFile::new_in(dir) else {
            return;
        };
        if tmp.write_all(&encode(table)).is_ok() {
            let _ = tmp.persist(path);
        }
    }
}

fn encode(t: &Table) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + t.rows.len() * 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&t.base.to_le_bytes());
    out.extend_from_slice(&(t.rows.len() as u64).to_le_bytes());
    for r in &t.rows {
        out.extend_from_slice(&r.pc.to_le_bytes());
        out.extend_from_slice(&r.cfa_off.to_le_bytes());
        out.push(r.kind);
        out.push(r.rbp_off as u8);
    }
    out
}

fn decode(d: &[u8]) -> Option<Table> {
    if d.get(..8)? != MAGIC {
        return None;
    }
    let base = u64::from_le_bytes(d.get(8..16)?.try_into().ok()?);
    let n = usize::try_from(u64::from_le_bytes(d.get(16..24)?.try_into().ok()?)).ok()?;
    let body = d.get(HEADER..)?;
    if body.len() != n.checked_mul(8)? {
        return None;
    }
    let rows: Vec<Row> = body
        .chunks_exact(8)
        .map(|c| Row {
            pc: u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
            cfa_off: u16::from_le_bytes([c[4], c[5]]),
            kind: c[6],
            rbp_off: c[7] as i8,
        })
        .collect();
    if !rows.windows(2).all(|w| w[0].pc < w[1].pc) {
        return None;
    }
    Some(Table {
        base,
        rows,
        bad_fdes: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_round_trip_and_bad_files_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::at(dir.path());
        let data = fs::read("/lib/x86_64-linux-gnu/libc.so.6").unwrap();
        let t = Table::from_elf(&data).unwrap();
        assert!(cache.load("libc").is_none());
        cache.store("libc", &t);
        assert_eq!(cache.load("libc").as_ref(), Some(&t));
        let path = dir.path().join("libc.rows");
        let mut bytes = fs::read(&path).unwrap();
        bytes.truncate(bytes.len() - 3);
        fs::write(&path, &bytes).unwrap();
        assert!(cache.load("libc").is_none(), "a short file is not a table");
        assert!(DiskCache::none().load("libc").is_none());
    }

    #[test]
    fn keys_prefer_the_build_id() {
        let meta = fs::metadata("/lib/x86_64-linux-gnu/libc.so.6").unwrap();
        assert_eq!(key(Some(&[0xab, 0x01]), &meta), "ab01");
        assert!(key(None, &meta).starts_with("f-"));
    }
}
