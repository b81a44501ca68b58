//! Finding CPython in a process: which object holds the interpreter (a
//! `python3.N` executable, a `libpython3.N` library, or any object that
//! exports `_PyRuntime` and `Py_Version`), its version and layout, and the
//! addresses BPF walks from: `_PyRuntime`, `PyCode_Type`, the eval loop
//! and the slot holding each thread's `PyThreadState *`.
//!
//! This is the step that trusts nothing: the files are other users' (they
//! are opened through the paths [`ExecMapping::open_paths`] gives, the
//! process's own root never left, and read in bounded pieces, never
//! mapped: a file truncated under a map would kill flare), and so is the
//! memory (every figure read from it is checked against another before it
//! is believed: the thread-state slot is learnt from the live threads and
//! must agree for all of them). What a file says is kept per object
//! (device, inode), so that twenty processes of one interpreter read its
//! symbols once.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::sync::Arc;

use super::debug_offsets;
use super::layout::{self, Layout};
use super::machine_code::{self, ThreadLocal};
use super::Process;
use crate::runtime::memory::Memory;
use crate::runtime::tracker::Found;
use crate::unwind::elf::{vaddr_of_offset, Machine, Segment};
use crate::unwind::procs::{Backing, ExecMapping};

/// What a process runs, as far as Python goes: [`Found::Unsupported`]
/// says the same text for every process of one interpreter, so that it
/// can be said once.
pub type Detected = Found<Process>;

/// The minor versions of CPython 3 flare walks.
const MINORS: std::ops::RangeInclusive<u8> = 6..=15;

/// Objects whose symbols are kept; past it, one is forgotten per new one.
const MAX_OBJECTS: usize = 4096;

/// Finds CPython in processes, keeping what each object's file says.
#[derive(Debug, Default)]
pub struct Detector {
    objects: HashMap<(u64, u64), Arc<Object>>,
}

/// What a mapped object's name says: `python3.11`, `libpython3.12.so.1.0`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Named {
    pub library: bool,
    pub major: u8,
    pub minor: u8,
    /// The ABI flags after the version (`d`: debug, `t`: free-threaded,
    /// `m`: pymalloc, 3.7 and before).
    pub abiflags: String,
}

/// Reads a file's base name as a CPython executable or library.
pub(crate) fn parse_name(base: &str) -> Option<Named> {
    let (library, rest) = match base.strip_prefix("libpython") {
        Some(rest) => (true, rest),
        None => (false, base.strip_prefix("python")?),
    };
    let (major, rest) = number(rest)?;
    let (minor, rest) = number(rest.strip_prefix('.')?)?;
    let flags_end = rest
        .find(|c: char| !c.is_ascii_lowercase())
        .unwrap_or(rest.len());
    let (abiflags, rest) = rest.split_at(flags_end);
    let tail_ok = if library {
        rest.starts_with(".so")
    } else {
        rest.is_empty() || rest.starts_with(['-', '.', '_'])
    };
    tail_ok.then(|| Named {
        library,
        major,
        minor,
        abiflags: abiflags.to_string(),
    })
}

/// A leading decimal number (1 to 3 digits) and what follows it.
fn number(s: &str) -> Option<(u8, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if end == 0 || end > 3 {
        return None;
    }
    Some((s[..end].parse().ok()?, &s[end..]))
}

/// Why flare cannot walk CPython `major.minor` with these ABI flags, if
/// it cannot.
pub(crate) fn refusal(major: u8, minor: u8, abiflags: &str) -> Option<String> {
    if major != 3 || !MINORS.contains(&minor) {
        return Some(format!(
            "CPython {major}.{minor} is not supported: flare walks the frames of CPython 3.{} to 3.{}",
            MINORS.start(),
            MINORS.end()
        ));
    }
    if abiflags.contains('t') {
        return Some(format!(
            "CPython {major}.{minor}{abiflags} is not supported: a free-threaded build (its objects have another layout)"
        ));
    }
    if abiflags.contains('d') {
        return Some(format!(
            "CPython {major}.{minor}{abiflags} is not supported: a debug build (its objects have another layout)"
        ));
    }
    None
}

/// A symbol's value (the object's virtual address) and size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sym {
    pub value: u64,
    pub size: u64,
}

/// The symbols of an object that detection looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Symbols {
    pub runtime: Option<Sym>,
    pub code_type: Option<Sym>,
    pub eval: Option<Sym>,
    /// `_PyEval_EvalFrameDefault.cold`, `.part.N` and the like: pieces of
    /// the eval loop the compiler moved out of it.
    pub eval_parts: Vec<Sym>,
    pub py_version: Option<Sym>,
    /// `_Py_NegativeRefcount`: only in builds with reference debugging.
    pub debug_build: bool,
    /// An undefined `Py_BytesMain` or `Py_Main`: a `python` executable
    /// that runs the interpreter of a library.
    pub calls_main: bool,
    /// glibc's `_thread_db_sizeof_pthread` (for libthread_db): the size of
    /// `struct pthread`, which sits below the thread pointer on arm64.
    pub sizeof_pthread: Option<Sym>,
    /// `PyGILState_GetThisThreadState`: where 3.15 says which thread-local
    /// variable holds a thread's state.
    pub gilstate: Option<Sym>,
    /// 3.6, which has no `_PyRuntime`: `pystate.c`'s static `interp_head`
    /// (the first interpreter) and `autoTLSkey` (the thread-state key, an
    /// int), in `.symtab` only.
    pub interp_head: Option<Sym>,
    pub auto_tls_key: Option<Sym>,
}

/// What detection needs of one object's file.
#[derive(Clone, Debug, Default)]
pub(crate) struct Object {
    pub segments: Vec<Segment>,
    pub symbols: Symbols,
    /// `Py_Version` as the file holds it (PY_VERSION_HEX; 3.11+).
    pub version_hex: Option<u32>,
    /// `.symtab` was read too (else `.dynsym` alone).
    pub full: bool,
    /// The value of `_thread_db_sizeof_pthread` (glibc's libc).
    pub pthread_size: Option<u32>,
    /// The thread-local variable `PyGILState_GetThisThreadState` returns
    /// (3.15), as its code reads it.
    pub gilstate_tls: Option<ThreadLocal>,
}

impl Detector {
    pub fn new() -> Self {
        Self::default()
    }

    /// Finds the CPython process `pid` runs, from its executable mappings
    /// `maps` and its memory `mem`.
    pub fn detect(&mut self, pid: u32, maps: &[ExecMapping], mem: &dyn Memory) -> Detected {
        let mut refused: Option<String> = None;
        let mut shim = false;
        let mut seen: Vec<&ExecMapping> = Vec::new();
        for m in maps {
            let Backing::File(path) = &m.backing else {
                continue;
            };
            let same = |o: &&ExecMapping| {
                if m.dev_ino.1 != 0 {
                    o.dev_ino == m.dev_ino
                } else {
                    o.backing == m.backing
                }
            };
            if seen.iter().any(same) {
                continue;
            }
            seen.push(m);
            let base = path.rsplit('/').next().unwrap_or(path);
            let named = parse_name(base);
            let Some(object) = self.object(pid, m, named.is_some()) else {
                continue;
            };
            let s = &object.symbols;
            if s.runtime.is_none() && s.interp_head.is_none() {
                match &named {
                    Some(n) if !n.library && s.calls_main => shim = true,
                    Some(n) => {
                        refused.get_or_insert_with(|| {
                            refusal(n.major, n.minor, &n.abiflags).unwrap_or_else(|| {
                                format!(
                                    "CPython {}.{} in {base} is not supported: it has no _PyRuntime symbol (stripped?)",
                                    n.major, n.minor
                                )
                            })
                        });
                    }
                    None => {}
                }
                continue;
            }
            // The version: Py_Version (3.11+) over the name.
            let version = match (object.version_hex, &named) {
                (Some(hex), n) => {
                    let flags = n.as_ref().map_or("", |n| n.abiflags.as_str());
                    Version::from_hex(hex, flags)
                }
                (None, Some(n)) => Version {
                    major: n.major,
                    minor: n.minor,
                    alpha: false,
                    pre_release: false,
                    abiflags: n.abiflags.clone(),
                },
                (None, None) => {
                    // An embedder's CPython that says not which it is.
                    if s.py_version.is_none() {
                        refused.get_or_insert_with(|| {
                            format!("CPython in {base} is not supported: it has no Py_Version (3.10 or older) nor a versioned name")
                        });
                    }
                    continue;
                }
            };
            let below = match self.thread_pointer_offset(Machine::HOST, pid, maps) {
                Ok(Some(b)) => b,
                // Still starting: glibc's loader has not mapped libc yet.
                Ok(None) => return Found::NotReady,
                Err(why) => {
                    refused.get_or_insert(why);
                    continue;
                }
            };
            match build(m, &object, &version, base, maps, mem, below) {
                Found::Unsupported(why) => {
                    refused.get_or_insert(why);
                }
                found => return found,
            }
        }
        match (refused, shim) {
            (Some(why), _) => Found::Unsupported(why),
            // A `python3.N` whose libpython is not mapped yet.
            (None, true) => Found::NotReady,
            (None, false) => Found::No,
        }
    }

    /// How far below the thread pointer (what BPF reads: x86-64's fs base,
    /// arm64's tpidr_el0) glibc's `struct pthread` begins: 0 on x86-64
    /// (TLS variant II: the thread pointer is `pthread_self()`); on arm64
    /// (variant I) the thread pointer follows the `struct pthread`, whose
    /// size libc tells libthread_db in `_thread_db_sizeof_pthread`.
    /// `None` while glibc's dynamic loader has yet to map libc (a process
    /// sampled as it starts). `machine` is the host's but in tests.
    fn thread_pointer_offset(
        &mut self,
        machine: Machine,
        pid: u32,
        maps: &[ExecMapping],
    ) -> Result<Option<u64>, String> {
        if machine == Machine::X86_64 {
            return Ok(Some(0));
        }
        let named = |prefix: &str| {
            maps.iter().find(|m| match &m.backing {
                Backing::File(p) => p.rsplit('/').next().is_some_and(|b| b.starts_with(prefix)),
                _ => false,
            })
        };
        let Some(libc) = named("libc.so") else {
            return match named("ld-linux") {
                Some(_) => Ok(None),
                None => Err(NO_PTHREAD_SIZE.into()),
            };
        };
        match self.object(pid, libc, false).and_then(|o| o.pthread_size) {
            Some(n) if (0x100..0x10000).contains(&n) => Ok(Some(u64::from(n))),
            _ => Err(NO_PTHREAD_SIZE.into()),
        }
    }

    /// What the file of mapping `m` says, from the cache or read now
    /// (with `.symtab` if `full`): nothing for a file that is not a
    /// 64-bit ELF file of the host's machine; `None` when it cannot be opened (not kept:
    /// the process may be gone, the next one may open it).
    fn object(&mut self, pid: u32, m: &ExecMapping, full: bool) -> Option<Arc<Object>> {
        let key = m.dev_ino;
        let cached = (key.1 != 0).then(|| self.objects.get(&key)).flatten();
        if let Some(o) = cached {
            if o.full || !full {
                return Some(o.clone());
            }
        }
        let file = crate::runtime::open_mapped(pid, m)?;
        let object = Arc::new(read_object(&file, full).unwrap_or(Object {
            full: true,
            ..Object::default()
        }));
        if key.1 != 0 {
            if self.objects.len() >= MAX_OBJECTS && !self.objects.contains_key(&key) {
                if let Some(old) = self.objects.keys().next().copied() {
                    self.objects.remove(&old);
                }
            }
            self.objects.insert(key, object.clone());
        }
        Some(object)
    }
}

/// Why CPython is refused on arm64 without glibc's size of `struct pthread`.
const NO_PTHREAD_SIZE: &str = "its libc gives no size of struct pthread (_thread_db_sizeof_pthread): CPython frames need glibc on arm64";

/// A CPython version as detection settled it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Version {
    major: u8,
    minor: u8,
    /// An alpha release: its structures may be any.
    alpha: bool,
    /// A beta or a release candidate: 3.15's table changed in its betas.
    pre_release: bool,
    abiflags: String,
}

impl Version {
    fn from_hex(hex: u32, abiflags: &str) -> Version {
        Version {
            major: (hex >> 24) as u8,
            minor: (hex >> 16) as u8,
            alpha: (hex >> 4) & 0xf == 0xa,
            pre_release: matches!((hex >> 4) & 0xf, 0xb | 0xc),
            abiflags: abiflags.to_string(),
        }
    }
}

/// The Python process whose interpreter is `object`, mapped (executable)
/// at `m`.
#[allow(clippy::too_many_arguments)]
fn build(
    m: &ExecMapping,
    object: &Object,
    version: &Version,
    base: &str,
    maps: &[ExecMapping],
    mem: &dyn Memory,
    below_tp: u64,
) -> Detected {
    let Version { major, minor, .. } = *version;
    if let Some(why) = refusal(major, minor, &version.abiflags) {
        return Found::Unsupported(why);
    }
    let unsupported = |why: &str| {
        Found::Unsupported(format!(
            "CPython {major}.{minor} in {base} is not supported: {why}"
        ))
    };
    if version.alpha {
        return unsupported("an alpha release (its structures may differ from the release's)");
    }
    if version.pre_release && minor >= 14 {
        return unsupported("a pre-release (its table of offsets may differ from the release's)");
    }
    let s = &object.symbols;
    if s.debug_build {
        return unsupported("a debug build (its objects have another layout)");
    }
    let Some(mut layout) = layout::for_version(minor) else {
        return unsupported("no layout for this version");
    };
    let Some(vaddr) = vaddr_of_offset(&object.segments, m.offset) else {
        return unsupported("its mapping is in none of its segments");
    };
    let bias = m.start.wrapping_sub(vaddr);
    // 3.6 has no `_PyRuntime`: its layout reads the first interpreter
    // from `interp_head` itself.
    let runtime = if minor == 6 { s.interp_head } else { s.runtime };
    let (Some(runtime), Some(code_type), Some(eval)) = (runtime, s.code_type, s.eval) else {
        return unsupported("it lacks one of _PyRuntime, PyCode_Type and _PyEval_EvalFrameDefault");
    };
    if eval.size == 0 {
        return unsupported("_PyEval_EvalFrameDefault has no size");
    }
    let runtime_at = runtime.value.wrapping_add(bias);
    if let Some(size) = debug_offsets::table_size(minor) {
        let mut table = [0u8; debug_offsets::MAX_TABLE];
        let table = &mut table[..size];
        if let Err(e) = mem.read(runtime_at, table) {
            return match unreadable(&e) {
                Found::Unsupported(why) => unsupported(&why),
                other => other,
            };
        }
        layout = match debug_offsets::from_debug_offsets(layout, table) {
            Ok(l) => l,
            Err(why) => return unsupported(&why),
        };
    }
    // The runtime fields read must lie inside `_PyRuntime`.
    let runtime_end = [
        layout.runtime_autotss,
        Some(layout.runtime_interpreters_head),
    ]
    .iter()
    .flatten()
    .map(|&o| u64::from(o) + 8)
    .max()
    .unwrap_or(0);
    if runtime.size != 0 && runtime_end > runtime.size {
        return unsupported("_PyRuntime is smaller than its layout says");
    }
    // The slot is found from each thread's pthread_self(); BPF reads it
    // from the thread pointer.
    let found = match (layout.runtime_autotss, s.auto_tls_key) {
        (Some(_), _) => autotss_and_slot(layout, runtime_at, maps, mem),
        (None, Some(key)) if minor == 6 => {
            let key_at = key.value.wrapping_add(bias);
            match mem.read_u32(key_at) {
                Ok(key) => slot_of_key(key, &layout, runtime_at, maps, mem).map(|s| (s, layout)),
                Err(e) => Err(unreadable(&e)),
            }
        }
        _ => thread_local_slot(object.gilstate_tls, bias, below_tp, layout, runtime_at, mem),
    };
    let (tstate_slot, layout) = match found {
        Ok((slot, layout)) => (slot.wrapping_sub(below_tp), layout),
        Err(Found::Unsupported(why)) => return unsupported(&why),
        Err(other) => return other,
    };
    let range =
        |s: Sym| s.value.wrapping_add(bias)..s.value.wrapping_add(bias).wrapping_add(s.size);
    let cold = cold_part(&s.eval_parts).map_or(0..0, range);
    Found::Yes(Process {
        layout: Arc::new(layout),
        runtime: runtime_at,
        code_type: code_type.value.wrapping_add(bias),
        eval: [range(eval), cold],
        tstate_slot,
    })
}

/// Where `_PyRuntime` keeps `autoTSSkey` past the layout's x86-64 offset,
/// on other machines: before it lie the GIL's pthread mutexes (3.8-3.12),
/// 40 bytes on x86-64 but 48 on arm64. Each is tried in turn; only the
/// one whose key's thread-specific slot holds every thread's state passes
/// [`tstate_slot`]'s check.
const AUTOTSS_SHIFTS: [u16; 7] = [0, 8, 16, 24, 32, 40, 48];

/// The thread-state slot (from `pthread_self()`) and the layout with
/// `autoTSSkey` where it was found: the layout's own offset on x86-64,
/// else the first of [`AUTOTSS_SHIFTS`] that holds. The error of the
/// layout's own offset when none does.
fn autotss_and_slot(
    layout: Layout,
    runtime: u64,
    maps: &[ExecMapping],
    mem: &dyn Memory,
) -> Result<(u64, Layout), Detected> {
    let shifts: &[u16] = if Machine::HOST == Machine::X86_64 {
        &AUTOTSS_SHIFTS[..1]
    } else {
        &AUTOTSS_SHIFTS
    };
    let mut first = None;
    for &shift in shifts {
        let l = Layout {
            runtime_autotss: layout.runtime_autotss.map(|o| o.saturating_add(shift)),
            ..layout.clone()
        };
        match tstate_slot(&l, runtime, maps, mem) {
            Ok(slot) => return Ok((slot, l)),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(first.unwrap_or(Found::NotReady))
}

/// The thread-state slot (from `pthread_self()`) of a CPython that keeps
/// each thread's state in a thread-local variable (3.15): where the code
/// of `PyGILState_GetThisThreadState` reads it (`tls`; `bias` places the
/// object, `below_tp` is how far below the thread pointer
/// `pthread_self()` lies), checked against the live threads.
fn thread_local_slot(
    tls: Option<ThreadLocal>,
    bias: u64,
    below_tp: u64,
    layout: Layout,
    runtime: u64,
    mem: &dyn Memory,
) -> Result<(u64, Layout), Detected> {
    let from_tp = match tls {
        Some(ThreadLocal::Offset(off)) => off,
        Some(ThreadLocal::Got(at)) => match mem.read_u64(at.wrapping_add(bias)) {
            // The loader has yet to fill it.
            Ok(0) => return Err(Found::NotReady),
            Ok(v) => v as i64,
            Err(e) => return Err(unreadable(&e)),
        },
        None => {
            return Err(Found::Unsupported(
                "the code of its PyGILState_GetThisThreadState is not one flare reads a thread-local variable from".into(),
            ))
        }
    };
    let slot = below_tp.wrapping_add_signed(from_tp);
    let threads = started_threads(&layout, runtime, mem)?;
    if !slot_holds(&layout, &threads, slot, mem) {
        // Threads starting: try later.
        return Err(Found::NotReady);
    }
    Ok((slot, layout))
}

/// The thread states of the first interpreter ([`thread_states`]), once
/// it has one and at least one of them names its thread; else try later
/// (or, memory flare may not read, give up).
fn started_threads(
    layout: &Layout,
    runtime: u64,
    mem: &dyn Memory,
) -> Result<Vec<Thread>, Detected> {
    match thread_states(layout, runtime, mem) {
        Ok(Some(t)) if t.iter().any(|t| t.id != 0) => Ok(t),
        Ok(_) => Err(Found::NotReady),
        Err(e) => Err(unreadable(&e)),
    }
}

/// What a failed read of the process's memory means: it may be gone or
/// not set up yet (try later), unless flare may not read it at all.
fn unreadable(e: &io::Error) -> Detected {
    if e.kind() == io::ErrorKind::PermissionDenied {
        Found::Unsupported(format!("its memory cannot be read ({e})"))
    } else {
        Found::NotReady
    }
}

/// The eval loop's outlined part BPF is given: the one there is, else the
/// span of them all when they lie close together, else the largest.
fn cold_part(parts: &[Sym]) -> Option<Sym> {
    const CLOSE: u64 = 64 << 10;
    let start = parts.iter().map(|p| p.value).min()?;
    let end = parts.iter().map(|p| p.value.saturating_add(p.size)).max()?;
    if end - start <= CLOSE {
        return Some(Sym {
            value: start,
            size: end - start,
        });
    }
    parts.iter().copied().max_by_key(|p| p.size)
}

/// Where glibc 2.36 (and the versions around it) has `struct pthread`'s
/// `specific_1stblock` (x86-64): tried before any other.
const GLIBC_SPECIFIC: u64 = 0x310;
/// Where else it is looked for.
const SPECIFIC_SCAN: Range<u64> = 0x100..0x1000;
/// glibc's first block of thread-specific slots (`PTHREAD_KEY_2NDLEVEL_SIZE`).
const FIRST_BLOCK_KEYS: u32 = 32;
/// Thread states walked at most.
const MAX_THREADS: usize = 64;

/// A thread state and its thread's `pthread_t` (0: not bound to one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Thread {
    pub tstate: u64,
    pub id: u64,
}

/// The thread states of the first interpreter of the CPython whose
/// `_PyRuntime` is at `runtime` (at most [`MAX_THREADS`]); `None` while
/// it has no interpreter yet.
pub(crate) fn thread_states(
    layout: &Layout,
    runtime: u64,
    mem: &dyn Memory,
) -> io::Result<Option<Vec<Thread>>> {
    let field = |at: u64, off: u16| at.wrapping_add(u64::from(off));
    let interp = mem.read_u64(field(runtime, layout.runtime_interpreters_head))?;
    if interp == 0 {
        return Ok(None);
    }
    let mut threads: Vec<Thread> = Vec::new();
    let mut at = mem.read_u64(field(interp, layout.interp_threads_head))?;
    while at != 0 && threads.len() < MAX_THREADS && !threads.iter().any(|t| t.tstate == at) {
        let id = mem.read_u64(field(at, layout.tstate_thread_id))?;
        threads.push(Thread { tstate: at, id });
        at = mem.read_u64(field(at, layout.tstate_next))?;
    }
    Ok(Some(threads))
}

/// The offset from a thread's pointer (fs base) of its `PyThreadState *`:
/// glibc's `specific_1stblock[key].data` for the key of `autoTSSkey`,
/// learnt from the live threads.
fn tstate_slot(
    layout: &Layout,
    runtime: u64,
    maps: &[ExecMapping],
    mem: &dyn Memory,
) -> Result<u64, Detected> {
    let read_u32 = |a: u64| mem.read_u32(a).map_err(|e| unreadable(&e));
    let field = |at: u64, off: u16| at.wrapping_add(u64::from(off));
    let Some(autotss) = layout.runtime_autotss else {
        return Err(Found::Unsupported("it has no autoTSSkey".into()));
    };
    let tss = field(runtime, autotss);
    if read_u32(tss)? != 1 {
        return Err(Found::NotReady);
    }
    let key = read_u32(tss.wrapping_add(4))?;
    slot_of_key(key, layout, runtime, maps, mem)
}

/// The offset from a thread's pointer of glibc's thread-specific slot of
/// `key` (`specific_1stblock[key].data`), checked to hold every live
/// thread's state. 3.6's `autoTLSkey` is -1 until it is created.
fn slot_of_key(
    key: u32,
    layout: &Layout,
    runtime: u64,
    maps: &[ExecMapping],
    mem: &dyn Memory,
) -> Result<u64, Detected> {
    if key == u32::MAX {
        return Err(Found::NotReady);
    }
    if key >= FIRST_BLOCK_KEYS {
        return Err(Found::Unsupported(format!(
            "its thread-state key {key} is past glibc's first {FIRST_BLOCK_KEYS} thread-specific slots"
        )));
    }
    let threads = started_threads(layout, runtime, mem)?;
    // specific_1stblock[key].data: 16-byte entries, `data` after `seq`.
    let rel = 16 * u64::from(key) + 8;
    let check = |off: u64| slot_holds(layout, &threads, off + rel, mem);
    if check(GLIBC_SPECIFIC) {
        return Ok(GLIBC_SPECIFIC + rel);
    }
    let mut tried = vec![GLIBC_SPECIFIC];
    for t in threads.iter().filter(|t| t.id != 0) {
        let first = t.id.wrapping_add(SPECIFIC_SCAN.start + rel);
        let words = read_words(mem, first, (SPECIFIC_SCAN.end - SPECIFIC_SCAN.start) / 8);
        for (i, w) in words.iter().enumerate() {
            let off = SPECIFIC_SCAN.start + 8 * i as u64;
            if *w != Some(t.tstate) || tried.contains(&off) {
                continue;
            }
            tried.push(off);
            if check(off) {
                return Ok(off + rel);
            }
        }
    }
    let musl = maps.iter().any(|m| match &m.backing {
        Backing::File(p) => {
            let base = p.rsplit('/').next().unwrap_or(p);
            base.starts_with("ld-musl") || base.starts_with("libc.musl")
        }
        _ => false,
    });
    if musl {
        return Err(Found::Unsupported(
            "musl libc (flare finds thread states in glibc's thread-specific data)".into(),
        ));
    }
    // Threads starting or ending while they were read: try later.
    Err(Found::NotReady)
}

/// Whether `slot` from each thread's pointer holds its thread state: at
/// least one does, and for none of the others does it hold anything but
/// nothing (a thread gone: glibc clears its slots) or another thread state
/// of the same thread (one made for it that it has not taken up yet, or
/// its state in another interpreter).
fn slot_holds(layout: &Layout, threads: &[Thread], slot: u64, mem: &dyn Memory) -> bool {
    let mut matched = 0;
    for t in threads.iter().filter(|t| t.id != 0) {
        let v = match mem.read_u64(t.id.wrapping_add(slot)) {
            Ok(v) => v,
            Err(_) => continue,
        };
        if v == t.tstate {
            matched += 1;
            continue;
        }
        if v == 0 {
            continue;
        }
        let same_thread = threads.iter().any(|o| o.tstate == v && o.id == t.id)
            || mem
                .read_u64(v.wrapping_add(u64::from(layout.tstate_thread_id)))
                .is_ok_and(|id| id == t.id);
        if !same_thread {
            return false;
        }
    }
    matched > 0
}

/// `n` words from `addr`, each `None` where memory could not be read
/// (read a page at a time: a thread's `struct pthread` ends its stack's
/// mapping, and what follows may be a guard page).
fn read_words(mem: &dyn Memory, addr: u64, n: u64) -> Vec<Option<u64>> {
    const PAGE: u64 = 4096;
    let len = n * 8;
    let mut bytes = vec![0u8; len as usize];
    let mut good = vec![false; len as usize];
    let mut at = 0u64;
    while at < len {
        let here = addr.wrapping_add(at);
        let chunk = (PAGE - here % PAGE).min(len - at);
        let range = at as usize..(at + chunk) as usize;
        if mem.read(here, &mut bytes[range.clone()]).is_ok() {
            good[range].fill(true);
        }
        at += chunk;
    }
    (0..n as usize)
        .map(|i| {
            let r = i * 8..i * 8 + 8;
            if !good[r.clone()].iter().all(|&g| g) {
                return None;
            }
            <[u8; 8]>::try_from(&bytes[r]).ok().map(u64::from_ne_bytes)
        })
        .collect()
}

/// Symbol and string tables read of a file at most.
const MAX_TABLE: u64 = 64 << 20;

/// Reads what detection needs of the ELF file `file`: its load segments,
/// the symbols of [`Symbols`] from `.dynsym` (and `.symtab` if `full` or
/// the object defines `_PyRuntime`), and `Py_Version`'s value. `None`
/// unless a 64-bit little-endian executable or shared object of the host's machine.
pub(crate) fn read_object(file: &File, full: bool) -> Option<Object> {
    let elf = crate::elf::Elf::parse(crate::elf::FileSource::new(file)?)?;
    if elf.layout != crate::elf::Layout::HOST
        || elf.machine != crate::elf::EM_HOST
        || !matches!(elf.kind, 2 | 3)
        || elf.loads().next().is_none()
    {
        return None;
    }
    let mut object = Object::default();
    if elf.sections.is_empty() {
        // No sections: no symbols either, nothing more to read.
        object.full = true;
    } else {
        if let Some((syms, strs)) = elf.symbol_table(crate::elf::SHT_DYNSYM, MAX_TABLE) {
            scan_symbols(&syms, &strs, &mut object.symbols);
        }
        object.full = full || object.symbols.runtime.is_some();
        if object.full {
            if let Some((syms, strs)) = elf.symbol_table(crate::elf::SHT_SYMTAB, MAX_TABLE) {
                scan_symbols(&syms, &strs, &mut object.symbols);
            }
        }
    }
    object.version_hex = object
        .symbols
        .py_version
        .and_then(|v| elf.u64_at_vaddr(v.value))
        .and_then(|v| u32::try_from(v).ok());
    object.pthread_size = object
        .symbols
        .sizeof_pthread
        .and_then(|v| elf.u64_at_vaddr(v.value))
        .map(|v| v as u32);
    object.segments = elf.loads().map(Segment::from).collect();
    read_code(&elf, &mut object);
    Some(object)
}

/// Learns from the interpreter's machine code what its symbols do not
/// say ([`machine_code`]): the eval loop's outlined part where no symbol
/// names one, and the thread-local variable of a thread's state.
fn read_code<S: crate::elf::Source>(elf: &crate::elf::Elf<S>, object: &mut Object) {
    /// Bytes of the eval loop's entry read for its jumps.
    const MAX_EVAL: u64 = 1 << 20;
    /// `.eh_frame` read at most (python3.14's is 600 KiB).
    const MAX_EH_FRAME: u64 = 32 << 20;
    /// Bytes of `PyGILState_GetThisThreadState` read.
    const GILSTATE_BYTES: u64 = 32;
    let machine = if elf.machine == crate::elf::EM_AARCH64 {
        Machine::Aarch64
    } else {
        Machine::X86_64
    };
    let s = &mut object.symbols;
    if let Some(g) = s.gilstate {
        object.gilstate_tls = elf
            .bytes_at_vaddr(g.value, GILSTATE_BYTES, GILSTATE_BYTES)
            .and_then(|code| machine_code::thread_local_offset(machine, &code, g.value));
    }
    let Some(eval) = s.eval.filter(|e| e.size != 0 && s.eval_parts.is_empty()) else {
        return;
    };
    let Some(code) = elf.bytes_at_vaddr(eval.value, eval.size, MAX_EVAL) else {
        return;
    };
    let targets = machine_code::jumps_out(machine, &code, eval.value);
    if targets.is_empty() {
        return;
    }
    let Some(eh) = elf.section(b".eh_frame") else {
        return;
    };
    let Some(bytes) = elf.data(eh, MAX_EH_FRAME) else {
        return;
    };
    let functions = crate::unwind::table::eh_frame_ranges(&bytes, eh.addr);
    let from = eval.value..eval.value.saturating_add(eval.size);
    if let Some(part) = machine_code::outlined_part(&functions, &targets, &from) {
        s.eval_parts.push(Sym {
            value: part.start,
            size: part.end - part.start,
        });
    }
}

/// Records in `out` the symbols of [`Symbols`] among ELF64 symbol entries
/// `syms` whose names are in `strs`; what is already there stays.
pub(crate) fn scan_symbols(syms: &[u8], strs: &[u8], out: &mut Symbols) {
    const EVAL: &[u8] = b"_PyEval_EvalFrameDefault";
    crate::elf::each_symbol(crate::elf::Layout::HOST, syms, strs, |s| {
        let at = s.name;
        if !matches!(at.first(), Some(b'_' | b'P' | b'i' | b'a')) {
            return;
        }
        let sym = Sym {
            value: s.value,
            size: s.size,
        };
        if !s.defined {
            if at == b"Py_BytesMain" || at == b"Py_Main" {
                out.calls_main = true;
            }
            return;
        }
        let slot = match at {
            b"_PyRuntime" => &mut out.runtime,
            b"PyCode_Type" => &mut out.code_type,
            EVAL => &mut out.eval,
            b"Py_Version" => &mut out.py_version,
            b"_thread_db_sizeof_pthread" => &mut out.sizeof_pthread,
            b"PyGILState_GetThisThreadState" => &mut out.gilstate,
            b"interp_head" => &mut out.interp_head,
            b"autoTLSkey" => &mut out.auto_tls_key,
            b"_Py_NegativeRefcount" => {
                out.debug_build = true;
                return;
            }
            _ => {
                // `_PyEval_EvalFrameDefault.cold`, `.part.0`, `.cold.1`.
                if let Some(suffix) = at.strip_prefix(EVAL).and_then(|s| s.strip_prefix(b".")) {
                    let part = suffix.starts_with(b"cold") || suffix.starts_with(b"part");
                    if part && sym.size != 0 && !out.eval_parts.contains(&sym) {
                        out.eval_parts.push(sym);
                    }
                }
                return;
            }
        };
        slot.get_or_insert(sym);
    });
}

#[cfg(test)]
#[path = "detect_tests.rs"]
mod tests;
