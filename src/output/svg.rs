//! Interactive flame graphs (SVG with search, zoom and tooltips), drawn by
//! the inferno library from root-first stacks. flare picks the colours
//! itself so that kind is visible at a glance: in CPU graphs kernel frames
//! are orange, user frames red, inlined ones aqua; off-CPU and wakeup graphs
//! use cool blues on a blue background, with the waker's frames purple.

use std::collections::HashSet;
use std::io::{self, Write};
use std::time::Duration;

use inferno::flamegraph::color::{BackgroundColor, Color, PaletteMap};
use inferno::flamegraph::{self, Direction};

use crate::analysis::{DiffStack, Stacks};
use crate::profile::{FrameKind, Meta, Profile, ValueUnit};

/// Which colours the graph uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Palette {
    /// Warm colours for time on CPU (or event counts).
    #[default]
    Cpu,
    /// Cool colours for time spent blocked or waking.
    OffCpu,
}

/// How to draw a flame graph.
#[derive(Clone, Debug, PartialEq)]
pub struct SvgOptions {
    pub title: String,
    pub subtitle: Option<String>,
    /// What a value counts, in tooltips: `samples`, `us`, `events`.
    pub count_name: String,
    pub palette: Palette,
    /// Merge from the leaves: callees at the root, their callers above.
    pub reverse: bool,
    /// Draw top down (an icicle graph).
    pub inverted: bool,
    /// Frames narrower than this many pixels are left out.
    pub min_width: f64,
}

impl Default for SvgOptions {
    fn default() -> Self {
        SvgOptions {
            title: "Flame Graph".into(),
            subtitle: None,
            count_name: "samples".into(),
            palette: Palette::Cpu,
            reverse: false,
            inverted: false,
            min_width: 0.1,
        }
    }
}

impl SvgOptions {
    /// The options for a profile: a title naming tool, event, duration and
    /// target, the unit in tooltips and the palette of its family.
    pub fn for_profile(meta: &Meta) -> Self {
        let mut title = format!(
            "flare {}: {}, {}",
            meta.tool,
            meta.event,
            seconds(meta.duration)
        );
        if !meta.target.is_empty() {
            title.push_str(", ");
            title.push_str(&meta.target);
        }
        let (count_name, palette, subtitle) = match meta.unit {
            ValueUnit::Samples => (
                "samples",
                Palette::Cpu,
                meta.period_ns.map(|ns| {
                    format!(
                        "one sample = {} of CPU time; kernel frames orange, user red",
                        time(ns)
                    )
                }),
            ),
            ValueUnit::Microseconds => (
                "us",
                Palette::OffCpu,
                Some(
                    "off-CPU time in microseconds; kernel frames blue, user aqua, waker purple"
                        .into(),
                ),
            ),
            ValueUnit::Count => ("events", Palette::Cpu, None),
        };
        SvgOptions {
            title,
            subtitle,
            count_name: count_name.into(),
            palette,
            ..SvgOptions::default()
        }
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn time(ns: u64) -> String {
    match ns {
        0..=9_999 => format!("{ns} ns"),
        10_000..=999_999 => format!("{:.1} us", ns as f64 / 1e3),
        _ => format!("{:.1} ms", ns as f64 / 1e6),
    }
}

/// Writes a profile as a flame graph with the options of its kind.
/// A profile with nothing in it (an interval of stackcount -i in which
/// the event did not fire) is drawn as an empty graph that says so, so
/// that a file rewritten at every interval always holds the last one.
pub fn write<W: Write>(mut w: W, profile: &Profile) -> io::Result<()> {
    let stacks = Stacks::from_profile(profile);
    let opts = SvgOptions::for_profile(&profile.meta);
    if stacks.total() == 0 {
        return write_empty(&mut w, &opts);
    }
    write_stacks(w, &stacks, &opts)
}

/// A graph with a title and a line saying there was nothing to draw.
fn write_empty<W: Write>(w: &mut W, opts: &SvgOptions) -> io::Result<()> {
    let esc = |s: &str| {
        xml_safe(s.to_string())
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    writeln!(
        w,
        r#"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="1200" height="100" xmlns="http://www.w3.org/2000/svg">
<rect x="0" y="0" width="100%" height="100%" fill="rgb(248,248,248)"/>
<text x="600" y="24" font-size="17" font-family="Verdana" text-anchor="middle">{}</text>
<text x="600" y="60" font-size="12" font-family="Verdana" text-anchor="middle">No {} were recorded in this profile: there is no flame graph to draw.</text>
</svg>"#,
        esc(&opts.title),
        esc(&opts.count_name),
    )
}

/// Writes stacks as a flame graph. Fails (writing nothing) when the stacks
/// hold no value at all: there is nothing to draw.
pub fn write_stacks<W: Write>(w: W, stacks: &Stacks, opts: &SvgOptions) -> io::Result<()> {
    if stacks.total() == 0 {
        return Err(nothing_to_draw());
    }
    let lines: Vec<String> = stacks.folded_lines().into_iter().map(xml_safe).collect();
    let mut map = PaletteMap::default();
    // inferno's "all" frame at the root has an empty name: neutral grey.
    map.insert("", rgb(200.0, 200.0, 200.0));
    let mut seen: HashSet<&str> = HashSet::new();
    for s in &stacks.stacks {
        for (depth, f) in s.frames.iter().enumerate() {
            if seen.insert(f) {
                let kind = stacks.kinds.get(f.as_str()).copied();
                map.insert(
                    xml_safe(f.to_string()),
                    colour(f, kind, depth, opts.palette),
                );
            }
        }
    }
    let mut options = inferno_options(opts);
    options.palette_map = Some(&mut map);
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), w)
}

/// Writes a differential flame graph: widths are the "after" values,
/// frames that grew are red and those that shrank blue, deeper for more.
pub fn write_diff<W: Write>(w: W, stacks: &[DiffStack], opts: &SvgOptions) -> io::Result<()> {
    if stacks.iter().all(|s| s.after == 0 && s.before == 0) {
        return Err(nothing_to_draw());
    }
    let lines: Vec<String> = stacks
        .iter()
        .map(|s| xml_safe(format!("{} {} {}", s.frames.join(";"), s.before, s.after)))
        .collect();
    let mut options = inferno_options(opts);
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), w)
}

/// Replaces characters XML 1.0 cannot hold (control characters, which a
/// process name or a mangled symbol may contain) with U+FFFD; inferno
/// escapes the rest.
fn xml_safe(line: String) -> String {
    if line.chars().any(char::is_control) {
        line.chars()
            .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
            .collect()
    } else {
        line
    }
}

fn nothing_to_draw() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "no samples were recorded, so there is no flame graph to draw",
    )
}

fn inferno_options(opts: &SvgOptions) -> flamegraph::Options<'static> {
    let mut o = flamegraph::Options::default();
    o.title = opts.title.clone();
    o.subtitle = opts.subtitle.clone();
    o.count_name = opts.count_name.clone();
    o.min_width = opts.min_width;
    o.reverse_stack_order = opts.reverse;
    if opts.inverted {
        o.direction = Direction::Inverted;
    }
    o.hash = true;
    o.deterministic = true;
    o.bgcolors = Some(match opts.palette {
        Palette::Cpu => BackgroundColor::Yellow,
        Palette::OffCpu => BackgroundColor::Blue,
    });
    o
}

/// A number in [0, 1) from the name, so a function keeps its shade from
/// one graph to the next.
fn shade(name: &str) -> f64 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    (h % 1000) as f64 / 1000.0
}

fn rgb(r: f64, g: f64, b: f64) -> Color {
    Color {
        r: r as u8,
        g: g as u8,
        b: b as u8,
    }
}

/// The colour of a frame by its annotation (`_[k]`, `_[j]`, `_[i]`,
/// `_[w]`) or its kind where no annotation shows it (interpreted
/// functions green, labels grey), its depth (the process name at the
/// root is grey) and the palette.
fn colour(name: &str, kind: Option<FrameKind>, depth: usize, palette: Palette) -> Color {
    let v = shade(name);
    let annotation = name
        .strip_suffix(']')
        .and_then(|n| n.rsplit_once("_["))
        .map(|(_, a)| a);
    if name.starts_with("[Missed") {
        return rgb(160.0, 160.0, 160.0);
    }
    match (palette, annotation, kind) {
        (_, Some("w"), _) => rgb(190.0 + 65.0 * v, 80.0 + 60.0 * v, 190.0 + 65.0 * v),
        (_, Some("i"), _) => rgb(50.0 + 60.0 * v, 165.0 + 55.0 * v, 165.0 + 55.0 * v),
        _ if depth == 0 => rgb(180.0 + 30.0 * v, 180.0 + 30.0 * v, 180.0 + 30.0 * v),
        (_, _, Some(FrameKind::Label)) => rgb(150.0 + 40.0 * v, 150.0 + 40.0 * v, 150.0 + 40.0 * v),
        (_, Some("j"), _) => rgb(0.0, 170.0 + 60.0 * v, 0.0),
        (_, _, Some(FrameKind::Interpreted)) => {
            rgb(80.0 + 60.0 * v, 190.0 + 55.0 * v, 80.0 + 60.0 * v)
        }
        (Palette::Cpu, Some("k"), _) => rgb(190.0 + 65.0 * v, 90.0 + 65.0 * v, 0.0),
        (Palette::Cpu, _, _) => rgb(200.0 + 55.0 * v, 50.0 + 80.0 * v, 50.0 + 80.0 * v),
        (Palette::OffCpu, Some("k"), _) => rgb(80.0 + 60.0 * v, 80.0 + 60.0 * v, 190.0 + 55.0 * v),
        (Palette::OffCpu, _, _) => rgb(50.0 + 60.0 * v, 165.0 + 55.0 * v, 165.0 + 55.0 * v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Kind;

    #[test]
    fn kernel_and_user_frames_differ_in_each_palette() {
        for p in [Palette::Cpu, Palette::OffCpu] {
            let k = colour("vfs_read_[k]", None, 2, p);
            let u = colour("vfs_read", None, 2, p);
            assert_ne!(k, u, "{p:?}");
            // Orange kernel frames have no blue; off-CPU kernel frames are blue.
            match p {
                Palette::Cpu => assert_eq!(k.b, 0),
                Palette::OffCpu => assert!(k.b > k.r && k.b > k.g),
            }
        }
        assert_ne!(
            colour("f", None, 1, Palette::Cpu),
            colour("f", None, 1, Palette::OffCpu)
        );
    }

    #[test]
    fn titles_say_tool_event_duration_and_target() {
        let mut m = Meta::new(Kind::Cpu, "cpu-clock");
        m.duration = Duration::from_millis(5020);
        m.target = "PID [185]".into();
        m.period_ns = Some(10_101_010);
        let o = SvgOptions::for_profile(&m);
        assert_eq!(o.title, "flare profile: cpu-clock, 5.0 s, PID [185]");
        assert_eq!(o.count_name, "samples");
        assert!(o.subtitle.unwrap().contains("10.1 ms"));
        let m = Meta::new(Kind::OffCpu, "sched_switch");
        let o = SvgOptions::for_profile(&m);
        assert_eq!((o.count_name.as_str(), o.palette), ("us", Palette::OffCpu));
    }
}
