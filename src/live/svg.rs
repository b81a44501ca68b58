//! A static SVG flame graph of the live view's tree, for the page's SVG
//! download until the output writers of issue 5 (`output::svg`) land.
//!
//! Plain SVG 1.1: one `<g>` per frame with a `<title>` (name, value and
//! share), a `<rect>` and a `<text>` clipped to the frame's width. No
//! script, so it opens anywhere.

use std::fmt::Write as _;

use super::tree::{Kind, Tree};

const WIDTH: f64 = 1200.0;
const FRAME: f64 = 16.0;
const PAD: f64 = 10.0;
const TOP: f64 = 34.0;
/// Width of one character of the 12 px monospace labels, roughly.
const CHAR: f64 = 7.2;

/// Escapes text for XML content and attribute values.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 does not allow at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A stable warm colour for a frame, by kind and name (as flamegraph.pl's
/// "hot" palette varies by name).
fn colour(kind: Kind, name: &str) -> String {
    let h = name
        .bytes()
        .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
    let v = (h % 1000) as f64 / 1000.0;
    let (r, g, b) = match kind {
        Kind::Root => (200.0, 200.0, 200.0),
        Kind::Process => (190.0 + 40.0 * v, 190.0 + 40.0 * v, 80.0),
        Kind::Kernel => (220.0 + 35.0 * v, 120.0 + 60.0 * v, 40.0),
        Kind::Missed => (170.0, 170.0, 170.0),
        Kind::Waker => (80.0 + 40.0 * v, 130.0 + 60.0 * v, 220.0),
        Kind::User => (230.0 + 25.0 * v, 60.0 + 120.0 * v, 50.0 + 20.0 * v),
    };
    format!("rgb({},{},{})", r as u8, g as u8, b as u8)
}

/// Renders `tree` as an SVG document titled `title`, `unit` naming what
/// the values count.
pub fn render(tree: &Tree, title: &str, unit: &str) -> String {
    let depth = tree.depth().max(1);
    let height = TOP + depth as f64 * FRAME + PAD * 2.0;
    let total = tree.total().max(1) as f64;
    let mut out = String::with_capacity(256 + tree.nodes.len() * 200);
    let _ = write!(
        out,
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" \
         xmlns=\"http://www.w3.org/2000/svg\">\n\
         <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"#fdfdf5\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"16\">{}</text>\n\
         <g font-family=\"monospace\" font-size=\"12\">\n",
        WIDTH / 2.0,
        xml_escape(title)
    );
    if tree.nodes.is_empty() {
        out.push_str("</g>\n</svg>\n");
        return out;
    }
    let scale = (WIDTH - 2.0 * PAD) / total;
    // (node, x, level), root at the bottom.
    let mut stack = vec![(0u32, PAD, 0usize)];
    while let Some((i, x, level)) = stack.pop() {
        let node = &tree.nodes[i as usize];
        let (name, kind) = &tree.names[node.name as usize];
        let w = node.value as f64 * scale;
        let y = height - PAD - (level + 1) as f64 * FRAME;
        let share = node.value as f64 * 100.0 / total;
        let _ = writeln!(
            out,
            "<g><title>{} ({} {unit}, {share:.2}%)</title>\
             <rect x=\"{x:.2}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{}\" fill=\"{}\" rx=\"2\"/>",
            xml_escape(name),
            node.value,
            FRAME - 1.0,
            colour(*kind, name),
        );
        let fits = ((w - 6.0) / CHAR).floor();
        if fits >= 3.0 {
            let fits = fits as usize;
            let label: String = if name.chars().count() <= fits {
                name.clone()
            } else {
                name.chars().take(fits - 2).chain("..".chars()).collect()
            };
            let _ = write!(
                out,
                "<text x=\"{:.2}\" y=\"{:.1}\">{}</text>",
                x + 3.0,
                y + FRAME - 4.5,
                xml_escape(&label)
            );
        }
        out.push_str("</g>\n");
        let mut cx = x;
        for &c in &node.children {
            stack.push((c, cx, level + 1));
            cx += tree.nodes[c as usize].value as f64 * scale;
        }
    }
    out.push_str("</g>\n</svg>\n");
    out
}
