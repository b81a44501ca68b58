//! Finding CPython in a process (being written; a stub with the API).

use super::memory::Memory;
use super::Process;
use crate::unwind::procs::ExecMapping;

/// What a process runs.
pub enum Detected {
    NotPython,
    Python(Process),
    NotReady,
    Unsupported(String),
}

/// Finds CPython in processes.
#[derive(Default)]
pub struct Detector {}

impl Detector {
    pub fn new() -> Self {
        Detector {}
    }

    pub fn detect(&mut self, _pid: u32, _maps: &[ExecMapping], _mem: &dyn Memory) -> Detected {
        Detected::NotPython
    }
}
