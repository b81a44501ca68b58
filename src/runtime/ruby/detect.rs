//! Finding CRuby in a process (placeholder: finds none yet).

use super::Process;
use crate::runtime::memory::ProcessMemory;
use crate::runtime::tracker::Found;
use crate::unwind::procs::ExecMapping;

/// What a process runs, as far as Ruby goes.
pub type Detected = Found<Process>;

/// Finds Ruby in processes.
#[derive(Default)]
pub struct Detector {}

impl Detector {
    /// What process `pid`, mapping `maps`, runs as far as Ruby goes.
    pub fn detect(&mut self, _pid: u32, _maps: &[ExecMapping], _mem: &ProcessMemory) -> Detected {
        Found::No
    }
}
