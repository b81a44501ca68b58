//! `flare wallclock` arguments: profile's options where they apply, and
//! offcputime's `--state` and `-m`.

use clap::Args;
use flare::collect::Recording;
use flare::output::StackStyle;
use flare::tools::wallclock::Config;
use flare::tools::ToolConfig;

use super::common::LaunchArgs;
use super::nonzero;
use super::output::OutputArgs;

pub const EXAMPLES: &str = "\
Examples:
    flare wallclock -p 185 5          # where PID 185's threads spend their time, 5 seconds
    flare wallclock -o wall.svg -- ./app   # start ./app; flame graph of its time on and off CPU
    flare wallclock -f -U -p 185      # folded user stacks, values in microseconds
    flare wallclock -o wall.pb.gz 5   # pprof with wall and cpu sample types (nanoseconds)
    flare wallclock --state 2 -p 185  # off-CPU time only when waiting uninterruptibly (disk)
    flare wallclock -m 1000 -p 185    # drop blocked periods shorter than 1 ms

Blocked stacks end in a frame naming the state: [off-cpu: sleeping], [off-cpu: disk],
[off-cpu: preempted] (runnable, waiting for a CPU), [off-cpu: idle], ...";

#[derive(Debug, Args)]
pub struct WallclockArgs {
    #[command(flatten)]
    pub target: super::common::TargetArgs,

    #[command(flatten)]
    pub stacks: super::common::StacksArgs,

    /// On-CPU sample frequency, Hertz
    #[arg(short = 'F', long, value_name = "FREQUENCY", default_value_t = flare::defaults::FREQUENCY, value_parser = nonzero)]
    pub frequency: u64,

    /// Count time off CPU only in this task state (0 preempted, 1 sleeping,
    /// 2 uninterruptible; a bitmask as in offcputime)
    #[arg(long, value_name = "STATE", value_parser = super::whole::<u64>)]
    pub state: Option<u64>,

    /// Drop blocked periods shorter than this, in microseconds
    #[arg(short = 'm', long, value_name = "MIN_US", default_value_t = 0, value_parser = super::whole::<u64>)]
    pub min_block_time: u64,

    /// Output folded format, one line per stack (values in microseconds)
    #[arg(short = 'f', long)]
    pub folded: bool,

    #[command(flatten)]
    pub hash_storage: super::common::HashStorageArgs,

    #[command(flatten)]
    pub stack_storage: super::common::StackStorageArgs,

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
    pub launch: LaunchArgs,
}

impl WallclockArgs {
    /// The library config for these arguments.
    pub fn config(&self) -> Config {
        Config {
            target: self.target.target(),
            frequency: self.frequency,
            state: self.state,
            min_us: self.min_block_time,
            duration: self.duration.duration(),
            recording: Recording {
                hash_storage_size: self.hash_storage.hash_storage_size,
                stack_storage_size: self.stack_storage.stack_storage_size,
                ..self
                    .unwind
                    .recording(self.stacks.stacks(), self.include_self)
            },
            ..Config::default()
        }
    }

    /// What to run: the tool, the printer, files, the live view.
    pub fn request(&self) -> anyhow::Result<crate::run::Request> {
        let config = self.config();
        let style = StackStyle::default();
        let printer = super::output::bcc_printer(&self.output, self.folded, style, None);
        let mut request = super::output::request(
            ToolConfig::Wallclock(config.clone()),
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
