//! The subcommands on saved profiles: read folded stacks or a timed file
//! (all input is checked before anything is written), then draw or
//! tabulate them.

use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use anyhow::{Context, Result};
use flare::analysis::{self, TopEntry};
use flare::output::svg::{self, SvgOptions};

use crate::cli::analyze::{DiffArgs, FlamegraphArgs, HeatmapArgs, TopArgs};
use flare::analysis::timed;
use flare::output::heatmap::{self, HeatmapOptions};
use flare::profile::{Profile, ValueUnit};
use flare::sinks::files::write_atomically;

/// Writes to the file atomically, or to standard output.
fn emit(output: Option<&Path>, draw: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
    match output {
        Some(path) => write_atomically(path, |w| draw(w))
            .with_context(|| format!("cannot write {}", path.display())),
        None => {
            let stdout = io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            draw(&mut out)
                .and_then(|()| out.flush())
                .context(WRITING_STDOUT)
        }
    }
}

/// What a failed write to standard output says it was doing.
const WRITING_STDOUT: &str = "writing to standard output";

/// What to record to have times, for messages about files without them.
const RECORD_TIMES: &str =
    "record a timed file with -o NAME.json.gz (e.g. flare profile -F 99 -o cpu.json.gz -- CMD)";

/// The input's bytes (`-` for standard input).
fn read_input(path: &Path) -> Result<Vec<u8>> {
    let mut raw = Vec::new();
    if path.as_os_str() == "-" {
        io::stdin().lock().read_to_end(&mut raw)?;
    } else {
        raw = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    }
    Ok(raw)
}

/// True for bytes that look like a timed file (gzip, or a JSON object)
/// rather than folded stacks.
fn is_timed(raw: &[u8]) -> bool {
    raw.starts_with(&[0x1f, 0x8b])
        || raw
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b'{')
}

/// The timed profile in `raw`, or an error that says how to record one.
fn timed_profile(path: &Path, raw: &[u8]) -> Result<Profile> {
    let name = if path.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    };
    if !is_timed(raw) {
        anyhow::bail!(
            "{name} has no sample times (folded stacks keep none): {RECORD_TIMES}, then read that file"
        );
    }
    let profile = timed::parse(raw, &name)?;
    if profile
        .timeline
        .as_ref()
        .is_none_or(|t| t.events.is_empty())
    {
        anyhow::bail!("{name} has no timed samples: {RECORD_TIMES}");
    }
    Ok(profile)
}

fn seconds_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

pub fn flamegraph(args: &FlamegraphArgs) -> Result<()> {
    let raw = read_input(&args.input)?;
    let mut opts = args.options();
    let ranged = args.from.is_some() || args.to.is_some();
    let stacks = if is_timed(&raw) || ranged {
        let profile = timed_profile(&args.input, &raw)?;
        let from = args.from.unwrap_or(0.0);
        let to = args.to.unwrap_or(f64::MAX / 1e10);
        if to <= from {
            anyhow::bail!("--to ({to} s) must be after --from ({from} s)");
        }
        let range = profile
            .range(seconds_ns(from), seconds_ns(to))
            .context("the file has no times")?;
        if ranged {
            let end = profile.timeline.as_ref().map_or(0, |t| t.end_ns()) as f64 / 1e9;
            if range.samples.is_empty() {
                anyhow::bail!(
                    "no samples from {from} s to {to} s ({} has samples from 0 to {end:.3} s)",
                    args.input.display()
                );
            }
            opts.subtitle = Some(match args.to {
                Some(to) => format!("{from:.3} s to {to:.3} s of {end:.3} s"),
                None => format!("{from:.3} s to the end ({end:.3} s)"),
            });
        }
        if range.meta.unit == ValueUnit::Microseconds && args.count_name == "samples" {
            opts.count_name = "us".into();
        }
        analysis::Stacks::from_profile(&range)
    } else {
        let name = args.input.display().to_string();
        let name = if name == "-" { "<stdin>".into() } else { name };
        analysis::parse(&raw[..], &name)?
    };
    emit(args.output.as_deref(), |w| {
        svg::write_stacks(w, &stacks, &opts)
    })
}

pub fn heatmap(args: &HeatmapArgs) -> Result<()> {
    let raw = read_input(&args.input)?;
    let profile = timed_profile(&args.input, &raw)?;
    let grep = match &args.grep {
        Some(g) => Some(
            regex_lite::Regex::new(g)
                .map_err(|e| anyhow::anyhow!("bad --grep pattern '{g}': {e}"))?,
        ),
        None => None,
    };
    let opts = HeatmapOptions {
        rows: args.rows,
        pid: args.pid,
        tid: args.tid,
        grep,
        title: args
            .title
            .clone()
            .unwrap_or_else(|| format!("Heat map: {}", args.input.display())),
    };
    let Some(timeline) = profile.timeline.as_ref() else {
        anyhow::bail!("{} has no times: {RECORD_TIMES}", args.input.display());
    };
    let grid = heatmap::grid(&profile, timeline, &opts);
    let unit = match profile.meta.unit {
        ValueUnit::Microseconds => "us",
        _ => "samples",
    };
    emit(args.output.as_deref(), |w| {
        heatmap::write(w, &grid, &opts, unit)
    })
}

pub fn diff(args: &DiffArgs) -> Result<()> {
    let before = analysis::parse_file(&args.before)?;
    let after = analysis::parse_file(&args.after)?;
    let joined = analysis::diff(&before, &after);
    let opts = SvgOptions {
        title: args.title.clone(),
        subtitle: Some(format!(
            "{} -> {}: red grew, blue shrank (before scaled to the after total)",
            args.before.display(),
            args.after.display()
        )),
        min_width: args.minwidth,
        ..SvgOptions::default()
    };
    emit(Some(&args.output), |w| svg::write_diff(w, &joined, &opts))
}

pub fn top(args: &TopArgs) -> Result<()> {
    let stacks = analysis::parse_file(&args.input)?;
    let mut entries = analysis::top(&stacks);
    if args.total {
        entries.sort_by(|a, b| {
            b.total_value
                .cmp(&a.total_value)
                .then(b.self_value.cmp(&a.self_value))
                .then(a.name.cmp(&b.name))
        });
    }
    if args.lines > 0 {
        entries.truncate(args.lines);
    }
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    write_table(&mut out, &entries, stacks.total())
        .and_then(|()| out.flush())
        .context(WRITING_STDOUT)
}

/// `pprof -top`'s columns: self, self%, running sum%, total, total%, name.
pub fn write_table<W: Write>(w: &mut W, entries: &[TopEntry], total: u64) -> io::Result<()> {
    let pct = |v: u64| {
        if total == 0 {
            0.0
        } else {
            100.0 * v as f64 / total as f64
        }
    };
    let width = entries
        .iter()
        .map(|e| e.total_value.to_string().len())
        .max()
        .unwrap_or(0)
        .max(5);
    writeln!(
        w,
        "{:>width$} {:>7} {:>7} {:>width$} {:>7}  function",
        "self", "self%", "sum%", "total", "total%"
    )?;
    let mut sum = 0;
    for e in entries {
        sum += e.self_value;
        writeln!(
            w,
            "{:>width$} {:>6.2}% {:>6.2}% {:>width$} {:>6.2}%  {}",
            e.self_value,
            pct(e.self_value),
            pct(sum),
            e.total_value,
            pct(e.total_value),
            e.name
        )?;
    }
    Ok(())
}
