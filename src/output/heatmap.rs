//! Sub-second heat maps (FlameScope's view) of a timed profile: one
//! column per second, one row per slice of the second (50 rows of 20 ms
//! by default), each cell coloured by the samples in it, so that bursts,
//! pauses and periodic work stand out; a cell's tooltip gives its time
//! range and count. The time range of a pattern found here is what
//! `flare flamegraph --from S --to S` draws. For the microsecond kinds a
//! cell counts the microseconds of the blocked periods that began in it
//! (as `Profile::range` does: a period belongs to its start).

use std::io::{self, Write};

use regex_lite::Regex;

use crate::profile::{Profile, Timeline};

/// What to count and how to draw it.
#[derive(Clone, Debug)]
pub struct HeatmapOptions {
    /// Rows per second (each a slice of 1 s / rows).
    pub rows: u32,
    /// Only this process's samples.
    pub pid: Option<u32>,
    /// Only this thread's samples.
    pub tid: Option<u32>,
    /// Only samples with a frame whose name matches.
    pub grep: Option<Regex>,
    pub title: String,
}

impl Default for HeatmapOptions {
    fn default() -> Self {
        HeatmapOptions {
            rows: 50,
            pid: None,
            tid: None,
            grep: None,
            title: "Heat map".into(),
        }
    }
}

/// Counts per cell: `counts[column][row]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grid {
    pub rows: u32,
    /// Nanoseconds per row.
    pub slice_ns: u64,
    pub counts: Vec<Vec<u64>>,
}

impl Grid {
    pub fn max(&self) -> u64 {
        self.counts.iter().flatten().copied().max().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().flatten().sum()
    }
}

/// The counts of a timeline's events that pass the filters, by second
/// and slice (at least one column).
pub fn grid(profile: &Profile, timeline: &Timeline, opts: &HeatmapOptions) -> Grid {
    let rows = opts.rows.max(1);
    let slice_ns = (1_000_000_000 / rows as u64).max(1);
    let columns = (timeline.end_ns() / 1_000_000_000 + 1) as usize;
    let mut counts = vec![vec![0u64; rows as usize]; columns];
    // Which samples pass the pid and grep filters, once each.
    let keep: Vec<bool> = profile
        .samples
        .iter()
        .map(|s| {
            opts.pid.is_none_or(|p| s.task.pid == Some(p))
                && opts
                    .grep
                    .as_ref()
                    .is_none_or(|re| s.path().iter().any(|f| re.is_match(f.name)))
        })
        .collect();
    for e in &timeline.events {
        if !keep.get(e.sample as usize).copied().unwrap_or(false)
            || opts.tid.is_some_and(|t| t != e.tid)
        {
            continue;
        }
        let at = timeline.offset_ns(e);
        let col = (at / 1_000_000_000) as usize;
        let row = ((at % 1_000_000_000) / slice_ns).min(rows as u64 - 1) as usize;
        if let Some(c) = counts.get_mut(col) {
            c[row] += e.value;
        }
    }
    Grid {
        rows,
        slice_ns,
        counts,
    }
}

const CELL_W: u32 = 16;
const CELL_H: u32 = 8;
const LEFT: u32 = 70;
const TOP: u32 = 50;

/// White for none, then light to dark red as the count nears the most.
fn colour(count: u64, max: u64) -> String {
    if count == 0 || max == 0 {
        return "#ffffff".into();
    }
    let f = (count as f64 / max as f64).clamp(0.0, 1.0);
    let r = 255.0 - 80.0 * f;
    let g = 235.0 - 215.0 * f;
    let b = 225.0 - 205.0 * f;
    format!("#{:02x}{:02x}{:02x}", r as u8, g as u8, b as u8)
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in crate::profile::clean_name(s).chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// Writes the heat map of a timed profile as SVG; `unit` names what
/// counts are (`samples`, `us`).
pub fn write<W: Write>(mut w: W, grid: &Grid, opts: &HeatmapOptions, unit: &str) -> io::Result<()> {
    let cols = grid.counts.len() as u32;
    let rows = grid.rows;
    let max = grid.max();
    let width = LEFT + cols * CELL_W + 40;
    let width = width.max(LEFT + 420);
    let height = TOP + rows * CELL_H + 110;
    writeln!(
        w,
        r##"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="{width}" height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" font-family="Verdana, sans-serif" font-size="11">
<rect x="0" y="0" width="{width}" height="{height}" fill="#f8f8f8"/>
<text x="{}" y="22" font-size="16" text-anchor="middle">{}</text>
<text x="{}" y="40" text-anchor="middle" fill="#555">{} {unit} in {} s; rows: {} ms slices of each second</text>"##,
        width / 2,
        escape(&opts.title),
        width / 2,
        grid.total(),
        cols,
        grid.slice_ns as f64 / 1e6,
    )?;
    let slice_ms = grid.slice_ns as f64 / 1e6;
    for (c, column) in grid.counts.iter().enumerate() {
        for (r, &n) in column.iter().enumerate() {
            let from = c as f64 + r as f64 * slice_ms / 1000.0;
            let to = from + slice_ms / 1000.0;
            writeln!(
                w,
                r#"<rect class="cell" x="{}" y="{}" width="{CELL_W}" height="{CELL_H}" fill="{}" data-from="{from:.3}" data-to="{to:.3}" data-count="{n}"><title>{from:.3}-{to:.3} s: {n} {unit}</title></rect>"#,
                LEFT + c as u32 * CELL_W,
                TOP + r as u32 * CELL_H,
                colour(n, max),
            )?;
        }
    }
    // Axes: seconds along the bottom, milliseconds of the second down the side.
    let bottom = TOP + rows * CELL_H;
    let step = (cols / 20).max(1);
    for c in (0..cols).step_by(step as usize) {
        writeln!(
            w,
            r#"<text x="{}" y="{}" text-anchor="middle">{c}</text>"#,
            LEFT + c * CELL_W + CELL_W / 2,
            bottom + 14
        )?;
    }
    writeln!(
        w,
        r#"<text x="{}" y="{}" text-anchor="middle">time (s)</text>"#,
        LEFT + cols * CELL_W / 2,
        bottom + 30
    )?;
    let label_every = (rows / 10).max(1);
    for r in (0..rows).step_by(label_every as usize) {
        writeln!(
            w,
            r#"<text x="{}" y="{}" text-anchor="end">{:.0}</text>"#,
            LEFT - 4,
            TOP + r * CELL_H + CELL_H,
            r as f64 * slice_ms
        )?;
    }
    writeln!(
        w,
        r#"<text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">offset in the second (ms)</text>"#,
        TOP + rows * CELL_H / 2,
        TOP + rows * CELL_H / 2
    )?;
    // The legend: ten steps from none to the most.
    let ly = bottom + 50;
    writeln!(
        w,
        r#"<text x="{LEFT}" y="{}">{unit} per cell:</text>"#,
        ly - 4
    )?;
    for i in 0..=10u64 {
        let n = max * i / 10;
        writeln!(
            w,
            r##"<rect class="legend" x="{}" y="{ly}" width="30" height="12" fill="{}" stroke="#ccc"><title>{n} {unit}</title></rect>"##,
            LEFT + i as u32 * 34,
            colour(n, max)
        )?;
        if i % 5 == 0 {
            writeln!(
                w,
                r#"<text x="{}" y="{}" text-anchor="middle">{n}</text>"#,
                LEFT + i as u32 * 34 + 15,
                ly + 26
            )?;
        }
    }
    writeln!(w, "</svg>")
}
