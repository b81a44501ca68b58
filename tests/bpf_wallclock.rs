//! `flare wallclock` against ground truth: the `wallwork` workload
//! computes in compute() for a known share of each cycle and sleeps in
//! rest() for the remainder, and reports what it measured itself (CPU
//! time, wall time, wall time inside compute(), which is more than its CPU
//! time when the machine is busy and it is preempted). Launched through
//! `-- CMD`, it lives only while flare watches, so per thread the time on
//! and off the CPU must add up to its lifetime.

mod common;

use std::process::{Output, Stdio};

use common::bpf::{flare, require_bpf, serial, workload};

/// The workload's command name (15 bytes of its file name).
const COMM: &str = "workload-wallwo";

fn run(args: &[&str]) -> Output {
    flare()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running flare")
}

/// Folded lines of the workload: (stack, microseconds).
fn lines(out: &str) -> Vec<(String, u64)> {
    out.lines()
        .filter(|l| l.starts_with(COMM))
        .filter_map(|l| {
            let (s, n) = l.rsplit_once(' ')?;
            Some((s.to_string(), n.parse().ok()?))
        })
        .collect()
}

#[test]
fn wall_time_splits_into_compute_and_sleep_and_adds_up_to_the_lifetime() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let w = workload("wallwork");
    let path = w.to_string_lossy().into_owned();
    let dir = tempfile::tempdir().unwrap();
    let pb = dir.path().join("wall.pb.gz");
    let pb_arg = pb.to_string_lossy().into_owned();
    // 4 s: 30 % computing, 70 % asleep, in cycles of 20 ms. At 997 Hz
    // that is some 1,200 on-CPU samples, so that sampling error (about 1
    // point) stays well inside the 3-point tolerance.
    let out = run(&[
        "wallclock",
        "-F",
        "997",
        "-f",
        "-o",
        &pb_arg,
        "--",
        &path,
        "4",
        "30",
        "20",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    let (cpu, wall, in_compute) = common::bpf::wallwork_figures(&err);
    let lines = lines(&text);
    let total: u64 = lines.iter().map(|(_, n)| n).sum();
    let sum = |f: &dyn Fn(&str) -> bool| -> f64 {
        lines
            .iter()
            .filter(|(s, _)| f(s))
            .map(|(_, n)| *n as f64)
            .sum::<f64>()
            / total as f64
    };
    let why = format!("the workload measured cpu {cpu} s, wall {wall} s, in compute() {in_compute} s; flare:\n{text}");
    // One thread: on + off CPU is its lifetime (its wall time, plus the
    // few milliseconds of loading and exiting it does not measure).
    let lifetime = wall * 1e6;
    assert!(
        (total as f64 - lifetime).abs() <= lifetime * 0.03,
        "on + off CPU {total} us vs lifetime {lifetime:.0} us; {why}"
    );
    let compute = sum(&|s| s.split(';').any(|f| f == "compute"));
    let truth = in_compute / wall;
    assert!(
        (compute - truth).abs() <= 0.03,
        "compute() share {compute:.3} vs {truth:.3}; {why}"
    );
    let on_cpu = sum(&|s| !s.contains("[off-cpu: "));
    assert!(
        (on_cpu - cpu / wall).abs() <= 0.03,
        "on-CPU share {on_cpu:.3} vs {:.3}; {why}",
        cpu / wall
    );
    assert!(text.contains("[off-cpu: sleeping]"), "{why}");

    // pprof: wall and cpu sample types, both readable by go tool pprof.
    for index in ["wall", "cpu"] {
        let o = std::process::Command::new("go")
            .args(["tool", "pprof", "-top", "-symbolize=none"])
            .arg(format!("-sample_index={index}"))
            .arg(&pb)
            .env("HOME", dir.path())
            .output()
            .expect("go tool pprof (scripts/deps.sh installs golang-go)");
        let top = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && top.contains(&format!("Type: {index}")),
            "{top}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(top.contains("compute"), "{top}");
    }
}

#[test]
fn a_thread_still_blocked_at_the_end_is_counted() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    // sleep blocks from its start until after flare's 1 s is over: its
    // whole time comes from the blocked period still open when flare
    // reads (the kernel only counts a period when the thread runs again).
    let out = run(&["wallclock", "-f", "1", "--", "sleep", "2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let asleep: u64 = text
        .lines()
        .filter(|l| l.starts_with("sleep;") && l.contains("[off-cpu: sleeping]"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert!(
        (850_000..=1_050_000).contains(&asleep),
        "sleep was blocked {asleep} us of the 1 s run:\n{text}"
    );
}
