//! A PID reused during a run (issue 25, finding 8): a process that exits
//! keeps its own mappings when a later process takes its PID. The
//! workload (tests/workloads/pidreuse.c) runs one executable burning CPU
//! in `reuse_first`, then another (pidreuse2.c, `reuse_second`) under the
//! same PID through `/proc/sys/kernel/ns_last_pid`; both must be named
//! under that PID, each with its share of the CPU time the two really
//! had, and with no `[unknown]` frame in their user stacks.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use common::bpf::{require_bpf, run_flare, serial, workload};
use common::session::{parse_folded, Flare};

/// Seconds of CPU each of the two processes burns.
const SECONDS: &str = "1.5";

/// What the workload's report says of one process.
#[derive(Debug)]
struct Ran {
    pid: u32,
    cpu: f64,
}

/// The two processes of one run of the workload, from its report.
fn read_report(path: &Path) -> (Ran, Ran) {
    let text = std::fs::read_to_string(path).expect("reading the workload's report");
    let ran = |which: &str| {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(which))
            .unwrap_or_else(|| panic!("no {which} line in the report:\n{text}"));
        let mut f = line.split_whitespace();
        Ran {
            pid: f.next().and_then(|p| p.parse().ok()).expect("a pid"),
            cpu: f.next().and_then(|c| c.parse().ok()).expect("CPU seconds"),
        }
    };
    assert!(
        text.contains("done"),
        "the workload did not finish:\n{text}"
    );
    let (first, second) = (ran("first "), ran("second "));
    assert_eq!(first.pid, second.pid, "the second process took the PID");
    assert!(first.cpu > 0.5 && second.cpu > 0.5, "{first:?} {second:?}");
    (first, second)
}

/// The command line that runs the workload, and where it reports.
fn launcher(name: &str) -> (Vec<String>, PathBuf) {
    let report = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("pidreuse-{name}.txt"));
    let _ = std::fs::remove_file(&report);
    let argv = vec![
        workload("pidreuse").display().to_string(),
        "run".into(),
        workload("pidreuse2").display().to_string(),
        SECONDS.into(),
        report.display().to_string(),
    ];
    (argv, report)
}

/// Weights of the samples of process `comm (pid)` in a speedscope file:
/// those whose stack holds `function`, and all.
fn weights(doc: &Value, comm: &str, pid: u32, function: &str) -> (f64, f64) {
    let frames: Vec<&str> = doc["shared"]["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .map(|f| f["name"].as_str().unwrap_or(""))
        .collect();
    let name = format!("{comm} ({pid})");
    let (mut named, mut all) = (0.0, 0.0);
    for p in doc["profiles"].as_array().expect("profiles") {
        if p["name"].as_str() != Some(name.as_str()) {
            continue;
        }
        let samples = p["samples"].as_array().expect("samples");
        let weights = p["weights"].as_array().expect("weights");
        for (s, w) in samples.iter().zip(weights) {
            let w = w.as_f64().unwrap_or(0.0);
            let names: Vec<&str> = s
                .as_array()
                .expect("a stack")
                .iter()
                .filter_map(|i| frames.get(i.as_u64()? as usize).copied())
                .collect();
            all += w;
            if names.contains(&function) {
                named += w;
            }
        }
    }
    (named, all)
}

/// Samples of `comm` in bcc's folded output with an `[unknown]` frame
/// (speedscope names such frames by object and offset instead), and all.
fn unknown(folded: &str, comm: &str) -> (u64, u64) {
    let (mut unknown, mut all) = (0, 0);
    for (frames, n) in parse_folded(folded) {
        if frames[0] != comm {
            continue;
        }
        all += n;
        if frames.iter().any(|f| f == "[unknown]") {
            unknown += n;
        }
    }
    (unknown, all)
}

/// Checks a profile of the two processes (speedscope, and bcc's folded
/// output): each named under the PID with its share of their CPU time
/// (within 10 percentage points), without `[unknown]` frames.
fn check(profile: &Path, folded: &str, first: &Ran, second: &Ran) {
    let doc: Value = serde_json::from_slice(&std::fs::read(profile).expect("reading the profile"))
        .expect("JSON");
    let (a_named, a_all) = weights(&doc, "reuse_a", first.pid, "reuse_first");
    let (b_named, b_all) = weights(&doc, "reuse_b", second.pid, "reuse_second");
    let (a_unknown, a_samples) = unknown(folded, "reuse_a");
    let (b_unknown, b_samples) = unknown(folded, "reuse_b");
    let total = a_all + b_all;
    assert!(total > 0.0, "no samples of either process");
    let summary = format!(
        "pid {}: first {:.1} % of the time in reuse_first ({a_unknown} of {a_samples} samples with [unknown]), \
         second {:.1} % in reuse_second ({b_unknown} of {b_samples} with [unknown]); CPU time {:.2} s + {:.2} s",
        first.pid,
        100.0 * a_named / total,
        100.0 * b_named / total,
        first.cpu,
        second.cpu,
    );
    eprintln!("{summary}");
    assert_eq!(a_unknown + b_unknown, 0, "[unknown] frames: {summary}");
    let truth = first.cpu / (first.cpu + second.cpu);
    for (got, want, what) in [
        (a_named / total, truth, "reuse_first"),
        (b_named / total, 1.0 - truth, "reuse_second"),
    ] {
        assert!(
            (got - want).abs() < 0.10,
            "{what}: share {got:.3}, CPU time says {want:.3}: {summary}"
        );
    }
}

/// Runs the workload under `profile` (given its command line and the
/// speedscope file to write; returns bcc's folded output) and checks what
/// it found.
fn reuse_case(name: &str, profile: impl FnOnce(&[String], &str) -> String) {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let (argv, report) = launcher(name);
    let speedscope = report.with_extension("json");
    let folded = profile(&argv, &speedscope.display().to_string());
    let (first, second) = read_report(&report);
    check(&speedscope, &folded, &first, &second);
}

/// A system-wide profile while the workload runs.
#[test]
fn pid_reuse_keeps_each_process_mappings_system_wide() {
    reuse_case("system", |argv, out| {
        // SAFETY: sysconf has no preconditions.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        // The tracker's events and the sampling events, one each per CPU.
        let flare = Flare::start(&["profile", "-F", "199", "-f", "-o", out], 2 * cpus);
        let status = Command::new(&argv[0])
            .args(&argv[1..])
            .status()
            .expect("running pidreuse");
        assert!(status.success(), "pidreuse failed ({status})");
        flare.stop().0
    });
}

/// `flare profile -- CMD`: the command's children are followed, the
/// second one under the first one's PID.
#[test]
fn pid_reuse_keeps_each_process_mappings_under_a_command() {
    reuse_case("command", |argv, out| {
        let mut args = vec!["profile", "-F", "199", "-f", "-o", out, "--"];
        args.extend(argv.iter().map(String::as_str));
        String::from_utf8_lossy(&run_flare(&args).stdout).into_owned()
    });
}
