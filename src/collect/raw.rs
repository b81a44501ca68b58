//! The raw vocabulary a collector hands over: samples whose stacks are
//! still what the kernel recorded (addresses and runtime identifiers, not
//! names), for the symbolizer to name.
//!
//! A raw frame says what it is, and each kind has its own resolver in
//! [`crate::symbolize`]: a machine address (kernel or native user code,
//! by the trace it lies in), a label (a fixed name a collector adds, such
//! as the state a thread waits in), or a runtime frame (a Python or Java
//! frame as read in BPF: identifiers that only the live process can turn
//! into a name, and a cookie that tells a reused identifier apart).

use std::fmt;
use std::sync::Arc;

/// A stack as the kernel handed it over.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RawTrace {
    /// Not asked for.
    NotCollected,
    /// Could not be stored; `enomem` when the stack storage was full.
    Missed { enomem: bool },
    /// Frames, leaf first (empty: no such stack). Shared: many keys point
    /// at one stack.
    Frames(Arc<[RawFrame]>),
}

impl RawFrame {
    /// A label frame.
    pub fn label(name: impl Into<String>) -> Self {
        RawFrame::Label(Arc::new(name.into()))
    }
}

impl RawTrace {
    /// A stack of machine addresses only, leaf first.
    pub fn addrs(addrs: impl IntoIterator<Item = u64>) -> Self {
        RawTrace::Frames(addrs.into_iter().map(RawFrame::Addr).collect())
    }

    /// The frames, empty for a stack that is not there.
    pub fn frames(&self) -> &[RawFrame] {
        match self {
            RawTrace::Frames(f) => f,
            _ => &[],
        }
    }
}

/// One frame of a raw stack. 16 bytes: the rare label and runtime frame
/// are behind thin pointers so that a native stack costs little more than
/// its addresses (a profile of 16,000 stacks holds some 300,000 frames).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RawFrame {
    /// An instruction address: kernel code in a kernel trace, native user
    /// code (or JIT code, named through the process's perf map) in a user
    /// trace.
    Addr(u64),
    /// A fixed name, shown as it is (wall-clock's `[off-cpu: sleeping]`);
    /// made with [`RawFrame::label`].
    Label(Arc<String>),
    /// A frame of a language runtime's own stack.
    Runtime(Box<RuntimeFrame>),
}

/// A language runtime whose frames flare reads in BPF.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Runtime {
    /// CPython: a code object and an instruction index.
    Python,
    /// HotSpot: a `Method*` and a bytecode index.
    Java,
    /// V8 (Node.js): a shared function info and where in it (a bytecode
    /// or pc offset).
    V8,
    /// CRuby: an instruction sequence, a method entry and an instruction
    /// index ([`crate::runtime::ruby::split_ids`]).
    Ruby,
    /// Frames that only the test knob `FLARE_TEST_RUNTIME_FRAME` makes
    /// (the process's id and the native frames below it), to check the
    /// path from the BPF stack record to every writer.
    Test,
}

impl Runtime {
    /// The runtime of a frame type in a BPF stack record
    /// (`FLARE_FRAME_*` in `bpf/common.h`).
    pub fn from_frame_type(t: u8) -> Option<Self> {
        [
            Runtime::Python,
            Runtime::Java,
            Runtime::V8,
            Runtime::Ruby,
            Runtime::Test,
        ]
        .into_iter()
        .find(|r| r.frame_type() == t)
    }

    /// The frame type of this runtime's frames in a stack record.
    pub fn frame_type(self) -> u8 {
        match self {
            Runtime::Python => 1,
            Runtime::Java => 2,
            Runtime::V8 => 3,
            Runtime::Ruby => 4,
            Runtime::Test => 255,
        }
    }

    /// The runtime's name, in the names of frames it could not name
    /// (`python+0x7f12...`).
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Python => "python",
            Runtime::Java => "java",
            Runtime::V8 => "js",
            Runtime::Ruby => "ruby",
            Runtime::Test => "test-runtime",
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A runtime frame as read in BPF: what it means depends on the process
/// (an address in its memory), so it is named from the live process and
/// remembered under (process, identifiers, cookie).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuntimeFrame {
    pub runtime: Runtime,
    /// The runtime's identifiers, e.g. a code object's address and an
    /// instruction index.
    pub ids: [u64; 2],
    /// A value read beside the identifiers that changes when the memory
    /// they point at is reused for another function (0: none).
    pub cookie: u64,
}

/// A task with unresolved stacks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RawTask {
    /// The process, `None` for stacks of all processes counted together.
    pub pid: Option<u32>,
    /// When the process started (`CLOCK_MONOTONIC` nanoseconds, the clock
    /// of [`crate::procmaps::now`]), telling apart processes that had the
    /// same PID in turn; 0 when unknown (its latest mappings are used).
    pub start: u64,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_frame_stays_small() {
        assert_eq!(std::mem::size_of::<RawFrame>(), 16);
    }
}
