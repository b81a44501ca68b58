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

use super::{Layout, Process, Tls, MAX_SLOTS};
use crate::elf::{name_at, Elf, FileSource, Source, EM_AARCH64, EM_X86_64, SHT_DYNSYM};
use crate::runtime::memory::Memory;
use crate::runtime::open_mapped;
use crate::runtime::tracker::Found;
use crate::unwind::elf::{vaddr_of_offset, Machine, Segment};
use crate::unwind::procs::{Backing, ExecMapping};

/// What a process runs, as far as Ruby goes.
pub type Detected = Found<Process>;

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

/// What the file of a Ruby interpreter says of its thread-local
/// storage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct FileTls {
    /// x86-64: the GOT slots (virtual addresses) the loader writes
    /// libruby's module id in, symbol-less ones first.
    modid_slots: Vec<u64>,
    /// arm64: the GOT TLS descriptors (virtual addresses) whose second
    /// word the loader sets to the variable's offset from the thread
    /// pointer.
    descriptors: Vec<u64>,
    /// The candidate offsets known from the file: in the block (x86-64),
    /// or from the thread pointer (arm64 with no descriptors).
    slots: Vec<i64>,
    /// An executable with no TLS relocations: its own block, glibc's
    /// module 1 (x86-64), at a fixed place after the thread pointer
    /// (arm64, `slots`).
    own: bool,
}

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
            Err(not) => return not,
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
        let ids = IdLayout::for_version(&file.version)?;
        if let Some(&off) = self.global_symbols.get(&key) {
            let at = bias.wrapping_add(off);
            return ids.is_global_symbols(mem, at).then_some(at);
        }
        let (addr, size) = file.data?;
        let at = find_global_symbols(mem, bias.wrapping_add(addr), size.min(MAX_DATA), &ids)?;
        if key.1 != 0 {
            self.global_symbols.insert(key, at.wrapping_sub(bias));
        }
        Some(at)
    }
}

/// Where the execution context lies, from the file's `FileTls` and what
/// the loader wrote in the process (libruby loaded with bias `bias`):
/// `Err` with what to answer when it cannot be said now.
fn live_tls(file: &RubyFile, bias: u64, mem: &dyn Memory) -> Result<Tls, Detected> {
    let t = &file.tls;
    match file.machine {
        Machine::X86_64 => {
            let modid = if t.own {
                1
            } else {
                t.modid_slots
                    .iter()
                    .filter_map(|&slot| mem.read_u64(bias.wrapping_add(slot)).ok())
                    .find(|&v| v != 0 && v < MAX_TLS_VALUE)
                    .ok_or(Found::NotReady)?
            };
            if t.slots.is_empty() {
                return Err(Found::Unsupported(format!(
                    "Ruby {}: no thread-local variable found in its object",
                    file.version
                )));
            }
            Ok(Tls {
                modid,
                slots: t.slots.clone(),
            })
        }
        Machine::Aarch64 => {
            if t.descriptors.is_empty() {
                if t.slots.is_empty() {
                    return Err(Found::Unsupported(format!(
                        "Ruby {}: no thread-local variable found in its object",
                        file.version
                    )));
                }
                return Ok(Tls {
                    modid: 0,
                    slots: t.slots.clone(),
                });
            }
            let mut slots = Vec::new();
            for &d in &t.descriptors {
                let off = mem
                    .read_u64(bias.wrapping_add(d).wrapping_add(8))
                    .map_err(|_| Found::NotReady)?;
                if off == 0 {
                    return Err(Found::NotReady);
                }
                // Else a pointer to the loader's data: TLS allocated on
                // demand (a dlopen'd libruby), not at a fixed place.
                if off < MAX_TLS_VALUE && !slots.contains(&(off as i64)) {
                    slots.push(off as i64);
                }
            }
            slots.truncate(MAX_SLOTS);
            if slots.is_empty() {
                return Err(Found::Unsupported(format!(
                    "Ruby {}: its thread-local storage is not static (a dlopen'd libruby?)",
                    file.version
                )));
            }
            Ok(Tls { modid: 0, slots })
        }
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

/// The size and alignment of `elf`'s `PT_TLS` segment, read from its
/// program headers.
fn tls_segment<S: Source>(elf: &Elf<S>) -> Option<(u64, u64)> {
    let l = crate::elf::Layout::HOST;
    let h = elf.bounded(0, 64, 64)?;
    let (phoff, phentsize, phnum) = (l.u64(&h, 32)?, l.u16(&h, 54)?, l.u16(&h, 56)?);
    if phentsize < 56 {
        return None;
    }
    let len = u64::from(phentsize) * u64::from(phnum);
    let ph = elf.bounded(phoff, len, crate::elf::MAX_HEADERS)?;
    ph.chunks_exact(usize::from(phentsize))
        .find_map(|p| (l.u32(p, 0)? == PT_TLS).then_some((l.u64(p, 40)?, l.u64(p, 48)?)))
}

/// What `elf` says of its thread-local storage, from its relocations
/// `relas` and symbols `syms`.
fn file_tls<S: Source>(elf: &Elf<S>, machine: Machine, relas: &[Rela], syms: &DynSyms) -> FileTls {
    let mut t = FileTls::default();
    let ec = syms.current_ec;
    let sym_value = |r: &Rela| syms.values.get(r.sym as usize).copied().unwrap_or(0);
    let executable = elf.kind == ET_EXEC || elf.segments.iter().any(|s| s.kind == PT_INTERP);
    let (memsz, align) = tls_segment(elf).unwrap_or((0, 1));
    // Every word of the block, for want of better.
    let words = |base: i64| -> Vec<i64> {
        (0..memsz / 8)
            .map(|i| base.wrapping_add((i * 8) as i64))
            .take(MAX_SLOTS)
            .collect()
    };
    match machine {
        Machine::X86_64 => {
            let mut modids: Vec<&Rela> = relas
                .iter()
                .filter(|r| r.kind == R_X86_64_DTPMOD64)
                .collect();
            modids.sort_by_key(|r| r.sym != 0);
            t.modid_slots = modids.iter().map(|r| r.offset).collect();
            t.own = t.modid_slots.is_empty() && executable;
            let mut slots: Vec<i64> = Vec::new();
            if let Some(ec) = ec {
                slots.push(ec.value as i64);
            } else {
                let dtpoffs: Vec<&Rela> = relas
                    .iter()
                    .filter(|r| r.kind == R_X86_64_DTPOFF64)
                    .collect();
                for r in &modids {
                    let second = r.offset.wrapping_add(8);
                    if r.sym != 0 || dtpoffs.iter().any(|d| d.offset == second) {
                        continue;
                    }
                    // General-dynamic pair of a hidden variable: its
                    // offset fixed at link time, in the file.
                    if let Some(off) = elf.u64_at_vaddr(second) {
                        slots.push(off as i64);
                    }
                }
                for d in dtpoffs {
                    slots.push(sym_value(d).wrapping_add(d.addend as u64) as i64);
                }
            }
            let mut unique: Vec<i64> = Vec::new();
            for s in slots {
                if !unique.contains(&s) {
                    unique.push(s);
                }
            }
            unique.truncate(MAX_SLOTS);
            t.slots = if unique.is_empty() { words(0) } else { unique };
        }
        Machine::Aarch64 => {
            let descs: Vec<&Rela> = relas
                .iter()
                .filter(|r| r.kind == R_AARCH64_TLSDESC)
                .collect();
            let naming: Vec<&&Rela> = match ec {
                Some(ec) => descs
                    .iter()
                    .filter(|r| r.sym == ec.index || (r.sym == 0 && r.addend as u64 == ec.value))
                    .collect(),
                None => Vec::new(),
            };
            t.descriptors = if naming.is_empty() {
                descs.iter().map(|r| r.offset).collect()
            } else {
                naming.iter().map(|r| r.offset).collect()
            };
            t.descriptors.truncate(MAX_SLOTS);
            t.own = t.descriptors.is_empty() && executable;
            if t.own {
                // Local-exec: the executable's block follows the thread
                // control block (16 bytes), aligned.
                let first = 16u64.checked_next_multiple_of(align.max(1)).unwrap_or(16) as i64;
                t.slots = match ec {
                    Some(ec) => vec![first.wrapping_add(ec.value as i64)],
                    None => words(first),
                };
            }
        }
    }
    t
}

/// What reading `ruby_global_symbols` needs of one Ruby version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct IdLayout {
    /// `tLAST_OP_ID`: `last_id` is past it.
    last_op_id: u32,
    /// The serial of `tEach` (id.h), whose name is "each".
    each: u64,
    /// `RARRAY_EMBED_LEN_MASK` (its shift is 15).
    array_embed_len: u64,
    /// 3.1: an embedded string's length is in its flags, its bytes at
    /// 16; 3.3 on: the length at 16, the bytes (or their pointer) at 24.
    len_in_flags: bool,
}

const T_STRING: u64 = 5;
const T_ARRAY: u64 = 7;
const T_HASH: u64 = 8;
/// `FL_USER1`: an array's `RARRAY_EMBED_FLAG`, a string's
/// `RSTRING_NOEMBED`.
const FL_USER1: u64 = 0x2000;

impl IdLayout {
    fn for_version(version: &str) -> Option<IdLayout> {
        let mut parts = version.split('.');
        let major: u32 = parts.next()?.parse().ok()?;
        let minor: u32 = parts.next()?.parse().ok()?;
        Some(match (major, minor) {
            (3, 1) => IdLayout {
                last_op_id: 169,
                each: 188,
                array_embed_len: 0x18000,
                len_in_flags: true,
            },
            (3, 3) => IdLayout {
                last_op_id: 169,
                each: 190,
                array_embed_len: 0x3f8000,
                len_in_flags: false,
            },
            (3, 4) => IdLayout {
                last_op_id: 170,
                each: 192,
                array_embed_len: 0x3f8000,
                len_in_flags: false,
            },
            _ => return None,
        })
    }

    /// Element `i` of the Array at `ary`.
    fn element(&self, mem: &dyn Memory, ary: u64, i: u64) -> Option<u64> {
        let flags = mem.read_u64(ary).ok()?;
        if flags & 0x1f != T_ARRAY {
            return None;
        }
        let (len, ptr) = if flags & FL_USER1 != 0 {
            ((flags & self.array_embed_len) >> 15, ary.wrapping_add(16))
        } else {
            (
                mem.read_u64(ary.wrapping_add(16)).ok()?,
                mem.read_u64(ary.wrapping_add(32)).ok()?,
            )
        };
        if i >= len {
            return None;
        }
        mem.read_u64(ptr.wrapping_add(i.checked_mul(8)?)).ok()
    }

    /// Whether the String at `s` holds `text`.
    fn string_is(&self, mem: &dyn Memory, s: u64, text: &[u8]) -> bool {
        let Ok(flags) = mem.read_u64(s) else {
            return false;
        };
        if flags & 0x1f != T_STRING {
            return false;
        }
        let heap = flags & FL_USER1 != 0;
        let at = |o: u64| s.wrapping_add(o);
        let (len, ptr) = match (self.len_in_flags, heap) {
            (true, false) => (Ok((flags >> 14) & 0x1f), Ok(at(16))),
            (true, true) => (mem.read_u64(at(16)), mem.read_u64(at(24))),
            (false, false) => (mem.read_u64(at(16)), Ok(at(24))),
            (false, true) => (mem.read_u64(at(16)), mem.read_u64(at(24))),
        };
        let (Ok(len), Ok(ptr)) = (len, ptr) else {
            return false;
        };
        if len != text.len() as u64 {
            return false;
        }
        let mut buf = vec![0u8; text.len()];
        mem.read(ptr, &mut buf).is_ok() && buf == text
    }

    /// Whether the 32 bytes `b` (at `at` in the process) look like a
    /// `rb_symbols_t`: `{u32 last_id, u32 0, st_table *str_sym, VALUE
    /// ids, VALUE dsymbol_fstr_hash}`.
    fn looks_like(&self, b: &[u8]) -> bool {
        let l = crate::elf::Layout::HOST;
        let (Some(last), Some(pad), Some(str_sym), Some(ids), Some(dsym)) = (
            l.u32(b, 0),
            l.u32(b, 4),
            l.u64(b, 8),
            l.u64(b, 16),
            l.u64(b, 24),
        ) else {
            return false;
        };
        let pointer = |p: u64| p != 0 && p & 7 == 0;
        last > self.last_op_id && pad == 0 && pointer(str_sym) && pointer(ids) && pointer(dsym)
    }

    /// Whether `at` holds `ruby_global_symbols`: it looks like one, its
    /// `ids` is an Array and its `dsymbol_fstr_hash` a Hash, and `tEach`
    /// is named "each".
    fn is_global_symbols(&self, mem: &dyn Memory, at: u64) -> bool {
        let mut b = [0u8; 32];
        mem.read(at, &mut b).is_ok() && self.looks_like(&b) && self.checks(mem, &b)
    }

    /// The checks of [`IdLayout::is_global_symbols`] past its looks.
    fn checks(&self, mem: &dyn Memory, b: &[u8]) -> bool {
        let l = crate::elf::Layout::HOST;
        let (Some(ids), Some(dsym)) = (l.u64(b, 16), l.u64(b, 24)) else {
            return false;
        };
        let is = |v: u64, t: u64| mem.read_u64(v).is_ok_and(|f| f & 0x1f == t);
        if !is(ids, T_ARRAY) || !is(dsym, T_HASH) {
            return false;
        }
        const UNIT: u64 = 512;
        self.element(mem, ids, self.each / UNIT)
            .and_then(|chunk| self.element(mem, chunk, self.each % UNIT * 2))
            .is_some_and(|name| self.string_is(mem, name, b"each"))
    }
}

/// `ruby_global_symbols` in the `size` bytes of memory from `start`
/// (`.data` of libruby in the process), read a page at a time.
fn find_global_symbols(mem: &dyn Memory, start: u64, size: u64, ids: &IdLayout) -> Option<u64> {
    const PAGE: u64 = 4096;
    let mut bytes = vec![0u8; usize::try_from(size).ok()?];
    let mut done = 0u64;
    while done < size {
        let at = start.wrapping_add(done);
        let n = (PAGE - at % PAGE).min(size - done);
        let chunk = &mut bytes[done as usize..(done + n) as usize];
        if mem.read(at, chunk).is_err() {
            chunk.fill(0);
        }
        done += n;
    }
    let first = (8 - start % 8) % 8;
    (first..size.saturating_sub(31))
        .step_by(8)
        .map(|o| (o, &bytes[o as usize..o as usize + 32]))
        .filter(|(_, b)| ids.looks_like(b))
        .take(MAX_CANDIDATES)
        .find(|(_, b)| ids.checks(mem, b))
        .map(|(o, _)| start.wrapping_add(o))
}

#[cfg(test)]
#[path = "detect_tests.rs"]
mod tests;
