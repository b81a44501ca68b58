//! The subcommands on saved profiles: read folded stacks (all input is
//! checked before anything is written), then draw or tabulate them.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use flare::analysis::{self, TopEntry};
use flare::output::svg::{self, SvgOptions};

use crate::cli::analyze::{DiffArgs, FlamegraphArgs, TopArgs};
use flare::sinks::files::write_atomically;

/// Writes to the file atomically, or to standard output.
fn emit(output: Option<&Path>, draw: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
    match output {
        Some(path) => write_atomically(path, |w| draw(w))
            .with_context(|| format!("cannot write {}", path.display())),
        None => {
            let stdout = io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            draw(&mut out)?;
            out.flush()?;
            Ok(())
        }
    }
}

pub fn flamegraph(args: &FlamegraphArgs) -> Result<()> {
    let stacks = analysis::parse_file(&args.input)?;
    let opts = args.options();
    emit(args.output.as_deref(), |w| {
        svg::write_stacks(w, &stacks, &opts)
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
    write_table(&mut out, &entries, stacks.total())?;
    out.flush()?;
    Ok(())
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
