//! The command line: one clap struct per tool, each converted into the
//! library's plain config. Nothing below this module sees clap.

pub mod agent;
pub mod analyze;
pub mod common;
pub mod docs;
pub mod offcpu;
pub mod output;
pub mod profile;
pub mod serve;
pub mod stackcount;
pub mod wallclock;

use clap::{Parser, Subcommand};

/// flare: an eBPF profiler for Linux — CPU, off-CPU and wall-clock stacks
/// as bcc prints them, Python and Java frames, flame graphs, pprof and a
/// fleet agent.
#[derive(Debug, Parser)]
#[command(name = "flare", version, propagate_version = true, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// `flare --help`'s examples: one per kind of question.
const EXAMPLES: &str = "\
Examples:
    flare profile -o cpu.svg -- ./app           # where ./app spends CPU: a flame graph
    flare profile -p 185 -o cpu.pb.gz 10        # a running process for 10 s, as pprof
    flare offcputime -p 185 -f 5 > off.folded   # where it blocks, and for how long
    flare wallclock -o wall.json.gz -- python3 app.py   # on and off CPU, for the Firefox Profiler

Each tool's --help has examples of its own. The user guide:
/usr/share/doc/flare/docs/ (docs/ in the source tree).";

// Every tool takes negative numbers as option values (`-F -5`), so that
// their parsers say what is wrong with them instead of clap taking them
// for unknown flags.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Profile CPU stack traces at a timed interval
    #[command(after_help = profile::EXAMPLES, allow_negative_numbers = true)]
    Profile(profile::ProfileArgs),
    /// Draw a flame graph (SVG) from folded stacks, or a time range of a timed file
    #[command(allow_negative_numbers = true)]
    Flamegraph(analyze::FlamegraphArgs),
    /// Draw a sub-second heat map (SVG) of a timed profile (.json.gz)
    #[command(allow_negative_numbers = true)]
    Heatmap(analyze::HeatmapArgs),
    /// Draw a differential flame graph of two folded profiles
    #[command(allow_negative_numbers = true)]
    Diff(analyze::DiffArgs),
    /// List the functions with the most self and total value
    #[command(allow_negative_numbers = true)]
    Top(analyze::TopArgs),
    /// Count the stacks that reach a function, tracepoint or probe
    #[command(after_help = stackcount::EXAMPLES, allow_negative_numbers = true)]
    Stackcount(stackcount::StackcountArgs),
    /// Summarize off-CPU time by stack trace
    #[command(after_help = offcpu::OFFCPUTIME_EXAMPLES, allow_negative_numbers = true)]
    Offcputime(offcpu::OffcputimeArgs),
    /// Summarize sleep to wakeup time by waker kernel stack
    #[command(after_help = offcpu::WAKEUPTIME_EXAMPLES, allow_negative_numbers = true)]
    Wakeuptime(offcpu::WakeuptimeArgs),
    /// Summarize blocked time by kernel stack trace + waker stack
    #[command(after_help = offcpu::OFFWAKETIME_EXAMPLES, allow_negative_numbers = true)]
    Offwaketime(offcpu::OffwaketimeArgs),
    /// Where threads spend wall-clock time: on CPU and blocked, by stack
    #[command(after_help = wallclock::EXAMPLES, allow_negative_numbers = true)]
    Wallclock(wallclock::WallclockArgs),
    /// Profile continuously and push each window to Pyroscope, Parca, OTLP or a directory
    #[command(after_help = agent::EXAMPLES, allow_negative_numbers = true)]
    Agent(agent::AgentArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell)
    Completions(docs::CompletionsArgs),
    /// Print the man page (roff)
    #[command(hide = true)]
    Man(docs::ManArgs),
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

/// What is wrong with `s` as a whole number, `what` saying
/// which numbers are allowed.
fn not_whole(s: &str, what: &str) -> String {
    match s.trim().parse::<i128>() {
        Ok(n) if n < 0 => format!("'{s}' is negative: give {what}"),
        Ok(_) => format!("'{s}' is too large: give {what}"),
        Err(_) => format!("'{s}' is not a whole number: give {what}"),
    }
}

/// A whole number greater than zero.
pub fn nonzero(s: &str) -> Result<u64, String> {
    const WHAT: &str = "a whole number greater than zero, e.g. 5";
    match s.trim().parse::<u64>() {
        Ok(0) => Err(format!("'0' is not allowed: give {WHAT}")),
        Ok(n) => Ok(n),
        Err(_) => Err(not_whole(s, WHAT)),
    }
}

/// A whole number, 0 or more, that fits `T` (ids, CPUs, states, counts).
pub fn whole<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.trim()
        .parse::<T>()
        .map_err(|_| not_whole(s, "a whole number, 0 or more"))
}

/// A whole number greater than zero that fits 32 bits (map sizes).
pub fn nonzero_u32(s: &str) -> Result<u32, String> {
    let n = nonzero(s)?;
    u32::try_from(n).map_err(|_| format!("{n} is too large (at most {})", u32::MAX))
}

#[cfg(test)]
mod tests;
