//! Finding V8 in a process: an executable mapping of a Node.js binary
//! (`node`, `nodejs`, `node<digits>`, `libnode.so*`) whose symbols hold
//! V8's `v8dbg_*` constants, its [`Layout`], where its builtins run, and
//! (leaptiering, Node 24 on) its dispatch table.
//!
//! As for Java (src/runtime/java/detect.rs), the file is another user's:
//! opened through the paths the process maps it by and read in bounded
//! pieces ([`Symbols::read`]); what it says (its symbols, layout,
//! segments, how its code reaches the dispatch table) is kept per file
//! (device, inode). The memory is the process's: the dispatch table's
//! address is read from it each time, and checked to be readable.
//!
//! The builtins: at start-up, before any JavaScript runs, V8 copies
//! them beside the code that calls them (a second mapping of the binary,
//! at the builtins' file offset: Node 20, 22, 24 and 26 on a machine with
//! memory enough for a large heap), and from V8 12 on runs them from
//! there ([`runs_copy`]); without a copy (`--no-short-builtin-calls`, a
//! small `--max-old-space-size`) they run where the binary is loaded. A
//! process found before its copy is made is given the binary's range;
//! the copy appears when the loader next reads the process's mappings
//! (its pcs lie in no mapping known), which detects it again.

use std::collections::HashMap;
use std::io;
use std::ops::Range;
use std::sync::Arc;

use super::layout::{FunctionCode, Layout, Version};
use super::machine_code::{first_isolate_field, table_read, TableRead, MAX_CODE};
use super::process::{bpf_slots, Process};
use super::symbols::{Symbols, Variable};
use crate::elf::{file_offset, Elf, FileSource, EM_HOST};
use crate::runtime::memory::Memory;
use crate::runtime::open_mapped;
use crate::runtime::tracker::Found;
use crate::unwind::elf::{vaddr_of_offset, Segment};
use crate::unwind::procs::{Backing, ExecMapping};

/// What a process runs, as far as V8 goes: `NotReady` for a V8 whose
/// isolate or dispatch table is not set up yet; `Unsupported` says why
/// (one text per binary and reason).
pub type Detected = Found<Process>;

/// Files kept at most; past it, one is forgotten per new one.
const MAX_OBJECTS: usize = 64;

/// `e_type` of an executable not position-independent: loaded at its
/// own addresses.
const ET_EXEC: u16 = 2;

/// How a process's dispatch table is reached, as the binary's code says.
#[derive(Clone, Debug, PartialEq, Eq)]
enum DispatchAt {
    /// No leaptiering: functions point at their code.
    None,
    /// `[[group] + offset]` (V8 13).
    Group { group: u64, offset: u32 },
    /// `[[[group] + main] + offset]`: the first isolate's (V8 14).
    Isolate { group: u64, main: u32, offset: u32 },
    /// Leaptiering, but the code did not say where (why).
    Unknown(String),
}

/// What one Node.js binary says.
#[derive(Debug)]
struct NodeFile {
    version: Option<Version>,
    layout: Result<Arc<Layout>, String>,
    segments: Vec<Segment>,
    kind: u16,
    /// The builtins' code: virtual address, file offset, size.
    blob: Option<(u64, u64, u64)>,
    /// The interpreter's code, as offsets in the builtins
    /// ([`Symbols::interpreter`]).
    interpreter: Vec<Range<u32>>,
    dispatch: DispatchAt,
}

/// Finds V8 in processes.
#[derive(Debug, Default)]
pub struct Detector {
    /// By (device, inode); `None`: a file of that name without V8.
    objects: HashMap<(u64, u64), Option<Arc<NodeFile>>>,
}

/// True for a path naming a Node.js binary: `node`, `nodejs`,
/// `node<digits>` or `libnode.so*`.
pub fn is_node(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let digits = name
        .strip_prefix("node")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
    name == "node" || name == "nodejs" || digits || name.starts_with("libnode.so")
}

impl Detector {
    pub fn new() -> Self {
        Self::default()
    }

    /// Finds the V8 process `pid` runs, from its executable mappings
    /// `maps` and its memory `mem`.
    pub fn detect(&mut self, pid: u32, maps: &[ExecMapping], mem: &dyn Memory) -> Detected {
        let mut tried = Vec::new();
        for m in maps {
            let Backing::File(path) = &m.backing else {
                continue;
            };
            if !is_node(path) || tried.contains(&m.dev_ino) {
                continue;
            }
            tried.push(m.dev_ino);
            if let Some(file) = self.object(pid, m) {
                return match found(&file, m.dev_ino, maps, mem) {
                    Found::Yes(p) => Found::Yes(Process {
                        started: crate::procmaps::procfs::start_ticks(pid).unwrap_or(0),
                        ..p
                    }),
                    other => other,
                };
            }
        }
        Found::No
    }

    /// What the file mapped at `m` says, read once; `None` when it has no
    /// V8 (or cannot be read now).
    fn object(&mut self, pid: u32, m: &ExecMapping) -> Option<Arc<NodeFile>> {
        if let Some(known) = self.objects.get(&m.dev_ino) {
            return known.clone();
        }
        // Gone: not remembered, the next process may read it.
        let file = open_mapped(pid, m)?;
        let read = read_node(&file).map(Arc::new);
        if self.objects.len() >= MAX_OBJECTS {
            if let Some(old) = self.objects.keys().next().copied() {
                self.objects.remove(&old);
            }
        }
        self.objects.insert(m.dev_ino, read.clone());
        read
    }
}

/// What the binary `file` says of its V8; `None` unless it is an ELF file
/// of this machine with V8's constants.
fn read_node(file: &std::fs::File) -> Option<NodeFile> {
    let symbols = Symbols::read(file)?;
    if symbols.dbg.is_empty() || symbols.machine != EM_HOST {
        return None;
    }
    let elf = Elf::parse(FileSource::new(file)?)?;
    let version = symbols.version.map(|[major, minor, build, patch]| Version {
        major,
        minor,
        build,
        patch,
    });
    let layout = Layout::from_symbols(&symbols).map(Arc::new);
    let blob = symbols
        .blob_code
        .and_then(|b| Some((b.addr, file_offset(elf.loads(), b.addr)?, b.size)));
    let interpreter = symbols
        .blob_code
        .map(|b| {
            let offset = |a: u64| u32::try_from(a.checked_sub(b.addr)?).ok();
            symbols
                .interpreter
                .iter()
                .filter_map(|r| Some(offset(r.start)?..offset(r.end)?))
                .collect()
        })
        .unwrap_or_default();
    let code = |v: Variable| {
        elf.bytes_at_vaddr(v.addr, v.size.min(MAX_CODE), MAX_CODE)
            .map(|b| b.into_owned())
    };
    let dispatch = match &layout {
        Ok(l) if matches!(l.function_code, FunctionCode::DispatchHandle { .. }) => {
            dispatch_at(&symbols, code)
        }
        _ => DispatchAt::None,
    };
    Some(NodeFile {
        version,
        layout,
        segments: elf.loads().map(Into::into).collect(),
        kind: elf.kind,
        blob,
        interpreter,
        dispatch,
    })
}

/// How the code of the binary whose symbols are `s` (its bytes read by
/// `code`) reaches its dispatch table.
fn dispatch_at(s: &Symbols, code: impl Fn(Variable) -> Option<Vec<u8>>) -> DispatchAt {
    let Some(group) = s.isolate_group else {
        return DispatchAt::Unknown("no IsolateGroup::default_isolate_group_ symbol".into());
    };
    let Some((f, takes_isolate)) = s.dispatch_table_address else {
        return DispatchAt::Unknown("no ExternalReference::js_dispatch_table_address".into());
    };
    let read = code(f).and_then(|c| table_read(s.machine, &c, f.addr, group.addr));
    match (read, takes_isolate) {
        (Some(TableRead::Group { offset }), false) => DispatchAt::Group {
            group: group.addr,
            offset,
        },
        (Some(TableRead::Isolate { offset }), true) => {
            let main = s
                .add_isolate
                .and_then(&code)
                .and_then(|c| first_isolate_field(s.machine, &c));
            match main {
                Some(main) => DispatchAt::Isolate {
                    group: group.addr,
                    main,
                    offset,
                },
                None => DispatchAt::Unknown(
                    "IsolateGroup::AddIsolate's code does not say where the first isolate is"
                        .into(),
                ),
            }
        }
        _ => DispatchAt::Unknown(
            "js_dispatch_table_address's code is not a form flare decodes".into(),
        ),
    }
}

/// Whether V8 `v` runs its builtins from its copy of them, when it made
/// one. In a live Node 22.23.5, 24.22.3 and 26.12.1 (V8 12.4, 13.6,
/// 14.6) the builtin Code objects' instructions and the return addresses
/// on the stack of interpreted and TurboFan frames lie in the copy; in
/// Node 20.20.2 (V8 11.3) both lie in the binary's own, none in the copy
/// V8 made all the same. (V8 12's `EmbeddedData` says calls from wasm
/// may still run the binary's own: [`Process::blobs`] keeps both.)
fn runs_copy(v: Version) -> bool {
    v.major >= 12
}

/// `why`, said of the Node.js whose V8 is `version` (`why` may start with
/// the version itself, as the layout's reasons do).
fn unsupported(version: Option<Version>, why: &str) -> Detected {
    Found::Unsupported(match version {
        Some(v) => {
            let why = why.strip_prefix(&format!("{v}: ")).unwrap_or(why);
            format!("Node.js ({v}): {why}")
        }
        None => format!("Node.js: {why}"),
    })
}

/// The process of `file` (device and inode `dev_ino`), from its mappings
/// and memory.
fn found(file: &NodeFile, dev_ino: (u64, u64), maps: &[ExecMapping], mem: &dyn Memory) -> Detected {
    let v = file.version;
    let layout = match &file.layout {
        Ok(l) => Arc::clone(l),
        Err(why) => return unsupported(v, why),
    };
    let slots = match bpf_slots(&layout.frame) {
        Ok(s) => s,
        Err(why) => return unsupported(v, &why),
    };
    let Some((blob_vaddr, blob_offset, size)) = file.blob else {
        return unsupported(
            v,
            "no v8_Default_embedded_blob_code_ symbol (a binary without .symtab): its builtins cannot be told apart",
        );
    };
    let mine: Vec<&ExecMapping> = maps.iter().filter(|m| m.dev_ino == dev_ino).collect();
    let bias_of = |m: &ExecMapping| {
        vaddr_of_offset(&file.segments, m.offset).map(|va| m.start.wrapping_sub(va))
    };
    // File offsets: where a mapping ends, where the builtins end.
    let end = |m: &ExecMapping| m.offset.saturating_add(m.end.saturating_sub(m.start));
    let blob_end = blob_offset.saturating_add(size);
    let pages = blob_offset & !0xfff..blob_end.saturating_add(0xfff) & !0xfff;
    let only_blob = |m: &ExecMapping| pages.start <= m.offset && end(m) <= pages.end;
    // The loader's bias: none for an executable at its own addresses,
    // else that of a mapping holding more than the builtins.
    let bias = if file.kind == ET_EXEC {
        Some(0)
    } else {
        mine.iter().find(|m| !only_blob(m)).and_then(|m| bias_of(m))
    };
    let Some(bias) = bias else {
        return Found::NotReady;
    };
    let mut blobs: Vec<(Range<u64>, bool)> = mine
        .iter()
        .filter(|m| m.offset <= blob_offset && blob_end <= end(m))
        .map(|m| {
            let start = m.start.saturating_add(blob_offset - m.offset);
            (start..start.saturating_add(size), bias_of(m) != Some(bias))
        })
        .collect();
    // The binary's own first; the walk's is V8's copy where V8 runs it.
    blobs.sort_by_key(|(r, copy)| (*copy, r.start));
    let own = blob_vaddr.wrapping_add(bias);
    let walked = blobs
        .iter()
        .find(|(_, copy)| *copy && runs_copy(layout.version))
        .or_else(|| blobs.iter().find(|(r, _)| r.start == own));
    let Some(blob) = walked.map(|(r, _)| r.clone()) else {
        return Found::NotReady;
    };
    let dispatch = match dispatch_table(&file.dispatch, bias, mem) {
        Ok(Some(table)) => table,
        Ok(None) => return Found::NotReady,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return unsupported(v, &format!("its memory cannot be read ({e})"))
        }
        Err(_) => return Found::NotReady,
    };
    Found::Yes(Process {
        layout,
        blob,
        blobs: blobs.into_iter().map(|(r, _)| r).collect(),
        dispatch,
        slots,
        interpreter: file.interpreter.clone(),
        started: 0,
    })
}

/// The process's dispatch table (0: none, or not found from the code);
/// `None` while it is not set up. An error reading the isolate group: the
/// process is gone or starting, unless flare may not read it.
fn dispatch_table(at: &DispatchAt, bias: u64, mem: &dyn Memory) -> io::Result<Option<u64>> {
    let (group, rest) = match *at {
        DispatchAt::None | DispatchAt::Unknown(_) => return Ok(Some(0)),
        DispatchAt::Group { group, offset } => (group, (None, offset)),
        DispatchAt::Isolate {
            group,
            main,
            offset,
        } => (group, (Some(main), offset)),
    };
    let group = mem.read_u64(group.wrapping_add(bias))?;
    if group == 0 {
        return Ok(None);
    }
    // Past the group, a read that fails is an offset that is wrong: no
    // table rather than waiting for one.
    let word = |at: u64, offset: u32| mem.read_u64(at.checked_add(u64::from(offset))?).ok();
    let holder = match rest.0 {
        None => Some(group),
        Some(main) => match word(group, main) {
            Some(0) => return Ok(None),
            isolate => isolate,
        },
    };
    let table = match holder.and_then(|h| word(h, rest.1)) {
        Some(0) => return Ok(None),
        Some(table) => table,
        None => return Ok(Some(0)),
    };
    let mut entry = [0u8; 16];
    Ok(Some(if mem.read(table, &mut entry).is_ok() {
        table
    } else {
        0
    }))
}

#[cfg(test)]
#[path = "detect_tests.rs"]
mod tests;
