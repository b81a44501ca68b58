//! The live view: a flame graph in the browser, redrawn as samples arrive.
//!
//! A tool that can hand over what it counted since its last read (a
//! [`Source`]) is read every interval through the same collection path its
//! one-shot run uses; a [`Feeder`] symbolizes what is new in each delta
//! with one long-lived [`Symbolizer`] (its caches persist across
//! intervals) and adds it to the windowed [`Store`]. [`server`] serves the page and a JSON snapshot of any
//! window and process from that store; [`snapshot_json`] and [`download`]
//! are what it answers with.

mod fxhash;
pub mod server;
pub mod tree;
pub mod window;

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

pub use window::{Limits, Selection, Store, View};

use crate::error::{Error, Result};
use crate::output::StackStyle;
use crate::profile::{Lost, Sample, ValueUnit};
use crate::symbolize::{RawSample, RawTask, Symbolizer};
use tree::{json_str, Tree};

/// A tool that can be read periodically: each call returns what was
/// counted since the previous one.
pub trait Source {
    fn delta(&mut self) -> Result<(Vec<RawSample>, Lost)>;

    /// Tool-specific clean-up of freshly symbolized samples (the off-CPU
    /// tools drop tracing frames from kernel stacks).
    fn tidy(&self, _samples: &mut [Sample]) {}
}

impl Source for crate::tools::profile::Session<'_> {
    fn delta(&mut self) -> Result<(Vec<RawSample>, Lost)> {
        let c = self.collect(true)?;
        Ok((c.samples, c.lost))
    }
}

impl Source for crate::tools::offcpu::Session<'_> {
    fn delta(&mut self) -> Result<(Vec<RawSample>, Lost)> {
        let c = self.collect(true)?;
        Ok((c.samples, c.lost))
    }

    fn tidy(&self, samples: &mut [Sample]) {
        crate::tools::offcpu::tidy_samples(samples, self.tool());
    }
}

/// Turns each interval's raw samples into the store's stack ids through
/// one long-lived [`Symbolizer`], symbolizing only stacks not seen before:
/// the kernel keeps a stack's id and addresses for the whole run, so a
/// stack seen in one interval means the same in the next.
pub struct Feeder {
    symbolizer: Symbolizer,
    known: fxhash::FxMap<RawKey, u32>,
    batches: u64,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct RawKey {
    task: RawTask,
    waker: Option<RawTask>,
}

/// Known raw stacks are forgotten this often (in intervals), so that a
/// process that reuses a PID (and the same addresses) is named afresh,
/// and so that the map stays small.
const FORGET_EVERY: u64 = 60;
const MAX_KNOWN: usize = 1 << 20;

impl Feeder {
    pub fn new(symbolizer: Symbolizer) -> Self {
        Feeder {
            symbolizer,
            known: Default::default(),
            batches: 0,
        }
    }

    /// Reads one interval from `source`, symbolizes what is new and adds
    /// it all to `store`, `length` being the time since the previous read.
    pub fn step<S: Source + ?Sized>(
        &mut self,
        source: &mut S,
        store: &Mutex<Store>,
        length: Duration,
    ) -> Result<()> {
        let (raw, lost) = source.delta()?;
        self.batches += 1;
        if self.batches % FORGET_EVERY == 0 || self.known.len() > MAX_KNOWN {
            self.known.clear();
        }
        let mut known = Vec::with_capacity(raw.len());
        let mut new_keys = Vec::new();
        let mut new = Vec::new();
        for s in raw {
            let key = RawKey {
                task: s.task,
                waker: s.waker,
            };
            match self.known.get(&key) {
                Some(&id) => known.push((id, s.value)),
                None => {
                    new.push(RawSample {
                        task: key.task.clone(),
                        waker: key.waker.clone(),
                        value: s.value,
                    });
                    new_keys.push(key);
                }
            }
        }
        let mut samples = self.symbolizer.resolve(new);
        source.tidy(&mut samples);
        // A panic elsewhere while holding the lock cannot leave the store
        // half-updated for readers: they only see whole intervals.
        let ids = {
            let mut store = store.lock().unwrap_or_else(|e| e.into_inner());
            store.push_interval(known, samples, lost, length)
        };
        self.known.extend(new_keys.into_iter().zip(ids));
        Ok(())
    }
}

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
        format!("'{s}' is not ADDR:PORT: give e.g. 127.0.0.1:8080, :8080 (loopback) or 0.0.0.0:8080 (a duration goes before --serve)")
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
    let total = view.total();
    let min_value = (total as f64 * min_share).floor() as u64;
    let tree = Tree::build(store, &view, min_value);
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
         \"rate\":{rate:.2},\"stacks\":{},\"processes\":{},\"lost\":{{\"stacks\":{},\"hash_full\":{}}},\
         \"pid\":{},\"last\":{},\"procs\":[",
        unit_name(meta.unit),
        store.seq(),
        store.elapsed().as_secs_f64(),
        view.counts.len(),
        view.processes.len(),
        view.lost.stacks,
        view.lost.hash_full,
        sel.pid.map_or("null".to_string(), |p| p.to_string()),
        sel.last.map_or("null".to_string(), |l| l.as_secs().to_string()),
    );
    for (i, &(pid, comm, value)) in view.processes.iter().take(MAX_PROCESSES).enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "[{pid},");
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
    out.push_str("],\"graph\":");
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
    let mut profile = store.profile(sel);
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
