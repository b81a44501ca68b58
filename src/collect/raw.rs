//! The raw vocabulary a collector hands over: samples whose stacks are
//! still what the kernel recorded (addresses, not names), for the
//! symbolizer to name.

use std::sync::Arc;

/// A stack as the kernel handed it over.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RawTrace {
    /// Not asked for.
    NotCollected,
    /// Could not be stored; `enomem` when the stack storage was full.
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
