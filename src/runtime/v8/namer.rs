//! Naming JavaScript frames: BPF recorded, for each V8 frame, the
//! function's shared function info and what it knew of where in it the
//! frame was: a bytecode offset (interpreted), a pc offset in the code
//! (compiled), or nothing (the function alone), with the bytecode array
//! or code it read as a cookie. [`V8Namer`] reads the live process's heap
//! (the [`Registry`] says with which layout) and gives the function's
//! name, its script and a line: the bytecode's, where V8 keeps the
//! bytecode's source positions, else the line the function starts on.
//! Optimized code (TurboFan's, Maglev's) gives the pc's line and the
//! functions inlined there, each a frame of its own
//! ([`super::inlining`]).
//! Every object is checked to be of its type before it is read: what is
//! not (freed, moved, reused) names nothing.

use std::sync::Arc;

use super::heap::{Heap, LineTable};
use super::inlining::Inlined;
use super::layout::Layout;
use super::source::Positions;
use super::{Process, Registry};
use crate::collect::{Namers, Runtime, RuntimeFrame};
use crate::profile::{clean_name_within, Frame, FrameKind, SourceLine, MAX_RUNTIME_NAME};
use crate::runtime::memory::Memory;
use crate::runtime::tracker::{ProcessNamer, ReadCache, Weight};

/// What a V8 frame's identifiers say it was (the top byte of the
/// second).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Run by the interpreter: a bytecode offset; the cookie the
    /// `BytecodeArray`.
    Interpreted,
    /// Compiled (baseline, Maglev, TurboFan): a pc offset in the code's
    /// instructions; the cookie the `Code`.
    Compiled,
    /// The function alone (its code not known).
    Function,
    /// Compiled code its function does not point to (compiled on stack
    /// replacement, or replaced since): the pc itself, for user space to
    /// find the code in the function's feedback; the cookie the
    /// `JSFunction`.
    Elsewhere,
}

/// A V8 frame's identifiers as BPF writes them: `[sfi, kind << 56 |
/// offset]`, the shared function info a tagged pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameId {
    pub kind: Kind,
    pub sfi: u64,
    /// The bytecode offset (from the first bytecode), the pc offset (each
    /// 32 bits at most), the pc (56 bits at most), or 0.
    pub offset: u64,
}

impl FrameId {
    pub fn decode(ids: [u64; 2]) -> Option<FrameId> {
        let kind = match ids[1] >> 56 {
            1 => Kind::Interpreted,
            2 => Kind::Compiled,
            3 => Kind::Function,
            4 => Kind::Elsewhere,
            _ => return None,
        };
        let offset = ids[1] & ((1 << 56) - 1);
        if kind != Kind::Elsewhere && offset > u64::from(u32::MAX) {
            return None;
        }
        Some(FrameId {
            kind,
            sfi: ids[0],
            offset,
        })
    }

    pub fn encode(&self) -> [u64; 2] {
        let kind: u64 = match self.kind {
            Kind::Interpreted => 1,
            Kind::Compiled => 2,
            Kind::Function => 3,
            Kind::Elsewhere => 4,
        };
        [self.sfi, kind << 56 | (self.offset & ((1 << 56) - 1))]
    }
}

/// The bytecode offset (from the first bytecode) of an interpreted
/// frame whose bytecode offset slot holds the Smi `slot`: V8 keeps it
/// from the array's tagged address (`InterpretedFrame::GetBytecodeOffset`).
pub fn bytecode_offset(layout: &Layout, slot: i64) -> Option<u32> {
    let header = i64::from(layout.bytecode_array_data) - 1;
    u32::try_from(slot.checked_sub(header)?).ok()
}

/// What a function's shared function info says.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Function {
    name: String,
    /// Its script's name (`file://` URLs as paths); `None` for code
    /// without one (`eval`).
    file: Option<String>,
    script: Option<u64>,
    /// Where it starts in the script.
    start: Option<u32>,
}

impl Weight for Function {
    fn weight(&self) -> usize {
        self.name.len() + self.file.as_ref().map_or(0, String::len) + std::mem::size_of::<Self>()
    }
}

/// Names V8 frames of the processes in a [`Registry`].
pub struct V8Namer {
    runtime: Runtime,
    registry: Registry,
    /// By (process id, shared function info, its name-or-scope-info
    /// word).
    functions: ReadCache<Process, Function>,
    /// By (process id, script, its source's word), for a process whose
    /// start is unknown (else in [`super::lines`], shared).
    lines: ReadCache<Process, LineTable>,
    /// By (process id, bytecode array, its table's word).
    positions: ReadCache<Process, Positions>,
    /// By (process id, code, its deoptimization data's word).
    inlined: ReadCache<Process, Inlined>,
}

/// The namers of a run whose Node.js processes are in `registry`, for
/// frames of type `runtime` ([`Runtime`] has no V8 yet: the frame type
/// comes with the walk).
pub fn namers(registry: &Registry, runtime: Runtime) -> Namers {
    vec![(runtime, Box::new(V8Namer::new(registry.clone(), runtime)))]
}

impl V8Namer {
    pub fn new(registry: Registry, runtime: Runtime) -> Self {
        V8Namer {
            runtime,
            registry,
            functions: ReadCache::default(),
            lines: ReadCache::default(),
            positions: ReadCache::default(),
            inlined: ReadCache::default(),
        }
    }

    /// The function of shared function info `sfi`, read once while its
    /// name or scope info stays.
    fn function(
        &mut self,
        heap: &Heap,
        pid: u32,
        process: &Arc<Process>,
        sfi: u64,
    ) -> Option<Arc<Function>> {
        let l = &process.layout;
        if heap.instance_type(sfi) != Some(l.types.shared_function_info) {
            return None;
        }
        let key = heap.word(sfi, l.sfi_name_or_scope_info)?;
        self.functions.get_or_read((pid, sfi, key), process, || {
            Some(Function {
                name: heap.function_name(sfi)?,
                file: heap.script_name(sfi).map(|n| file_name(&n)),
                script: heap.script(sfi),
                start: heap.start_position(sfi),
            })
        })
    }

    /// The frames of optimized code `code` at frame `id`'s pc offset,
    /// outermost first: `function` (the frame's own), then each function
    /// inlined into the one before, marked inlined; `None` if the code is
    /// not optimized code of the frame's function whose tables read.
    fn optimized(
        &mut self,
        heap: &Heap,
        pid: u32,
        process: &Arc<Process>,
        function: &Arc<Function>,
        id: FrameId,
        code: u64,
    ) -> Option<Vec<Frame>> {
        let il = process.layout.source.inlining?;
        let data = heap.word(code, il.deopt_data)?;
        let inlined = self
            .inlined
            .get_or_read((pid, code, data), process, || heap.inlined(code))?;
        if inlined.shared != id.sfi {
            return None;
        }
        let sites = inlined.at(u32::try_from(id.offset).ok()?)?;
        let mut out = Vec::with_capacity(sites.len());
        for (i, site) in sites.iter().enumerate() {
            let f = match site.function {
                None => Arc::clone(function),
                Some(inner) => self.function(heap, pid, process, inner)?,
            };
            let at = site.script.or(f.start);
            let line = at.and_then(|at| self.line(heap, pid, process, &f, at));
            out.push(Frame {
                inlined: i > 0,
                ..v8_frame(&f, line, FrameKind::Jit)
            });
        }
        Some(out)
    }

    /// The positions of bytecode array `ba`, read once per table.
    fn bytecode_positions(
        &mut self,
        heap: &Heap,
        pid: u32,
        process: &Arc<Process>,
        ba: u64,
    ) -> Option<Arc<Positions>> {
        let table = heap.bytecode_table_word(ba)?;
        self.positions
            .get_or_read((pid, ba, table), process, || heap.bytecode_positions(ba))
    }

    /// The line of source position `at` in `function`'s script.
    fn line(
        &mut self,
        heap: &Heap,
        pid: u32,
        process: &Arc<Process>,
        function: &Function,
        at: u32,
    ) -> Option<u32> {
        let script = function.script?;
        let source = heap.word(script, process.layout.script_source)?;
        let read = || heap.line_table(script);
        let table = match process.started {
            // Known across collectors: read once for all of them.
            0 => self
                .lines
                .get_or_read((pid, script, source), process, read)?,
            started => super::lines::get_or_read((pid, started, script, source), read)?,
        };
        table.line(at)
    }
}

impl ProcessNamer for V8Namer {
    type Process = Process;

    fn runtime(&self) -> Runtime {
        self.runtime
    }

    fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Names `frame` of process `pid` (`process` in the registry), read
    /// through `mem`.
    fn name_in(
        &mut self,
        mem: &dyn Memory,
        pid: u32,
        process: &Arc<Process>,
        frame: &RuntimeFrame,
    ) -> Option<Vec<Frame>> {
        let id = FrameId::decode(frame.ids)?;
        let layout = &process.layout;
        let heap = Heap::new(layout, mem);
        let function = self.function(&heap, pid, process, id.sfi)?;
        let cookie = frame.cookie;
        let (line, kind) = match id.kind {
            Kind::Interpreted => {
                // BPF gives the frame's slot as it is (from the array's
                // tagged address). An array gone or an offset past it
                // (checked in BPF at the sample, the function is right)
                // leaves the function's own line.
                let t = &layout.types;
                let slot = i64::try_from(id.offset).ok()?;
                let offset = bytecode_offset(layout, slot).filter(|&offset| {
                    heap.instance_type(cookie) == Some(t.bytecode_array)
                        && heap
                            .smi_field(cookie, layout.bytecode_array_length)
                            .is_some_and(|length| i64::from(offset) < length)
                });
                let at = offset.and_then(|offset| {
                    self.bytecode_positions(&heap, pid, process, cookie)?
                        .at(offset)
                });
                let line = at.and_then(|at| self.line(&heap, pid, process, &function, at));
                (line, FrameKind::Interpreted)
            }
            Kind::Compiled => {
                let code = heap.instructions(cookie)?;
                if id.offset > code.end - code.start {
                    return None;
                }
                // Optimized code: the functions inlined at the pc, each
                // at its line; any other code, or tables that do not
                // read, leave the function alone.
                let inlined = self.optimized(&heap, pid, process, &function, id, cookie);
                if inlined.is_some() {
                    return inlined;
                }
                (None, FrameKind::Jit)
            }
            Kind::Function => (None, FrameKind::Jit),
            // The code its feedback keeps that holds the pc, named as a
            // compiled frame at its offset; else the function alone.
            Kind::Elsewhere => {
                let pc = id.offset;
                let found = (heap.shared(cookie) == Some(id.sfi))
                    .then(|| heap.feedback_code(cookie, pc))
                    .flatten()
                    .and_then(|code| Some((code, heap.instructions(code)?.start)));
                if let Some((code, start)) = found {
                    let at = FrameId {
                        kind: Kind::Compiled,
                        offset: pc - start,
                        ..id
                    };
                    let inlined = self.optimized(&heap, pid, process, &function, at, code);
                    if inlined.is_some() {
                        return inlined;
                    }
                }
                (None, FrameKind::Jit)
            }
        };
        let line = line.or_else(|| {
            let start = function.start?;
            self.line(&heap, pid, process, &function, start)
        });
        Some(vec![v8_frame(&function, line, kind)])
    }
}

/// A function's frame: its name, and its script and `line` where known.
fn v8_frame(f: &Function, line: Option<u32>, kind: FrameKind) -> Frame {
    Frame {
        source: f.file.as_ref().map(|file| {
            Box::new(SourceLine {
                file: clean_name_within(file, MAX_RUNTIME_NAME).into(),
                line,
            })
        }),
        ..Frame::named(clean_name_within(&f.name, MAX_RUNTIME_NAME), kind)
    }
}

/// A script's name as a file: an ES module's `file://` URL as its path
/// (its `%XX` escapes decoded where they make UTF-8), anything else as it
/// is (`/srv/app.js`, `node:internal/...`).
pub fn file_name(name: &str) -> String {
    let Some(path) = name.strip_prefix("file://") else {
        return name.to_string();
    };
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| path.to_string())
}

#[cfg(test)]
#[path = "namer_tests.rs"]
mod tests;
