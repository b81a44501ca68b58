//! Finding an object's separate debug file, as gdb and perf look for it:
//! by build id under `/usr/lib/debug/.build-id/xx/yyyy.debug`, in a local
//! debuginfod client cache (`$DEBUGINFOD_CACHE_PATH`,
//! `$XDG_CACHE_HOME/debuginfod_client`, `~/.cache/debuginfod_client`: what
//! `debuginfod-find` fetched before; flare itself fetches nothing), or by
//! the name in `.gnu_debuglink` next to the object, in its `.debug/`
//! directory or under `/usr/lib/debug/` (checked against the link's
//! CRC-32).
//!
//! A debug link's candidates beside the object lie where the object's
//! owner chose: each is opened as [`crate::untrusted`] says (no symbolic
//! link, a regular file, read no further than [`MAX_DEBUG_FILE`]), held
//! open, and handed to blazesym as `/proc/self/fd/N`, so that what was
//! checked is what is read.

use std::fs::{self, File};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::procmaps::Object;
use crate::untrusted::{self, Resolve};

/// A debug file larger than this is not read (the largest Debian ships,
/// libLLVM's, is under 1 GiB).
pub(crate) const MAX_DEBUG_FILE: u64 = 4 << 30;

/// A debug file found: the path blazesym opens, and the file itself when
/// that path is its descriptor's (`/proc/self/fd/N`), held open for it.
#[derive(Debug)]
pub(crate) struct DebugFile {
    pub(crate) path: PathBuf,
    _held: Option<File>,
}

/// Where distributions install debug files.
const DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

/// The debuginfod client caches that exist on this machine.
fn debuginfod_caches() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("DEBUGINFOD_CACHE_PATH") {
        out.push(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        out.push(Path::new(&p).join("debuginfod_client"));
    }
    if let Some(p) = std::env::var_os("HOME") {
        out.push(Path::new(&p).join(".cache/debuginfod_client"));
    }
    out.retain(|p| p.is_dir());
    out
}

/// The debug file of `object`, whose ELF `.gnu_debuglink` is `link`.
pub(crate) fn find(object: &Object, link: Option<&(String, u32)>) -> Option<DebugFile> {
    let trusted = |path: PathBuf| DebugFile { path, _held: None };
    if let Some(hex) = object.reference().build_id_hex().filter(|h| h.len() > 2) {
        let (dir, rest) = hex.split_at(2);
        for d in DEBUG_DIRS {
            let p = PathBuf::from(format!("{d}/.build-id/{dir}/{rest}.debug"));
            if p.is_file() {
                return Some(trusted(p));
            }
        }
        for cache in debuginfod_caches() {
            let p = cache.join(&hex).join("debuginfo");
            if p.is_file() {
                return Some(trusted(p));
            }
        }
    }
    let (name, crc) = link?;
    // Paths next to the object mean something only when the object's path
    // names the same file here (not in another mount namespace).
    let path = Path::new(&**object.path());
    let same = fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == object.dev_ino());
    if !same || name.contains('/') {
        return None;
    }
    let dir = path.parent()?;
    let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
    for d in DEBUG_DIRS {
        candidates.push(Path::new(d).join(dir.strip_prefix("/").ok()?).join(name));
    }
    candidates
        .into_iter()
        .filter(|c| c.as_path() != path)
        .find_map(|c| {
            let (file, meta) = untrusted::open(&c, Resolve::NoSymlinks).ok()?;
            if meta.len() > MAX_DEBUG_FILE || crc32(&file) != Some(*crc) {
                return None;
            }
            Some(DebugFile {
                path: PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())),
                _held: Some(file),
            })
        })
}

/// The CRC-32 of a whole file, as `.gnu_debuglink` records it, read no
/// further than [`MAX_DEBUG_FILE`].
fn crc32(file: &File) -> Option<u32> {
    let mut file = file.take(MAX_DEBUG_FILE);
    let mut crc = flate2::Crc::new();
    let mut buf = vec![0; 1 << 16];
    loop {
        let n = file.read(&mut buf).ok()?;
        if n == 0 {
            return Some(crc.sum());
        }
        crc.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_is_the_gnu_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let p = dir.path().join("f");
        fs::write(&p, b"123456789").expect("write");
        // The standard CRC-32 check value.
        assert_eq!(crc32(&File::open(&p).expect("open")), Some(0xcbf4_3926));
    }
}
