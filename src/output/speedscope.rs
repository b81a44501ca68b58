//! speedscope output: the JSON file format of speedscope.app
//! (https://www.speedscope.app/file-format-schema.json), one sampled
//! profile per process, heaviest first, sharing one frame table.
//!
//! Weights are in the profile's time unit where there is one (CPU
//! nanoseconds for `profile`, microseconds for the off-CPU family) so that
//! speedscope shows times, and plain counts otherwise.
//!
//! A profile with a timeline is written one profile per thread instead,
//! its samples in time order, so that speedscope's time-order view shows
//! when each stack ran: `startValue` is the thread's first event (from
//! the profile's start, in the unit), and where a time unit places the
//! events, the time between them is an empty-stack sample (idle, which
//! speedscope draws as a gap).

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

use serde::Serialize;

use crate::profile::{Event, FrameKind, PathKind, Profile, Sample, Timeline, ValueUnit};

const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize)]
struct File {
    #[serde(rename = "$schema")]
    schema: &'static str,
    name: String,
    exporter: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    shared: Shared,
    profiles: Vec<Sampled>,
}

#[derive(Serialize)]
struct Shared {
    frames: Vec<FrameOut>,
}

#[derive(Serialize, Clone, PartialEq, Eq, Hash)]
struct FrameOut {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

#[derive(Serialize)]
struct Sampled {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
}

/// The speedscope unit and the factor from a sample's value to it.
fn unit(profile: &Profile) -> (&'static str, u64) {
    match (profile.meta.unit, profile.meta.period_ns) {
        (ValueUnit::Samples, Some(ns)) => ("nanoseconds", ns),
        (ValueUnit::Microseconds, _) => ("microseconds", 1),
        _ => ("none", 1),
    }
}

/// The shared frame table, built as stacks are added.
#[derive(Default)]
struct FrameTable {
    frames: Vec<FrameOut>,
    index: HashMap<FrameOut, usize>,
}

impl FrameTable {
    /// A sample's stack, root first, as indices into the table.
    fn stack(&mut self, s: &Sample) -> Vec<usize> {
        s.path()
            .iter()
            .filter(|p| p.kind != PathKind::Process)
            .map(|p| {
                let f = p.frame;
                let file = match f {
                    Some(f) if f.source.is_some() => f.file().map(str::to_string),
                    Some(f) if f.kind == FrameKind::Kernel => Some("[kernel.kallsyms]".into()),
                    // speedscope has no frame kinds: the file says it.
                    Some(f) if f.kind == FrameKind::Jit && f.object.is_none() => {
                        Some("[jit]".into())
                    }
                    Some(f) if f.kind == FrameKind::Label => Some("[label]".into()),
                    Some(f) => f.module().map(str::to_string),
                    None => None,
                };
                let out = FrameOut {
                    name: p.name.to_string(),
                    file,
                    line: f.and_then(|f| f.line()),
                };
                *self.index.entry(out.clone()).or_insert_with(|| {
                    self.frames.push(out);
                    self.frames.len() - 1
                })
            })
            .collect()
    }
}

/// Writes the profile as a speedscope JSON file.
pub fn write<W: Write>(mut w: W, profile: &Profile) -> io::Result<()> {
    let mut table = FrameTable::default();
    let profiles = match &profile.timeline {
        Some(t) => by_thread(profile, t, &mut table),
        None => by_process(profile, &mut table),
    };
    let meta = &profile.meta;
    let mut name = format!("flare {}: {}", meta.tool, meta.event);
    if !meta.target.is_empty() {
        name.push_str(", ");
        name.push_str(&meta.target);
    }
    let file = File {
        schema: SCHEMA,
        name,
        exporter: format!("flare {}", env!("CARGO_PKG_VERSION")),
        active_profile_index: 0,
        shared: Shared {
            frames: table.frames,
        },
        profiles,
    };
    serde_json::to_writer(&mut w, &file).map_err(io::Error::other)?;
    writeln!(w)
}

/// One profile per thread, its events in time order; idle time between
/// them (where the unit is a time) as empty-stack samples.
fn by_thread(profile: &Profile, timeline: &Timeline, table: &mut FrameTable) -> Vec<Sampled> {
    let (unit, factor) = unit(profile);
    // Nanoseconds per unit, to place events; none for counts.
    let ns_per_unit = match unit {
        "nanoseconds" => Some(1),
        "microseconds" => Some(1000),
        _ => None,
    };
    let mut events: Vec<&Event> = timeline.events.iter().collect();
    events.sort_by_key(|e| e.time_ns);
    let mut order: Vec<(u32, u32)> = Vec::new();
    let mut threads: HashMap<(u32, u32), (Sampled, u64)> = HashMap::new();
    let mut stacks: HashMap<u32, Vec<usize>> = HashMap::new();
    for e in events {
        let Some(s) = profile.samples.get(e.sample as usize) else {
            continue;
        };
        let pid = s.task.pid.unwrap_or(0);
        let key = (pid, e.tid);
        let at = ns_per_unit.map_or(0, |n| timeline.offset_ns(e) / n);
        let (sampled, end) = threads.entry(key).or_insert_with(|| {
            order.push(key);
            let name = match s.task.pid {
                Some(pid) if pid != e.tid => format!("{} ({pid}/{})", s.task.comm, e.tid),
                Some(pid) => format!("{} ({pid})", s.task.comm),
                None => format!("{} ({})", s.task.comm, e.tid),
            };
            let sampled = Sampled {
                kind: "sampled",
                name,
                unit,
                start_value: at,
                end_value: at,
                samples: Vec::new(),
                weights: Vec::new(),
            };
            (sampled, at)
        });
        if ns_per_unit.is_some() && at > *end {
            sampled.samples.push(Vec::new());
            sampled.weights.push(at - *end);
            sampled.end_value += at - *end;
        }
        let stack = stacks
            .entry(e.sample)
            .or_insert_with(|| table.stack(s))
            .clone();
        let weight = e.value * factor;
        sampled.samples.push(stack);
        sampled.weights.push(weight);
        sampled.end_value += weight;
        *end = sampled.end_value;
    }
    order
        .iter()
        .filter_map(|k| threads.remove(k).map(|t| t.0))
        .collect()
}

/// One profile per process, heaviest first, each stack once.
fn by_process(profile: &Profile, table: &mut FrameTable) -> Vec<Sampled> {
    let (unit, factor) = unit(profile);
    // Processes in order of first appearance, keyed by pid and name.
    let mut order: Vec<(Option<u32>, Arc<str>)> = Vec::new();
    let mut by_process: HashMap<(Option<u32>, Arc<str>), Sampled> = HashMap::new();
    for s in &profile.samples {
        let key = (s.task.pid, s.task.comm.clone());
        let sampled = by_process.entry(key.clone()).or_insert_with(|| {
            order.push(key.clone());
            Sampled {
                kind: "sampled",
                name: match key.0 {
                    Some(pid) => format!("{} ({pid})", key.1),
                    None => key.1.to_string(),
                },
                unit,
                start_value: 0,
                end_value: 0,
                samples: Vec::new(),
                weights: Vec::new(),
            }
        });
        let stack = table.stack(s);
        let weight = s.value * factor;
        sampled.samples.push(stack);
        sampled.weights.push(weight);
        sampled.end_value += weight;
    }
    let mut profiles: Vec<Sampled> = order.iter().filter_map(|k| by_process.remove(k)).collect();
    profiles.sort_by_key(|p| std::cmp::Reverse(p.end_value));
    profiles
}
