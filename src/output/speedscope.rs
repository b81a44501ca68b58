//! speedscope output: the JSON file format of speedscope.app
//! (https://www.speedscope.app/file-format-schema.json), one sampled
//! profile per process, heaviest first, sharing one frame table.
//!
//! Weights are in the profile's time unit where there is one (CPU
//! nanoseconds for `profile`, microseconds for the off-CPU family) so that
//! speedscope shows times, and plain counts otherwise.

use std::collections::HashMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::profile::{FrameKind, PathKind, Profile, ValueUnit};

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

/// Writes the profile as a speedscope JSON file.
pub fn write<W: Write>(mut w: W, profile: &Profile) -> io::Result<()> {
    let (unit, factor) = unit(profile);
    let mut frames: Vec<FrameOut> = Vec::new();
    let mut frame_index: HashMap<FrameOut, usize> = HashMap::new();
    // Processes in order of first appearance, keyed by pid and name.
    let mut order: Vec<(Option<u32>, String)> = Vec::new();
    let mut by_process: HashMap<(Option<u32>, String), Sampled> = HashMap::new();
    for s in &profile.samples {
        let key = (s.task.pid, s.task.comm.clone());
        let sampled = by_process.entry(key.clone()).or_insert_with(|| {
            order.push(key.clone());
            Sampled {
                kind: "sampled",
                name: match key.0 {
                    Some(pid) => format!("{} ({pid})", key.1),
                    None => key.1.clone(),
                },
                unit,
                start_value: 0,
                end_value: 0,
                samples: Vec::new(),
                weights: Vec::new(),
            }
        });
        let stack = s
            .path()
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
                *frame_index.entry(out.clone()).or_insert_with(|| {
                    frames.push(out);
                    frames.len() - 1
                })
            })
            .collect();
        let weight = s.value * factor;
        sampled.samples.push(stack);
        sampled.weights.push(weight);
        sampled.end_value += weight;
    }
    let mut profiles: Vec<Sampled> = order.iter().filter_map(|k| by_process.remove(k)).collect();
    profiles.sort_by_key(|p| std::cmp::Reverse(p.end_value));
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
        shared: Shared { frames },
        profiles,
    };
    serde_json::to_writer(&mut w, &file).map_err(io::Error::other)?;
    writeln!(w)
}
