//! Reading a live process's executable mappings from `/proc/PID/maps`, and
//! opening the files behind them in a way that works across mount
//! namespaces and for deleted files (`/proc/PID/map_files/`); telling a
//! process from a later one given its PID.

use std::fs::{self, File};
use std::sync::Arc;

use super::objects::{Object, ObjectStore};
use super::{Backing, Mapping};

/// One line of `/proc/PID/maps` (an executable one but for
/// [`parse_any_line`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MapsLine {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub dev: u64,
    pub ino: u64,
    /// The path, or a pseudo name (`[vdso]`), or empty for anonymous memory.
    pub path: String,
}

/// `makedev` for the device numbers `/proc/PID/maps` and perf print.
pub(crate) fn makedev(major: u64, minor: u64) -> u64 {
    ((major & 0xffff_f000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0xff)
}

/// The executable mappings in the text of a `/proc/PID/maps` file.
pub(crate) fn parse_maps(text: &str) -> Vec<MapsLine> {
    text.lines().filter_map(parse_line).collect()
}

/// One line of `/proc/PID/maps`, if it is executable.
pub(crate) fn parse_line(line: &str) -> Option<MapsLine> {
    parse_any_line(line)
        .filter(|(_, perms)| perms.as_bytes().get(2) == Some(&b'x'))
        .map(|(l, _)| l)
}

/// One line of `/proc/PID/maps`, whatever its permissions, and those
/// (`r-xp`).
pub(crate) fn parse_any_line(line: &str) -> Option<(MapsLine, &str)> {
    let mut f = line.splitn(6, ' ');
    let (start, end) = f.next()?.split_once('-')?;
    let perms = f.next()?;
    let offset = u64::from_str_radix(f.next()?, 16).ok()?;
    let (major, minor) = f.next()?.split_once(':')?;
    let ino = f.next()?.parse().ok()?;
    let path = f.next().unwrap_or("").trim_start().to_string();
    let line = MapsLine {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset,
        dev: makedev(
            u64::from_str_radix(major, 16).ok()?,
            u64::from_str_radix(minor, 16).ok()?,
        ),
        ino,
        path,
    };
    Some((line, perms))
}

/// True for a path that names a file (not `[vdso]`, `//anon`, empty).
pub(crate) fn is_file_path(path: &str) -> bool {
    path.starts_with('/') && !path.starts_with("//anon")
}

/// Opens the file of a mapping of a live process: through `map_files`
/// (works in other mount namespaces and for deleted files), else through
/// the process's root.
pub(crate) fn open_mapped(pid: u32, start: u64, end: u64, path: &str) -> Option<File> {
    File::open(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
        .or_else(|_| File::open(format!("/proc/{pid}/root{path}")))
        .ok()
}

/// Reads a live process's executable mappings, finding or opening their
/// objects in `store`. `None` when the process is gone or unreadable.
pub(crate) fn read_mappings(pid: u32, store: &mut ObjectStore) -> Option<Vec<Mapping>> {
    let text = fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let mut out = Vec::new();
    for line in parse_maps(&text) {
        let backing = if is_file_path(&line.path) {
            let path = line.path.strip_suffix(" (deleted)").unwrap_or(&line.path);
            Backing::File(object_for(pid, &line, path, store))
        } else {
            Backing::Anon(line.path.as_str().into())
        };
        out.push(Mapping {
            start: line.start,
            end: line.end,
            offset: line.offset,
            backing,
        });
    }
    Some(out)
}

fn object_for(pid: u32, line: &MapsLine, path: &str, store: &mut ObjectStore) -> Arc<Object> {
    if let Some(o) = store.by_inode(line.dev, line.ino) {
        return o;
    }
    let file = open_mapped(pid, line.start, line.end, path);
    store.intern(path, file, None)
}

/// Whether the process that has `pid` now started after `time`
/// (`CLOCK_MONOTONIC` ns): then it is not the one that started at `time`
/// but a later one given its PID. `/proc/PID/stat` gives the start in
/// clock ticks of `CLOCK_BOOTTIME`, which runs ahead by the time spent
/// suspended since boot; a suspend after the start makes a process look
/// older, never younger. False when the process cannot be read.
pub(crate) fn started_after(pid: u32, time: u64) -> bool {
    let Some(ticks) = start_ticks(pid) else {
        return false;
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let tick = 1_000_000_000 / u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100);
    let suspended = super::clock_ns(libc::CLOCK_BOOTTIME).saturating_sub(super::now());
    let started = ticks.saturating_mul(tick).saturating_sub(suspended);
    started > time.saturating_add(tick + super::START_SLACK)
}

/// When process `pid` started, in clock ticks after boot (`/proc/PID/stat`'s
/// starttime): with the pid, an identity no later process shares.
pub(crate) fn start_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name may hold spaces; starttime is field 22, the 20th after it.
    stat.rfind(')')
        .and_then(|i| stat.get(i + 1..))
        .and_then(|rest| rest.split_whitespace().nth(19))
        .and_then(|t| t.parse::<u64>().ok())
}

/// The effective user id of a live process (`/proc/PID/status`).
pub(crate) fn effective_uid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// The process's PID in its own (innermost) PID namespace.
pub(crate) fn namespace_pid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_executable_lines_only() {
        let text = "\
55d0c0a00000-55d0c0a21000 r--p 00000000 fd:01 1234 /usr/bin/app
55d0c0a21000-55d0c0a80000 r-xp 00021000 fd:01 1234 /usr/bin/app
7f00aa000000-7f00aa001000 rwxp 00000000 00:00 0 
7ffd1c3f2000-7ffd1c3f4000 r-xp 00000000 00:00 0                          [vdso]
7f00ab000000-7f00ab100000 r-xp 00001000 103:02 99 /tmp/my lib.so (deleted)
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].start, 0x55d0c0a21000);
        assert_eq!(m[0].offset, 0x21000);
        assert_eq!(m[0].dev, makedev(0xfd, 1));
        assert_eq!(m[0].ino, 1234);
        assert_eq!(m[0].path, "/usr/bin/app");
        assert_eq!(m[1].path, "");
        assert_eq!(m[2].path, "[vdso]");
        assert_eq!(m[3].path, "/tmp/my lib.so (deleted)");
        assert_eq!(m[3].dev, makedev(0x103, 2));
        assert!(is_file_path(&m[0].path));
        assert!(!is_file_path(&m[2].path));
    }

    #[test]
    fn own_mappings_open_their_objects() {
        let mut store = ObjectStore::default();
        let maps = read_mappings(std::process::id(), &mut store).expect("own maps");
        let exe = std::env::current_exe().expect("own executable");
        let own = maps
            .iter()
            .find_map(|m| match &m.backing {
                Backing::File(o) if std::path::Path::new(&**o.path()) == exe => Some(o),
                _ => None,
            })
            .expect("the test binary is mapped");
        assert!(own.file().is_some(), "opened through map_files or root");
        assert_ne!(own.dev_ino(), (0, 0));
    }
}
