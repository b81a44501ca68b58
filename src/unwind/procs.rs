//! A process's executable mappings, as the unwinder needs them: address
//! range, file offset and the object behind it. Read from
//! `/proc/PID/maps` when a process is first seen and again when the
//! unwinder meets an address outside every known mapping (a library
//! loaded since, an exec). Kept apart from the loader so that a tracker
//! of mmap events can feed it later instead of /proc.

use std::io;
use std::path::PathBuf;

use crate::procmaps::{Backing as TrackedBacking, Mapping, Mappings};

/// What is mapped at a range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backing {
    /// A file, by its path in the process's mount namespace.
    File(String),
    /// The kernel's vDSO.
    Vdso,
    /// Anything else: anonymous memory (JIT code), `[vsyscall]`, a file
    /// deleted since it was mapped.
    Other,
}

/// One executable mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecMapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub backing: Backing,
    /// The file's device and inode as `/proc/PID/maps` gives them (0, 0:
    /// no file), so that a known object is found without opening it.
    pub dev_ino: (u64, u64),
    /// A path that opens the very file mapped (a descriptor the run's
    /// tracker holds), tried first.
    pub opened: Option<PathBuf>,
}

impl ExecMapping {
    /// Where flare can open the mapped file: through `map_files` (which
    /// works across mount namespaces and for replaced files), else the
    /// process's root.
    pub fn open_paths(&self, pid: u32) -> Vec<PathBuf> {
        let Backing::File(path) = &self.backing else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = self.opened.iter().cloned().collect();
        paths.push(PathBuf::from(format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            self.start, self.end
        )));
        paths.push(PathBuf::from(format!("/proc/{pid}/root{path}")));
        paths
    }
}

/// The executable mappings in the text of a `/proc/PID/maps` file,
/// sorted by address. Lines that do not parse are skipped.
pub fn parse_maps(text: &str) -> Vec<ExecMapping> {
    let mut out: Vec<ExecMapping> = text.lines().filter_map(parse_line).collect();
    out.sort_by_key(|m| m.start);
    out
}

fn parse_line(line: &str) -> Option<ExecMapping> {
    let l = crate::procmaps::procfs::parse_line(line)?;
    let backing = if l.path == "[vdso]" {
        Backing::Vdso
    } else if l.path.starts_with('/') && !l.path.ends_with(" (deleted)") {
        Backing::File(l.path)
    } else {
        Backing::Other
    };
    Some(ExecMapping {
        start: l.start,
        end: l.end,
        offset: l.offset,
        backing,
        dev_ino: (l.dev, l.ino),
        opened: None,
    })
}

/// The executable mappings of process `pid` as the run's tracker knows
/// them (it reads `/proc` itself for a process it has no record of).
pub fn tracked_mappings(mappings: &Mappings, pid: u32) -> Option<Vec<ExecMapping>> {
    // Records still in the kernel's buffers: a library mapped just now.
    mappings.sync();
    let space = mappings.space(pid, None)?;
    Some(space.mappings.iter().map(from_tracked).collect())
}

fn from_tracked(m: &Mapping) -> ExecMapping {
    let (backing, dev_ino, opened) = match &m.backing {
        TrackedBacking::File(o) => (
            Backing::File(o.path().to_string()),
            o.dev_ino(),
            o.open_path(),
        ),
        TrackedBacking::Anon(n) if &**n == "[vdso]" => (Backing::Vdso, (0, 0), None),
        TrackedBacking::Anon(_) => (Backing::Other, (0, 0), None),
    };
    ExecMapping {
        start: m.start,
        end: m.end,
        offset: m.offset,
        backing,
        dev_ino,
        opened,
    }
}

/// Every process, as flare's /proc lists them.
pub fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The processes that map the file at `path` executable (the targets of
/// a uprobe on it), so that they can be loaded before probes fire.
pub fn pids_mapping(path: &std::path::Path) -> Vec<u32> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let want = Backing::File(path.to_string_lossy().into_owned());
    all_pids()
        .into_iter()
        .filter(|&pid| exec_mappings(pid).is_ok_and(|m| m.iter().any(|m| m.backing == want)))
        .collect()
}

/// The executable mappings of process `pid`.
pub fn exec_mappings(pid: u32) -> io::Result<Vec<ExecMapping>> {
    Ok(parse_maps(&std::fs::read_to_string(format!(
        "/proc/{pid}/maps"
    ))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d4c8a00000-55d4c8a02000 r--p 00000000 fe:01 1234    /usr/bin/prog
55d4c8a02000-55d4c8a05000 r-xp 00002000 fe:01 1234    /usr/bin/prog
7f10c0000000-7f10c0001000 rwxp 00000000 00:00 0 
7f10c1028000-7f10c117d000 r-xp 00026000 fe:01 5678    /usr/lib/x86_64-linux-gnu/libc.so.6
7f10c2000000-7f10c2001000 r-xp 00000000 fe:01 999     /tmp/old lib.so (deleted)
7f10c3000000-7f10c3001000 r-xp 00000000 fe:01 998     /opt/my lib.so
7ffd1a5f0000-7ffd1a5f2000 r-xp 00000000 00:00 0       [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0   [vsyscall]
garbage line
";

    #[test]
    fn executable_mappings_and_their_backing() {
        let m = parse_maps(MAPS);
        let kinds: Vec<(u64, &Backing)> = m.iter().map(|m| (m.offset, &m.backing)).collect();
        assert_eq!(
            kinds,
            vec![
                (0x2000, &Backing::File("/usr/bin/prog".into())),
                (0, &Backing::Other),
                (
                    0x26000,
                    &Backing::File("/usr/lib/x86_64-linux-gnu/libc.so.6".into())
                ),
                (0, &Backing::Other),
                (0, &Backing::File("/opt/my lib.so".into())),
                (0, &Backing::Vdso),
                (0, &Backing::Other),
            ]
        );
        assert_eq!(m[0].start, 0x55d4c8a02000);
        assert_eq!(m[0].end, 0x55d4c8a05000);
        assert_eq!(
            m[0].open_paths(7)[0],
            PathBuf::from("/proc/7/map_files/55d4c8a02000-55d4c8a05000")
        );
    }

    #[test]
    fn the_test_binary_is_mapped_by_this_process() {
        let exe = std::env::current_exe().unwrap();
        assert!(pids_mapping(&exe).contains(&std::process::id()));
        assert!(all_pids().contains(&1));
    }

    #[test]
    fn this_process_maps_its_own_code() {
        let m = exec_mappings(std::process::id()).expect("own maps");
        let here = executable_mappings_and_their_backing as *const () as u64;
        assert!(m.iter().any(|m| m.start <= here && here < m.end));
    }
}
