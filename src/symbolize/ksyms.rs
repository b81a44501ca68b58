//! This boot's copy of the kernel's symbols ([`super::kallsyms`]), indexed
//! by flare itself: each function's start and where its name lies in the
//! copy, the names read from the copy when an address in them is first
//! named.
//!
//! blazesym's kernel resolver parses the whole copy into a name per
//! symbol (a boxed string each: about 3 MiB for the 64,000 functions of
//! this machine's copy), and every symbolizer holding it kept its own. A
//! run without end (the agent) names few kernel functions, each once:
//! this index takes 16 bytes a function (1 MiB), is shared by every
//! symbolizer of the process, and names an address as blazesym named it
//! (the first symbol, in the copy's order, of those at the greatest
//! start at or below it).

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A kernel symbol copy's functions, indexed.
#[derive(Debug)]
pub(crate) struct Table {
    /// Kept open: a copy made for a newer module list removes this one's
    /// name meanwhile.
    file: fs::File,
    /// Starts, ascending; equal starts in the copy's order.
    starts: Vec<u64>,
    /// Each start's name: its offset in the copy and its length.
    names: Vec<(u32, u16)>,
}

impl Table {
    /// The table of the copy at `path`, shared with every symbolizer of
    /// the process that asks for the same copy while one holds it.
    pub(crate) fn shared(path: &Path) -> Option<Arc<Table>> {
        static SHARED: Mutex<Vec<(PathBuf, Weak<Table>)>> = Mutex::new(Vec::new());
        let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        shared.retain(|(_, t)| t.strong_count() > 0);
        if let Some(t) = shared
            .iter()
            .find(|(p, _)| p == path)
            .and_then(|(_, t)| t.upgrade())
        {
            return Some(t);
        }
        let table = Arc::new(Table::read(path)?);
        shared.push((path.to_path_buf(), Arc::downgrade(&table)));
        Some(table)
    }

    /// Indexes the copy at `path` (lines of `address type name`, perhaps
    /// a module tag after; others, the header among them, skipped).
    pub(crate) fn read(path: &Path) -> Option<Table> {
        let file = fs::File::open(path).ok()?;
        let mut reader = BufReader::new(&file);
        let mut rows: Vec<(u64, u32, u16)> = Vec::new();
        let mut line = String::new();
        let mut at = 0usize;
        loop {
            line.clear();
            let n = reader.read_line(&mut line).ok()?;
            if n == 0 {
                break;
            }
            let line_at = at;
            at += n;
            let mut f = line.split_ascii_whitespace();
            let (Some(addr), Some(_kind), Some(name)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 {
                continue;
            }
            // The name's place: its distance from the line's start.
            let off = line_at + (name.as_ptr() as usize - line.as_ptr() as usize);
            let (Ok(off), Ok(len)) = (u32::try_from(off), u16::try_from(name.len())) else {
                continue;
            };
            rows.push((addr, off, len));
        }
        // Stable: equal starts keep the copy's order.
        rows.sort_by_key(|r| r.0);
        Some(Table {
            file,
            starts: rows.iter().map(|r| r.0).collect(),
            names: rows.iter().map(|r| (r.1, r.2)).collect(),
        })
    }

    /// The function holding `addr`: the first of those starting at the
    /// greatest start at or below it (kallsyms gives no sizes); its start
    /// and name. `None` below the first function, or when the copy cannot
    /// be read.
    pub(crate) fn find(&self, addr: u64) -> Option<(u64, String)> {
        let i = self.starts.partition_point(|&s| s <= addr);
        let start = *self.starts[..i].last()?;
        let first = self.starts[..i].partition_point(|&s| s < start);
        let (off, len) = self.names[first];
        let mut buf = vec![0u8; usize::from(len)];
        self.file.read_exact_at(&mut buf, u64::from(off)).ok()?;
        Some((start, String::from_utf8(buf).ok()?))
    }

    /// How many functions it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> (tempfile::TempDir, Table) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("copy");
        fs::write(&path, text).expect("copy");
        let t = Table::read(&path).expect("a table");
        (dir, t)
    }

    #[test]
    fn an_address_is_named_by_the_nearest_start_below_it() {
        let (_d, t) = table(
            "#flare-kallsyms ffffffff81000000 ffffffff82000000\n\
             ffffffff81000200 t do_work\n\
             ffffffff81000100 T entry_SYSCALL_64\n\
             0000000000000000 T hidden\n\
             ffffffffc0001000 t ext4_read\t[ext4]\n\
             not a line\n",
        );
        assert_eq!(t.len(), 3, "the header, the zero and the bad line skipped");
        // Address, and the start and name it is named by.
        let want: [(u64, Option<(u64, &str)>); 5] = [
            (
                0xffff_ffff_8100_0100,
                Some((0xffff_ffff_8100_0100, "entry_SYSCALL_64")),
            ),
            (
                0xffff_ffff_8100_01ff,
                Some((0xffff_ffff_8100_0100, "entry_SYSCALL_64")),
            ),
            (
                0xffff_ffff_8100_0210,
                Some((0xffff_ffff_8100_0200, "do_work")),
            ),
            // A module's function, its tag not in its name.
            (
                0xffff_ffff_c000_1010,
                Some((0xffff_ffff_c000_1000, "ext4_read")),
            ),
            // Below the first function.
            (0xffff_ffff_8100_00ff, None),
        ];
        for (addr, named) in want {
            let got = t.find(addr);
            assert_eq!(
                got.as_ref().map(|(s, n)| (*s, n.as_str())),
                named,
                "{addr:#x}"
            );
        }
    }

    #[test]
    fn of_functions_at_one_start_the_first_in_the_copy_names_it() {
        let (_d, t) = table(
            "ffffffff81000100 T alias_b\n\
             ffffffff81000100 T alias_a\n\
             ffffffff81000000 T before\n\
             ffffffff81000100 T alias_c\n",
        );
        for a in [0xffff_ffff_8100_0100, 0xffff_ffff_8100_0180] {
            assert_eq!(t.find(a).map(|(_, n)| n).as_deref(), Some("alias_b"));
        }
    }

    #[test]
    fn one_copy_is_indexed_once_while_held() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("copy");
        fs::write(&path, "ffffffff81000100 T f\n").expect("copy");
        let a = Table::shared(&path).expect("a table");
        let b = Table::shared(&path).expect("the table");
        assert!(Arc::ptr_eq(&a, &b));
        // Held open: named even once the copy's name is gone.
        fs::remove_file(&path).expect("rm");
        assert_eq!(
            b.find(0xffff_ffff_8100_0101).map(|(_, n)| n).as_deref(),
            Some("f")
        );
    }
}
