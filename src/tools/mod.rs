//! The tools, each a [`Collector`]: a plain config turned into attached
//! BPF programs and, when read, into raw samples. [`start`] starts any of
//! them from its config, so that the library can run a tool end to end
//! through [`crate::pipeline`].

pub mod offcpu;
pub mod profile;
pub mod stackcount;

use std::mem::MaybeUninit;

use libbpf_rs::OpenObject;

use crate::collect::Collector;
use crate::error::Result;

/// The config of any tool.
#[derive(Clone, Debug)]
pub enum ToolConfig {
    Profile(profile::Config),
    /// offcputime, wakeuptime or offwaketime.
    OffCpu(offcpu::Config),
    Stackcount(stackcount::Config),
}

/// Storage for a skeleton's open object that lives as long as the
/// collector using it. It is a few hundred bytes, left behind once per
/// started tool; the BPF object itself is freed when the collector drops.
fn object_storage() -> &'static mut MaybeUninit<OpenObject> {
    Box::leak(Box::new(MaybeUninit::uninit()))
}

/// Loads and attaches the tool `config` names.
pub fn start(config: ToolConfig) -> Result<Box<dyn Collector>> {
    Ok(match config {
        ToolConfig::Profile(c) => Box::new(profile::Session::start(c, object_storage())?),
        ToolConfig::OffCpu(c) => Box::new(offcpu::Session::start(c, object_storage())?),
        ToolConfig::Stackcount(c) => Box::new(stackcount::Session::start(c, object_storage())?),
    })
}
