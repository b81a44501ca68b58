//! Reading timed profiles back: Firefox Profiler files (the processed
//! format flare's `-o NAME.json.gz` and samply's `profile.json.gz`
//! write), gzipped or plain, into a [`Profile`] with a [`Timeline`], so
//! that heat maps and flame graphs of a time range can be drawn from a
//! saved file.
//!
//! Every thread's samples become events at their times (offsets from the
//! profile's start), each pointing at one sample per distinct stack of
//! that thread. Frames keep their names and kinds (from their
//! categories: kernel, interpreted, JIT, off-CPU labels), not their
//! addresses. Strings may be per thread (`thread.stringArray`, older
//! files and flare's) or shared (`shared.stringArray`, newer samply
//! files); input that does not hold together is an error naming the file
//! and what is wrong.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::profile::{
    Event, Frame, FrameKind, Kind, Meta, Profile, Sample, TaskStack, Timeline, Trace, ValueUnit,
};

/// Why a timed file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TimedError {
    #[error("cannot read {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path}: not JSON ({error}); expected a Firefox Profiler file (flare -o NAME.json.gz, samply's profile.json.gz)")]
    Json {
        path: String,
        error: serde_json::Error,
    },
    #[error("{path}: not a Firefox Profiler file: {what}")]
    Format { path: String, what: String },
}

/// Reads a Firefox Profiler file (gzipped or not) into a timed profile.
pub fn read_file(path: &Path) -> Result<Profile, TimedError> {
    let name = path.display().to_string();
    let io = |error| TimedError::Io {
        path: name.clone(),
        error,
    };
    let mut raw = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut raw))
        .map_err(io)?;
    parse(&raw, &name)
}

/// Parses a Firefox Profiler file's bytes (gzipped or not); `name` names
/// it in errors.
pub fn parse(raw: &[u8], name: &str) -> Result<Profile, TimedError> {
    let json: Value = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut text = Vec::new();
        flate2::read::MultiGzDecoder::new(raw)
            .read_to_end(&mut text)
            .map_err(|error| TimedError::Io {
                path: format!("{name} (gzip)"),
                error,
            })?;
        serde_json::from_slice(&text)
    } else {
        serde_json::from_slice(raw)
    }
    .map_err(|error| TimedError::Json {
        path: name.to_string(),
        error,
    })?;
    from_json(&json).map_err(|what| TimedError::Format {
        path: name.to_string(),
        what,
    })
}

/// A column of a table: an array, or (in older files) absent.
fn column<'a>(table: &'a Value, key: &str, table_name: &str) -> Result<&'a [Value], String> {
    table
        .get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| format!("{table_name}.{key} is missing or not an array"))
}

fn index(v: &Value) -> Option<usize> {
    v.as_u64().map(|i| i as usize)
}

/// The table `key` of a thread, or the profile's shared one.
fn table<'a>(thread: &'a Value, shared: Option<&'a Value>, key: &str) -> Result<&'a Value, String> {
    thread
        .get(key)
        .or_else(|| shared.and_then(|s| s.get(key)))
        .ok_or_else(|| format!("a thread has no {key}"))
}

/// What a frame's category says of its kind.
fn kind_of(category: &str) -> FrameKind {
    let c = category.to_ascii_lowercase();
    if c.contains("kernel") {
        FrameKind::Kernel
    } else if c.contains("interpreted") || c == "javascript" || c == "python" {
        FrameKind::Interpreted
    } else if c.contains("jit") {
        FrameKind::Jit
    } else if c.contains("off-cpu") || c.contains("missed") {
        FrameKind::Label
    } else {
        FrameKind::Native
    }
}

/// The earliest registration or sample time of a thread with samples.
fn first_time(threads: &[Value]) -> Option<f64> {
    let mut first: Option<f64> = None;
    let mut see = |t: f64| {
        if t.is_finite() {
            first = Some(first.map_or(t, |f| f.min(t)));
        }
    };
    // Threads without samples (samply's own) may start at 0.
    for thread in threads
        .iter()
        .filter(|t| t["samples"]["length"].as_u64() != Some(0))
    {
        if let Some(t) = thread["registerTime"].as_f64() {
            see(t);
        }
        let samples = &thread["samples"];
        if let Some(t) = samples["time"].as_array().and_then(|t| t.first()) {
            see(t.as_f64().unwrap_or(f64::NAN));
        } else if let Some(t) = samples["timeDeltas"].as_array().and_then(|t| t.first()) {
            see(t.as_f64().unwrap_or(f64::NAN));
        }
    }
    first
}

fn from_json(json: &Value) -> Result<Profile, String> {
    let meta_json = json
        .get("meta")
        .ok_or("no \"meta\" object (is it a Gecko profile or another format?)")?;
    let threads = json
        .get("threads")
        .and_then(Value::as_array)
        .ok_or("no \"threads\" array")?;
    let shared = json.get("shared");
    let shared_strings = shared
        .and_then(|s| s.get("stringArray"))
        .and_then(Value::as_array);
    let categories: Vec<String> = meta_json
        .get("categories")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .map(|c| c["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    let start_ms = meta_json["startTime"].as_f64().unwrap_or(0.0);
    // Times are milliseconds from meta.startTime; the profile starts at
    // meta.profilingStartTime (flare's files: 0), or else (samply's files,
    // on the monotonic clock's scale) at its first thread's start.
    let profiling_start = match meta_json["profilingStartTime"].as_f64() {
        Some(t) => t,
        None => first_time(threads).unwrap_or(0.0),
    };
    let product = meta_json["product"].as_str().unwrap_or("").to_string();
    let interval_ms = meta_json["interval"].as_f64().unwrap_or(1.0);
    let micros = product.contains("microseconds");
    let kind = if micros { Kind::OffCpu } else { Kind::Cpu };
    let mut meta = Meta::new(kind, "");
    meta.tool = product.clone();
    if !micros && interval_ms > 0.0 && interval_ms.is_finite() {
        meta.period_ns = Some((interval_ms * 1e6) as u64);
    }
    if micros {
        meta.unit = ValueUnit::Microseconds;
    }

    let mut samples: Vec<Sample> = Vec::new();
    let mut events: Vec<Event> = Vec::new();
    for (n, thread) in threads.iter().enumerate() {
        let what = |s: String| format!("thread {n}: {s}");
        let strings = thread
            .get("stringArray")
            .or_else(|| thread.get("stringTable"))
            .and_then(Value::as_array)
            .or(shared_strings)
            .ok_or_else(|| {
                what("no string table (thread.stringArray or shared.stringArray)".into())
            })?;
        let string = |v: &Value| -> Result<String, String> {
            let i = index(v).ok_or_else(|| what(format!("{v} is not a string index")))?;
            strings
                .get(i)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| what(format!("string {i} is out of range")))
        };
        let id = |v: &Value| -> Option<u32> {
            match v {
                Value::Number(n) => n.as_u64().map(|n| n as u32),
                Value::String(s) => s.split('.').next()?.parse().ok(),
                _ => None,
            }
        };
        let pid = id(&thread["pid"]);
        let tid = id(&thread["tid"]).or(pid).unwrap_or(0);
        let comm = thread["name"]
            .as_str()
            .or(thread["processName"].as_str())
            .unwrap_or("")
            .to_string();
        let sample_table = table(thread, None, "samples").map_err(what)?;
        let stack_table = table(thread, shared, "stackTable").map_err(what)?;
        let frame_table = table(thread, shared, "frameTable").map_err(what)?;
        let func_table = table(thread, shared, "funcTable").map_err(what)?;
        let prefixes = column(stack_table, "prefix", "stackTable").map_err(what)?;
        let stack_frames = column(stack_table, "frame", "stackTable").map_err(what)?;
        let frame_funcs = column(frame_table, "func", "frameTable").map_err(what)?;
        let frame_cats = frame_table["category"].as_array();
        let frame_lines = frame_table["line"].as_array();
        let frame_inline = frame_table["inlineDepth"].as_array();
        let func_names = column(func_table, "name", "funcTable").map_err(what)?;
        let func_files = func_table["fileName"].as_array();
        let stacks = column(sample_table, "stack", "samples").map_err(what)?;
        let weights = sample_table["weight"].as_array();
        let times: Vec<f64> = match sample_table.get("time").and_then(Value::as_array) {
            Some(t) => t.iter().map(|v| v.as_f64().unwrap_or(0.0)).collect(),
            None => {
                let deltas = column(sample_table, "timeDeltas", "samples").map_err(what)?;
                let mut at = 0.0;
                deltas
                    .iter()
                    .map(|d| {
                        at += d.as_f64().unwrap_or(0.0);
                        at
                    })
                    .collect()
            }
        };
        if times.len() != stacks.len() {
            return Err(what(format!(
                "{} sample times for {} sample stacks",
                times.len(),
                stacks.len()
            )));
        }

        // Frame index -> our frame.
        let mut frames_cache: HashMap<usize, Frame> = HashMap::new();
        let mut frame = |i: usize| -> Result<Frame, String> {
            if let Some(f) = frames_cache.get(&i) {
                return Ok(f.clone());
            }
            let func = frame_funcs
                .get(i)
                .and_then(index)
                .ok_or_else(|| what(format!("frame {i} has no function")))?;
            let name = string(
                func_names
                    .get(func)
                    .ok_or_else(|| what(format!("function {func} is out of range")))?,
            )?;
            let category = frame_cats
                .and_then(|c| c.get(i))
                .and_then(index)
                .and_then(|c| categories.get(c))
                .map_or("", String::as_str);
            let mut f = Frame::named(name, kind_of(category));
            f.inlined = frame_inline
                .and_then(|c| c.get(i))
                .and_then(Value::as_u64)
                .is_some_and(|d| d > 0);
            let file = func_files
                .and_then(|c| c.get(func))
                .filter(|v| !v.is_null())
                .map(&string)
                .transpose()?;
            if let Some(file) = file {
                f.source = Some(Box::new(crate::profile::SourceLine {
                    file: file.into(),
                    line: frame_lines
                        .and_then(|c| c.get(i))
                        .and_then(Value::as_u64)
                        .map(|l| l as u32),
                }));
            }
            frames_cache.insert(i, f.clone());
            Ok(f)
        };
        // Stack index -> sample index.
        let mut by_stack: HashMap<usize, u32> = HashMap::new();
        for (k, (stack, time)) in stacks.iter().zip(&times).enumerate() {
            let Some(stack) = index(stack) else {
                continue; // null: no stack (an idle sample)
            };
            let sample = match by_stack.get(&stack) {
                Some(&s) => s,
                None => {
                    let mut leaf_first = Vec::new();
                    let mut at = Some(stack);
                    while let Some(s) = at {
                        if leaf_first.len() > stack_frames.len() {
                            return Err(what(format!("stack {stack} has a prefix loop")));
                        }
                        let fi = stack_frames
                            .get(s)
                            .and_then(index)
                            .ok_or_else(|| what(format!("stack {s} is out of range")))?;
                        leaf_first.push(frame(fi)?);
                        at = match prefixes.get(s) {
                            Some(Value::Null) | None => None,
                            Some(p) => Some(
                                index(p)
                                    .filter(|&p| p < stack_frames.len())
                                    .ok_or_else(|| what(format!("stack {s} has a bad prefix")))?,
                            ),
                        };
                    }
                    samples.push(Sample::new(
                        TaskStack {
                            pid,
                            tid: Some(tid),
                            comm: comm.as_str().into(),
                            user: Trace::of(leaf_first),
                            kernel: Trace::NotCollected,
                        },
                        None,
                        0,
                    ));
                    let i = (samples.len() - 1) as u32;
                    by_stack.insert(stack, i);
                    i
                }
            };
            let weight = weights
                .and_then(|w| w.get(k))
                .and_then(Value::as_f64)
                .unwrap_or(1.0);
            if !(weight.is_finite() && weight >= 0.0) {
                continue;
            }
            let value = weight.round() as u64;
            samples[sample as usize].value += value;
            let ms = (time - profiling_start).max(0.0);
            events.push(Event {
                time_ns: (ms * 1e6) as u64,
                value,
                sample,
                tid,
                cpu: 0,
            });
        }
    }
    let mut timeline = Timeline {
        origin_ns: 0,
        origin_unix_ns: ((start_ms + profiling_start) * 1e6).max(0.0) as u64,
        events,
    };
    timeline.sort();
    meta.duration = Duration::from_nanos(timeline.end_ns());
    Ok(Profile {
        meta,
        samples,
        timeline: Some(timeline),
    })
}
