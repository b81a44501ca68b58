//! Arguments of the subcommands that work on saved profiles:
//! `flare flamegraph`, `flare heatmap`, `flare diff` and `flare top`.

use std::path::PathBuf;

use clap::Args;
use flare::output::svg::{Palette, SvgOptions};

/// `flare flamegraph IN [-o OUT.svg]`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
    flare flamegraph cpu.folded -o cpu.svg
    perf script | stackcollapse-perf.pl > out.folded; flare flamegraph out.folded > out.svg
    flare flamegraph --reverse cpu.folded -o callers.svg   # leaves at the top, callers below
    flare profile -F 99 -o cpu.json.gz -- ./app             # a timed file
    flare heatmap cpu.json.gz -o heat.svg                   # find the burst
    flare flamegraph cpu.json.gz --from 2.0 --to 2.5 -o burst.svg")]
pub struct FlamegraphArgs {
    /// Folded stacks (flare -f, bcc -f, perf + stackcollapse-perf.pl), or a
    /// timed Firefox Profiler file (flare -o NAME.json.gz, samply's
    /// profile.json.gz); - for stdin
    #[arg(value_name = "IN")]
    pub input: PathBuf,

    /// Draw only the samples from this many seconds after the start (a
    /// timed file only; fractions allowed)
    #[arg(long, value_name = "S", value_parser = seconds)]
    pub from: Option<f64>,

    /// Draw only the samples before this many seconds after the start
    #[arg(long, value_name = "S", value_parser = seconds)]
    pub to: Option<f64>,

    /// The SVG file to write [default: standard output]
    #[arg(short = 'o', long = "output", value_name = "OUT.svg")]
    pub output: Option<PathBuf>,

    /// The title at the top [default: the input's name]
    #[arg(long)]
    pub title: Option<String>,

    /// Reversed (icicle) graph: merge from the leaves and draw top down, so
    /// the hottest functions line the top edge with their callers below
    #[arg(long)]
    pub reverse: bool,

    /// Draw top down (icicle) without reversing the stacks
    #[arg(long)]
    pub inverted: bool,

    /// Leave out frames narrower than this many pixels
    #[arg(long, value_name = "PIXELS", default_value_t = 0.1, value_parser = min_width)]
    pub minwidth: f64,

    /// What the counts are, in tooltips (samples, us, events, ...)
    #[arg(long, value_name = "NAME", default_value = "samples")]
    pub count_name: String,

    /// Use the off-CPU palette (blues) for blocked-time profiles
    #[arg(long)]
    pub offcpu: bool,
}

/// Seconds from a profile's start: a number, 0 or more.
fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "'{s}' is not a time in seconds (a number, 0 or more)"
        )),
    }
}

fn rows(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(v) if (1..=1000).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a number of rows (1 to 1000)")),
    }
}

/// `flare heatmap IN -o OUT.svg`.
#[derive(Debug, Args)]
#[command(
    after_help = "Columns are seconds, rows are slices of each second (20 ms by default), \
and a cell's colour is the number of samples in it (FlameScope's view): bursts, pauses and \
periodic work stand out. Hover a cell for its time range, then draw that range with \
flare flamegraph IN --from S --to S.

The input is a timed file: record one with -o NAME.json.gz (the Firefox Profiler's format), \
or use samply's profile.json.gz.

Examples:
    flare profile -F 99 -o cpu.json.gz -- ./app
    flare heatmap cpu.json.gz -o heat.svg
    flare heatmap cpu.json.gz --rows 100 -o heat.svg        # 10 ms slices
    flare heatmap cpu.json.gz --grep 'gc|malloc' -o gc.svg  # only stacks with a matching frame
    flare heatmap cpu.json.gz --pid 4242 --tid 4250 -o t.svg
    flare flamegraph cpu.json.gz --from 2.0 --to 2.5 -o burst.svg"
)]
pub struct HeatmapArgs {
    /// A timed profile: flare -o NAME.json.gz, samply's profile.json.gz; - for stdin
    #[arg(value_name = "IN")]
    pub input: PathBuf,

    /// The SVG file to write [default: standard output]
    #[arg(short = 'o', long = "output", value_name = "OUT.svg")]
    pub output: Option<PathBuf>,

    /// Rows per second: each row is a slice of 1 s / ROWS
    #[arg(long, value_name = "ROWS", default_value_t = 50, value_parser = rows)]
    pub rows: u32,

    /// Count only this process's samples
    #[arg(short = 'p', long, value_name = "PID", value_parser = super::whole::<u32>)]
    pub pid: Option<u32>,

    /// Count only this thread's samples
    #[arg(short = 't', long, value_name = "TID", value_parser = super::whole::<u32>)]
    pub tid: Option<u32>,

    /// Count only samples whose stack has a frame matching this regular expression
    #[arg(long, value_name = "REGEX")]
    pub grep: Option<String>,

    /// The title at the top [default: the input's name]
    #[arg(long)]
    pub title: Option<String>,
}

fn min_width(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "'{s}' is not a width in pixels (a number, 0 or more)"
        )),
    }
}

impl FlamegraphArgs {
    /// The drawing options for these arguments.
    pub fn options(&self) -> SvgOptions {
        SvgOptions {
            title: self
                .title
                .clone()
                .unwrap_or_else(|| format!("Flame Graph: {}", self.input.display())),
            subtitle: None,
            count_name: self.count_name.clone(),
            palette: if self.offcpu {
                Palette::OffCpu
            } else {
                Palette::Cpu
            },
            reverse: self.reverse,
            inverted: self.reverse || self.inverted,
            min_width: self.minwidth,
        }
    }
}

/// `flare diff BEFORE AFTER -o OUT.svg`.
#[derive(Debug, Args)]
#[command(
    after_help = "Widths are the AFTER profile; BEFORE is scaled to the same total, so \
colours show the change in share: red grew, blue shrank.

Examples:
    flare diff before.folded after.folded -o diff.svg
    flare diff --title 'v2 against v1' v1.folded v2.folded -o v2.svg"
)]
pub struct DiffArgs {
    /// Folded stacks of the first profile
    #[arg(value_name = "BEFORE")]
    pub before: PathBuf,

    /// Folded stacks of the second profile
    #[arg(value_name = "AFTER")]
    pub after: PathBuf,

    /// The SVG file to write
    #[arg(short = 'o', long = "output", value_name = "OUT.svg")]
    pub output: PathBuf,

    /// The title at the top
    #[arg(long, default_value = "Differential Flame Graph")]
    pub title: String,

    /// Leave out frames narrower than this many pixels
    #[arg(long, value_name = "PIXELS", default_value_t = 0.1, value_parser = min_width)]
    pub minwidth: f64,
}

/// `flare top IN`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
    flare top cpu.folded                 # the 20 functions with the most self value
    flare top --total -n 50 cpu.folded   # by total (inclusive) value, 50 of them
    flare profile -f 5 | flare top -     # straight from a profile")]
pub struct TopArgs {
    /// Folded stacks; - for stdin
    #[arg(value_name = "IN")]
    pub input: PathBuf,

    /// Show this many functions (0 for all)
    #[arg(short = 'n', long, default_value_t = 20, value_parser = super::whole::<usize>)]
    pub lines: usize,

    /// Rank by total (inclusive) value instead of self value
    #[arg(long)]
    pub total: bool,
}
