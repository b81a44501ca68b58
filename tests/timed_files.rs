//! Timed files: the Firefox Profiler writer (golden files and a round
//! trip through flare's reader), the reader on samply's files and on bad
//! input, speedscope's per-thread time order, and `flare heatmap` and
//! `flare flamegraph --from/--to` on a profile of a known time shape.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

use common::bpf::flare;
use common::{golden, rich, schema, timed};
use flare::analysis::timed as reader;
use flare::output::heatmap::{self, HeatmapOptions};
use flare::output::{firefox, Format, StackStyle};
use flare::profile::Profile;
use serde_json::Value;

fn render(p: &Profile, f: Format) -> Vec<u8> {
    let mut out = Vec::new();
    f.write(&mut out, p, StackStyle::default()).unwrap();
    out
}

fn gunzip(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(raw)
        .read_to_end(&mut out)
        .expect("gzip");
    out
}

#[test]
fn firefox_goldens() {
    for (name, p) in [
        ("cpu", timed::cpu()),
        ("wall", timed::wall()),
        ("offcpu-untimed", rich::offcpu()),
    ] {
        let json = firefox::to_json(&p);
        golden::check(
            &format!("formats-{name}.firefox.json"),
            &(serde_json::to_string_pretty(&json).unwrap() + "\n"),
        );
        // The file is that JSON, gzipped.
        let file: Value = serde_json::from_slice(&gunzip(&render(&p, Format::Firefox))).unwrap();
        assert_eq!(file, json, "{name}");
    }
}

/// What the file says in the places the profiler reads.
#[test]
fn firefox_content() {
    let json = firefox::to_json(&timed::cpu());
    assert_eq!(json["meta"]["interval"], 10.10101);
    assert_eq!(json["meta"]["startTime"], 1_700_000_000_000.0);
    let libs = json["libs"].as_array().unwrap();
    let app = libs
        .iter()
        .find(|l| l["path"] == "/usr/bin/app")
        .expect("the app's library");
    assert_eq!(app["codeId"], "deadbeef0102030405060708090a0b0c0d0e0f10");
    assert!(libs.iter().any(|l| l["name"] == "[kernel.kallsyms]"));
    let threads = json["threads"].as_array().unwrap();
    let app = threads
        .iter()
        .find(|t| t["tid"] == "4243")
        .expect("thread 4243");
    assert_eq!(app["pid"], "4242");
    assert_eq!(app["processName"], "app");
    let strings: Vec<&str> = app["stringArray"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let funcs = &app["funcTable"];
    let name_of = |f: usize| strings[funcs["name"][f].as_u64().unwrap() as usize];
    let frames = &app["frameTable"];
    let n = frames["length"].as_u64().unwrap() as usize;
    let mut seen = BTreeMap::new();
    for i in 0..n {
        let f = frames["func"][i].as_u64().unwrap() as usize;
        seen.insert(name_of(f), i);
    }
    // Native frames are addresses in their library; the inlined one a
    // label at depth 1 with its source line.
    let hb = seen["hash_buf"];
    assert_eq!(frames["address"][hb], 0x1136);
    assert_eq!(frames["line"][hb], 40);
    let hs = seen["hash_step"];
    assert_eq!(frames["inlineDepth"][hs], 1);
    assert_eq!(frames["line"][hs], 12);
    let f = frames["func"][hs].as_u64().unwrap() as usize;
    assert_eq!(
        strings[funcs["fileName"][f].as_u64().unwrap() as usize],
        "hash.h"
    );
    // Categories by kind.
    let cats: Vec<&str> = json["meta"]["categories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let py = threads.iter().find(|t| t["tid"] == "5152").unwrap();
    let py_strings = py["stringArray"].as_array().unwrap();
    let py_funcs = &py["funcTable"];
    let crunch = (0..py_funcs["length"].as_u64().unwrap() as usize)
        .find(|&f| py_strings[py_funcs["name"][f].as_u64().unwrap() as usize] == "crunch")
        .unwrap();
    let frame = (0..py["frameTable"]["length"].as_u64().unwrap() as usize)
        .find(|&i| py["frameTable"]["func"][i] == crunch)
        .unwrap();
    assert_eq!(
        cats[py["frameTable"]["category"][frame].as_u64().unwrap() as usize],
        "Interpreted"
    );
    assert_eq!(
        py_strings[py_funcs["fileName"][crunch].as_u64().unwrap() as usize],
        "worker.py"
    );

    // Wall-clock: weights in microseconds, off-CPU periods as markers.
    let wall = firefox::to_json(&timed::wall());
    let t = &wall["threads"][0];
    let weights: Vec<i64> = t["samples"]["weight"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_i64().unwrap())
        .collect();
    assert_eq!(weights.iter().sum::<i64>(), 900_000, "microseconds in all");
    let m = &t["markers"];
    assert_eq!(m["length"], 1);
    assert_eq!(m["startTime"][0], 200.0);
    assert_eq!(m["endTime"][0], 700.0);
    assert_eq!(m["data"][0]["type"], "OffCpu");

    // Without times: each stack once, at the start, weighted by its value.
    let off = firefox::to_json(&rich::offcpu());
    assert!(off["meta"]["product"]
        .as_str()
        .unwrap()
        .contains("no sample times"));
    let total: i64 = off["threads"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| {
            t["samples"]["weight"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_i64().unwrap())
        })
        .sum();
    assert_eq!(total, 1_250_000);
}

/// Each thread's functions and sample times, by tid.
fn shape(p: &Profile) -> BTreeMap<u32, (BTreeSet<String>, Vec<u64>)> {
    let t = p.timeline.as_ref().unwrap();
    let mut out: BTreeMap<u32, (BTreeSet<String>, Vec<u64>)> = BTreeMap::new();
    for e in &t.events {
        let s = &p.samples[e.sample as usize];
        let entry = out.entry(e.tid).or_default();
        for f in s.path().iter().skip(1) {
            entry.0.insert(f.name.to_string());
        }
        // To the microsecond: the file keeps milliseconds as doubles.
        entry.1.push(t.offset_ns(e) / 1000);
    }
    for v in out.values_mut() {
        v.1.sort();
    }
    out
}

#[test]
fn firefox_round_trip() {
    for p in [timed::cpu(), timed::wall(), timed::burst()] {
        let raw = render(&p, Format::Firefox);
        let back = reader::parse(&raw, "x.json.gz").expect("reads back");
        assert_eq!(
            back.timeline.as_ref().unwrap().events.len(),
            p.timeline.as_ref().unwrap().events.len()
        );
        assert_eq!(back.total(), p.total(), "values");
        let (a, b) = (shape(&p), shape(&back));
        assert_eq!(a.len(), b.len(), "thread count");
        assert_eq!(a, b, "per-thread functions and times");
    }
}

/// Newer files keep one string table for all threads
/// (`shared.stringArray`), and files need not be gzipped.
#[test]
fn reads_shared_strings_and_plain_json() {
    let mut json = firefox::to_json(&timed::burst());
    let strings = json["threads"][0]["stringArray"].take();
    json["threads"][0]
        .as_object_mut()
        .unwrap()
        .remove("stringArray");
    json["shared"] = serde_json::json!({ "stringArray": strings });
    let raw = serde_json::to_vec(&json).unwrap();
    let back = reader::parse(&raw, "shared.json").expect("shared strings");
    assert_eq!(shape(&back), shape(&timed::burst()));
}

#[test]
fn reads_a_samply_file() {
    // Recorded with samply 0.13.1 (`samply record --save-only -r 500 --
    // ./burn`, tests/data/samply-burn.c): 47 samples of one thread.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/samply-burn.json.gz");
    let p = reader::read_file(&path).expect("samply's file");
    let t = p.timeline.as_ref().unwrap();
    assert_eq!(t.events.len(), 47);
    let tids: BTreeSet<u32> = t.events.iter().map(|e| e.tid).collect();
    assert_eq!(tids.len(), 1);
    assert!(p.samples.iter().all(|s| &*s.task.comm == "burn"));
    assert!(t.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    // samply leaves names to the profiler: frames are addresses.
    assert!(p.samples.iter().any(|s| s
        .task
        .user
        .frames()
        .iter()
        .any(|f| f.name.starts_with("0x"))));
    let end = t.end_ns();
    assert!(end > 100_000_000 && end < 2_000_000_000, "{end}");
}

#[test]
fn bad_files_are_errors_naming_the_file() {
    let good = firefox::to_json(&timed::burst());
    let mut bad_stack = good.clone();
    bad_stack["threads"][0]["samples"]["stack"][0] = 999_999.into();
    let mut loop_ = good.clone();
    loop_["threads"][0]["stackTable"]["prefix"][0] = 0.into();
    let mut bad_func = good.clone();
    bad_func["threads"][0]["frameTable"]["func"][0] = 12345.into();
    let mut no_threads = good.clone();
    no_threads.as_object_mut().unwrap().remove("threads");
    let gz = render(&timed::burst(), Format::Firefox);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("garbage", b"steady;main 3\n".to_vec(), "not JSON"),
        ("truncated gzip", gz[..gz.len() / 2].to_vec(), "gzip"),
        ("no meta", b"{\"threads\": []}".to_vec(), "meta"),
        (
            "no threads",
            serde_json::to_vec(&no_threads).unwrap(),
            "threads",
        ),
        (
            "stack out of range",
            serde_json::to_vec(&bad_stack).unwrap(),
            "out of range",
        ),
        ("prefix loop", serde_json::to_vec(&loop_).unwrap(), "loop"),
        (
            "func out of range",
            serde_json::to_vec(&bad_func).unwrap(),
            "out of range",
        ),
    ];
    for (what, raw, says) in cases {
        let e = reader::parse(&raw, "bad.json.gz")
            .expect_err(what)
            .to_string();
        assert!(e.contains("bad.json.gz") && e.contains(says), "{what}: {e}");
    }
}

#[test]
fn speedscope_is_per_thread_in_time_order() {
    let p = timed::cpu();
    let file: Value = serde_json::from_slice(&render(&p, Format::Speedscope)).unwrap();
    let root: Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/speedscope-file-format-schema.json"
    )))
    .unwrap();
    let errors = schema::validate(&root, &file);
    assert!(errors.is_empty(), "{errors:#?}");
    let profiles = file["profiles"].as_array().unwrap();
    let threads: BTreeSet<u32> = p
        .timeline
        .as_ref()
        .unwrap()
        .events
        .iter()
        .map(|e| e.tid)
        .collect();
    assert_eq!(profiles.len(), threads.len(), "one profile per thread");
    let period = 10_101_010u64;
    for prof in profiles {
        let weights: Vec<u64> = prof["weights"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_u64().unwrap())
            .collect();
        let start = prof["startValue"].as_u64().unwrap();
        let end = prof["endValue"].as_u64().unwrap();
        assert_eq!(end - start, weights.iter().sum::<u64>(), "{}", prof["name"]);
        // Stacks weigh one period each; the rest is idle (empty stacks).
        let samples = prof["samples"].as_array().unwrap();
        for (s, w) in samples.iter().zip(&weights) {
            if !s.as_array().unwrap().is_empty() {
                assert_eq!(*w, period);
            }
        }
    }
    // The burst shows where it happened: its samples start 2 s in.
    let file: Value = serde_json::from_slice(&render(&timed::burst(), Format::Speedscope)).unwrap();
    let frames = file["shared"]["frames"].as_array().unwrap();
    let burst = frames.iter().position(|f| f["name"] == "burst").unwrap();
    let prof = &file["profiles"][0];
    let mut at = prof["startValue"].as_u64().unwrap();
    let mut first = None;
    for (s, w) in prof["samples"]
        .as_array()
        .unwrap()
        .iter()
        .zip(prof["weights"].as_array().unwrap())
    {
        if first.is_none() && s.as_array().unwrap().last() == Some(&Value::from(burst)) {
            first = Some(at);
        }
        at += w.as_u64().unwrap();
    }
    assert_eq!(first, Some(2_003_000_000));
}

/// The burst fixture written where the binary can read it.
fn burst_file(dir: &Path) -> String {
    let path = dir.join("shape.json.gz");
    std::fs::write(&path, render(&timed::burst(), Format::Firefox)).unwrap();
    path.display().to_string()
}

fn run_ok(args: &[&str]) -> String {
    let out = flare().args(args).output().expect("running flare");
    assert!(
        out.status.success(),
        "flare {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The cells of a heat map: (from s, count).
fn cells(svg: &str) -> Vec<(f64, u64)> {
    svg.lines()
        .filter(|l| l.starts_with("<rect class=\"cell\""))
        .map(|l| {
            let attr = |k: &str| {
                let at = l.find(&format!("{k}=\"")).unwrap() + k.len() + 2;
                l[at..at + l[at..].find('"').unwrap()].to_string()
            };
            (
                attr("data-from").parse().unwrap(),
                attr("data-count").parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn heatmap_shows_the_burst_where_it_was() {
    let p = timed::burst();
    let opts = HeatmapOptions {
        grep: Some(regex_lite::Regex::new("^burst$").unwrap()),
        ..HeatmapOptions::default()
    };
    let grid = heatmap::grid(&p, p.timeline.as_ref().unwrap(), &opts);
    assert_eq!(grid.total(), 50);
    assert_eq!(grid.counts.len(), 4, "four seconds");
    let dir = tempfile::tempdir().unwrap();
    let file = burst_file(dir.path());
    let svg = run_ok(&["heatmap", &file, "--grep", "^burst$"]);
    assert!(
        svg.contains("<title>2.000-2.020 s: 2 samples</title>"),
        "tooltips"
    );
    let hot: Vec<f64> = cells(&svg)
        .into_iter()
        .filter(|c| c.1 > 0)
        .map(|c| c.0)
        .collect();
    assert!(!hot.is_empty());
    let slice = 0.02;
    for at in &hot {
        assert!(
            *at >= 2.0 - slice && *at < 2.5 + slice,
            "hot cell at {at} s"
        );
    }
    // All samples without the filter; another row count.
    let all = cells(&run_ok(&["heatmap", &file, "--rows", "10"]));
    assert_eq!(all.len(), 40);
    assert_eq!(all.iter().map(|c| c.1).sum::<u64>(), 400);
    // Filters that match nothing count nothing.
    let none = cells(&run_ok(&["heatmap", &file, "--pid", "1"]));
    assert_eq!(none.iter().map(|c| c.1).sum::<u64>(), 0);
    let none = cells(&run_ok(&["heatmap", &file, "--tid", "78"]));
    assert_eq!(none.iter().map(|c| c.1).sum::<u64>(), 0);
}

/// The share of `name` in a flame graph, from its tooltip.
fn share(svg: &str, name: &str) -> f64 {
    let key = format!("<title>{name} (");
    svg.split(&key)
        .nth(1)
        .map(|rest| {
            let pct = &rest[rest.find(", ").unwrap() + 2..rest.find("%)").unwrap()];
            pct.parse().unwrap()
        })
        .unwrap_or(0.0)
}

#[test]
fn flamegraph_of_a_time_range() {
    let dir = tempfile::tempdir().unwrap();
    let file = burst_file(dir.path());
    let inside = run_ok(&["flamegraph", &file, "--from", "2.0", "--to", "2.5"]);
    assert!(
        share(&inside, "burst") >= 90.0,
        "burst inside: {}",
        share(&inside, "burst")
    );
    for (from, to) in [("0", "2.0"), ("2.5", "4.0")] {
        let outside = run_ok(&["flamegraph", &file, "--from", from, "--to", to]);
        assert!(
            share(&outside, "burst") < 5.0,
            "{from}-{to}: {}",
            share(&outside, "burst")
        );
        assert!(share(&outside, "steady") > 90.0);
    }
    // The whole file without a range.
    let whole = run_ok(&["flamegraph", &file]);
    assert!((share(&whole, "burst") - 12.5).abs() < 0.01);
}

#[test]
fn files_without_times_say_how_to_record_them() {
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("a.folded");
    std::fs::write(&folded, "main;work 5\n").unwrap();
    let folded = folded.display().to_string();
    for args in [
        vec!["heatmap", folded.as_str()],
        vec!["flamegraph", folded.as_str(), "--from", "1", "--to", "2"],
    ] {
        let out = flare().args(&args).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("-o NAME.json.gz") && err.contains("a.folded"),
            "{err}"
        );
    }
    let file = burst_file(dir.path());
    let out = flare()
        .args(["flamegraph", &file, "--from", "9", "--to", "10"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("no samples from 9 s to 10 s"));
    let out = flare()
        .args(["flamegraph", &file, "--from", "2", "--to", "1"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be after"));
}
