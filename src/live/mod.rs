//! The live view: a flame graph in the browser, redrawn as samples arrive.
//!
//! The pipeline reads any collector every interval and hands each
//! interval's symbolized profile to the live sink ([`sink::LiveSink`]),
//! which adds it to the windowed [`Store`]. [`server`] serves the page and
//! a JSON snapshot of any window and process from that store;
//! [`snapshot_json`] and [`download`] are what it answers with. Nothing
//! here knows which tool made the profile.

mod fxhash;
mod query;
pub mod server;
pub mod sink;
pub mod times;
pub mod timeview;
pub mod tree;
pub mod window;

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

pub use timeview::{range_json, timeline_json, TimeQuery};
pub use window::{Limits, Selection, Store, View};

use crate::error::{Error, Result};
use crate::output::StackStyle;
use crate::profile::ValueUnit;
use tree::{json_str, Tree};

/// How to run the live view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Where to listen; loopback unless the user named another address.
    pub bind: SocketAddr,
    /// Time between reads of the kernel maps (and page updates).
    pub interval: Duration,
    pub limits: Limits,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            interval: Duration::from_secs(1),
            limits: Limits::default(),
        }
    }
}

/// Where to serve: `:PORT`, `ADDR:PORT` or `HOST:PORT`. Port 0 picks a
/// free port.
pub fn parse_bind(s: &str) -> std::result::Result<SocketAddr, String> {
    let bad = || {
        format!("'{s}' is not ADDR:PORT: give e.g. 127.0.0.1:8080, :8080 (loopback) or 0.0.0.0:8080 (a duration goes before --serve, as does stackcount's pattern)")
    };
    if !s.contains(':') {
        return Err(bad());
    }
    if let Some(port) = s.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| bad())?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let mut addrs = s.to_socket_addrs().map_err(|e| format!("{}: {e}", bad()))?;
    addrs.next().ok_or_else(bad)
}

/// The unit of the values, as the page and downloads name it.
fn unit_name(u: ValueUnit) -> &'static str {
    match u {
        ValueUnit::Samples => "samples",
        ValueUnit::Microseconds => "us",
        ValueUnit::Count => "events",
    }
}

/// Frames narrower than this share of the view are left out of a
/// snapshot (about a pixel of a 2,000 px wide graph).
pub const DEFAULT_MIN_SHARE: f64 = 1.0 / 2000.0;

/// At most this many processes are listed for the filter.
const MAX_PROCESSES: usize = 200;

/// The JSON the page draws: totals of the selection and its flame graph.
pub fn snapshot_json(store: &Store, sel: Selection, min_share: f64) -> String {
    let view = store.view(sel);
    let min_value = (view.total() as f64 * min_share).floor() as u64;
    let tree = Tree::build(store, &view, min_value);
    write_snapshot(store, &view, sel.pid, sel.last, &tree, "")
}

/// A view's snapshot JSON with its flame graph `tree`; `extra` (fields
/// with their leading commas) goes before the graph.
pub(crate) fn write_snapshot(
    store: &Store,
    view: &View,
    pid: Option<u32>,
    last: Option<Duration>,
    tree: &Tree,
    extra: &str,
) -> String {
    let total = view.total();
    let span = view.span.as_secs_f64();
    let rate = if span > 0.0 { total as f64 / span } else { 0.0 };
    let meta = &store.meta;
    let mut out = String::with_capacity(4096 + tree.nodes.len() * 24);
    out.push_str("{\"tool\":");
    json_str(&mut out, &meta.tool);
    out.push_str(",\"event\":");
    json_str(&mut out, &meta.event);
    out.push_str(",\"target\":");
    json_str(&mut out, &meta.target);
    let _ = write!(
        out,
        ",\"unit\":\"{}\",\"seq\":{},\"elapsed\":{:.3},\"span\":{span:.3},\"total\":{total},\
         \"rate\":{rate:.2},\"stacks\":{},\"processes\":{},\"lost\":{{\"stacks\":{},\"hash_full\":{},\"untracked\":{},\"missed_events\":{}}},\
         \"pid\":{},\"last\":{},\"timed\":{},\"procs\":[",
        unit_name(meta.unit),
        store.seq(),
        store.elapsed().as_secs_f64(),
        view.counts.len(),
        view.processes.len(),
        view.lost.stacks,
        view.lost.hash_full,
        view.lost.untracked,
        view.lost.missed_events,
        pid.map_or("null".to_string(), |p| p.to_string()),
        last.map_or("null".to_string(), |l| l.as_secs().to_string()),
        store.timed(),
    );
    for (i, &(pid, comm, value)) in view.processes.iter().take(MAX_PROCESSES).enumerate() {
        if i > 0 {
            out.push(',');
        }
        match pid {
            Some(pid) => {
                let _ = write!(out, "[{pid},");
            }
            None => out.push_str("[null,"),
        }
        json_str(&mut out, store.string(comm));
        let _ = write!(out, ",{value}]");
    }
    out.push_str("],\"downloads\":[");
    for (i, f) in Format::AVAILABLE.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_str(&mut out, f.name());
    }
    out.push(']');
    out.push_str(extra);
    out.push_str(",\"graph\":");
    tree.write_json(&mut out);
    out.push('}');
    out
}

/// The formats the page offers for download.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Folded,
    Svg,
    Pprof,
}

impl Format {
    /// The formats this build can write; the page hides the others.
    pub const AVAILABLE: &'static [Format] = &[Format::Svg, Format::Folded, Format::Pprof];

    /// The name the page and routes use.
    pub fn name(self) -> &'static str {
        match self {
            Format::Folded => "folded",
            Format::Svg => "svg",
            Format::Pprof => "pprof",
        }
    }
}

/// A rendered download.
#[derive(Debug)]
pub struct Download {
    pub content_type: &'static str,
    pub file_name: &'static str,
    pub body: Vec<u8>,
}

/// The selection rendered in `format`, by the same writers as `-o`.
pub fn download(store: &Store, sel: Selection, format: Format) -> Result<Download> {
    write_download(store.profile(sel), format)
}

/// A profile rendered in `format` for download.
pub(crate) fn write_download(
    mut profile: crate::profile::Profile,
    format: Format,
) -> Result<Download> {
    let (writer, content_type, file_name) = match format {
        Format::Folded => (
            crate::output::Format::Folded,
            "text/plain; charset=utf-8",
            "flare.folded",
        ),
        Format::Svg => (crate::output::Format::Svg, "image/svg+xml", "flare.svg"),
        Format::Pprof => (
            crate::output::Format::Pprof,
            "application/octet-stream",
            "flare.pb.gz",
        ),
    };
    profile.sort_ascending();
    let mut body = Vec::new();
    writer
        .write(&mut body, &profile, StackStyle::default())
        .map_err(|source| Error::Io {
            what: format!("writing the {} download", format.name()),
            source,
        })?;
    Ok(Download {
        content_type,
        file_name,
        body,
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
#[path = "time_tests.rs"]
mod time_tests;
