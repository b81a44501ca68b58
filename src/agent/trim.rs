//! Memory the agent holds only because nobody gave it back: after each
//! window, the allocator's free pages, and the pages of files it maps
//! only to read (the profiled programs' binaries, which the symbolizer
//! keeps mapped for their symbols: 9 MiB of `node`'s and 3 MiB of
//! `libjvm.so`'s were resident beside a tsc and a javac loop, a sixth of
//! the agent's RSS, though a window's lookups touch a few pages of each).

use std::ops::Range;

use crate::error::Result;
use crate::pipeline::Sink;
use crate::procmaps::procfs::{is_file_path, parse_any_line, MapsLine};

/// Gives memory back after each window. Symbolizing a window and
/// building unwind tables for the processes that appeared in it allocate
/// and free megabytes at a time; without this, the freed pages stay in
/// the process's heaps and the agent's RSS climbs to the largest such
/// moment and stays there.
pub struct Trim;

impl Sink for Trim {
    fn report(&mut self, _profile: &crate::profile::Profile) -> Result<()> {
        release_free_memory();
        Ok(())
    }
}

/// Asks the C allocator to give free memory back to the system, and the
/// kernel to drop this process's pages of files it maps only to read.
pub fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions; it only releases free
    // memory of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
    if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
        for range in read_only_file_maps(&maps) {
            let len = (range.end - range.start) as usize;
            // SAFETY: the range is a read-only mapping of a file (never
            // written, so it holds nothing but the file's bytes):
            // MADV_DONTNEED only unmaps its pages, and a later read of
            // the mapping faults them in again from the file, unchanged.
            // It moves no mapping and frees no memory a pointer may hold.
            unsafe {
                libc::madvise(range.start as *mut libc::c_void, len, libc::MADV_DONTNEED);
            }
        }
    }
}

/// The read-only mappings of files in `maps` (`/proc/self/maps`) that
/// flare does not run code from: the files it maps to read (shared, as
/// memmap2 and blazesym map them, or private). A file with an
/// executable mapping is flare's own code (its binary, its libraries),
/// whose read-only data it uses all the time: left alone; so are
/// devices.
fn read_only_file_maps(maps: &str) -> Vec<Range<u64>> {
    let rows: Vec<(MapsLine, &str)> = maps
        .lines()
        .filter_map(parse_any_line)
        .filter(|(l, _)| is_file_path(&l.path) && !l.path.starts_with("/dev/"))
        .collect();
    let code: std::collections::HashSet<&str> = rows
        .iter()
        .filter(|(_, perms)| perms.contains('x'))
        .map(|(l, _)| l.path.as_str())
        .collect();
    rows.iter()
        .filter(|(l, perms)| {
            matches!(*perms, "r--p" | "r--s") && !code.contains(l.path.as_str()) && l.end > l.start
        })
        .map(|(l, _)| l.start..l.end)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_mapped_to_be_read_are_given_back() {
        let maps = "\
55d0c0000000-55d0c0100000 r--p 00000000 fe:01 100 /usr/bin/flare
55d0c0100000-55d0c0400000 r-xp 00100000 fe:01 100 /usr/bin/flare
55d0c0400000-55d0c0500000 r--p 00400000 fe:01 100 /usr/bin/flare
55d0c0500000-55d0c0510000 rw-p 00500000 fe:01 100 /usr/bin/flare
7f0000000000-7f0006000000 r--p 00000000 fe:01 200 /usr/bin/node
7f0006000000-7f0006100000 r--p 00000000 fe:01 300 /usr/lib/jvm/lib/server/libjvm.so (deleted)
7f0007000000-7f0007100000 rw-p 00000000 00:00 0 
7f0008000000-7f0008001000 rw-s 00000000 00:0e 12 anon_inode:[perf_event]
7f0009000000-7f0009010000 r--s 00000000 fe:01 400 /var/cache/flare/shared
7f0009100000-7f0009110000 rw-s 00000000 fe:01 401 /var/cache/flare/written
7f0009200000-7f0009210000 r--s 00000000 00:05 402 /dev/some-device
7f000a000000-7f000a0c0000 r--p 00000000 fe:01 500 /usr/lib/x86_64-linux-gnu/libc.so.6
7f000a0c0000-7f000a200000 r-xp 000c0000 fe:01 500 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7ffd00100000-7ffd00102000 r--p 00000000 00:00 0 [vvar]
";
        assert_eq!(
            read_only_file_maps(maps),
            vec![
                0x7f00_0000_0000..0x7f00_0600_0000,
                0x7f00_0600_0000..0x7f00_0610_0000,
                0x7f00_0900_0000..0x7f00_0901_0000,
            ],
            "node's, libjvm's and a read-only shared file's: not flare's nor libc's, \
             not writable ones, not devices"
        );
    }

    #[test]
    fn pages_given_back_read_the_same() {
        use std::io::Write;
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        let bytes: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
        file.write_all(&bytes).expect("write");
        // SAFETY: the map is only read; the temp file is ours and not
        // changed while mapped.
        let map = unsafe { memmap2::Mmap::map(file.as_file()) }.expect("mmap");
        assert_eq!(&map[..], &bytes[..]);
        let at = map.as_ptr() as u64;
        assert_eq!(resident_kib(at), Some(64), "read, all resident");
        release_free_memory();
        assert_eq!(resident_kib(at), Some(0), "given back");
        assert_eq!(&map[..], &bytes[..], "read again from the file");
    }

    /// The resident KiB of this process's mapping that starts at `at`.
    fn resident_kib(at: u64) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let head = format!("{at:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
        lines.next()?;
        let rss = lines.find(|l| l.starts_with("Rss:"))?;
        rss.split_whitespace().nth(1)?.parse().ok()
    }
}
