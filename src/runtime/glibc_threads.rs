//! A live process's threads as glibc keeps them: each kernel thread id's
//! thread pointer, read from user space. A perf sample carries no thread
//! pointer (x86-64's fs base, arm64's tpidr_el0), yet a runtime that keeps
//! its state in thread-local storage (Ruby's `ruby_current_ec`) is found
//! through it; glibc lists its threads' `struct pthread`s, each holding the
//! kernel's thread id, and tells debuggers where through the tables it
//! exports for libthread_db: libc's `_thread_db_*` symbols, each a
//! `db_desc_t` (three u32: the field's size in bits, its element count and
//! its offset; nptl_db/structs.def, thread_dbP.h) or, for a structure's
//! size, one u32. Those are the runtime's own tables, read from the files
//! the process maps, never offsets guessed here:
//! - `_dl_stack_used` and `_dl_stack_user` (fields of ld.so's exported
//!   `_rtld_global`, glibc 2.34 and later): the lists of threads with a
//!   stack glibc allocated and of the others (the main thread);
//! - `struct pthread`'s `list` (the links in those lists) and `tid`;
//! - `sizeof (struct pthread)`: arm64's thread pointer is just past it
//!   (TLS_DTV_AT_TP), x86-64's is the structure's address.
//!
//! Every read of the process is bounded and checked; the lists are walked
//! at most [`MAX_THREADS`] entries and never around a cycle twice.

use std::collections::{HashMap, HashSet};

use crate::elf::{each_symbol, Elf, FileSource, SHT_DYNSYM};
use crate::runtime::memory::Memory;
use crate::runtime::open_mapped;
use crate::unwind::elf::{vaddr_of_offset, Machine, Segment};
use crate::unwind::procs::{Backing, ExecMapping};

/// Threads walked per list at most.
pub const MAX_THREADS: usize = 16384;
/// Symbol tables read of a file at most (libc's `.dynsym` is some 100 KiB).
const MAX_TABLE: u64 = 16 << 20;
/// Files kept at most.
const MAX_FILES: usize = 16;

/// A `db_desc_t`: where a field lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    /// The field's size, in bits.
    pub bits: u32,
    /// Its elements (1 for a scalar).
    pub count: u32,
    /// Its offset in its structure.
    pub offset: u32,
}

/// The descriptor in `b` (three native-endian u32), if it is whole.
pub fn parse_desc(b: &[u8]) -> Option<Desc> {
    let word = |i: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(
            b.get(i * 4..i * 4 + 4)?.try_into().ok()?,
        ))
    };
    Some(Desc {
        bits: word(0)?,
        count: word(1)?,
        offset: word(2)?,
    })
}

/// What libc's file says of its threads (offsets, no addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `_dl_stack_used` and `_dl_stack_user` in `_rtld_global`.
    pub stack_used: u64,
    pub stack_user: u64,
    /// `list_t.next`.
    pub next: u64,
    /// `struct pthread`'s `list` and `tid`.
    pub list: u64,
    pub tid: u64,
    /// `sizeof (struct pthread)`.
    pub size: u64,
}

impl Layout {
    /// The layout the descriptors `desc` (by symbol name, less
    /// `_thread_db_`) say, when every one is there and of the size it
    /// must be.
    pub fn from_descs(desc: &dyn Fn(&str) -> Option<Vec<u8>>) -> Result<Layout, String> {
        let field = |name: &str, bits: u32| -> Result<u64, String> {
            let d = desc(name)
                .as_deref()
                .and_then(parse_desc)
                .ok_or_else(|| format!("glibc's _thread_db_{name} is missing"))?;
            if d.bits != bits || d.count != 1 {
                return Err(format!(
                    "glibc's _thread_db_{name} says {} bits × {} (not {bits} × 1)",
                    d.bits, d.count
                ));
            }
            Ok(u64::from(d.offset))
        };
        let size = desc("sizeof_pthread")
            .and_then(|b| Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?)))
            .ok_or("glibc's _thread_db_sizeof_pthread is missing")?;
        Ok(Layout {
            stack_used: field("rtld_global__dl_stack_used", 128)?,
            stack_user: field("rtld_global__dl_stack_user", 128)?,
            next: field("list_t_next", 64)?,
            list: field("pthread_list", 128)?,
            tid: field("pthread_tid", 32)?,
            size: u64::from(size),
        })
    }
}

/// Where one process keeps its threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Threads {
    pub layout: Layout,
    /// `_rtld_global` in the process.
    pub rtld_global: u64,
    pub machine: Machine,
}

impl Threads {
    /// Every thread of the lists: kernel thread id → thread pointer. A
    /// list that cannot be read, or that loops, ends where it does.
    pub fn thread_pointers(&self, mem: &dyn Memory) -> HashMap<u32, u64> {
        let l = &self.layout;
        let mut out = HashMap::new();
        for head in [l.stack_used, l.stack_user] {
            let head = self.rtld_global.wrapping_add(head);
            for pd in walk_list(mem, head, l.next, MAX_THREADS) {
                let pd = pd.wrapping_sub(l.list);
                match mem.read_u32(pd.wrapping_add(l.tid)) {
                    // An exited thread's id is cleared.
                    Ok(tid) if tid != 0 && tid <= i32::MAX as u32 => {
                        out.insert(tid, self.thread_pointer(pd));
                    }
                    _ => {}
                }
            }
        }
        out
    }

    /// The thread pointer of the thread whose `struct pthread` is at `pd`.
    pub fn thread_pointer(&self, pd: u64) -> u64 {
        match self.machine {
            Machine::X86_64 => pd,
            Machine::Aarch64 => pd.wrapping_add(self.layout.size),
        }
    }

    /// Whether the thread pointer `tp` is still thread `tid`'s.
    pub fn is_thread(&self, tp: u64, tid: u32, mem: &dyn Memory) -> bool {
        let pd = match self.machine {
            Machine::X86_64 => tp,
            Machine::Aarch64 => tp.wrapping_sub(self.layout.size),
        };
        mem.read_u32(pd.wrapping_add(self.layout.tid))
            .is_ok_and(|t| t == tid)
    }
}

/// The entries of the circular list whose head is at `head` (`next`: the
/// link's offset in an entry), at most `max`, each once: the addresses of
/// their links. A failed read or a link seen before ends it.
pub fn walk_list(mem: &dyn Memory, head: u64, next: u64, max: usize) -> Vec<u64> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut at = head;
    while out.len() < max {
        let Ok(n) = mem.read_u64(at.wrapping_add(next)) else {
            break;
        };
        if n == head || n == 0 || n & 7 != 0 || !seen.insert(n) {
            break;
        }
        out.push(n);
        at = n;
    }
    out
}

/// What one file says, kept by (device, inode).
#[derive(Clone, Debug)]
enum File {
    /// libc: its segments and thread layout (or why not).
    Libc(Vec<Segment>, Result<Layout, String>),
    /// ld.so: its segments and `_rtld_global`.
    Loader(Vec<Segment>, u64),
    Other,
}

/// Finds processes' thread lists, keeping what each file said.
#[derive(Debug, Default)]
pub struct Finder {
    files: HashMap<(u64, u64), File>,
}

/// True for the file name of glibc's libc (`libc.so.6`, `libc-2.31.so`).
fn is_libc(name: &str) -> bool {
    name.starts_with("libc.so") || (name.starts_with("libc-") && name.ends_with(".so"))
}

/// True for the file name of glibc's dynamic loader.
fn is_loader(name: &str) -> bool {
    name.starts_with("ld-linux") || (name.starts_with("ld-") && name.contains(".so"))
}

impl Finder {
    /// Where process `pid`, mapping `maps` (its executable mappings), keeps
    /// its threads; `Err` says why it cannot be told (no glibc, a glibc
    /// older than 2.34, a file that cannot be read).
    pub fn find(&mut self, pid: u32, maps: &[ExecMapping]) -> Result<Threads, String> {
        let mut libc = None;
        let mut rtld = None;
        let mut unread = None;
        for m in maps {
            let Backing::File(path) = &m.backing else {
                continue;
            };
            let name = path.rsplit('/').next().unwrap_or(path);
            if !(is_libc(name) || is_loader(name)) {
                continue;
            }
            let Some(file) = self.file(pid, m) else {
                unread = Some(path.clone());
                continue;
            };
            let bias = |segments: &[Segment]| {
                vaddr_of_offset(segments, m.offset).map(|v| m.start.wrapping_sub(v))
            };
            match file {
                File::Libc(segments, layout) if libc.is_none() && bias(&segments).is_some() => {
                    libc = Some(layout);
                }
                File::Loader(segments, at) if rtld.is_none() => {
                    rtld = bias(&segments).map(|b| b.wrapping_add(at));
                }
                _ => {}
            }
        }
        let layout = match (libc, unread) {
            (Some(layout), _) => layout?,
            (None, Some(path)) => return Err(format!("{path} could not be read")),
            // musl, or a glibc before 2.34 (its tables in libpthread).
            (None, None) => return Err("no libc.so.6 of glibc 2.34 or later mapped".into()),
        };
        let rtld_global = rtld.ok_or("no _rtld_global in its dynamic loader")?;
        Ok(Threads {
            layout,
            rtld_global,
            machine: Machine::HOST,
        })
    }

    /// What the file mapped at `m` says, read once per (device, inode).
    fn file(&mut self, pid: u32, m: &ExecMapping) -> Option<File> {
        if let Some(f) = self.files.get(&m.dev_ino) {
            return Some(f.clone());
        }
        let file = open_mapped(pid, m)?;
        let read = FileSource::new(&file)
            .and_then(Elf::parse)
            .map_or(File::Other, |elf| read_file(&elf));
        if m.dev_ino.1 != 0 {
            if self.files.len() >= MAX_FILES {
                self.files.clear();
            }
            self.files.insert(m.dev_ino, read.clone());
        }
        Some(read)
    }
}

/// What the ELF file `elf` says: libc's thread descriptors, or ld.so's
/// `_rtld_global`.
fn read_file<S: crate::elf::Source>(elf: &Elf<S>) -> File {
    if elf.layout != crate::elf::Layout::HOST {
        return File::Other;
    }
    let Some((syms, strs)) = elf.symbol_table(SHT_DYNSYM, MAX_TABLE) else {
        return File::Other;
    };
    let mut descs: HashMap<String, (u64, u64)> = HashMap::new();
    let mut rtld = None;
    each_symbol(elf.layout, &syms, &strs, |s| {
        if !s.defined {
            return;
        }
        if let Some(name) = s.name.strip_prefix(b"_thread_db_") {
            descs.insert(
                String::from_utf8_lossy(name).into_owned(),
                (s.value, s.size),
            );
        } else if s.name == b"_rtld_global" {
            rtld = Some(s.value);
        }
    });
    let segments: Vec<Segment> = elf.loads().map(Into::into).collect();
    if !descs.is_empty() {
        let desc = |name: &str| -> Option<Vec<u8>> {
            let &(at, size) = descs.get(name)?;
            Some(elf.bytes_at_vaddr(at, size.clamp(4, 12), 12)?.into_owned())
        };
        return File::Libc(segments, Layout::from_descs(&desc));
    }
    match rtld {
        Some(at) => File::Loader(segments, at),
        None => File::Other,
    }
}

#[cfg(test)]
#[path = "glibc_threads_tests.rs"]
mod tests;
