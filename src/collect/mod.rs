//! The collector contract: the one trait every tool implements, so that
//! one pipeline ([`crate::pipeline`]) runs any of them the same way.
//!
//! A collector is the first layer of the data flow (collect → symbolize →
//! model → sinks): it loads and attaches its BPF programs when started,
//! and each read hands over raw samples — addresses, not names — with
//! every count of what the kernel could not record. It says what it
//! measures ([`Collector::meta`]) and in bcc's words how it was asked
//! ([`Collector::header`]); it never prints, symbolizes or writes.

use crate::error::Result;
use crate::procmaps::Mappings;
use crate::profile::{Frame, Lost, Meta, Sample};

mod raw;
pub mod stacks;
pub mod timed;
mod walking;

pub use raw::{RawFrame, RawSample, RawTask, RawTrace, Runtime, RuntimeFrame};
pub use stacks::{Periodic, StackCache, StackReader, STACK_SKIPPED};
pub use walking::{Runtimes, UnwindMode};

/// Which threads to sample or trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Target {
    /// Every thread (on the sampled CPUs).
    #[default]
    All,
    /// These processes (and threads they start).
    Pids(Vec<u32>),
    /// These threads only.
    Tids(Vec<u32>),
}

/// Which of a task's stacks to record (bcc's `-U` and `-K`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stacks {
    pub user: bool,
    pub kernel: bool,
}

impl Default for Stacks {
    fn default() -> Self {
        Stacks {
            user: true,
            kernel: true,
        }
    }
}

/// How every BPF tool records stacks, whatever it samples or traces: the
/// options `profile`, `wallclock`, the off-CPU family and `stackcount`
/// share, held in one place so that start-up ([`crate::tools::start`])
/// reads them from each tool's config alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recording {
    pub stacks: Stacks,
    /// How user stacks are walked.
    pub unwind: UnwindMode,
    /// Runtime frames (--python, --java) in the user stacks of processes
    /// running them.
    pub runtimes: Runtimes,
    /// Record flare's own process too (`--include-self`).
    pub include_self: bool,
    /// Keep each sample's time (for outputs that show when), sending
    /// samples to user space instead of counting them in the kernel.
    pub timed: bool,
    /// Buckets of the counts map.
    pub hash_storage_size: u32,
    /// Buckets of the stack map.
    pub stack_storage_size: u32,
}

impl Default for Recording {
    fn default() -> Self {
        Recording {
            stacks: Stacks::default(),
            unwind: UnwindMode::default(),
            runtimes: Runtimes::default(),
            include_self: false,
            timed: false,
            hash_storage_size: crate::defaults::HASH_STORAGE_SIZE,
            stack_storage_size: crate::defaults::STACK_STORAGE_SIZE,
        }
    }
}

impl Stacks {
    /// The selection for bcc's `-U` (user stacks only) and `-K` (kernel
    /// stacks only); neither means both.
    pub fn only(user_only: bool, kernel_only: bool) -> Self {
        Stacks {
            user: !kernel_only,
            kernel: !user_only,
        }
    }

    /// True when both stacks are recorded (a delimiter between them means
    /// something).
    pub fn both(self) -> bool {
        self.user && self.kernel
    }
}

/// What one read of a collector returned.
#[derive(Debug, Default)]
pub struct Collection {
    pub samples: Vec<RawSample>,
    /// Everything that could not be recorded since the previous clearing
    /// read (or the start).
    pub lost: Lost,
    /// With times kept: each sample or blocked period, pointing into
    /// `samples` (whose values are their sums).
    pub events: Option<Vec<crate::profile::Event>>,
}

/// What symbolization can load while a collector runs, so that less is
/// left for the end: the kernel's symbols, and the binaries of processes
/// known to be profiled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WarmUp {
    pub kernel: bool,
    pub pids: Vec<u32>,
}

/// Names one runtime's frames from the live process: the collector that
/// reads a runtime's frames in BPF hands one over ([`Collector::namers`]),
/// sharing what it learnt of each process (where the runtime keeps its
/// structures, their layout for the version found).
pub trait Namer: Send {
    /// The frames `frame` of process `pid` stands for: the function, then
    /// any inlined into it (innermost last), as native lookups give them.
    /// `None` when it cannot be named (the process is gone, or what the
    /// identifiers point at no longer matches the cookie). The symbolizer
    /// asks once per (process, identifiers, cookie) and keeps the answer.
    fn name(&mut self, pid: u32, frame: &RuntimeFrame) -> Option<Vec<Frame>>;

    /// [`Namer::name`] of each of `frames`, all of process `pid`: a
    /// window's new frames of one process, named together so that a
    /// namer reads the process's memory once for them all (a page at a
    /// time, where field by field cost a system call each).
    fn name_all(&mut self, pid: u32, frames: &[RuntimeFrame]) -> Vec<Option<Vec<Frame>>> {
        frames.iter().map(|f| self.name(pid, f)).collect()
    }

    /// True when the namer knows process `pid` (found its runtime): a
    /// frame of it that it could not name then stays unnamed (the process
    /// exited, or the memory was reused), and is not asked again. False
    /// while the runtime is still being looked for, so that its frames
    /// are asked again once it is found.
    fn knows(&self, _pid: u32) -> bool {
        true
    }
}

/// Namers, each with the runtime whose frames it names.
pub type Namers = Vec<(Runtime, Box<dyn Namer>)>;

/// The processes a runtime found in a run, as they are found (the
/// runtimes fill them, [`crate::runtime`]): what names their frames.
pub trait RuntimeFinds: Send + Sync {
    /// The namers of the frames of the processes found.
    fn namers(&self) -> Namers;

    /// True once a process of the runtime was found.
    fn any_process(&self) -> bool;
}

/// A started tool: attached, counting in the kernel until dropped.
pub trait Collector {
    /// What the profiles it makes measure: kind, event, unit, target. The
    /// duration and losses are left for the pipeline to fill in.
    fn meta(&self) -> Meta;

    /// bcc's first line for this run ("Sampling at 49 Hertz of ...").
    fn header(&self) -> String;

    /// Reads what was counted. With `clear`, what is read is removed, so
    /// that the next read returns only what came after.
    fn collect(&mut self, clear: bool) -> Result<Collection>;

    /// Notes for the user about how the collector attached (a fallback it
    /// had to take), printed once on stderr.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Finishes freshly symbolized samples the way only this collector
    /// knows (the off-CPU tools drop tracing frames from kernel stacks),
    /// in place: one sample out for each in. The pipeline calls it exactly
    /// once for each sample it symbolizes, in every mode (a periodic run's
    /// resolver keeps what a raw stack became, tidied, and does not tidy
    /// it again), so a step need not be idempotent (`-s` appends offsets).
    fn tidy(&self, _samples: &mut [Sample]) {}

    /// What symbolization may load while collecting.
    fn warm_up(&self) -> WarmUp {
        WarmUp::default()
    }

    /// Processes' mappings, when the collector records them itself (perf
    /// events on its targets, without the privileges the pipeline's
    /// system-wide [`crate::procmaps::Tracker`] needs); `None` for that
    /// tracker.
    fn mappings(&self) -> Option<Mappings> {
        None
    }

    /// The namers of the runtime frames this collector's stacks hold
    /// ([`RawFrame::Runtime`]), taken once before symbolization starts.
    fn namers(&self) -> Namers {
        Vec::new()
    }

    /// False while no process the collector met runs a runtime its
    /// namers name: a one-shot run then skips its reads to learn names.
    fn has_runtime_frames(&self) -> bool {
        true
    }

    /// Hands over the pipeline's record of processes' mappings, which the
    /// collector's unwinder reads instead of `/proc/PID/maps` (the same
    /// facts, kept up to date from the kernel's records at no cost per
    /// process).
    fn share_mappings(&self, _mappings: &Mappings) {}
}
