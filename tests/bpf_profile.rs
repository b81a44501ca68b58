//! Real BPF tests of `flare profile` against workloads whose truth is
//! known (tests/workloads/twofuncs.c and syscalls.c). They need root; see
//! `common::bpf::require_bpf`. Each holds `serial()` while the CPUs are
//! loaded, so tests do not skew each other.
//!
//! Tolerances: a function's share of samples within 5 percentage points of
//! the CPU share the workload gave it; sample counts within 10 % of
//! frequency x the CPU seconds the workload reports for itself.

mod common;

use common::bpf::{require_bpf, serial};
use common::session::{parse_folded, parse_text, Entry, Flare, Workload, SIGTERM};

const NCPU_ALL: usize = 0;

fn online_cpus() -> usize {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    s.trim()
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

fn events_for(n: usize) -> usize {
    if n == NCPU_ALL {
        online_cpus()
    } else {
        n
    }
}

/// Runs flare with `args` around one run of `w`, returns flare's stdout and
/// stderr and the workload's CPU seconds.
fn profile_around(w: &mut Workload, args: &[&str], events: usize) -> (String, String, f64) {
    let flare = Flare::start(args, events_for(events));
    w.go();
    let cpu = w.wait_done();
    let (out, err) = flare.stop();
    (out, err, cpu)
}

fn has(e: &Entry, func: &str) -> bool {
    e.frames.iter().any(|f| f == func)
}

fn total(entries: &[&Entry]) -> u64 {
    entries.iter().map(|e| e.count).sum()
}

/// Asserts func_a/func_b shares of the entries and returns the total.
fn assert_shares(entries: &[&Entry], share_a: f64, what: &str) -> u64 {
    let all = total(entries) as f64;
    assert!(all > 0.0, "{what}: no samples");
    let a = entries
        .iter()
        .filter(|e| has(e, "func_a"))
        .map(|e| e.count)
        .sum::<u64>() as f64;
    let b = entries
        .iter()
        .filter(|e| has(e, "func_b"))
        .map(|e| e.count)
        .sum::<u64>() as f64;
    let (pa, pb) = (100.0 * a / all, 100.0 * b / all);
    assert!(
        (pa - share_a).abs() <= 5.0,
        "{what}: func_a got {pa:.1} % of {all} samples, expected {share_a} % ± 5"
    );
    assert!(
        (pb - (100.0 - share_a)).abs() <= 5.0,
        "{what}: func_b got {pb:.1} % of {all} samples, expected {} % ± 5",
        100.0 - share_a
    );
    all as u64
}

fn assert_count(samples: u64, hz: f64, cpu: f64, what: &str) {
    let expected = hz * cpu;
    let err = (samples as f64 - expected).abs() / expected;
    assert!(
        err <= 0.10,
        "{what}: {samples} samples, expected {expected:.0} ({hz} Hz x {cpu:.3} CPU s) ± 10 %"
    );
}

#[test]
fn pid_profile_matches_the_workloads_truth() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let mut w = Workload::start("twofuncs", &["2", "25"]);
    let pid = w.pid.to_string();
    let (out, _, cpu) = profile_around(&mut w, &["profile", "-F", "199", "-p", &pid], 1);
    assert!(
        out.starts_with(&format!(
            "Sampling at 199 Hertz of PID [{pid}] by user + kernel stack... Hit Ctrl-C to end.\n\n"
        )),
        "{out}"
    );
    let entries = parse_text(&out);
    for e in &entries {
        assert_eq!(e.pid, w.pid, "only the target is sampled: {e:?}");
        assert_eq!(
            e.comm, "workload-twofun",
            "comm is the workload's, cut to 15 bytes"
        );
    }
    let refs: Vec<&Entry> = entries.iter().collect();
    let n = assert_shares(&refs, 25.0, "-p");
    assert_count(n, 199.0, cpu, "-p");
    // Frames that symbolize alike are merged into one entry.
    let mut seen = std::collections::HashSet::new();
    for e in &entries {
        assert!(
            seen.insert(e.frames.clone()),
            "duplicate entry {:?}",
            e.frames
        );
    }
    // Ascending order, as bcc prints.
    assert!(entries.windows(2).all(|w| w[0].count <= w[1].count));
}

#[test]
fn two_pids_are_both_profiled_and_nothing_else() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let mut a = Workload::start("twofuncs", &["1.5", "25"]);
    let mut b = Workload::start("twofuncs", &["1.5", "60"]);
    let list = format!("{},{}", a.pid, b.pid);
    let flare = Flare::start(&["profile", "-F", "149", "-p", &list], 2);
    a.go();
    b.go();
    let (ca, cb) = (a.wait_done(), b.wait_done());
    let (out, _) = flare.stop();
    assert!(out.starts_with(&format!(
        "Sampling at 149 Hertz of PID [{}, {}]",
        a.pid, b.pid
    )));
    let entries = parse_text(&out);
    assert!(
        entries.iter().all(|e| e.pid == a.pid || e.pid == b.pid),
        "{out}"
    );
    for (w, share, cpu) in [(&a, 25.0, ca), (&b, 60.0, cb)] {
        let mine: Vec<&Entry> = entries.iter().filter(|e| e.pid == w.pid).collect();
        let n = assert_shares(&mine, share, &format!("pid {}", w.pid));
        assert_count(n, 149.0, cpu, &format!("pid {}", w.pid));
    }
}

#[test]
fn tid_filter_samples_one_thread_only() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    // Thread 0 gives func_a 20 %, thread 1 gives it 80 %.
    let mut w = Workload::start("twofuncs", &["2", "20", "2"]);
    assert_eq!(w.tids.len(), 2);
    let tid = w.tids[1];
    let flare = Flare::start(&["profile", "-F", "199", "-L", &tid.to_string()], 1);
    w.go();
    w.wait_done();
    let (out, _) = flare.stop();
    let cpu = w.thread_cpu[&tid];
    assert!(out.starts_with(&format!("Sampling at 199 Hertz of TID [{tid}]")));
    let entries = parse_text(&out);
    let refs: Vec<&Entry> = entries.iter().collect();
    assert!(
        refs.iter().all(|e| e.pid == w.pid),
        "the pid column is the process id"
    );
    let n = assert_shares(&refs, 80.0, "-L thread 1");
    assert_count(n, 199.0, cpu, "-L thread 1");
}

#[test]
fn user_and_kernel_only() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let mut w = Workload::start("syscalls", &["1"]);
    let pid = w.pid.to_string();
    let (out, _, _) = profile_around(&mut w, &["profile", "-F", "499", "-p", &pid, "-U", "-a"], 1);
    assert!(out.starts_with("Sampling at 499 Hertz of PID") && out.contains("by user stack..."));
    let entries = parse_text(&out);
    assert!(entries.iter().any(|e| has(e, "main")), "{out}");
    assert!(!out.contains("_[k]"), "-U prints no kernel frames:\n{out}");

    let mut w = Workload::start("syscalls", &["1"]);
    let pid = w.pid.to_string();
    let (out, _, _) = profile_around(&mut w, &["profile", "-F", "499", "-p", &pid, "-K", "-a"], 1);
    assert!(out.contains("by kernel stack..."));
    let entries = parse_text(&out);
    assert!(
        !entries
            .iter()
            .any(|e| has(e, "write_zeroes") || has(e, "main")),
        "-K prints no user frames"
    );
    let kernel: Vec<&Entry> = entries.iter().filter(|e| !e.frames.is_empty()).collect();
    assert!(
        !kernel.is_empty(),
        "the workload spends its time in write(2):\n{out}"
    );
    for e in kernel {
        assert!(
            e.frames
                .iter()
                .all(|f| f.ends_with("_[k]") || f == "[Missed Kernel Stack]"),
            "{e:?}"
        );
    }
}

#[test]
fn delimiter_and_folded_order() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let mut w = Workload::start("syscalls", &["1"]);
    let pid = w.pid.to_string();
    let (out, _, _) = profile_around(
        &mut w,
        &["profile", "-F", "499", "-p", &pid, "-f", "-d", "-a"],
        1,
    );
    let lines = parse_folded(&out);
    assert!(!lines.is_empty());
    let mut both = 0;
    for (frames, _) in &lines {
        assert_eq!(
            frames[0], "workload-syscal",
            "folded lines start with the comm"
        );
        let user_at = frames.iter().position(|f| f == "main");
        let kernel_at = frames.iter().position(|f| f.ends_with("_[k]"));
        if let (Some(u), Some(k)) = (user_at, kernel_at) {
            both += 1;
            let delim = frames
                .iter()
                .position(|f| f == "-")
                .expect("-d puts '-' between user and kernel frames");
            assert!(
                u < delim && delim < k,
                "user frames, then '-', then kernel frames: {frames:?}"
            );
            assert!(
                frames[k..].iter().all(|f| f.ends_with("_[k]")),
                "{frames:?}"
            );
        }
    }
    assert!(both > 0, "some stacks have user and kernel frames:\n{out}");
    // Without -d there is no delimiter.
    let mut w = Workload::start("syscalls", &["1"]);
    let pid = w.pid.to_string();
    let (out, _, _) = profile_around(&mut w, &["profile", "-F", "499", "-p", &pid, "-f"], 1);
    assert!(parse_folded(&out)
        .iter()
        .all(|(f, _)| !f.iter().any(|x| x == "-")));
}

#[test]
fn cpu_filter_sees_only_its_cpu() {
    if !require_bpf() || online_cpus() < 2 {
        return;
    }
    let _g = serial();
    for (cpu, expect) in [("1", true), ("0", false)] {
        let mut w = Workload::start_with(&["taskset", "-c", "1"], "twofuncs", &["1", "25"]);
        let (out, _, cpu_s) = profile_around(&mut w, &["profile", "-F", "499", "-C", cpu], 1);
        assert!(out.starts_with(&format!(
            "Sampling at 499 Hertz of all threads by user + kernel stack on CPU#{cpu}..."
        )));
        let mine: Vec<&Entry> = parse_text(&out)
            .into_iter()
            .filter(|e| e.pid == w.pid)
            .collect::<Vec<_>>()
            .leak()
            .iter()
            .collect();
        if expect {
            let n = assert_shares(&mine, 25.0, "-C 1");
            assert_count(n, 499.0, cpu_s, "-C 1");
        } else {
            assert_eq!(
                total(&mine),
                0,
                "a workload pinned to CPU 1 is not seen on CPU 0"
            );
        }
    }
}

/// The CPUs' idle time so far, summed, in seconds (/proc/stat's "cpu"
/// line, in USER_HZ ticks of 1/100 s).
fn idle_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let ticks: f64 = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|t| t.parse().ok())
        .expect("the idle field of /proc/stat");
    ticks / 100.0
}

#[test]
fn system_wide_count_and_idle() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let mut w = Workload::start("twofuncs", &["2", "25"]);
    let (out, _, cpu) = profile_around(&mut w, &["profile", "-F", "499"], NCPU_ALL);
    let entries = parse_text(&out);
    assert!(
        entries.iter().all(|e| e.pid != 0),
        "idle is excluded without -I"
    );
    let mine: Vec<&Entry> = entries.iter().filter(|e| e.pid == w.pid).collect();
    let n = assert_shares(&mine, 25.0, "system-wide");
    assert_count(n, 499.0, cpu, "system-wide");

    // With -I the idle task shows up, as often as the kernel says its
    // CPUs were idle: a machine saturated by other work (a build beside
    // the suite) may have had no idle time at all in the window.
    let flare = Flare::start(&["profile", "-F", "199", "-I"], events_for(NCPU_ALL));
    let idle_before = idle_seconds();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let idle_during = idle_seconds() - idle_before;
    let (out, _) = flare.stop_with(SIGTERM);
    let idle: Vec<Entry> = parse_text(&out)
        .into_iter()
        .filter(|e| e.pid == 0)
        .collect();
    if idle_during < 0.2 {
        eprintln!("the CPUs were idle {idle_during:.2} s of the window: -I's samples not judged");
        return;
    }
    assert!(
        !idle.is_empty(),
        "-I includes idle stacks (the CPUs were idle {idle_during:.2} s):\n{out}"
    );
    assert!(
        idle.iter().all(|e| e.comm.starts_with("swapper/")),
        "{idle:?}"
    );
}

#[test]
fn period_sampling() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let mut w = Workload::start("twofuncs", &["2", "25"]);
    let pid = w.pid.to_string();
    // One sample per 5 ms of CPU clock: 200 per CPU second.
    let (out, _, cpu) = profile_around(&mut w, &["profile", "-c", "5000000", "-p", &pid], 1);
    assert!(out.starts_with("Sampling at every 5000000 events of PID"));
    let entries = parse_text(&out);
    let refs: Vec<&Entry> = entries.iter().collect();
    let n = assert_shares(&refs, 25.0, "-c");
    assert_count(n, 200.0, cpu, "-c");
}

#[test]
fn full_maps_are_reported_with_the_option_to_raise() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    // Two stack slots cannot hold the workload's user and kernel stacks.
    let mut w = Workload::start("syscalls", &["1"]);
    let pid = w.pid.to_string();
    let (out, err, _) = profile_around(
        &mut w,
        &[
            "profile",
            "-F",
            "499",
            "-p",
            &pid,
            "--stack-storage-size",
            "2",
        ],
        1,
    );
    assert!(
        err.contains(
            "stack traces could not be displayed. Consider increasing --stack-storage-size."
        ),
        "{err}"
    );
    assert!(
        out.contains("[Missed Kernel Stack]") || out.contains("[Missed User Stack]"),
        "{out}"
    );
    let missed = err
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap();
    let shown = out.matches("[Missed").count() as u64;
    assert_eq!(missed, shown, "the warning counts the missed stacks shown");

    // One hash slot cannot hold the workload's distinct stacks.
    let mut w = Workload::start("syscalls", &["1"]);
    let pid = w.pid.to_string();
    let (out, err, _) = profile_around(
        &mut w,
        &[
            "profile",
            "-F",
            "499",
            "-p",
            &pid,
            "--hash-storage-size",
            "1",
        ],
        1,
    );
    assert_eq!(parse_text(&out).len(), 1, "one key fits:\n{out}");
    assert!(err.contains("samples were dropped because the hash table was full. Consider increasing --hash-storage-size."), "{err}");
}

#[test]
fn kernel_stacks_have_no_duplicated_top_frame() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let mut w = Workload::start("syscalls", &["1"]);
    let pid = w.pid.to_string();
    let (out, _, _) = profile_around(&mut w, &["profile", "-F", "499", "-p", &pid, "-K"], 1);
    let entries = parse_text(&out);
    assert!(entries.iter().filter(|e| e.frames.len() >= 2).count() > 0);
    for e in entries.iter().filter(|e| e.frames.len() >= 2) {
        assert_ne!(
            e.frames[0], e.frames[1],
            "top kernel frame printed twice: {e:?}"
        );
    }
}

#[test]
fn pid_target_follows_threads_started_after_attach() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    // Two workers created after flare attached; thread 1 swaps the shares,
    // so together they give func_a 50 %.
    let mut w = Workload::start("twofuncs", &["1.5", "25", "2", "late"]);
    assert!(w.tids.is_empty(), "no workers before go");
    let pid = w.pid.to_string();
    let (out, _, cpu) = profile_around(&mut w, &["profile", "-F", "199", "-p", &pid], 1);
    let entries = parse_text(&out);
    let refs: Vec<&Entry> = entries.iter().collect();
    let n = assert_shares(&refs, 50.0, "late threads");
    assert_count(n, 199.0, cpu, "late threads");
}
