//! `flare profile` arguments: bcc profile's options, names and defaults.

use clap::Args;
use flare::bpf::perf::Sampling;
use flare::collect::Recording;
use flare::output::StackStyle;
use flare::tools::profile::Config;
use flare::tools::ToolConfig;

use super::nonzero;
use super::output::OutputArgs;

pub const EXAMPLES: &str = "\
Examples:
    flare profile                # profile stack traces at 49 Hertz until Ctrl-C
    flare profile -F 99          # profile stack traces at 99 Hertz
    flare profile -c 1000000     # profile stack traces every 1 in a million events
    flare profile 5              # profile at 49 Hertz for 5 seconds only
    flare profile -f 5           # output in folded format for flame graphs
    flare profile -o cpu.svg 5   # write an interactive flame graph
    flare profile -o cpu.pb.gz -o cpu.json 5  # pprof and speedscope files from one run
    flare profile --serve        # and a live flame graph in the browser (URL on stderr)
    flare profile -- ./app --opt # start ./app, profile it and its children until it exits
    flare profile -F 99 -o app.svg -- ./app  # works without root too: your own command, user stacks (perf events)
    flare profile -p 185         # only profile process with PID 185 (without root: your own processes only)
    flare profile -p 185,186     # only profile processes 185 and 186
    flare profile -L 185         # only profile thread with TID 185
    flare profile -U             # only show user space stacks (no kernel)
    flare profile -K             # only show kernel space stacks (no user)
    flare profile --cgroupmap /sys/fs/bpf/cgset  # only trace cgroups in this BPF map";

#[derive(Debug, Args)]
pub struct ProfileArgs {
    #[command(flatten)]
    pub target: super::common::TargetArgs,

    #[command(flatten)]
    pub stacks: super::common::StacksArgs,

    /// Sample frequency, Hertz [default: 49]
    #[arg(short = 'F', long, value_name = "FREQUENCY", value_parser = nonzero, conflicts_with = "count")]
    pub frequency: Option<u64>,

    /// Sample period, number of events (nanoseconds of CPU clock)
    #[arg(short = 'c', long, value_name = "COUNT", value_parser = nonzero)]
    pub count: Option<u64>,

    #[command(flatten)]
    pub delimiter: super::common::DelimiterArgs,

    /// Add _[k] annotations to kernel frames
    #[arg(short = 'a', long)]
    pub annotations: bool,

    /// Include CPU idle stacks
    #[arg(short = 'I', long)]
    pub include_idle: bool,

    /// Output folded format, one line per stack (for flame graphs)
    #[arg(short = 'f', long)]
    pub folded: bool,

    #[command(flatten)]
    pub hash_storage: super::common::HashStorageArgs,

    #[command(flatten)]
    pub stack_storage: super::common::StackStorageArgs,

    /// CPU number to run profile on
    #[arg(short = 'C', long, value_name = "CPU", value_parser = super::whole::<u32>)]
    pub cpu: Option<u32>,

    #[command(flatten)]
    pub maps: super::common::MapFilterArgs,

    /// Profile flare's own process too (left out by default)
    #[arg(long)]
    pub include_self: bool,

    #[command(flatten)]
    pub unwind: super::common::UnwindArgs,

    #[command(flatten)]
    pub serve: super::serve::ServeArgs,

    #[command(flatten)]
    pub duration: super::common::DurationArgs,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub push: super::agent::PushArgs,

    #[command(flatten)]
    pub launch: super::common::LaunchArgs,
}

impl ProfileArgs {
    /// The library config for these arguments.
    pub fn config(&self) -> Config {
        let sampling = match (self.frequency, self.count) {
            (Some(f), _) => Sampling::Frequency(f),
            (None, Some(c)) => Sampling::Period(c),
            (None, None) => Sampling::Frequency(flare::defaults::FREQUENCY),
        };
        Config {
            target: self.target.target(),
            sampling,
            include_idle: self.include_idle,
            cpu: self.cpu,
            cgroup_map: self.maps.cgroupmap.clone(),
            mntns_map: self.maps.mntnsmap.clone(),
            per_thread: false,
            duration: self.duration.duration(),
            follow_children: false,
            recording: Recording {
                hash_storage_size: self.hash_storage.hash_storage_size,
                stack_storage_size: self.stack_storage.stack_storage_size,
                ..self
                    .unwind
                    .recording(self.stacks.stacks(), self.include_self)
            },
        }
    }

    /// What to run: the tool, bcc's printer, files, the live view.
    pub fn request(&self) -> anyhow::Result<crate::run::Request> {
        let config = self.config();
        let printer = super::output::bcc_printer(&self.output, self.folded, self.style(), None);
        let mut request = super::output::request(
            ToolConfig::Profile(config.clone()),
            config.duration,
            &self.output,
            self.serve.options(),
            printer,
            self.style(),
        )?;
        request.command = self.launch.command.clone();
        request.push = self.push.config_if_any()?;
        Ok(request)
    }

    /// How stacks are printed.
    pub fn style(&self) -> StackStyle {
        StackStyle {
            delimited: self.delimiter.delimited,
            annotate_kernel: self.annotations,
            ..StackStyle::default()
        }
    }
}
