//! Arguments of the subcommands that work on saved profiles:
//! `flare flamegraph`, `flare diff` and `flare top`.

use std::path::PathBuf;

use clap::Args;
use flare::output::svg::{Palette, SvgOptions};

/// `flare flamegraph IN [-o OUT.svg]`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
    flare flamegraph cpu.folded -o cpu.svg
    perf script | stackcollapse-perf.pl > out.folded; flare flamegraph out.folded > out.svg
    flare flamegraph --reverse cpu.folded -o callers.svg   # leaves at the top, callers below")]
pub struct FlamegraphArgs {
    /// Folded stacks (flare -f, bcc -f, perf + stackcollapse-perf.pl); - for stdin
    #[arg(value_name = "IN")]
    pub input: PathBuf,

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

Example:
    flare diff before.folded after.folded -o diff.svg"
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
