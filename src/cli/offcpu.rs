//! `flare offcputime`, `wakeuptime` and `offwaketime` arguments: bcc's
//! options, names and defaults, shared where the tools share them.

use clap::{Args, ValueEnum};
use flare::collect::Stacks;
use flare::output::StackStyle;
use flare::tools::offcpu::{Attach, Config, Threads, Tool};
use flare::tools::ToolConfig;

use super::{id_list, nonzero, nonzero_u32, IdList};

pub const OFFCPUTIME_EXAMPLES: &str = "\
Examples:
    flare offcputime             # trace off-CPU stack time until Ctrl-C
    flare offcputime 5           # trace for 5 seconds only
    flare offcputime -f 5        # 5 seconds, and output in folded format
    flare offcputime -- ./app    # start ./app and trace it and its children until it exits
    flare offcputime -m 1000     # trace only events that last more than 1000 usec
    flare offcputime -M 10000    # trace only events that last less than 10000 usec
    flare offcputime -p 185      # only trace threads for PID 185
    flare offcputime -t 188      # only trace thread 188
    flare offcputime -u          # only trace user threads (no kernel)
    flare offcputime -k          # only trace kernel threads (no user)
    flare offcputime -U          # only show user space stacks (no kernel)
    flare offcputime -K          # only show kernel space stacks (no user)";

pub const WAKEUPTIME_EXAMPLES: &str = "\
Examples:
    flare wakeuptime             # trace blocked time with waker stacks
    flare wakeuptime 5           # trace for 5 seconds only
    flare wakeuptime -f 5        # 5 seconds, and output in folded format
    flare wakeuptime -- ./app    # start ./app and trace it until it exits
    flare wakeuptime -u          # don't include kernel threads (user only)
    flare wakeuptime -p 185      # trace for PID 185 only
    flare wakeuptime --user-stack  # also show the waker's user stack";

pub const OFFWAKETIME_EXAMPLES: &str = "\
Examples:
    flare offwaketime            # trace off-CPU + waker stack time until Ctrl-C
    flare offwaketime 5          # trace for 5 seconds only
    flare offwaketime -f 5       # 5 seconds, and output in folded format
    flare offwaketime -- ./app   # start ./app and trace it until it exits
    flare offwaketime -m 1000    # trace only events that last more than 1000 usec
    flare offwaketime -M 9000    # trace only events that last less than 9000 usec
    flare offwaketime -p 185     # only trace threads for PID 185
    flare offwaketime -t 188     # only trace thread 188
    flare offwaketime -u         # only trace user threads (no kernel)
    flare offwaketime -k         # only trace kernel threads (no user)
    flare offwaketime -U         # only show user space stacks (no kernel)
    flare offwaketime -K         # only show kernel space stacks (no user)";

/// How to attach to the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AttachArg {
    /// The first that works of tp-btf, raw-tp, kprobe
    Auto,
    /// BTF-typed tracepoints (Linux 5.5+)
    TpBtf,
    /// Raw tracepoints (Linux 4.17+)
    RawTp,
    /// kprobes on finish_task_switch and try_to_wake_up
    Kprobe,
}

/// Options all three tools share.
#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Output folded format
    #[arg(short = 'f', long)]
    pub folded: bool,

    /// The amount of time in microseconds over which we store traces
    #[arg(short = 'm', long, value_name = "MIN_BLOCK_TIME", default_value_t = 1, value_parser = nonzero)]
    pub min_block_time: u64,

    /// The amount of time in microseconds under which we store traces [default: U64_MAX]
    #[arg(short = 'M', long, value_name = "MAX_BLOCK_TIME", value_parser = nonzero)]
    pub max_block_time: Option<u64>,

    /// How to attach to the scheduler
    #[arg(long, value_enum, default_value_t = AttachArg::Auto)]
    pub attach: AttachArg,

    /// The number of threads that can be blocked at once and still be
    /// tracked
    #[arg(long, value_name = "BLOCKED_STORAGE_SIZE", default_value_t = flare::defaults::BLOCKED_STORAGE_SIZE, value_parser = nonzero_u32)]
    pub blocked_storage_size: u32,

    /// Trace flare's own threads too (left out by default)
    #[arg(long)]
    pub include_self: bool,

    #[command(flatten)]
    pub unwind: super::common::UnwindArgs,

    #[command(flatten)]
    pub output: super::output::OutputArgs,

    #[command(flatten)]
    pub serve: super::serve::ServeArgs,

    #[command(flatten)]
    pub duration: super::common::DurationArgs,

    #[command(flatten)]
    pub launch: super::common::LaunchArgs,
}

/// bcc's -p/-t/-u/-k, one at most.
#[derive(Debug, Args)]
pub struct ThreadArgs {
    /// Trace these comma-separated PIDs only
    #[arg(short = 'p', long = "pid", value_name = "PID", value_parser = id_list,
          conflicts_with_all = ["tid", "user_threads_only", "kernel_threads_only"])]
    pub pid: Option<IdList>,

    /// Trace these comma-separated TIDs only
    #[arg(short = 't', long = "tid", value_name = "TID", value_parser = id_list,
          conflicts_with_all = ["user_threads_only", "kernel_threads_only"])]
    pub tid: Option<IdList>,

    /// User threads only (no kernel threads)
    #[arg(short = 'u', long, conflicts_with = "kernel_threads_only")]
    pub user_threads_only: bool,

    /// Kernel threads only (no user threads)
    #[arg(short = 'k', long, conflicts_with = "user_stacks_only")]
    pub kernel_threads_only: bool,
}

impl ThreadArgs {
    fn threads(&self) -> Threads {
        match (&self.pid, &self.tid) {
            (Some(p), _) => Threads::Pids(p.0.clone()),
            (None, Some(t)) => Threads::Tids(t.0.clone()),
            _ if self.user_threads_only => Threads::User,
            _ if self.kernel_threads_only => Threads::Kernel,
            _ => Threads::All,
        }
    }
}

/// bcc's -U/-K and -d, in offcputime's and offwaketime's order.
#[derive(Debug, Args)]
pub struct StackArgs {
    #[command(flatten)]
    pub only: super::common::StacksArgs,

    #[command(flatten)]
    pub delimiter: super::common::DelimiterArgs,
}

impl StackArgs {
    fn stacks(&self) -> Stacks {
        self.only.stacks()
    }

    /// How stacks are printed.
    pub fn style(&self) -> StackStyle {
        StackStyle {
            delimited: self.delimiter.between(self.stacks()),
            ..StackStyle::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct OffcputimeArgs {
    #[command(flatten)]
    pub threads: ThreadArgs,

    #[command(flatten)]
    pub stacks: StackArgs,

    #[command(flatten)]
    pub stack_storage: super::common::StackStorageArgs,

    /// Filter on this thread state bitmask (eg, 2 == TASK_UNINTERRUPTIBLE) see include/linux/sched.h
    #[arg(long, value_name = "STATE", value_parser = super::whole::<u64>)]
    pub state: Option<u64>,

    /// Show address offsets (symbol+0xOFFSET)
    #[arg(short = 's', long)]
    pub offset: bool,

    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Args)]
pub struct WakeuptimeArgs {
    /// User threads only (no kernel threads)
    #[arg(short = 'u', long = "useronly", conflicts_with = "pid")]
    pub user_threads_only: bool,

    /// Trace this PID only
    #[arg(short = 'p', long, value_name = "PID", value_parser = super::whole::<u32>)]
    pub pid: Option<u32>,

    /// Also show the waker's user stack, below its kernel stack (bcc
    /// shows the kernel stack only)
    #[arg(long)]
    pub user_stack: bool,

    #[command(flatten)]
    pub stack_storage: super::common::StackStorageArgs,

    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Args)]
pub struct OffwaketimeArgs {
    #[command(flatten)]
    pub threads: ThreadArgs,

    #[command(flatten)]
    pub stacks: StackArgs,

    #[command(flatten)]
    pub stack_storage: super::common::StackStorageArgs,

    #[command(flatten)]
    pub common: CommonArgs,
}

impl CommonArgs {
    fn apply(&self, c: &mut Config) {
        c.min_us = self.min_block_time;
        c.max_us = self.max_block_time.unwrap_or(u64::MAX);
        c.attach = match self.attach {
            AttachArg::Auto => Attach::Auto,
            AttachArg::TpBtf => Attach::TpBtf,
            AttachArg::RawTp => Attach::RawTp,
            AttachArg::Kprobe => Attach::Kprobe,
        };
        c.duration = self.duration.duration();
        c.recording.unwind = self.unwind.mode;
        c.recording.runtimes = self.unwind.runtimes();
        c.recording.include_self = self.include_self;
        c.blocked_storage_size = self.blocked_storage_size;
    }

    /// What to run: `config` into bcc's printer (with the tool's closing
    /// line), the files and the live view asked for.
    fn request(
        &self,
        config: Config,
        style: StackStyle,
        trailer: Option<&str>,
    ) -> anyhow::Result<crate::run::Request> {
        let printer = super::output::bcc_printer(&self.output, self.folded, style, trailer);
        let mut request = super::output::request(
            ToolConfig::OffCpu(config.clone()),
            config.duration,
            &self.output,
            self.serve.options(),
            printer,
            style,
        )?;
        request.command = self.launch.command.clone();
        Ok(request)
    }
}

impl OffcputimeArgs {
    pub fn request(&self) -> anyhow::Result<crate::run::Request> {
        // bcc refuses the pair: folded lines carry names only.
        if self.common.folded && self.offset {
            anyhow::bail!(
                "can only use -f or -s: folded output has no offsets (drop -s, or -f for text with offsets)"
            );
        }
        self.common
            .request(self.config(), self.stacks.style(), None)
    }

    pub fn config(&self) -> Config {
        let mut c = Config::new(Tool::OffCpu);
        c.threads = self.threads.threads();
        c.recording.stacks = self.stacks.stacks();
        c.state = self.state;
        c.recording.stack_storage_size = self.stack_storage.stack_storage_size;
        c.offsets = self.offset;
        self.common.apply(&mut c);
        c
    }
}

impl WakeuptimeArgs {
    pub fn request(&self) -> anyhow::Result<crate::run::Request> {
        // bcc's wakeuptime says so when it is done.
        self.common
            .request(self.config(), StackStyle::default(), Some("Detaching..."))
    }

    pub fn config(&self) -> Config {
        let mut c = Config::new(Tool::Wakeup);
        c.threads = match (self.pid, self.user_threads_only) {
            (Some(p), _) => Threads::Pids(vec![p]),
            (None, true) => Threads::User,
            (None, false) => Threads::All,
        };
        c.recording.stacks.user = self.user_stack;
        c.recording.stack_storage_size = self.stack_storage.stack_storage_size;
        self.common.apply(&mut c);
        c
    }
}

impl OffwaketimeArgs {
    pub fn request(&self) -> anyhow::Result<crate::run::Request> {
        self.common
            .request(self.config(), self.stacks.style(), None)
    }

    pub fn config(&self) -> Config {
        let mut c = Config::new(Tool::OffWake);
        c.threads = self.threads.threads();
        c.recording.stacks = self.stacks.stacks();
        c.recording.stack_storage_size = self.stack_storage.stack_storage_size;
        self.common.apply(&mut c);
        c
    }
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;
    use clap::Parser;
    use flare::tools::offcpu::header;

    use super::*;
    use crate::cli::{Cli, Command};

    fn config(args: &[&str]) -> Result<Config, clap::Error> {
        Cli::try_parse_from(args.iter().copied()).map(|c| match c.command {
            Command::Offcputime(a) => a.config(),
            Command::Wakeuptime(a) => a.config(),
            Command::Offwaketime(a) => a.config(),
            other => panic!("parsed as {other:?}"),
        })
    }

    fn head(args: &[&str]) -> String {
        header(&config(args).expect("valid arguments"))
    }

    /// bcc's offcputime refuses -f with -s (folded lines have no offsets).
    #[test]
    fn folded_with_offsets_is_refused() {
        let cli = Cli::try_parse_from(["flare", "offcputime", "-f", "-s", "2"]).expect("parses");
        let Command::Offcputime(a) = cli.command else {
            panic!("parsed as another command");
        };
        let err = a.request().err().expect("refused").to_string();
        assert!(err.contains("can only use -f or -s"), "{err}");
        let cli = Cli::try_parse_from(["flare", "offcputime", "-s", "2"]).expect("parses");
        let Command::Offcputime(a) = cli.command else {
            panic!("parsed as another command");
        };
        assert!(a.request().is_ok());
    }

    #[test]
    fn headers_match_bcc() {
        assert_eq!(
            head(&["flare", "offcputime", "5"]),
            "Tracing off-CPU time (us) of all threads by user + kernel stack for 5 secs."
        );
        assert_eq!(
            head(&["flare", "offcputime", "-t", "188", "-U"]),
            "Tracing off-CPU time (us) of TID 188 by user stack... Hit Ctrl-C to end."
        );
        assert_eq!(
            head(&["flare", "offcputime", "-k", "-K", "1"]),
            "Tracing off-CPU time (us) of kernel threads by kernel stack for 1 secs."
        );
        assert_eq!(
            head(&["flare", "wakeuptime", "-p", "185"]),
            "Tracing blocked time (us) by kernel stack... Hit Ctrl-C to end."
        );
        assert_eq!(
            head(&["flare", "offwaketime", "-K", "5"]),
            "Tracing blocked time (us) by kernel off-CPU and waker stack for 5 secs."
        );
    }

    #[test]
    fn options_map_to_the_config() {
        let c = config(&[
            "flare",
            "offcputime",
            "-p",
            "1,2",
            "-m",
            "1000",
            "-M",
            "9000",
            "--state",
            "2",
        ])
        .unwrap();
        assert_eq!(c.threads, Threads::Pids(vec![1, 2]));
        assert_eq!((c.min_us, c.max_us, c.state), (1000, 9000, Some(2)));
        let c = config(&["flare", "offwaketime", "-u", "--attach", "raw-tp"]).unwrap();
        assert_eq!((c.threads, c.attach), (Threads::User, Attach::RawTp));
        assert_eq!((c.min_us, c.max_us), (1, u64::MAX));
        let c = config(&[
            "flare",
            "wakeuptime",
            "--user-stack",
            "--stack-storage-size",
            "64",
        ])
        .unwrap();
        assert!(c.recording.stacks.user && c.recording.stacks.kernel);
        assert_eq!(c.recording.stack_storage_size, 64);
    }

    #[test]
    fn exclusive_options_are_refused() {
        for bad in [
            &["flare", "offcputime", "-p", "1", "-t", "2"][..],
            &["flare", "offcputime", "-u", "-k"],
            &["flare", "offcputime", "-p", "1", "-u"],
            &["flare", "offwaketime", "-U", "-K"],
            &["flare", "offwaketime", "-k", "-U"],
            &["flare", "wakeuptime", "-p", "1", "-u"],
        ] {
            let err = config(bad).expect_err("conflicting options must be refused");
            assert_eq!(err.kind(), ErrorKind::ArgumentConflict, "{bad:?}");
        }
    }

    #[test]
    fn bad_values_are_refused() {
        for bad in [
            &["flare", "offcputime", "-m", "0"][..],
            &["flare", "offcputime", "0"],
            &["flare", "offwaketime", "--stack-storage-size", "0"],
            &["flare", "wakeuptime", "-p", "x"],
            &["flare", "offcputime", "--attach", "fentry"],
        ] {
            assert!(config(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn delimiter_only_with_both_stacks() {
        let style = |args: &[&str]| match Cli::try_parse_from(args.iter().copied()).unwrap().command
        {
            Command::Offwaketime(a) => a.stacks.style(),
            other => panic!("parsed as {other:?}"),
        };
        assert!(style(&["flare", "offwaketime", "-d"]).delimited);
        assert!(!style(&["flare", "offwaketime", "-d", "-K"]).delimited);
    }
}
