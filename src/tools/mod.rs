//! The tools, each a [`Collector`]: a plain config turned into attached
//! BPF programs and, when read, into raw samples. [`start`] starts any of
//! them from its config, so that the library can run a tool end to end
//! through [`crate::pipeline`].

pub mod offcpu;
pub mod perfmode;
pub mod profile;
pub mod stackcount;
mod start;
pub mod wallclock;

use std::mem::MaybeUninit;
use std::path::Path;

use libbpf_rs::OpenObject;

use crate::collect::Collector;
use crate::error::{Error, Result};

/// The config of any tool.
#[derive(Clone, Debug)]
pub enum ToolConfig {
    Profile(profile::Config),
    /// offcputime, wakeuptime or offwaketime.
    OffCpu(offcpu::Config),
    Stackcount(stackcount::Config),
    Wallclock(wallclock::Config),
}

impl ToolConfig {
    /// Targets a command flare launched (`-- CMD`): its process `pid`,
    /// which will run `program`, and every process it starts. Fails when
    /// the config already names other targets.
    pub fn launch(&mut self, pid: u32, program: &Path) -> Result<()> {
        let taken = || {
            Error::Unsupported(
                "-p/-L/-t and -- COMMAND cannot be combined: flare profiles the command it starts"
                    .into(),
            )
        };
        match self {
            ToolConfig::Profile(c) => {
                if c.target != crate::collect::Target::All {
                    return Err(taken());
                }
                c.target = crate::collect::Target::Pids(vec![pid]);
                c.follow_children = true;
            }
            ToolConfig::OffCpu(c) => {
                if !matches!(c.threads, offcpu::Threads::All | offcpu::Threads::User) {
                    return Err(taken());
                }
                c.threads = offcpu::Threads::Pids(vec![pid]);
                c.follow_children = true;
            }
            ToolConfig::Wallclock(c) => {
                if c.target != crate::collect::Target::All {
                    return Err(taken());
                }
                c.target = crate::collect::Target::Pids(vec![pid]);
                c.follow_children = true;
            }
            ToolConfig::Stackcount(c) => {
                if c.pid.is_some() {
                    return Err(taken());
                }
                c.pid = Some(pid);
                c.command = Some(program.to_path_buf());
            }
        }
        Ok(())
    }

    /// Keeps each sample's time (for the timeline and files with times).
    pub fn keep_times(&mut self) {
        match self {
            ToolConfig::Profile(c) => c.recording.timed = true,
            ToolConfig::OffCpu(c) => c.recording.timed = true,
            ToolConfig::Stackcount(c) => c.recording.timed = true,
            ToolConfig::Wallclock(c) => c.recording.timed = true,
        }
    }
}

/// Storage for a skeleton's open object that lives as long as the
/// collector using it. It is a few hundred bytes, left behind once per
/// started tool; the BPF object itself is freed when the collector drops.
fn object_storage() -> &'static mut MaybeUninit<OpenObject> {
    Box::leak(Box::new(MaybeUninit::uninit()))
}

/// Loads and attaches the tool `config` names. Where BPF programs may not
/// be loaded (no root, no CAP_BPF and CAP_PERFMON: probed), `profile`
/// samples with perf events instead ([`perfmode`]); the other tools say
/// what they need.
pub fn start(config: ToolConfig) -> Result<Box<dyn Collector>> {
    Ok(match config {
        // Test knob: perf-event mode where BPF could be loaded too.
        ToolConfig::Profile(c)
            if std::env::var_os("FLARE_TEST_PERF_EVENTS").is_some()
                || !crate::bpf::probe::bpf_allowed() =>
        {
            Box::new(perfmode::Session::start(c)?)
        }
        ToolConfig::Profile(c) => Box::new(profile::Session::start(c, object_storage())?),
        ToolConfig::OffCpu(c) => Box::new(offcpu::Session::start(c, object_storage())?),
        ToolConfig::Stackcount(c) => Box::new(stackcount::Session::start(c, object_storage())?),
        ToolConfig::Wallclock(c) => Box::new(wallclock::Session::start(c, object_storage())?),
    })
}
