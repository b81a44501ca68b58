//! The one internal model of a profile that every tool produces and every
//! output format consumes.
//!
//! A [`Profile`] is a list of [`Sample`]s: a task's user and kernel stacks
//! (and, for the off-CPU family, its waker's) with a value in the profile's
//! [`ValueUnit`]. Stacks are kept leaf first, as the kernel returns them and
//! as bcc prints them; writers that want root-first paths use
//! [`Sample::path`]. Frames are already symbolized: the model knows nothing
//! of BPF or of addresses that still need names.

use std::collections::HashMap;
use std::time::Duration;

mod path;

pub use path::{PathFrame, PathKind};

/// What a sample's value counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueUnit {
    /// Timer samples (`flare profile`); each is worth [`Meta::period_ns`].
    Samples,
    /// Blocked time in microseconds (the off-CPU family).
    Microseconds,
    /// Events (`flare stackcount`).
    Count,
}

/// Where a frame's code runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    Kernel,
    User,
}

/// One symbolized frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Function name, or `[unknown]`.
    pub name: String,
    pub kind: FrameKind,
    /// The instruction address the frame was resolved from (0 if none).
    pub addr: u64,
    /// Path of the binary or library (`None` for the kernel or when unknown).
    pub module: Option<String>,
    /// Source file and line, where debug information said so.
    pub file: Option<String>,
    pub line: Option<u32>,
    /// True for a function inlined into the frame below it (its caller).
    pub inlined: bool,
}

impl Frame {
    /// A frame with a name only.
    pub fn named(name: impl Into<String>, kind: FrameKind) -> Self {
        Frame {
            name: name.into(),
            kind,
            addr: 0,
            module: None,
            file: None,
            line: None,
            inlined: false,
        }
    }

    /// The frame for an address that could not be resolved.
    pub fn unknown(addr: u64, kind: FrameKind) -> Self {
        Frame {
            addr,
            ..Frame::named(UNKNOWN, kind)
        }
    }
}

/// The name bcc and flare give a frame that could not be resolved.
pub const UNKNOWN: &str = "[unknown]";

/// One of a task's two stacks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Trace {
    /// Not asked for (`-U` drops kernel stacks, `-K` user stacks).
    NotCollected,
    /// The kernel could not store it. `enomem` is true when a larger stack
    /// map would have helped (it was full, or the stack's bucket was taken
    /// by another stack: -ENOMEM or -EEXIST).
    Missed { enomem: bool },
    /// The frames, leaf first. Empty when there is no such stack (a sample
    /// in user mode has no kernel stack; a kernel thread no user stack).
    Frames(Vec<Frame>),
}

impl Trace {
    /// The frames, or an empty slice when there are none.
    pub fn frames(&self) -> &[Frame] {
        match self {
            Trace::Frames(f) => f,
            _ => &[],
        }
    }

    /// True when the stack exists and has frames (bcc: a valid stack id).
    pub fn has_frames(&self) -> bool {
        !self.frames().is_empty()
    }

    /// True when the stack was asked for but could not be stored.
    pub fn is_missed(&self) -> bool {
        matches!(self, Trace::Missed { .. })
    }
}

/// A task and its stacks at the moment of a sample.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TaskStack {
    /// Process id (thread group id), as flare's PID namespace sees it.
    pub pid: u32,
    /// Thread id, where the tool tells threads apart.
    pub tid: Option<u32>,
    /// The task's command name (at most 15 bytes, as the kernel keeps it).
    pub comm: String,
    pub user: Trace,
    pub kernel: Trace,
}

/// A distinct stack (or pair of stacks) and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub task: TaskStack,
    /// The waking task, for tools that record who woke the target.
    pub waker: Option<TaskStack>,
    pub value: u64,
}

/// Counts of what the kernel could not record during a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    /// Stacks that could not be stored (stack map full or hash collision).
    pub stacks: u64,
    /// True if at least one of those was for lack of room in the stack map
    /// (-ENOMEM, or -EEXIST from a bucket taken by another stack).
    pub stacks_enomem: bool,
    /// Events dropped because the counts map was full.
    pub hash_full: u64,
}

/// What a profile is of, for titles, headers and file metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// The tool that made it: `profile`, `offcputime`, `stackcount`, ...
    pub tool: String,
    /// The event sampled or traced: `cpu-clock`, `sched_switch`, a probe.
    pub event: String,
    pub unit: ValueUnit,
    /// For [`ValueUnit::Samples`]: nanoseconds of CPU time one sample stands
    /// for (1e9 / frequency), when sampling by frequency.
    pub period_ns: Option<u64>,
    /// How long the collection ran.
    pub duration: Duration,
    /// Who was profiled, in words (`all threads`, `PID [185]`).
    pub target: String,
    pub lost: Lost,
}

impl Meta {
    /// Metadata with the given tool, event and unit and nothing else known.
    pub fn new(tool: &str, event: &str, unit: ValueUnit) -> Self {
        Meta {
            tool: tool.to_string(),
            event: event.to_string(),
            unit,
            period_ns: None,
            duration: Duration::ZERO,
            target: String::new(),
            lost: Lost::default(),
        }
    }
}

/// A whole profile: metadata and samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    pub meta: Meta,
    pub samples: Vec<Sample>,
}

/// What two samples must share to be merged: the tasks and the frame names.
#[derive(PartialEq, Eq, Hash)]
struct MergeKey {
    task: TaskKey,
    waker: Option<TaskKey>,
}

#[derive(PartialEq, Eq, Hash)]
struct TaskKey {
    pid: u32,
    tid: Option<u32>,
    comm: String,
    user: TraceKey,
    kernel: TraceKey,
}

#[derive(PartialEq, Eq, Hash)]
enum TraceKey {
    NotCollected,
    Missed,
    Frames(Vec<(String, bool)>),
}

impl TaskKey {
    fn of(t: &TaskStack) -> Self {
        fn trace(t: &Trace) -> TraceKey {
            match t {
                Trace::NotCollected => TraceKey::NotCollected,
                Trace::Missed { .. } => TraceKey::Missed,
                Trace::Frames(f) => {
                    TraceKey::Frames(f.iter().map(|f| (f.name.clone(), f.inlined)).collect())
                }
            }
        }
        TaskKey {
            pid: t.pid,
            tid: t.tid,
            comm: t.comm.clone(),
            user: trace(&t.user),
            kernel: trace(&t.kernel),
        }
    }
}

impl Profile {
    /// An empty profile.
    pub fn new(meta: Meta) -> Self {
        Profile {
            meta,
            samples: Vec::new(),
        }
    }

    /// Sum of all sample values.
    pub fn total(&self) -> u64 {
        self.samples.iter().map(|s| s.value).sum()
    }

    /// Merges samples whose tasks and frame names are the same (different
    /// addresses in one function become one entry), keeping the first
    /// sample's frame details. Order of first appearance is kept.
    pub fn merge_identical(&mut self) {
        let mut index: HashMap<MergeKey, usize> = HashMap::with_capacity(self.samples.len());
        let mut merged: Vec<Sample> = Vec::with_capacity(self.samples.len());
        for sample in self.samples.drain(..) {
            let key = MergeKey {
                task: TaskKey::of(&sample.task),
                waker: sample.waker.as_ref().map(TaskKey::of),
            };
            match index.get(&key) {
                Some(&i) => merged[i].value += sample.value,
                None => {
                    index.insert(key, merged.len());
                    merged.push(sample);
                }
            }
        }
        self.samples = merged;
    }

    /// Sorts samples by value, smallest first (bcc's order), ties kept in
    /// a stable order.
    pub fn sort_ascending(&mut self) {
        self.samples.sort_by_key(|s| s.value);
    }
}

#[cfg(test)]
mod tests;
