//! The command line: one clap struct per tool, each converted into the
//! library's plain config. Nothing below this module sees clap.

pub mod agent;
pub mod analyze;
pub mod docs;
pub mod offcpu;
pub mod output;
pub mod profile;
pub mod serve;
pub mod stackcount;
pub mod wallclock;

use clap::{Parser, Subcommand};

/// flare: eBPF CPU profiling for Linux — bcc's profile with flame graphs
/// built in.
#[derive(Debug, Parser)]
#[command(name = "flare", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Profile CPU stack traces at a timed interval
    #[command(after_help = profile::EXAMPLES)]
    Profile(profile::ProfileArgs),
    /// Draw a flame graph (SVG) from folded stacks
    Flamegraph(analyze::FlamegraphArgs),
    /// Draw a differential flame graph of two folded profiles
    Diff(analyze::DiffArgs),
    /// List the functions with the most self and total value
    Top(analyze::TopArgs),
    /// Count the stacks that reach a function, tracepoint or probe
    #[command(after_help = stackcount::EXAMPLES)]
    Stackcount(stackcount::StackcountArgs),
    /// Summarize off-CPU time by stack trace
    #[command(after_help = offcpu::OFFCPUTIME_EXAMPLES)]
    Offcputime(offcpu::OffcputimeArgs),
    /// Summarize sleep to wakeup time by waker kernel stack
    #[command(after_help = offcpu::WAKEUPTIME_EXAMPLES)]
    Wakeuptime(offcpu::WakeuptimeArgs),
    /// Summarize blocked time by kernel stack trace + waker stack
    #[command(after_help = offcpu::OFFWAKETIME_EXAMPLES)]
    Offwaketime(offcpu::OffwaketimeArgs),
    /// Where threads spend wall-clock time: on CPU and blocked, by stack
    #[command(after_help = wallclock::EXAMPLES)]
    Wallclock(wallclock::WallclockArgs),
    /// Profile continuously and push each window to Pyroscope, Parca, OTLP or a directory
    #[command(after_help = agent::EXAMPLES)]
    Agent(agent::AgentArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell)
    Completions(docs::CompletionsArgs),
    /// Print the man page (roff)
    #[command(hide = true)]
    Man(docs::ManArgs),
}

/// `--unwind`, on every tool that takes user stacks.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct UnwindArgs {
    /// How to walk user stacks: auto (unwind tables where an object has
    /// them, frame pointers elsewhere), fp (frame pointers only), dwarf
    /// (unwind tables only)
    #[arg(long = "unwind", value_name = "MODE", default_value = "auto", value_parser = |s: &str| s.parse::<flare::unwind::Mode>())]
    pub mode: flare::unwind::Mode,
}

/// A comma-separated list of process or thread ids (`185,186`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdList(pub Vec<u32>);

/// Parses `1,2,3` into ids; each must be a whole number.
pub fn id_list(s: &str) -> Result<IdList, String> {
    s.split(',')
        .map(|p| {
            let p = p.trim();
            p.parse::<u32>().map_err(|_| {
                format!("'{p}' is not a process or thread id: give whole numbers separated by commas, e.g. 185,186")
            })
        })
        .collect::<Result<Vec<u32>, String>>()
        .map(IdList)
}

/// A whole number greater than zero.
pub fn nonzero(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be greater than zero".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a whole number")),
    }
}

/// A whole number greater than zero that fits 32 bits (map sizes).
pub fn nonzero_u32(s: &str) -> Result<u32, String> {
    let n = nonzero(s)?;
    u32::try_from(n).map_err(|_| format!("{n} is too large (at most {})", u32::MAX))
}

#[cfg(test)]
mod tests;
