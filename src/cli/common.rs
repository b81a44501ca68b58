//! The argument groups the collecting tools share. Each option here is
//! declared once — its name, short flag, help, default and parser — with
//! its one conversion into the library's config, and every tool that
//! takes it flattens the group (`#[command(flatten)]`) where its `--help`
//! lists the option, so bcc's order is kept. Options whose help, default
//! or behaviour differ between tools (bcc words some per tool) stay in
//! that tool's own arguments, where the difference shows. The output
//! (`output::OutputArgs`), live view (`serve::ServeArgs`) and push
//! (`agent::PushArgs`) groups live with the code they feed.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use flare::collect::{Recording, Stacks, Target};

use super::{id_list, nonzero, nonzero_u32, IdList};

/// `-p PID,...`: the processes profile, wallclock and the agent sample.
#[derive(Clone, Debug, Args)]
pub struct PidArgs {
    /// Profile processes with these comma-separated PIDs only
    #[arg(short = 'p', long = "pid", value_name = "PID", value_parser = id_list)]
    pub pid: Option<IdList>,
}

impl PidArgs {
    /// The processes asked for, else every thread.
    pub fn target(&self) -> Target {
        match &self.pid {
            Some(p) => Target::Pids(p.0.clone()),
            None => Target::All,
        }
    }
}

/// `-p PID,...` or `-L TID,...`, one at most: what profile and wallclock
/// sample. (The off-CPU tools take bcc's `-t` and `-u`/`-k` instead.)
///
/// The conflict is declared on `-p`, where it always was (the agent's
/// `-p` has no `-L` to conflict with): parsing would refuse the pair
/// either way, but the zsh completions name it on the side declaring it.
#[derive(Clone, Debug, Args)]
#[command(mut_args(|a| if a.get_id() == "pid" { a.conflicts_with("tid") } else { a }))]
pub struct TargetArgs {
    #[command(flatten)]
    pub pids: PidArgs,

    /// Profile threads with these comma-separated TIDs only
    #[arg(short = 'L', long = "tid", value_name = "TID", value_parser = id_list)]
    pub tid: Option<IdList>,
}

impl TargetArgs {
    /// The processes or threads asked for, else every thread.
    pub fn target(&self) -> Target {
        match (&self.pids.pid, &self.tid) {
            (None, Some(t)) => Target::Tids(t.0.clone()),
            _ => self.pids.target(),
        }
    }
}

/// `-U`/`-K`, one at most: which stacks to record, both by default
/// (profile, wallclock, the agent, offcputime, offwaketime; stackcount
/// words them its own way and refuses the pair with bcc's message).
#[derive(Clone, Debug, Args)]
pub struct StacksArgs {
    /// Show stacks from user space only (no kernel space stacks)
    #[arg(short = 'U', long, conflicts_with = "kernel_stacks_only")]
    pub user_stacks_only: bool,

    /// Show stacks from kernel space only (no user space stacks)
    #[arg(short = 'K', long)]
    pub kernel_stacks_only: bool,
}

impl StacksArgs {
    /// The stacks asked for.
    pub fn stacks(&self) -> Stacks {
        Stacks::only(self.user_stacks_only, self.kernel_stacks_only)
    }
}

/// `-d`: a delimiter between the kernel and user stacks (profile,
/// offcputime, offwaketime, stackcount).
#[derive(Clone, Debug, Args)]
pub struct DelimiterArgs {
    /// Insert delimiter between kernel/user stacks
    #[arg(short = 'd', long)]
    pub delimited: bool,
}

impl DelimiterArgs {
    /// Whether to draw it when recording `stacks`: only when both kinds
    /// are shown, as bcc does.
    pub fn between(&self, stacks: Stacks) -> bool {
        self.delimited && stacks.both()
    }
}

/// `--hash-storage-size`: entries of the counts map (profile, wallclock;
/// the agent's is worded for a tool that displays nothing).
#[derive(Clone, Debug, Args)]
pub struct HashStorageArgs {
    /// The number of hash keys that can be stored
    #[arg(long, value_name = "HASH_STORAGE_SIZE", default_value_t = flare::defaults::HASH_STORAGE_SIZE, value_parser = nonzero_u32)]
    pub hash_storage_size: u32,
}

/// `--stack-storage-size`: stacks the stack map holds (every collecting
/// tool; the agent's is worded for a tool that displays nothing).
#[derive(Clone, Debug, Args)]
pub struct StackStorageArgs {
    /// The number of unique stack traces that can be stored and displayed
    #[arg(long, value_name = "STACK_STORAGE_SIZE", default_value_t = flare::defaults::STACK_STORAGE_SIZE, value_parser = nonzero_u32)]
    pub stack_storage_size: u32,
}

/// `--cgroupmap` and `--mntnsmap`: bcc's pinned-map filters (profile,
/// the agent).
#[derive(Clone, Debug, Args)]
pub struct MapFilterArgs {
    /// Trace cgroups in this pinned BPF map only
    #[arg(long, value_name = "CGROUPMAP")]
    pub cgroupmap: Option<PathBuf>,

    /// Trace mount namespaces in this pinned BPF map only
    #[arg(long, value_name = "MNTNSMAP")]
    pub mntnsmap: Option<PathBuf>,
}

/// `DURATION`, the positional seconds of profile, wallclock and the
/// off-CPU tools (stackcount takes bcc's `-D` instead).
#[derive(Clone, Debug, Args)]
pub struct DurationArgs {
    /// Duration of trace, in seconds [default: until Ctrl-C]
    #[arg(value_name = "DURATION", value_parser = nonzero)]
    pub duration: Option<u64>,
}

impl DurationArgs {
    /// How long to trace; `None`: until stopped.
    pub fn duration(&self) -> Option<Duration> {
        self.duration.map(Duration::from_secs)
    }
}

/// `--unwind`, on every tool that takes user stacks.
#[derive(Clone, Copy, Debug, Args)]
pub struct UnwindArgs {
    /// How to walk user stacks: auto (unwind tables where an object has
    /// them, frame pointers elsewhere), fp (frame pointers only), dwarf
    /// (unwind tables only)
    #[arg(long = "unwind", value_name = "MODE", default_value = "auto", value_parser = |s: &str| s.parse::<flare::unwind::Mode>())]
    pub mode: flare::unwind::Mode,
    /// Python frames in Python processes' stacks (CPython 3.6-3.15, no
    /// flag on the target; needs --unwind auto or dwarf): on or off
    #[arg(long = "python", value_name = "ON|OFF", default_value = "on", value_parser = on_off, action = clap::ArgAction::Set)]
    pub python: bool,
    /// Java frames in JVMs' stacks (HotSpot, JDK 8-25, no flag or agent on
    /// the JVM; needs --unwind auto or dwarf): on or off
    #[arg(long = "java", value_name = "ON|OFF", default_value = "on", value_parser = on_off, action = clap::ArgAction::Set)]
    pub java: bool,
    /// JavaScript frames in Node.js processes' stacks (V8 of Node 20-26,
    /// no flag on the target; needs --unwind auto or dwarf): on or off
    #[arg(long = "node", value_name = "ON|OFF", default_value = "on", value_parser = on_off, action = clap::ArgAction::Set)]
    pub node: bool,
    /// Ruby frames in Ruby processes' stacks (CRuby 3.1, 3.3 and 3.4, YJIT
    /// too, no flag on the target; needs --unwind auto or dwarf): on or off
    #[arg(long = "ruby", value_name = "ON|OFF", default_value = "on", value_parser = on_off, action = clap::ArgAction::Set)]
    pub ruby: bool,
}

impl UnwindArgs {
    /// The runtimes whose frames are read.
    pub fn runtimes(&self) -> flare::collect::Runtimes {
        use flare::collect::Runtime;
        flare::collect::Runtimes::default()
            .with(Runtime::Python, self.python)
            .with(Runtime::Java, self.java)
            .with(Runtime::V8, self.node)
            .with(Runtime::Ruby, self.ruby)
    }

    /// How stacks are recorded: `stacks` walked as these options say,
    /// flare's own process left out unless `include_self`; the map sizes
    /// are the library's defaults.
    pub fn recording(&self, stacks: Stacks, include_self: bool) -> Recording {
        Recording {
            stacks,
            unwind: self.mode,
            runtimes: self.runtimes(),
            include_self,
            ..Recording::default()
        }
    }
}

/// Parses `on` / `off`.
fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("expected on or off, not {s:?}")),
    }
}

/// `-- CMD ARGS...`: the command to start and profile, flattened into
/// every collecting tool's arguments.
#[derive(Clone, Debug, Default, Args)]
pub struct LaunchArgs {
    /// Start this command (as the invoking user under sudo), profile it and
    /// the processes it starts until it exits, and exit with its status
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use flare::collect::{Stacks, Target};

    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Command {
        let mut argv = vec!["flare"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv) {
            Ok(cli) => cli.command,
            Err(e) => panic!("{args:?}: {e}"),
        }
    }

    /// `-p`, `-L` and neither, as every tool that flattens them reads them.
    #[test]
    fn targets_convert_once_for_every_tool() {
        let target = |args: &[&str]| match parse(args) {
            Command::Profile(a) => a.target.target(),
            Command::Wallclock(a) => a.target.target(),
            Command::Agent(a) => a.pids.target(),
            other => panic!("parsed as {other:?}"),
        };
        for tool in ["profile", "wallclock"] {
            assert_eq!(target(&[tool]), Target::All);
            assert_eq!(target(&[tool, "-p", "1,2"]), Target::Pids(vec![1, 2]));
            assert_eq!(target(&[tool, "-L", "3"]), Target::Tids(vec![3]));
            let both = Cli::try_parse_from(["flare", tool, "-L", "3", "-p", "1"]);
            let err = both.expect_err("-p with -L is refused");
            assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        }
        let push = ["--pyroscope", "http://127.0.0.1:1"];
        assert_eq!(target(&["agent", push[0], push[1]]), Target::All);
        assert_eq!(
            target(&["agent", "-p", "7", push[0], push[1]]),
            Target::Pids(vec![7])
        );
        assert!(Cli::try_parse_from(["flare", "agent", "-L", "3", push[0], push[1]]).is_err());
    }

    /// `-U`, `-K` and neither, and `-d` only with both kinds, for every
    /// tool that flattens them.
    #[test]
    fn stacks_and_delimiter_convert_once_for_every_tool() {
        let push = ["--pyroscope", "http://127.0.0.1:1"];
        let stacks = |args: &[&str]| match parse(args) {
            Command::Profile(a) => a.stacks.stacks(),
            Command::Wallclock(a) => a.stacks.stacks(),
            Command::Agent(a) => a.stacks.stacks(),
            Command::Offcputime(a) => a.stacks.only.stacks(),
            Command::Offwaketime(a) => a.stacks.only.stacks(),
            other => panic!("parsed as {other:?}"),
        };
        let only = |user, kernel| Stacks { user, kernel };
        for tool in ["profile", "wallclock", "agent", "offcputime", "offwaketime"] {
            let argv = |flag: Option<&'static str>| {
                let mut v = vec![tool];
                v.extend(flag);
                if tool == "agent" {
                    v.extend(push);
                }
                v
            };
            assert_eq!(stacks(&argv(None)), only(true, true), "{tool}");
            assert_eq!(stacks(&argv(Some("-U"))), only(true, false), "{tool}");
            assert_eq!(stacks(&argv(Some("-K"))), only(false, true), "{tool}");
        }
        let delimited = |args: &[&str]| match parse(args) {
            Command::Offcputime(a) => a.stacks.style().delimited,
            Command::Offwaketime(a) => a.stacks.style().delimited,
            Command::Stackcount(a) => a.style(false).delimited,
            other => panic!("parsed as {other:?}"),
        };
        for tool in ["offcputime", "offwaketime", "stackcount"] {
            let argv = |flags: &[&'static str]| {
                let mut v = vec![tool];
                v.extend_from_slice(flags);
                if tool == "stackcount" {
                    v.push("f");
                }
                v
            };
            assert!(delimited(&argv(&["-d"])), "{tool}");
            assert!(!delimited(&argv(&[])), "{tool}");
            assert!(!delimited(&argv(&["-d", "-U"])), "{tool}");
            assert!(!delimited(&argv(&["-d", "-K"])), "{tool}");
        }
    }

    /// Each tool's storage sizes reach its config, with the shared
    /// defaults when not given.
    #[test]
    fn storage_sizes_reach_every_tool() {
        use flare::defaults::{HASH_STORAGE_SIZE, STACK_STORAGE_SIZE};
        // (stack storage, hash storage where the tool has one)
        let sizes = |args: &[&str]| match parse(args) {
            Command::Profile(a) => {
                let c = a.config();
                (
                    c.recording.stack_storage_size,
                    Some(c.recording.hash_storage_size),
                )
            }
            Command::Wallclock(a) => {
                let c = a.config();
                (
                    c.recording.stack_storage_size,
                    Some(c.recording.hash_storage_size),
                )
            }
            Command::Offcputime(a) => (a.config().recording.stack_storage_size, None),
            Command::Wakeuptime(a) => (a.config().recording.stack_storage_size, None),
            Command::Offwaketime(a) => (a.config().recording.stack_storage_size, None),
            Command::Stackcount(a) => (a.config().recording.stack_storage_size, None),
            other => panic!("parsed as {other:?}"),
        };
        for tool in [
            "profile",
            "wallclock",
            "offcputime",
            "wakeuptime",
            "offwaketime",
            "stackcount",
        ] {
            let hash = matches!(tool, "profile" | "wallclock");
            let mut argv = vec![tool];
            if tool == "stackcount" {
                argv.push("f");
            }
            let (stack, h) = sizes(&argv);
            assert_eq!(stack, STACK_STORAGE_SIZE, "{tool}");
            assert_eq!(h, hash.then_some(HASH_STORAGE_SIZE), "{tool}");
            argv.extend(["--stack-storage-size", "64"]);
            if hash {
                argv.extend(["--hash-storage-size", "128"]);
            }
            let (stack, h) = sizes(&argv);
            assert_eq!(stack, 64, "{tool}");
            assert_eq!(h, hash.then_some(128), "{tool}");
        }
    }

    /// The positional DURATION, for every tool that takes it.
    #[test]
    fn durations_reach_every_tool() {
        use std::time::Duration;
        let duration = |args: &[&str]| match parse(args) {
            Command::Profile(a) => a.config().duration,
            Command::Wallclock(a) => a.config().duration,
            Command::Offcputime(a) => a.config().duration,
            Command::Wakeuptime(a) => a.config().duration,
            Command::Offwaketime(a) => a.config().duration,
            other => panic!("parsed as {other:?}"),
        };
        for tool in [
            "profile",
            "wallclock",
            "offcputime",
            "wakeuptime",
            "offwaketime",
        ] {
            assert_eq!(duration(&[tool]), None, "{tool}");
            assert_eq!(
                duration(&[tool, "5"]),
                Some(Duration::from_secs(5)),
                "{tool}"
            );
        }
    }
}
