//! Naming Python frames (being written; a stub with the API).

use super::Registry;
use crate::collect::{Namer, RuntimeFrame};
use crate::profile::Frame;

pub struct PythonNamer {
    _registry: Registry,
}

impl PythonNamer {
    pub fn new(registry: Registry) -> Self {
        PythonNamer {
            _registry: registry,
        }
    }
}

impl Namer for PythonNamer {
    fn name(&mut self, _pid: u32, _frame: &RuntimeFrame) -> Option<Vec<Frame>> {
        None
    }
}
