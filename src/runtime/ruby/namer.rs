//! Naming Ruby frames (placeholder: names none yet).

use super::Registry;
use crate::collect::{Namer, RuntimeFrame};
use crate::profile::Frame;

/// Names [`crate::collect::Runtime::Ruby`] frames of the processes in a
/// [`Registry`].
pub struct RubyNamer {
    #[allow(dead_code)]
    registry: Registry,
}

impl RubyNamer {
    pub fn new(registry: Registry) -> Self {
        RubyNamer { registry }
    }
}

impl Namer for RubyNamer {
    fn name(&mut self, _pid: u32, _frame: &RuntimeFrame) -> Option<Vec<Frame>> {
        None
    }
}
