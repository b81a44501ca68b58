//! Finding CRuby in a process: the object holding the interpreter (a
//! `libruby.so*` or `libruby-X.Y.so*` library, or an executable named
//! `ruby*` that defines `ruby_version` itself), its version and so its
//! [`Layout`], the interpreter's loop (`vm_exec_core`), where each
//! thread's execution context lies in its thread-local storage ([`Tls`]),
//! and `ruby_global_symbols`, which names C functions.
//!
//! Debian strips libruby and, from 3.3 on, exports neither
//! `ruby_current_ec` nor `ruby_global_symbols` (docs: the Ruby fact
//! sheet), so most of it is read from what a stripped object keeps:
//! - the version: the exported `ruby_version` string;
//! - the loop: Ruby's builds use direct threaded code, so `vm_exec_core`
//!   keeps a table of the addresses of its own instructions' labels,
//!   one `RELATIVE` relocation each (a few hundred): the longest run of
//!   relocations at consecutive words whose targets all lie inside one
//!   `.eh_frame` function (never at its start, as a table of functions'
//!   addresses would) is that table, and the function is the loop;
//! - the thread-local storage: libruby is loaded with the program, so
//!   glibc gives its block a place fixed for every thread (static TLS).
//!   x86-64: BPF reads the block from the thread's DTV with libruby's
//!   module id, which the dynamic loader wrote in the `DTPMOD64` slots of
//!   libruby's GOT (read in the live process), at offsets the file says
//!   (the exported symbol's value in 3.1, else the DTPOFF word of each
//!   general-dynamic GOT pair); arm64: the TLS descriptors' second words
//!   are the offsets from the thread pointer, written by the loader. A
//!   stripped libruby names no variable: each candidate is given to BPF,
//!   which keeps the one whose value checks out as an execution context;
//! - `ruby_global_symbols`: a scan of libruby's `.data` in the live
//!   process for a `rb_symbols_t` whose table names the id `tEach`
//!   "each".
//!
//! As for the other runtimes, the file is another user's: opened through
//! the paths the process maps it by, read in bounded pieces; what it says
//! is kept per file (device, inode), and so is where `ruby_global_symbols`
//! was found in it.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::{Layout, Process};
use crate::elf::{name_at, Elf, FileSource, Source, EM_AARCH64, EM_X86_64, SHT_DYNSYM};
use crate::runtime::memory::Memory;
use crate::runtime::open_mapped;
use crate::runtime::tracker::Found;
use crate::unwind::elf::{vaddr_of_offset, Machine, Segment};
use crate::unwind::procs::{Backing, ExecMapping};

mod symbols;
mod tls;

use symbols::{find_global_symbols, is_global_symbols};
use tls::{file_tls, live_tls, FileTls};

/// What a process runs, as far as Ruby goes.
pub type Detected = Found<Process>;

/// What detection answers when it finds no process (`No`, `NotReady`,
/// `Unsupported`).
type NotFound = Found<std::convert::Infallible>;

/// Files kept at most; past it, one is forgotten per new one.
const MAX_OBJECTS: usize = 64;
/// Symbol tables, relocations and `.eh_frame` read of a file at most.
const MAX_TABLE: u64 = 64 << 20;
/// Bytes of `.data` scanned in the live process at most (Debian's
/// libruby has 2.5 KiB of it).
const MAX_DATA: u64 = 1 << 20;
/// Places of `.data` that look like `ruby_global_symbols` checked at
/// most (each a few reads of the process's memory).
const MAX_CANDIDATES: usize = 256;
/// `SHT_RELR` bytes read of a file at most (each word may stand for 63
/// relocations; a library's few thousand take some kilobytes).
const MAX_RELR: u64 = 256 << 10;
/// The shortest run of relocations taken for the loop's table of
/// instruction addresses (Ruby 3.1 to 3.4 have some 200 instructions
/// and as many tracing ones).
const MIN_TABLE_RUN: usize = 100;
/// The longest `ruby_version` read.
const MAX_VERSION: u64 = 16;
/// A module id or an offset from the thread pointer past this is not
/// one glibc gives a library loaded with the program.
const MAX_TLS_VALUE: u64 = 1 << 20;

const SHT_RELA: u32 = 4;
const SHT_RELR: u32 = 19;
const PT_INTERP: u32 = 3;
const PT_TLS: u32 = 7;
const STT_TLS: u8 = 6;
const ET_EXEC: u16 = 2;
const R_X86_64_RELATIVE: u32 = 8;
const R_X86_64_DTPMOD64: u32 = 16;
const R_X86_64_DTPOFF64: u32 = 17;
const R_AARCH64_RELATIVE: u32 = 1027;
const R_AARCH64_TLSDESC: u32 = 1031;

/// What one Ruby interpreter's file says.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RubyFile {
    machine: Machine,
    segments: Vec<Segment>,
    /// `ruby_version` ("3.3.8").
    version: String,
    /// `vm_exec_core`'s function (virtual addresses), if found.
    exec: Option<Range<u64>>,
    /// The loop's caller, `rb_vm_exec`, where the file names it (3.1).
    exec_caller: Option<Range<u64>>,
    tls: FileTls,
    /// `.data`: virtual address and size.
    data: Option<(u64, u64)>,
    /// `rb_cObject`'s virtual address, if exported.
    object_class: Option<u64>,
}

/// A file mapped under a Ruby name.
#[derive(Clone, Debug)]
enum Object {
    Ruby(Arc<RubyFile>),
    /// An executable that runs the interpreter of a library (it imports
    /// `ruby_run_node`): until that library is mapped, not ready.
    Launcher,
    Other,
}

/// Finds Ruby in processes.
#[derive(Debug, Default)]
pub struct Detector {
    /// By (device, inode).
    objects: HashMap<(u64, u64), Object>,
    /// Where `ruby_global_symbols` was found, from the file's load bias,
    /// by (device, inode).
    global_symbols: HashMap<(u64, u64), u64>,
}

/// True for a file name of libruby: `libruby.so*`, `libruby-*.so*`.
fn is_libruby(name: &str) -> bool {
    name.starts_with("libruby.so") || (name.starts_with("libruby-") && name.contains(".so"))
}

impl Detector {
    pub fn new() -> Self {
        Self::default()
    }

    /// What process `pid`, mapping `maps` (executable mappings) with
    /// memory `mem`, runs as far as Ruby goes.
    pub fn detect(&mut self, pid: u32, maps: &[ExecMapping], mem: &dyn Memory) -> Detected {
        let mut tried: Vec<(u64, u64)> = Vec::new();
        let mut launcher = false;
        for m in maps {
            let Backing::File(path) = &m.backing else {
                continue;
            };
            let name = path.rsplit('/').next().unwrap_or(path);
            if !is_libruby(name) && !name.starts_with("ruby") {
                continue;
            }
            if tried.contains(&m.dev_ino) {
                continue;
            }
            tried.push(m.dev_ino);
            match self.object(pid, m) {
                Some(Object::Ruby(file)) if file.machine == Machine::HOST => {
                    return self.found(&file, m, mem);
                }
                Some(Object::Launcher) => launcher = true,
                _ => {}
            }
        }
        if launcher {
            Found::NotReady
        } else {
            Found::No
        }
    }

    /// What the file mapped at `m` says, read once; `None` when it cannot
    /// be opened now (not kept: the next process may open it).
    fn object(&mut self, pid: u32, m: &ExecMapping) -> Option<Object> {
        if let Some(known) = self.objects.get(&m.dev_ino) {
            return Some(known.clone());
        }
        let file = open_mapped(pid, m)?;
        let object = FileSource::new(&file)
            .and_then(Elf::parse)
            .map_or(Object::Other, |elf| read_file(&elf));
        if m.dev_ino.1 != 0 {
            if self.objects.len() >= MAX_OBJECTS {
                if let Some(old) = self.objects.keys().next().copied() {
                    self.objects.remove(&old);
                    self.global_symbols.remove(&old);
                }
            }
            self.objects.insert(m.dev_ino, object.clone());
        }
        Some(object)
    }

    /// The Ruby process whose interpreter is `file`, mapped (executable)
    /// at `m`.
    fn found(&mut self, file: &RubyFile, m: &ExecMapping, mem: &dyn Memory) -> Detected {
        let version = &file.version;
        let Some(layout) = Layout::for_version(version) else {
            return Found::Unsupported(format!("Ruby {version}: flare reads 3.1, 3.3 and 3.4"));
        };
        let Some(exec) = &file.exec else {
            return Found::Unsupported(format!(
                "Ruby {version}: its interpreter loop (vm_exec_core) was not found (not a direct-threaded build?)"
            ));
        };
        let Some(vaddr) = vaddr_of_offset(&file.segments, m.offset) else {
            return Found::NotReady;
        };
        let bias = m.start.wrapping_sub(vaddr);
        let tls = match live_tls(file, bias, mem) {
            Ok(tls) => tls,
            Err(not) => return not.widen(),
        };
        let global_symbols = self.global_symbols(m.dev_ino, file, bias, mem);
        Found::Yes(Process {
            layout: Arc::new(layout),
            version: version.clone(),
            exec: exec.start.wrapping_add(bias)..exec.end.wrapping_add(bias),
            exec_caller: file.exec_caller.as_ref().map_or(0..0, |c| {
                c.start.wrapping_add(bias)..c.end.wrapping_add(bias)
            }),
            tls,
            global_symbols,
            object_class: file.object_class.map(|v| v.wrapping_add(bias)),
        })
    }

    /// `ruby_global_symbols` in the process, where the file `file`
    /// (device and inode `key`) is loaded with bias `bias`: where it was
    /// found before in this file, else looked for in `.data`.
    fn global_symbols(
        &mut self,
        key: (u64, u64),
        file: &RubyFile,
        bias: u64,
        mem: &dyn Memory,
    ) -> Option<u64> {
        let layout = Layout::for_version(&file.version)?;
        if let Some(&off) = self.global_symbols.get(&key) {
            let at = bias.wrapping_add(off);
            return is_global_symbols(mem, &layout, at).then_some(at);
        }
        let (addr, size) = file.data?;
        let at = find_global_symbols(mem, bias.wrapping_add(addr), size.min(MAX_DATA), &layout)?;
        if key.1 != 0 {
            self.global_symbols.insert(key, at.wrapping_sub(bias));
        }
        Some(at)
    }
}

/// A relocation of `SHT_RELA` sections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rela {
    offset: u64,
    kind: u32,
    sym: u32,
    addend: i64,
}

/// A symbol of `.dynsym` detection looks at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct DynSym {
    index: u32,
    value: u64,
    size: u64,
    tls: bool,
}

/// The symbols of `.dynsym` detection looks at.
#[derive(Debug, Default)]
struct DynSyms {
    version: Option<DynSym>,
    current_ec: Option<DynSym>,
    /// `rb_vm_exec` (3.1 exports it): the loop's caller.
    vm_exec: Option<DynSym>,
    /// `rb_cObject`, the variable holding the `Object` class.
    object_class: Option<DynSym>,
    /// `ruby_run_node` imported: a `ruby` executable of a libruby.
    imports_run_node: bool,
    /// Every symbol's value, by index (for relocations naming them).
    values: Vec<u64>,
}

/// Reads `.dynsym`'s entries `syms` (ELF64), names in `strs`.
fn dynsyms(syms: &[u8], strs: &[u8]) -> DynSyms {
    let l = crate::elf::Layout::HOST;
    let mut out = DynSyms::default();
    for (i, e) in syms.chunks_exact(24).enumerate() {
        let (Some(name), Some(&info), Some(shndx), Some(value), Some(size)) = (
            l.u32(e, 0),
            e.get(4),
            l.u16(e, 6),
            l.u64(e, 8),
            l.u64(e, 16),
        ) else {
            continue;
        };
        out.values.push(value);
        let sym = DynSym {
            index: i as u32,
            value,
            size,
            tls: info & 0xf == STT_TLS,
        };
        match (name_at(strs, name), shndx != 0) {
            (b"ruby_version", true) => {
                out.version.get_or_insert(sym);
            }
            (b"ruby_current_ec", true) if sym.tls => {
                out.current_ec.get_or_insert(sym);
            }
            (b"rb_vm_exec", true) if sym.size > 0 => {
                out.vm_exec.get_or_insert(sym);
            }
            (b"rb_cObject", true) if sym.size == 8 && !sym.tls => {
                out.object_class.get_or_insert(sym);
            }
            (b"ruby_run_node", false) => out.imports_run_node = true,
            _ => {}
        }
    }
    out
}

/// What the ELF file `elf` says of the Ruby interpreter it holds.
fn read_file<S: Source>(elf: &Elf<S>) -> Object {
    let machine = match elf.machine {
        EM_X86_64 => Machine::X86_64,
        EM_AARCH64 => Machine::Aarch64,
        _ => return Object::Other,
    };
    if elf.layout != crate::elf::Layout::HOST || !matches!(elf.kind, 2 | 3) {
        return Object::Other;
    }
    let Some((syms, strs)) = elf.symbol_table(SHT_DYNSYM, MAX_TABLE) else {
        return Object::Other;
    };
    let syms = dynsyms(&syms, &strs);
    let Some(v) = syms.version else {
        return if syms.imports_run_node {
            Object::Launcher
        } else {
            Object::Other
        };
    };
    let version = elf
        .bytes_at_vaddr(v.value, v.size.clamp(1, MAX_VERSION), MAX_VERSION)
        .map(|b| {
            let text = b.split(|&c| c == 0).next().unwrap_or(&[]);
            // Said in notes: printable characters only.
            text.iter()
                .take_while(|c| c.is_ascii_graphic())
                .map(|&c| char::from(c))
                .collect::<String>()
        })
        .unwrap_or_default();
    let mut file = RubyFile {
        machine,
        segments: elf.loads().map(Into::into).collect(),
        version,
        exec: None,
        exec_caller: syms.vm_exec.map(|s| s.value..s.value + s.size),
        tls: FileTls::default(),
        data: elf.section(b".data").map(|s| (s.addr, s.size)),
        object_class: syms.object_class.map(|s| s.value),
    };
    // The rest only for a version flare reads.
    if Layout::for_version(&file.version).is_none() {
        return Object::Ruby(Arc::new(file));
    }
    let relas = relocations(elf);
    file.exec = exec_function(elf, machine, &relas);
    file.tls = file_tls(elf, machine, &relas, &syms);
    Object::Ruby(Arc::new(file))
}

/// The relocations of every `SHT_RELA` section of `elf`.
fn relocations<S: Source>(elf: &Elf<S>) -> Vec<Rela> {
    let l = crate::elf::Layout::HOST;
    let mut out = Vec::new();
    for s in elf.sections.iter().filter(|s| s.kind == SHT_RELA) {
        let Some(bytes) = elf.data(s, MAX_TABLE) else {
            continue;
        };
        out.extend(bytes.chunks_exact(24).filter_map(|e| {
            let info = l.u64(e, 8)?;
            Some(Rela {
                offset: l.u64(e, 0)?,
                kind: info as u32,
                sym: (info >> 32) as u32,
                addend: l.u64(e, 16)? as i64,
            })
        }));
    }
    out
}

/// The addresses `SHT_RELR` entries `words` relocate (ELF64): an even
/// word is an address, an odd one a bitmap of the 63 words after the
/// last address.
fn relr_offsets(words: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let mut out = Vec::new();
    let mut next = 0u64;
    for w in words {
        if w & 1 == 0 {
            out.push(w);
            next = w.wrapping_add(8);
        } else {
            for bit in 1..64 {
                if w >> bit & 1 != 0 {
                    out.push(next.wrapping_add((bit - 1) * 8));
                }
            }
            next = next.wrapping_add(63 * 8);
        }
    }
    out
}

/// The `RELATIVE` relocations of `elf` as (address, target), sorted by
/// address: `SHT_RELA` ones from `relas`, `SHT_RELR` ones with their
/// targets read from the file.
fn relative<S: Source>(elf: &Elf<S>, machine: Machine, relas: &[Rela]) -> Vec<(u64, u64)> {
    let kind = match machine {
        Machine::X86_64 => R_X86_64_RELATIVE,
        Machine::Aarch64 => R_AARCH64_RELATIVE,
    };
    let mut out: Vec<(u64, u64)> = relas
        .iter()
        .filter(|r| r.kind == kind)
        .map(|r| (r.offset, r.addend as u64))
        .collect();
    let l = crate::elf::Layout::HOST;
    for s in elf.sections.iter().filter(|s| s.kind == SHT_RELR) {
        let Some(bytes) = elf.data(s, MAX_RELR) else {
            continue;
        };
        let offsets = relr_offsets(bytes.chunks_exact(8).filter_map(|w| l.u64(w, 0)));
        // The targets are the words themselves: read the span once.
        let (Some(&lo), Some(&hi)) = (offsets.iter().min(), offsets.iter().max()) else {
            continue;
        };
        let Some(span) = elf.bytes_at_vaddr(lo, (hi - lo).saturating_add(8), MAX_TABLE) else {
            continue;
        };
        out.extend(offsets.iter().filter_map(|&o| {
            let at = usize::try_from(o - lo).ok()?;
            Some((o, l.u64(&span, at)?))
        }));
    }
    out.sort_unstable();
    out
}

/// `vm_exec_core`'s function in `elf` (virtual addresses): the
/// `.eh_frame` function holding the targets of the longest run of
/// `RELATIVE` relocations at consecutive words (its table of
/// instruction addresses), at least [`MIN_TABLE_RUN`] long.
fn exec_function<S: Source>(elf: &Elf<S>, machine: Machine, relas: &[Rela]) -> Option<Range<u64>> {
    let relative = relative(elf, machine, relas);
    let eh = elf.section(b".eh_frame")?;
    let bytes = elf.data(eh, MAX_TABLE)?;
    let functions = crate::unwind::table::eh_frame_ranges(&bytes, eh.addr);
    longest_table(&relative, &functions)
}

/// The function of `functions` (sorted by start) holding the targets of
/// the longest run of relocations `relative` ((address, target), sorted
/// by address) at consecutive 8-byte words, none at the function's
/// start; `None` unless the run is [`MIN_TABLE_RUN`] long.
fn longest_table(relative: &[(u64, u64)], functions: &[Range<u64>]) -> Option<Range<u64>> {
    let holder = |a: u64| {
        let i = functions.partition_point(|f| f.start <= a).checked_sub(1)?;
        let f = &functions[i];
        (f.start < a && a < f.end).then_some(i)
    };
    // (function, run length, last address) of the run going on; the best.
    let mut run: Option<(usize, usize, u64)> = None;
    let mut best: Option<(usize, usize)> = None;
    for &(at, target) in relative {
        run = match (run, holder(target)) {
            (Some((f, n, last)), Some(g)) if f == g && at == last.wrapping_add(8) => {
                Some((f, n + 1, at))
            }
            (_, Some(g)) => Some((g, 1, at)),
            (_, None) => None,
        };
        if let Some((f, n, _)) = run {
            if best.is_none_or(|(_, m)| n > m) {
                best = Some((f, n));
            }
        }
    }
    let (f, n) = best?;
    (n >= MIN_TABLE_RUN).then(|| functions[f].clone())
}

#[cfg(test)]
#[path = "detect_tests.rs"]
mod tests;
