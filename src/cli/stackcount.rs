//! `flare stackcount` arguments: bcc stackcount's options, names and
//! defaults.

use std::time::Duration;

use clap::{Args, ValueEnum};
use flare::collect::Recording;
use flare::output::stackcount::Style;
use flare::output::StackStyle;
use flare::pipeline::{Mode, Plan};
use flare::sinks::print::HeaderTo;
use flare::sinks::PrinterOptions;
use flare::tools::stackcount::{Config, KernelAttach, Pattern, Stacks};
use flare::tools::ToolConfig;

use super::nonzero;
use super::output::OutputArgs;
use crate::run::Request;

pub const EXAMPLES: &str = "\
Examples:
    flare stackcount submit_bio         # count kernel stack traces for submit_bio
    flare stackcount c:malloc -- ./app  # start ./app, count its malloc stacks until it exits
    flare stackcount -d ip_output       # include a user/kernel stack delimiter
    flare stackcount -s ip_output       # show symbol offsets
    flare stackcount -sv ip_output      # show offsets and raw addresses (verbose)
    flare stackcount 'tcp_send*'        # count stacks for funcs matching tcp_send*
    flare stackcount -r '^tcp_send.*'   # same as above, using regular expressions
    flare stackcount -Ti 5 ip_output    # output every 5 seconds, with timestamps
    flare stackcount -p 185 ip_output   # count ip_output stacks for PID 185 only
    flare stackcount -p 185 c:malloc    # count stacks for malloc in PID 185
    flare stackcount t:sched:sched_fork # count stacks for sched_fork tracepoint
    flare stackcount -p 185 u:node:*    # count stacks for all USDT probes in node
    flare stackcount -K t:sched:sched_switch   # kernel stacks only
    flare stackcount -U t:sched:sched_switch   # user stacks only
    flare stackcount -f -D 5 c:malloc > out.folded   # folded, for flame graphs
    flare stackcount -D 5 -o malloc.svg c:malloc     # a flame graph of the callers
    flare stackcount c:malloc --serve  # a live flame graph of the callers (URL on stderr)";

/// How to attach kernel functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KernelAttachArg {
    /// Multi-kprobes, else kprobes, else fentry: the first this kernel has
    Auto,
    /// One kprobe per function
    Kprobe,
    /// One multi-kprobe link for all functions (Linux 5.18+)
    KprobeMulti,
    /// fentry, one program per function (refused under kernel lockdown)
    Fentry,
}

#[derive(Debug, Args)]
pub struct StackcountArgs {
    /// Trace this PID only
    #[arg(short = 'p', long = "pid", value_name = "PID", value_parser = super::whole::<u32>)]
    pub pid: Option<u32>,

    /// Trace this CPU only
    #[arg(short = 'c', long = "cpu", value_name = "CPU", value_parser = super::whole::<u32>)]
    pub cpu: Option<u32>,

    /// Summary interval, seconds
    #[arg(short = 'i', long, value_name = "INTERVAL", value_parser = nonzero, conflicts_with = "serve")]
    pub interval: Option<u64>,

    /// Total duration of trace, seconds
    #[arg(short = 'D', long, value_name = "DURATION", value_parser = nonzero)]
    pub duration: Option<u64>,

    /// Include timestamp on output
    #[arg(short = 'T', long)]
    pub timestamp: bool,

    /// Use regular expressions. Default is "*" wildcards only.
    #[arg(short = 'r', long)]
    pub regexp: bool,

    /// Show address offsets
    #[arg(short = 's', long)]
    pub offset: bool,

    /// Display stacks separately for each process
    #[arg(short = 'P', long)]
    pub perpid: bool,

    /// Kernel stack only
    #[arg(short = 'K', long)]
    pub kernel_stacks_only: bool,

    /// User stack only
    #[arg(short = 'U', long)]
    pub user_stacks_only: bool,

    /// Show raw addresses
    #[arg(short = 'v', long)]
    pub verbose: bool,

    #[command(flatten)]
    pub delimiter: super::common::DelimiterArgs,

    /// Output folded format (the header goes to stderr)
    #[arg(short = 'f', long)]
    pub folded: bool,

    #[command(flatten)]
    pub stack_storage: super::common::StackStorageArgs,

    /// Count flare's own process too (left out by default)
    #[arg(long)]
    pub include_self: bool,

    /// How to attach kernel functions
    #[arg(long, value_enum, default_value_t = KernelAttachArg::Auto)]
    pub attach: KernelAttachArg,

    #[command(flatten)]
    pub serve: super::serve::ServeArgs,

    /// Search expression for events
    #[arg(value_name = "PATTERN")]
    pub pattern: String,

    #[command(flatten)]
    pub unwind: super::common::UnwindArgs,

    /// Files to write (-o FILE, --format); with -i each interval rewrites
    /// them with its own counts
    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub launch: super::common::LaunchArgs,
}

impl StackcountArgs {
    /// The library config for these arguments.
    pub fn config(&self) -> Config {
        Config {
            pattern: self.pattern.clone(),
            regex: self.regexp,
            pid: self.pid,
            cpu: self.cpu,
            per_process: self.perpid,
            offsets: self.offset,
            command: None,
            attach: match self.attach {
                KernelAttachArg::Auto => None,
                KernelAttachArg::Kprobe => Some(KernelAttach::Kprobe),
                KernelAttachArg::KprobeMulti => Some(KernelAttach::KprobeMulti),
                KernelAttachArg::Fentry => Some(KernelAttach::Fentry),
            },
            recording: Recording {
                stack_storage_size: self.stack_storage.stack_storage_size,
                ..self.unwind.recording(self.stacks(), self.include_self)
            },
        }
    }

    /// What to run: bcc's printer (a report every interval, `-T`
    /// timestamps, `Detaching...`), the files and the live view.
    pub fn request(&self) -> anyhow::Result<Request> {
        // bcc's wording and exit code (1), not a usage error's (2).
        if self.kernel_stacks_only && self.user_stacks_only {
            anyhow::bail!(
                "-K and -U are mutually exclusive. If you want both stacks, that is the default."
            );
        }
        let destinations = self.output.destinations().map_err(anyhow::Error::msg)?;
        let config = self.config();
        let kind = Pattern::parse(&config.pattern, config.regex)?.kind;
        let style = self.style(config.keys_processes(kind));
        let fstyle = self.output.styled(StackStyle {
            delimited: style.delimited,
            ..StackStyle::default()
        });
        // bcc's blank lines, timestamps and closing line, unless standard
        // output carries a file's format.
        let decorate = !self.output.format_on_stdout();
        let printer = PrinterOptions {
            header: if self.output.bcc_header(self.folded) {
                HeaderTo::Stdout
            } else {
                // Keep folded output (or another format) clean for the
                // tools that read it.
                HeaderTo::Stderr
            },
            stacks: self.output.bcc_stdout(self.folded),
            folded: self.folded,
            blank_line: !self.folded && decorate,
            timestamp: self.timestamp && decorate,
            trailer: (!self.folded && decorate).then(|| "Detaching...".to_string()),
            style: fstyle,
            counts: Some(style),
        };
        let live = self.serve.options();
        let mode = match (&live, self.interval()) {
            (Some(l), _) => Mode::Periodic {
                interval: l.interval,
                report_each: false,
            },
            (None, Some(interval)) => Mode::Periodic {
                interval,
                report_each: true,
            },
            (None, None) => Mode::Once,
        };
        Ok(Request {
            tool: ToolConfig::Stackcount(config),
            plan: Plan {
                duration: self.duration(),
                mode,
                symbolize: Default::default(),
                gate: None,
            },
            printer,
            destinations,
            style: fstyle,
            live,
            command: self.launch.command.clone(),
            push: None,
        })
    }

    /// The stacks `-U` or `-K` ask for.
    fn stacks(&self) -> Stacks {
        Stacks::only(self.user_stacks_only, self.kernel_stacks_only)
    }

    /// How often to print: bcc's `-i`, else `-D`, else only at the end.
    pub fn interval(&self) -> Option<Duration> {
        self.interval.or(self.duration).map(Duration::from_secs)
    }

    /// The whole run's length (`-D`), if any.
    pub fn duration(&self) -> Option<Duration> {
        self.duration.map(Duration::from_secs)
    }

    /// How stacks are printed; `tasks` is whether keys carry processes.
    pub fn style(&self, tasks: bool) -> Style {
        Style {
            delimited: self.delimiter.between(self.stacks()),
            addresses: self.verbose,
            tasks: tasks && self.pid.is_none(),
            unknown_offsets: self.output.unknown == super::output::Unknown::Offset,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::{Cli, Command};
    use super::*;

    fn parse(args: &[&str]) -> Result<StackcountArgs, clap::Error> {
        let mut argv = vec!["flare", "stackcount"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map(|c| match c.command {
            Command::Stackcount(a) => a,
            other => unreachable!("parsed as another command: {other:?}"),
        })
    }

    /// bcc's message and exit status 1 for -K with -U (a usage error
    /// would exit 2).
    #[test]
    fn kernel_and_user_only_together_are_refused_as_bcc_does() {
        let a = parse(&["-K", "-U", "t:sched:sched_switch"]).expect("parses");
        let err = a.request().err().expect("refused").to_string();
        assert!(err.contains("-K and -U are mutually exclusive"), "{err}");
    }

    #[test]
    fn options_follow_bcc() {
        let a = parse(&["-p", "185", "-c", "1", "-P", "-K", "-s", "-v", "c:malloc"]).unwrap();
        let c = a.config();
        assert_eq!((c.pid, c.cpu, c.per_process), (Some(185), Some(1), true));
        assert!(c.recording.stacks.kernel && !c.recording.stacks.user);
        assert_eq!(c.recording.stack_storage_size, 16384);
        // -p hides the process line; -d needs both stacks.
        let s = parse(&["-d", "-p", "1", "x:y"]).unwrap().style(true);
        assert!(s.delimited && !s.tasks);
        assert!(!parse(&["-d", "-U", "x:y"]).unwrap().style(true).delimited);
    }

    #[test]
    fn attach_modes_are_named() {
        assert_eq!(parse(&["f"]).unwrap().config().attach, None);
        for (arg, want) in [
            ("kprobe", KernelAttach::Kprobe),
            ("kprobe-multi", KernelAttach::KprobeMulti),
            ("fentry", KernelAttach::Fentry),
        ] {
            let c = parse(&["--attach", arg, "f"]).unwrap().config();
            assert_eq!(c.attach, Some(want));
            assert_eq!(want.name(), arg);
        }
        assert!(parse(&["--attach", "uprobe", "f"]).is_err());
    }

    #[test]
    fn duration_is_the_interval_unless_one_is_given() {
        let a = parse(&["-D", "5", "f"]).unwrap();
        assert_eq!(a.interval(), Some(Duration::from_secs(5)));
        let a = parse(&["-D", "5", "-i", "1", "f"]).unwrap();
        assert_eq!(a.interval(), Some(Duration::from_secs(1)));
        assert_eq!(parse(&["f"]).unwrap().interval(), None);
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(parse(&["-i", "0", "f"]).is_err());
        assert!(parse(&["--stack-storage-size", "0", "f"]).is_err());
        assert!(parse(&[]).is_err());
    }
}
