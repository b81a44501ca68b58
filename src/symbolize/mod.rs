//! Turns raw stack addresses into named frames, through blazesym.
//!
//! Tools hand over all their samples at once ([`RawSample`]); addresses are
//! resolved in one batch per process and one for the kernel, then each
//! sample is rebuilt with frames. One [`Symbolizer`] is kept for a run so
//! that parsed ELF/DWARF files are reused across batches (and, for live
//! views, across intervals).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use blazesym::symbolize::source::{Kernel, Process, Source};
use blazesym::symbolize::{CodeInfo, Input, Symbolized};
use blazesym::{MaybeDefault, Pid};

use crate::profile::{Frame, FrameKind, Sample, SourceLine, TaskStack, Trace};

mod background;

pub use background::Background;
mod cache;

/// A stack as the kernel handed it over.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RawTrace {
    /// Not asked for.
    NotCollected,
    /// Could not be stored; `enomem` when the stack map was full.
    Missed { enomem: bool },
    /// Instruction pointers, leaf first (empty: no such stack). Shared:
    /// many keys point at one stack.
    Addrs(Arc<[u64]>),
}

/// A task with unresolved stacks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RawTask {
    /// The process, `None` for stacks of all processes counted together.
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub comm: String,
    pub user: RawTrace,
    pub kernel: RawTrace,
}

/// A sample with unresolved stacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawSample {
    pub task: RawTask,
    pub waker: Option<RawTask>,
    pub value: u64,
}

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
    kernel_cache: HashMap<u64, Resolved>,
    user_cache: cache::UserCache<Resolved>,
}

impl Symbolizer {
    pub fn new(options: Options) -> Self {
        let inner = blazesym::symbolize::Symbolizer::builder()
            .enable_code_info(options.code_info)
            .enable_inlined_fns(options.inlined)
            .enable_auto_reload(true)
            .build();
        Symbolizer {
            inner,
            options,
            kernel_cache: HashMap::new(),
            user_cache: cache::UserCache::new(),
        }
    }

    fn convert(&self, addr: u64, sym: Symbolized<'_>, kind: FrameKind) -> Resolved {
        let Some(sym) = sym.into_sym() else {
            return vec![Frame::unknown(addr, kind)];
        };
        let module: Option<Arc<str>> = sym.module.as_ref().map(|m| m.to_string_lossy().into());
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
            name: sym.name.as_ref().into(),
            kind,
            addr,
            module: module.clone(),
            source: source.clone(),
            inlined: false,
        }];
        if self.options.inlined {
            for f in sym.inlined.iter() {
                // An inlined function's location is the call site, which
                // lies in the frame that made the call.
                if f.code_info.is_some() {
                    if let Some(caller) = frames.last_mut() {
                        caller.source = location(f.code_info.as_ref());
                    }
                }
                frames.push(Frame {
                    name: f.name.as_ref().into(),
                    kind,
                    addr,
                    module: module.clone(),
                    source: source.clone(),
                    inlined: true,
                });
            }
        }
        frames
    }

    /// Resolves kernel addresses, caching results for the run.
    fn resolve_kernel(&mut self, addrs: &BTreeSet<u64>) -> HashMap<u64, Resolved> {
        let missing: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.kernel_cache.contains_key(a))
            .collect();
        if !missing.is_empty() {
            let src = Source::Kernel(Kernel {
                kallsyms: MaybeDefault::Default,
                vmlinux: MaybeDefault::None,
                kaslr_offset: None,
                debug_syms: false,
                ..Default::default()
            });
            let results = self.inner.symbolize(&src, Input::AbsAddr(&missing));
            let resolved: Vec<Resolved> = match results {
                Ok(syms) => missing
                    .iter()
                    .zip(syms)
                    .map(|(&a, s)| self.convert(a, s, FrameKind::Kernel))
                    .collect(),
                Err(_) => missing
                    .iter()
                    .map(|&a| vec![Frame::unknown(a, FrameKind::Kernel)])
                    .collect(),
            };
            self.kernel_cache.extend(missing.into_iter().zip(resolved));
        }
        addrs
            .iter()
            .map(|a| (*a, self.kernel_cache[a].clone()))
            .collect()
    }

    /// Resolves one process's user addresses, from the cache where the
    /// process is known. A process that has exited (or cannot be read)
    /// yields `[unknown]` frames for addresses not seen before.
    fn resolve_user(&mut self, pid: u32, addrs: &BTreeSet<u64>) -> HashMap<u64, Resolved> {
        self.user_cache.validate(pid, cache::Identity::of(pid));
        let missing: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|&a| self.user_cache.get(pid, a).is_none())
            .collect();
        let mut out = HashMap::with_capacity(addrs.len());
        if !missing.is_empty() {
            let mut process = Process::new(Pid::from(pid));
            process.debug_syms = self.options.code_info || self.options.inlined;
            let src = Source::Process(process);
            match self.inner.symbolize(&src, Input::AbsAddr(&missing)) {
                Ok(syms) => {
                    for (&a, s) in missing.iter().zip(syms) {
                        let r = self.convert(a, s, FrameKind::User);
                        self.user_cache.insert(pid, a, r.clone());
                        out.insert(a, r);
                    }
                }
                // Not cached: the process may be readable next time.
                Err(_) => out.extend(
                    missing
                        .iter()
                        .map(|&a| (a, vec![Frame::unknown(a, FrameKind::User)])),
                ),
            }
        }
        for &a in addrs {
            if let Some(r) = self.user_cache.get(pid, a) {
                out.entry(a).or_insert_with(|| r.clone());
            }
        }
        out
    }

    /// Loads what later lookups will need: the kernel's symbols and, for
    /// each of `pids`, the symbols of every executable mapping. Called while
    /// a profile is still being collected, it takes this work off the path
    /// from stop to output.
    pub fn warm(&mut self, kernel: bool, pids: &[u32]) {
        if kernel {
            // Any kernel address makes blazesym parse kallsyms.
            let _ = self.resolve_kernel(&BTreeSet::from([!0xffff_u64]));
        }
        for &pid in pids {
            let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
                continue;
            };
            let starts: BTreeSet<u64> = maps
                .lines()
                .filter(|l| l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
                .filter_map(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
                .collect();
            let _ = self.resolve_user(pid, &starts);
        }
    }

    /// Symbolizes every sample: one kernel batch, one batch per process.
    pub fn resolve(&mut self, raw: Vec<RawSample>) -> Vec<Sample> {
        let mut kernel = BTreeSet::new();
        let mut user: HashMap<u32, BTreeSet<u64>> = HashMap::new();
        let mut collect = |t: &RawTask| {
            if let RawTrace::Addrs(a) = &t.kernel {
                kernel.extend(a.iter().enumerate().map(|(i, &x)| lookup_addr(i, x)));
            }
            if let (RawTrace::Addrs(a), Some(pid)) = (&t.user, t.pid) {
                user.entry(pid)
                    .or_default()
                    .extend(a.iter().enumerate().map(|(i, &x)| lookup_addr(i, x)));
            }
        };
        for s in &raw {
            collect(&s.task);
            if let Some(w) = &s.waker {
                collect(w);
            }
        }
        let kernel = self.resolve_kernel(&kernel);
        self.user_cache.begin_batch();
        let user: HashMap<u32, HashMap<u64, Resolved>> = user
            .iter()
            .map(|(&pid, addrs)| (pid, self.resolve_user(pid, addrs)))
            .collect();
        let empty = HashMap::new();
        let build = |t: RawTask| -> TaskStack {
            let ures = t.pid.and_then(|p| user.get(&p)).unwrap_or(&empty);
            TaskStack {
                pid: t.pid,
                tid: t.tid,
                comm: t.comm,
                user: rebuild(t.user, ures, FrameKind::User),
                kernel: rebuild(t.kernel, &kernel, FrameKind::Kernel),
            }
        };
        raw.into_iter()
            .map(|s| Sample::new(build(s.task), s.waker.map(build), s.value))
            .collect()
    }
}

/// The address to look up for the frame at `index` of a leaf-first stack.
/// Caller frames hold return addresses, which may point past the end of the
/// calling function (after a call to a function that does not return); they
/// are looked up one byte earlier, as perf does. The leaf is an exact
/// instruction pointer.
fn lookup_addr(index: usize, addr: u64) -> u64 {
    if index == 0 {
        addr
    } else {
        addr.wrapping_sub(1)
    }
}

fn rebuild(trace: RawTrace, resolved: &HashMap<u64, Resolved>, kind: FrameKind) -> Trace {
    match trace {
        RawTrace::NotCollected => Trace::NotCollected,
        RawTrace::Missed { enomem } => Trace::Missed { enomem },
        RawTrace::Addrs(addrs) => {
            let mut frames = Vec::with_capacity(addrs.len());
            for (i, &a) in addrs.iter().enumerate() {
                match resolved.get(&lookup_addr(i, a)) {
                    // Leaf first: the innermost inlined function comes first.
                    Some(r) => frames.extend(r.iter().rev().map(|f| Frame {
                        addr: a,
                        ..f.clone()
                    })),
                    None => frames.push(Frame::unknown(a, kind)),
                }
            }
            Trace::Frames(frames)
        }
    }
}
