//! `flare stackcount`: count the stacks that reach a kernel function, user
//! function, tracepoint or USDT probe.
//!
//! [`Config`] is the plain form of the command line. [`Session::start`]
//! parses the pattern ([`pattern`]), finds what it matches ([`resolve`]),
//! loads `stackcount.bpf.c` with only the entry points it needs and
//! attaches them ([`attach`]); [`Session::collect`] reads what the kernel
//! counted and can clear it, for bcc's `-i` intervals. [`header`] is bcc's
//! first line.

mod attach;
mod kallsyms;
pub mod offsets;
pub mod pattern;
pub mod resolve;
mod trampoline;
pub mod usdt;

use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::path::PathBuf;

use libbpf_rs::skel::OpenSkel;
use libbpf_rs::{Link, Object, OpenObject};

use crate::bpf::skel::stackcount::{types, StackcountSkel};
use crate::bpf::{comm_str, probe, PlainKey};
use crate::collect::timed::{self, TimedRing};
use crate::collect::{Collection, Collector, Periodic, RawSample, RawTask, Recording, WarmUp};
use crate::error::{Error, Result};
use crate::procmaps::Mappings;
use crate::profile::{Kind, Meta, Sample};
use crate::tools::start::{self, Plan, Watch};

pub use crate::collect::Stacks;
use crate::unwind::Unwinder;

pub use pattern::{Pattern, ProbeKind};

/// Mirrors `FLARE_SC_ALL_PIDS` in `stackcount.h`: the kernel's mark for
/// stacks of all processes counted together (`None` in the model).
const ALL_PIDS: u32 = u32::MAX;

/// Everything `flare stackcount` was asked to do.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// The event pattern (`func`, `lib:func`, `t:cat:event`, `u:lib:probe`).
    pub pattern: String,
    /// `-r`: the name part is a regular expression, not a glob.
    pub regex: bool,
    /// `-p`: count this process only.
    pub pid: Option<u32>,
    /// `-c`: count events on this CPU only.
    pub cpu: Option<u32>,
    /// `-P`: keep processes apart even when only kernel stacks of kernel
    /// events are counted (they are kept apart otherwise anyway).
    pub per_process: bool,
    /// `-s`: frame names with the offset into their function.
    pub offsets: bool,
    /// The program of a command flare launched (`-- CMD`): `pid` is its
    /// process, the processes it starts are counted too, and user probes
    /// are attached for every process (filtered in the kernel), since the
    /// command has not yet run its program when they are attached.
    pub command: Option<PathBuf>,
    /// How to attach kernel functions; `None` chooses (multi-kprobes,
    /// kprobes, fentry: the first this kernel has).
    pub attach: Option<KernelAttach>,
    /// Which stacks, walked how, into maps of what size.
    pub recording: Recording,
}

impl Config {
    /// True when keys carry the process (pid and comm). bcc keeps them for
    /// `-P`, for user-space events and whenever user stacks are collected
    /// (a user stack means nothing without its process).
    pub fn keys_processes(&self, kind: ProbeKind) -> bool {
        self.per_process || !kind.is_kernel() || self.recording.stacks.user
    }
}

/// bcc's header line (without the trailing newline).
pub fn header(pattern: &str, matched: usize) -> String {
    format!("Tracing {matched} functions for \"{pattern}\"... Hit Ctrl-C to end.")
}

/// How kernel functions are attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelAttach {
    KprobeMulti,
    Kprobe,
    Fentry,
}

impl KernelAttach {
    /// The name `--attach` takes.
    pub fn name(self) -> &'static str {
        match self {
            KernelAttach::KprobeMulti => "kprobe-multi",
            KernelAttach::Kprobe => "kprobe",
            KernelAttach::Fentry => "fentry",
        }
    }
}

/// What a pattern resolved to.
#[derive(Clone, Debug)]
pub(crate) enum Targets {
    User {
        binary: std::path::PathBuf,
        functions: Vec<resolve::UserFunction>,
    },
    Usdt {
        binary: std::path::PathBuf,
        probes: Vec<usdt::UsdtProbe>,
    },
    Tracepoints(Vec<String>),
    Kernel {
        functions: Vec<String>,
        how: KernelAttach,
    },
}

impl Targets {
    fn len(&self) -> usize {
        match self {
            Targets::User { functions, .. } => functions.len(),
            Targets::Usdt { probes, .. } => probes.len(),
            Targets::Tracepoints(t) => t.len(),
            Targets::Kernel { functions, .. } => functions.len(),
        }
    }
}

// SAFETY: stackcount_key is the skeleton's copy of a C struct of integers
// and a char array, valid for any bit pattern.
unsafe impl PlainKey for types::stackcount_key {}

/// A loaded and attached stack counter.
pub struct Session<'obj> {
    /// Dropped first (fields drop in order): a USDT link's detach uses
    /// libbpf's USDT manager, which the object owns and frees on close.
    /// Dropped after the object, it crashed flare on 5.10 (scripts/vmtest).
    _links: Vec<Link>,
    /// With fentry, one more object per kernel function after the first,
    /// sharing the first one's maps.
    _extra: Vec<Object>,
    /// Drains the timed events' ring (with [`Config::timed`]); dropped
    /// before the skeleton that owns the ring.
    timed: Option<TimedRing<types::stackcount_key>>,
    skel: StackcountSkel<'obj>,
    config: Config,
    pattern: Pattern,
    matched: usize,
    /// State kept between clearing reads (-i).
    periodic: Periodic,
    /// Feeds the BPF unwinder (not with --unwind fp).
    unwinder: Option<Unwinder>,
    /// How user stacks are walked: which build extra objects load.
    unwind: crate::unwind::Mode,
    /// Kernel functions are attached with fentry: their stacks are taken
    /// inside the program, under its trampoline.
    fentry: bool,
}

/// Finds what the pattern matches; fails with the pattern named when it
/// matches nothing.
fn resolve_targets(pattern: &Pattern, config: &Config) -> Result<Targets> {
    // A launched command has not run its program yet: its own process is
    // still flare's, so its program stands for "the process's binary" and
    // its libraries are found the way its loader will find them.
    let pid = config.pid.filter(|_| config.command.is_none());
    let binary = |lib: &str| match &config.command {
        Some(program) if lib.is_empty() => Ok(program.clone()),
        _ => resolve::binary(lib, pid),
    };
    if config.attach.is_some() && pattern.kind != ProbeKind::Kernel {
        return Err(Error::Unsupported(format!(
            "--attach applies to kernel functions only, not to \"{}\"",
            pattern.text
        )));
    }
    let targets = match pattern.kind {
        ProbeKind::User => {
            let binary = binary(&pattern.library)?;
            let functions = resolve::user_functions(&binary, pattern)?;
            Targets::User { binary, functions }
        }
        ProbeKind::Usdt => {
            let binary = binary(&pattern.library)?;
            let probes = resolve::usdt_probes(&binary, pattern)?;
            Targets::Usdt { binary, probes }
        }
        ProbeKind::Tracepoint => Targets::Tracepoints(resolve::tracepoints(pattern)?),
        ProbeKind::Kernel => {
            let functions = resolve::kernel_functions(pattern)?;
            let how = match config.attach {
                Some(how) => {
                    attach::check_kernel_attach(how)?;
                    how
                }
                None if !probe::kprobes() => KernelAttach::Fentry,
                None if probe::may_have_kprobe_multi() && functions.len() > 1 => {
                    KernelAttach::KprobeMulti
                }
                None => KernelAttach::Kprobe,
            };
            Targets::Kernel { functions, how }
        }
    };
    if targets.len() == 0 {
        let hint = match &targets {
            Targets::User { binary, .. } | Targets::Usdt { binary, .. } => {
                format!(" in {}", binary.display())
            }
            _ => String::new(),
        };
        return Err(pattern.no_match(hint));
    }
    Ok(targets)
}

/// What start-up needs to know of these options.
fn plan(c: &Config) -> Plan<'_> {
    Plan {
        watch: match &c.pid {
            Some(p) => Watch::Pids(std::slice::from_ref(p)),
            None => Watch::All,
        },
        cpu: c.cpu,
        launched: c.command.is_some(),
        uprobes: None,
        recording: c.recording,
        filtered: false,
    }
}

impl<'obj> Session<'obj> {
    /// Validates the config, resolves the pattern, loads the BPF program
    /// and attaches it to everything the pattern matches.
    pub fn start(config: Config, object: &'obj mut MaybeUninit<OpenObject>) -> Result<Self> {
        let mut plan = plan(&config);
        plan.prepare()?;
        let pattern = Pattern::parse(&config.pattern, config.regex)?;
        let targets = resolve_targets(&pattern, &config)?;
        if let Targets::User { binary, .. } | Targets::Usdt { binary, .. } = &targets {
            plan.uprobes = Some(binary);
        }
        let (mut open, mode) = plan.open::<StackcountSkel>(object, |ro| {
            ro.filter_pid = config.pid.is_some();
            ro.target_pid = config.pid.unwrap_or(0);
            ro.filter_cpu = config.cpu.is_some();
            ro.target_cpu = config.cpu.unwrap_or(0);
            ro.per_process = config.keys_processes(pattern.kind);
        })?;
        attach::choose_programs(&mut open.progs, &pattern, &targets)?;
        // Loading fentry is itself the probe: keep libbpf's complaints
        // out of the way of the one-line error that explains a refusal.
        let probing = matches!(
            targets,
            Targets::Kernel {
                how: KernelAttach::Fentry,
                ..
            }
        );
        let print = probing.then(|| libbpf_rs::set_print(None));
        let loaded = open.load();
        if let Some(previous) = print {
            libbpf_rs::set_print(previous);
        }
        let skel = loaded.map_err(|e| attach::load_error(&pattern, &targets, e))?;
        let unwinder = plan.start_unwinder(&skel, mode)?;
        let timed = config
            .recording
            .timed
            .then(|| TimedRing::start(&skel.maps.timed_events))
            .transpose()?;
        let mut session = Session {
            timed,
            skel,
            _extra: Vec::new(),
            fentry: false,
            _links: Vec::new(),
            config,
            pattern,
            matched: 0,
            periodic: Periodic::default(),
            unwinder,
            unwind: mode,
        };
        session.attach(&targets)?;
        Ok(session)
    }

    /// How many functions, tracepoints or probes were attached.
    pub fn matched(&self) -> usize {
        self.matched
    }

    /// The parsed pattern.
    pub fn pattern(&self) -> &Pattern {
        &self.pattern
    }

    /// True when keys carry the process.
    pub fn keys_processes(&self) -> bool {
        self.config.keys_processes(self.pattern.kind)
    }

    /// Program runs the kernel skipped, summed over the loaded programs.
    fn recursion_misses(&self) -> u64 {
        use libbpf_rs::skel::Skel;
        let mut total = 0;
        let object = self.skel.object();
        let extra = self._extra.iter();
        for obj in std::iter::once(object).chain(extra) {
            for prog in obj.progs() {
                total += attach::recursion_misses(prog.as_fd());
            }
        }
        total
    }
}

impl Collector for Session<'_> {
    fn share_mappings(&self, mappings: &Mappings) {
        start::share_mappings(self.unwinder.as_ref(), mappings);
    }

    fn namers(&self) -> crate::collect::Namers {
        start::namers(self.unwinder.as_ref())
    }

    fn has_runtime_frames(&self) -> bool {
        start::has_runtime_frames(self.unwinder.as_ref())
    }

    fn meta(&self) -> Meta {
        let mut meta = Meta::new(Kind::Count, &self.pattern.text);
        meta.target = match self.config.pid {
            Some(p) => format!("PID {p}"),
            None => "all processes".into(),
        };
        meta
    }

    fn header(&self) -> String {
        header(&self.config.pattern, self.matched)
    }

    fn tidy(&self, samples: &mut [Sample]) {
        if self.fentry {
            trampoline::strip_trampolines(samples);
        }
        if self.config.offsets {
            offsets::add_offsets(samples);
        }
    }

    fn warm_up(&self) -> WarmUp {
        plan(&self.config).warm_up()
    }

    /// Reads every counted stack. With `clear`, counts are removed as they
    /// are read, so the next call returns only what came after (stored
    /// stacks are kept: their ids may still be in use).
    fn collect(&mut self, clear: bool) -> Result<Collection> {
        let mut stacks = self.periodic.reader(crate::collect::stacks::Storage {
            stacks: &self.skel.maps.stacks,
            tails: &self.skel.maps.stack_tails,
        });
        let mut samples = Vec::new();
        let read = timed::read(self.timed.as_ref(), &self.skel.maps.counts, clear)?;
        for (k, count) in read.keys {
            let user = stacks.read(k.user_stack_id, self.config.recording.stacks.user);
            let kernel = stacks.read(k.kernel_stack_id, self.config.recording.stacks.kernel);
            // Stacks of all processes counted together have no process:
            // the pattern stands in for its name, so that folded lines and
            // flame graphs get one root instead of an empty one.
            let comm = if k.pid == ALL_PIDS {
                self.pattern.text.replace(';', ":")
            } else {
                comm_str(&k.comm)
            };
            samples.push(RawSample {
                task: RawTask {
                    pid: (k.pid != ALL_PIDS).then_some(k.pid),
                    start: k.start,
                    tid: None,
                    comm,
                    user,
                    kernel,
                },
                waker: None,
                value: count,
            });
        }
        let stats = self.skel.maps.bss_data.as_deref().map(|b| b.stats);
        let hash_full = stats.map_or(0, |s| s.hash_full);
        let ring_full = stats.map_or(0, |s| s.ring_full);
        let misses = self.recursion_misses();
        let mut lost = stacks.lost(self.periodic.delta("hash_full", hash_full, clear));
        lost.missed_events = self.periodic.delta("recursion_misses", misses, clear);
        lost.samples = self.periodic.delta("ring_full", ring_full, clear);
        self.periodic.done(stacks, clear);
        Ok(Collection {
            samples,
            lost,
            events: read.events,
        })
    }
}
