//! Turns raw stack addresses into named frames, through blazesym.
//!
//! Tools hand over all their samples at once ([`RawSample`]). Kernel
//! addresses are resolved in one batch. A process's user addresses are
//! first normalized — each to the object it lies in and its offset in that
//! file, through the process's mappings as recorded while it lived
//! ([`crate::procmaps`]) — and then named per object by file offset, in one
//! batch per object, cached per object across processes and batches: libc
//! is parsed once however many processes use it, and a process that has
//! exited is named like a live one. Addresses in no file are looked up in
//! the process's JIT map (`/tmp/perf-PID.map`). One [`Symbolizer`] is kept
//! for a run so that parsed ELF/DWARF files are reused across batches
//! (and, for live views, across intervals).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use blazesym::symbolize::source::{Kernel, Source};
use blazesym::symbolize::{CodeInfo, Input, Symbolized};
use blazesym::MaybeDefault;

use crate::collect::{RawFrame, RawSample, RawTask, RawTrace};
use crate::procmaps::{Mappings, Object};
use crate::profile::{clean_name, Frame, FrameKind, Sample, SourceLine, TaskStack, Trace};

mod background;
mod debug;
mod elf;
mod kallsyms;
mod ksyms;
mod objects;
mod plt;
pub mod runtime;
mod symtab;

pub use background::Background;

/// What to ask of the symbolizer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Report functions inlined at an address as frames of their own.
    pub inlined: bool,
    /// Look up source file and line.
    pub code_info: bool,
}

/// Resolved frames of one address: the function, then (with inlining) the
/// functions inlined into it, innermost last.
type Resolved = Vec<Frame>;

/// A symbolizer that lives for a whole run.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    options: Options,
    mappings: Mappings,
    kernel_cache: HashMap<u64, Resolved>,
    objects: objects::ObjectCache,
    /// The vDSO as an object, made when first met (`None` inside: it
    /// could not be).
    vdso: Option<Option<Arc<Object>>>,
    /// This boot's copy of the kernel's lasting symbols (`None` inside:
    /// there is none), and when it was looked for: a run without end
    /// (the agent) looks again, as modules come and go.
    kallsyms: Option<(Option<kallsyms::Copy>, Instant)>,
    /// That copy's functions, indexed ([`ksyms::Table`]), by its path.
    ksyms: Option<(std::path::PathBuf, Arc<ksyms::Table>)>,
    /// The transient functions read last, with the BPF programs loaded
    /// then ([`kallsyms::bpf_programs`]): read again when those change.
    transient: Option<(Vec<u32>, kallsyms::Transient)>,
    /// Runtime frames' namers and what they named (shared with a thread
    /// that learns while the symbolizer warms up: [`background`]).
    runtimes: runtime::Shared,
}

/// How long a look for the kernel symbols' copy holds: past it, the
/// module list is read again (a module loaded at a freed module's address
/// must not take its names from the old copy).
const KALLSYMS_RECHECK: Duration = Duration::from_secs(1);

/// The frames of a symbolized address (`None` when it was not found).
pub(crate) fn convert(
    addr: u64,
    sym: Symbolized<'_>,
    kind: FrameKind,
    options: Options,
) -> Option<Resolved> {
    let sym = sym.into_sym().filter(|s| !is_mapping_symbol(&s.name))?;
    let location = |c: Option<&CodeInfo<'_>>| {
        c.map(|c| {
            Box::new(SourceLine {
                file: c.to_path().display().to_string().into(),
                line: c.line,
            })
        })
    };
    let source = location(sym.code_info.as_deref());
    let mut frames = vec![Frame {
        addr,
        source: source.clone(),
        offset: u32::try_from(sym.offset).unwrap_or(u32::MAX),
        ..Frame::named(clean_name(&sym.name), kind)
    }];
    if options.inlined {
        for f in sym.inlined.iter() {
            // An inlined function's location is the call site, which
            // lies in the frame that made the call.
            if f.code_info.is_some() {
                if let Some(caller) = frames.last_mut() {
                    caller.source = location(f.code_info.as_ref());
                }
            }
            frames.push(Frame {
                addr,
                source: source.clone(),
                inlined: true,
                ..Frame::named(clean_name(&f.name), kind)
            });
        }
    }
    Some(frames)
}

/// True for an Arm ELF mapping symbol (`$x`, `$d`, `$a`, `$t`, perhaps
/// with a `.suffix`): a marker where code or data begins, which arm64
/// objects keep in `.symtab` and blazesym takes for a function when no
/// function symbol is nearer (in the PLT, in start-up code). Such an
/// address is unnamed, not in a function called `$x`.
fn is_mapping_symbol(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next() == Some('$')
        && matches!(chars.next(), Some('x' | 'd' | 'a' | 't'))
        && matches!(chars.next(), None | Some('.'))
}

impl Symbolizer {
    /// A symbolizer that reads processes' mappings from `/proc` when it
    /// needs them (and remembers them for processes that exit later).
    pub fn new(options: Options) -> Self {
        Self::with_mappings(options, Mappings::on_demand())
    }

    /// A symbolizer that takes processes' mappings from `mappings`, e.g.
    /// a [`crate::procmaps::Tracker`]'s, which knows processes that exited.
    pub fn with_mappings(options: Options, mappings: Mappings) -> Self {
        let inner = blazesym::symbolize::Symbolizer::builder()
            .enable_code_info(options.code_info)
            .enable_inlined_fns(options.inlined)
            .enable_auto_reload(true)
            .build();
        Symbolizer {
            inner,
            options,
            mappings,
            kernel_cache: HashMap::new(),
            transient: None,
            objects: objects::ObjectCache::default(),
            vdso: None,
            kallsyms: None,
            ksyms: None,
            runtimes: runtime::Shared::default(),
        }
    }

    /// Names runtime frames with `namers` (a collector's).
    pub fn set_namers(&mut self, namers: crate::collect::Namers) {
        runtime::lock(&self.runtimes).set(namers);
    }

    /// Names runtime frames with `shared`'s namers, keeping what they
    /// name there (for a thread that learns names beside this one).
    pub fn share_runtimes(&mut self, shared: runtime::Shared) {
        self.runtimes = shared;
    }

    /// Resolves kernel addresses, caching results for the run: those of
    /// the core kernel and its modules from this boot's copy of their
    /// symbols, the rest (BPF programs, trampolines) from `/proc/kallsyms`
    /// as it reads now (without a copy, everything from there).
    fn resolve_kernel(&mut self, addrs: &BTreeSet<u64>) -> HashMap<u64, Resolved> {
        let missing: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.kernel_cache.contains_key(a))
            .collect();
        if missing.is_empty() {
            // Nothing to read.
        } else if let Some(copy) = self.kallsyms() {
            let path = copy.path.clone();
            let (copied, rest): (Vec<u64>, Vec<u64>) =
                missing.into_iter().partition(|&a| copy.covers(a));
            self.name_copied(copied, path);
            // The rest is read apart from /proc/kallsyms (its few
            // transient functions), not through a second whole parse.
            if !rest.is_empty() {
                let syms = self.transient();
                for a in rest {
                    let frames = match kallsyms::find(&syms, a) {
                        Some((start, name)) => vec![Frame {
                            addr: a,
                            offset: offset_into(a, *start),
                            ..Frame::named(name.clone(), FrameKind::Kernel)
                        }],
                        None => vec![Frame::unknown(a, FrameKind::Kernel)],
                    };
                    self.kernel_cache.insert(a, frames);
                }
            }
        } else {
            self.name_kernel(missing, MaybeDefault::Default);
        }
        addrs
            .iter()
            .map(|a| (*a, self.kernel_cache[a].clone()))
            .collect()
    }

    /// The transient functions (BPF programs, trampolines) as
    /// /proc/kallsyms lists them now: read again only when the BPF
    /// programs loaded changed, or when they cannot be listed.
    fn transient(&mut self) -> kallsyms::Transient {
        let programs = kallsyms::bpf_programs();
        if let (Some(now), Some((then, syms))) = (&programs, &self.transient) {
            if now == then {
                return Arc::clone(syms);
            }
        }
        let syms: kallsyms::Transient =
            kallsyms::transient(std::path::Path::new("/proc/kallsyms")).into();
        self.transient = programs.map(|p| (p, Arc::clone(&syms)));
        syms
    }

    /// Names kernel addresses that this boot's copy at `path` covers, into
    /// the cache: through flare's index of it, shared by the process's
    /// symbolizers; through blazesym if it cannot be indexed.
    fn name_copied(&mut self, copied: Vec<u64>, path: std::path::PathBuf) {
        if copied.is_empty() {
            return;
        }
        if self.ksyms.as_ref().is_none_or(|(p, _)| *p != path) {
            self.ksyms = ksyms::Table::shared(&path).map(|t| (path.clone(), t));
        }
        let Some((_, table)) = &self.ksyms else {
            self.name_kernel(copied, MaybeDefault::Some(path));
            return;
        };
        for a in copied {
            let frame = table
                .find(a)
                .and_then(|(start, name)| {
                    symbol_frame(a, offset_into(a, start), &name, FrameKind::Kernel)
                })
                .unwrap_or_else(|| Frame::unknown(a, FrameKind::Kernel));
            self.kernel_cache.insert(a, vec![frame]);
        }
    }

    /// Names kernel addresses through blazesym from the kallsyms at
    /// `kallsyms`, into the cache.
    fn name_kernel(&mut self, missing: Vec<u64>, kallsyms: MaybeDefault<std::path::PathBuf>) {
        if missing.is_empty() {
            return;
        }
        let src = Source::Kernel(Kernel {
            kallsyms,
            vmlinux: MaybeDefault::None,
            kaslr_offset: None,
            debug_syms: false,
            ..Default::default()
        });
        let resolved: Vec<Resolved> = match self.inner.symbolize(&src, Input::AbsAddr(&missing)) {
            Ok(syms) => missing
                .iter()
                .zip(syms)
                .map(|(&a, s)| {
                    convert(a, s, FrameKind::Kernel, self.options)
                        .unwrap_or_else(|| vec![Frame::unknown(a, FrameKind::Kernel)])
                })
                .collect(),
            Err(_) => missing
                .iter()
                .map(|&a| vec![Frame::unknown(a, FrameKind::Kernel)])
                .collect(),
        };
        self.kernel_cache.extend(missing.into_iter().zip(resolved));
    }

    /// Resolves one process's user addresses: normalized through its
    /// mappings (those of the process with `pid` that started at `start`)
    /// to (object, file offset), named per object.
    fn resolve_user(
        &mut self,
        pid: u32,
        start: u64,
        addrs: &BTreeSet<u64>,
    ) -> HashMap<u64, Resolved> {
        let space = self.mappings.process_space(pid, start).unwrap_or_default();
        let mut by_object: HashMap<u64, (Arc<Object>, BTreeSet<u64>)> = HashMap::new();
        // Address -> (object id, file offset), or None: in no file.
        let mut placed: Vec<(u64, Option<(u64, u64)>)> = Vec::with_capacity(addrs.len());
        for &a in addrs {
            let at = space.find(a).and_then(|m| match m.object() {
                Some(o) => Some((o.clone(), m.file_offset(a))),
                // The vDSO image is linked at address 0 and mapped whole.
                None if m.name() == "[vdso]" => Some((self.vdso()?, a - m.start)),
                None => None,
            });
            match at {
                Some((o, off)) => {
                    by_object
                        .entry(o.id())
                        .or_insert_with(|| (o.clone(), BTreeSet::new()))
                        .1
                        .insert(off);
                    placed.push((a, Some((o.id(), off))));
                }
                None => placed.push((a, None)),
            }
        }
        let named: HashMap<u64, HashMap<u64, Resolved>> = by_object
            .into_iter()
            .map(|(id, (o, offs))| {
                let r = self.objects.resolve(&self.inner, self.options, &o, &offs);
                (id, r)
            })
            .collect();
        let perf_map = placed
            .iter()
            .any(|(_, p)| p.is_none())
            .then(|| self.mappings.perf_map(pid))
            .flatten();
        placed
            .into_iter()
            .map(|(a, p)| {
                let r = match p.and_then(|(id, off)| named.get(&id)?.get(&off)) {
                    Some(r) => r
                        .iter()
                        .map(|f| Frame {
                            addr: a,
                            ..f.clone()
                        })
                        .collect(),
                    None => match perf_map.as_ref().and_then(|m| m.find(a)) {
                        Some((start, name)) => vec![Frame {
                            addr: a,
                            offset: offset_into(a, start),
                            ..Frame::named(name.clone(), FrameKind::Jit)
                        }],
                        None => vec![Frame::unknown(a, FrameKind::Native)],
                    },
                };
                (a, r)
            })
            .collect()
    }

    /// This boot's copy of the kernel's symbols, if there is one.
    fn kallsyms(&mut self) -> Option<&kallsyms::Copy> {
        if self
            .kallsyms
            .as_ref()
            .is_none_or(|(_, at)| at.elapsed() > KALLSYMS_RECHECK)
        {
            self.kallsyms = Some((kallsyms::Copy::for_this_boot(), Instant::now()));
        }
        self.kallsyms.as_ref().and_then(|(c, _)| c.as_ref())
    }

    /// The vDSO as an object.
    fn vdso(&mut self) -> Option<Arc<Object>> {
        self.vdso
            .get_or_insert_with(|| Object::vdso().map(Arc::new))
            .clone()
    }

    /// Loads what later lookups will need: the kernel's symbols and, for
    /// each of `pids`, the symbols of every mapped object. Called while a
    /// profile is still being collected, it takes this work off the path
    /// from stop to output.
    pub fn warm(&mut self, kernel: bool, pids: &[u32]) {
        if kernel {
            // Any kernel address makes blazesym parse the symbols that
            // name it: an address in the core text, the copy's (or, with
            // no copy, /proc/kallsyms); BPF programs' names are read when
            // a stack holds one.
            let probe = self
                .kallsyms()
                .and_then(|c| c.covers.first().map(|r| r.start))
                .unwrap_or(!0xffff_u64);
            let _ = self.resolve_kernel(&BTreeSet::from([probe]));
        }
        for &pid in pids {
            let Some(space) = self.mappings.space(pid, None) else {
                continue;
            };
            for m in &space.mappings {
                if let Some(o) = m.object() {
                    self.objects.warm(&self.inner, self.options, o, m.offset);
                }
            }
        }
    }

    /// Names the runtime frames of `raw` not named yet, by their
    /// runtimes' namers, while their processes may still live: what is
    /// named here is kept for [`Symbolizer::resolve`], after the process
    /// is gone.
    pub fn learn(&mut self, raw: &[RawSample]) {
        runtime::lock(&self.runtimes).learn_samples(raw);
    }

    /// Symbolizes every sample: one kernel batch, one batch per process
    /// (a PID and a start: processes that had one PID in turn are apart),
    /// runtime frames by their runtime's namer, labels as they are.
    pub fn resolve(&mut self, raw: Vec<RawSample>) -> Vec<Sample> {
        self.learn(&raw);
        let mut kernel = BTreeSet::new();
        let mut user: HashMap<(u32, u64), BTreeSet<u64>> = HashMap::new();
        let mut collect = |t: &RawTask| {
            kernel.extend(lookups(&t.kernel, &|_| false));
            if let Some(pid) = t.pid {
                user.entry((pid, t.start))
                    .or_default()
                    .extend(lookups(&t.user, &|_| false));
            }
        };
        for s in &raw {
            collect(&s.task);
            if let Some(w) = &s.waker {
                collect(w);
            }
        }
        let mut kernel = self.resolve_kernel(&kernel);
        // Below an interrupt's entry lies the interrupted instruction itself:
        // looked up again exactly, now that the entries are named.
        let names_entry = |r: &Resolved| r.first().is_some_and(|f| is_interrupt_entry(&f.name));
        if kernel.values().any(names_entry) {
            let first = &kernel;
            let entry = |l: u64| first.get(&l).is_some_and(names_entry);
            let exact: BTreeSet<u64> = raw
                .iter()
                .flat_map(|s| std::iter::once(&s.task).chain(&s.waker))
                .flat_map(|t| lookups(&t.kernel, &entry).collect::<Vec<_>>())
                .filter(|l| !first.contains_key(l))
                .collect();
            kernel.extend(self.resolve_kernel(&exact));
        }
        let after_entry = |l: u64| kernel.get(&l).is_some_and(names_entry);
        // Mapping records still in the kernel's buffers count too.
        self.mappings.sync();
        let user: HashMap<(u32, u64), HashMap<u64, Resolved>> = user
            .iter()
            .map(|(&(pid, start), addrs)| ((pid, start), self.resolve_user(pid, start, addrs)))
            .collect();
        let empty = HashMap::new();
        let runtimes = runtime::lock(&self.runtimes);
        let build = |t: RawTask| -> TaskStack {
            let ures = t
                .pid
                .and_then(|p| user.get(&(p, t.start)))
                .unwrap_or(&empty);
            let named = |f: &crate::collect::RuntimeFrame| runtimes.get(t.pid, t.start, f);
            TaskStack {
                pid: t.pid,
                tid: t.tid,
                comm: t.comm.into(),
                user: rebuild(t.user, ures, &named, FrameKind::Native, &|_| false),
                kernel: rebuild(t.kernel, &kernel, &named, FrameKind::Kernel, &after_entry),
            }
        };
        raw.into_iter()
            .map(|s| Sample::new(build(s.task), s.waker.map(build), s.value))
            .collect()
    }
}

/// The frame at `addr`, `offset` bytes into the symbol named `name`
/// that flare's own indexes found, as [`convert`] makes blazesym's: none
/// for an Arm mapping symbol.
fn symbol_frame(addr: u64, offset: u32, name: &str, kind: FrameKind) -> Option<Frame> {
    (!is_mapping_symbol(name)).then(|| Frame {
        addr,
        offset,
        ..Frame::named(clean_name(name), kind)
    })
}

/// The offset of `addr` into a function that starts at `start`.
fn offset_into(addr: u64, start: u64) -> u32 {
    u32::try_from(addr.saturating_sub(start)).unwrap_or(u32::MAX)
}

/// The addresses to look up for the native frames of a leaf-first stack,
/// with the address each was read as. Callers hold return addresses,
/// which may point past the end of the calling function (after a call to
/// a function that does not return); they are looked up one byte
/// earlier, as perf does. The leaf, the first frame that is not a label,
/// is an exact instruction pointer, and so is the frame below one whose
/// lookup `entry` tells is an interrupt's entry (the interrupted
/// instruction: at a function's first byte, one byte earlier would name
/// the function before it).
fn native<'a>(
    trace: &'a RawTrace,
    entry: &'a dyn Fn(u64) -> bool,
) -> impl Iterator<Item = (u64, u64)> + 'a {
    let mut exact_next = true;
    trace.frames().iter().filter_map(move |f| match f {
        RawFrame::Label(_) => None,
        RawFrame::Runtime(_) => {
            exact_next = false;
            None
        }
        &RawFrame::Addr(a) => {
            let lookup = if exact_next { a } else { a.wrapping_sub(1) };
            exact_next = entry(lookup);
            Some((a, lookup))
        }
    })
}

/// The addresses to look up for a stack's native frames.
fn lookups<'a>(
    trace: &'a RawTrace,
    entry: &'a dyn Fn(u64) -> bool,
) -> impl Iterator<Item = u64> + 'a {
    native(trace, entry).map(|(_, lookup)| lookup)
}

/// True for the kernel's entries from interrupts and exceptions, below
/// which a stack goes on at the interrupted instruction: x86-64's
/// `asm_sysvec_*`/`asm_exc_*`/`asm_common_interrupt` (and FRED's), and
/// arm64's vectors (`el1h_64_irq` since 5.15, `el1_irq` before).
fn is_interrupt_entry(name: &str) -> bool {
    const X86_PREFIXES: [&str; 5] = [
        "asm_sysvec_",
        "asm_exc_",
        "asm_common_interrupt",
        "asm_spurious_interrupt",
        "asm_fred_",
    ];
    const ARM64: [&str; 8] = [
        "el1h_64_sync",
        "el1h_64_irq",
        "el1h_64_fiq",
        "el1h_64_error",
        "el1_sync",
        "el1_irq",
        "el1_fiq",
        "el1_error",
    ];
    X86_PREFIXES.iter().any(|p| name.starts_with(p)) || ARM64.contains(&name)
}

fn rebuild(
    trace: RawTrace,
    resolved: &HashMap<u64, Resolved>,
    runtime: &dyn Fn(&crate::collect::RuntimeFrame) -> Resolved,
    kind: FrameKind,
    entry: &dyn Fn(u64) -> bool,
) -> Trace {
    let frames = match &trace {
        RawTrace::NotCollected => return Trace::NotCollected,
        &RawTrace::Missed { enomem } => return Trace::Missed { enomem },
        RawTrace::Frames(f) => f,
    };
    let mut addrs = native(&trace, entry);
    let mut out = Vec::with_capacity(frames.len());
    for f in frames.iter() {
        match f {
            RawFrame::Label(name) => out.push(Frame::named(name.as_str(), FrameKind::Label)),
            // Leaf first: the innermost inlined function comes first.
            RawFrame::Runtime(r) => out.extend(runtime(r).into_iter().rev()),
            RawFrame::Addr(_) => {
                let Some((a, lookup)) = addrs.next() else {
                    continue;
                };
                match resolved.get(&lookup) {
                    Some(r) => out.extend(r.iter().rev().map(|f| {
                        // The offsets of `a` itself, not of the address
                        // looked up (one byte earlier for callers).
                        let back = a.wrapping_sub(lookup);
                        Frame {
                            addr: a,
                            file_offset: match f.file_offset {
                                0 => 0,
                                off => off + back,
                            },
                            offset: match f.inlined {
                                true => 0,
                                false => f.offset.saturating_add(back as u32),
                            },
                            ..f.clone()
                        }
                    })),
                    None => out.push(Frame::unknown(a, kind)),
                }
            }
        }
    }
    Trace::of(out)
}

#[cfg(test)]
mod tests;
