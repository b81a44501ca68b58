//! Real BPF tests of timed collection (issue 24): each tool, asked to keep
//! times, must put every sample and blocked period where the workload's
//! own clock says it happened. `tests/workloads/timeshape.c` spins thread
//! 0 in `steady`, then in `burst`, then in `steady` again, each phase a
//! fixed amount of the thread's own CPU time (so that the burst has its
//! ~100 samples at 199 Hz however slow or busy the machine); thread 1 in
//! `other` throughout; thread 2 naps three times. It reports its windows
//! in CLOCK_MONOTONIC nanoseconds, the clock of BPF's timestamps, so the
//! test compares times directly.
//!
//! Tolerances: one sampling period (5 ms at 199 Hz) at each edge of a
//! window; within the burst at least 90 % of thread 0's samples are in
//! `burst`, outside it at most 5 %; a nap's period lies between the
//! workload's call and return, lasts at least the 300 ms asked for, and
//! (on real hardware, not in emulated guests) starts within 5 ms of the
//! call and lasts within 5 ms of what the workload measured.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::bpf::{require_bpf, serial};
use common::session::Workload;
use flare::collect::{Collector, Recording, Target};
use flare::pipeline::{self, Mode, Plan, Sink};
use flare::profile::{Event, Profile, Sample};
use flare::tools::{self, offcpu, profile, stackcount, wallclock, ToolConfig};

#[derive(Default)]
struct Keep(Option<Profile>);

impl Sink for Keep {
    fn report(&mut self, p: &Profile) -> flare::error::Result<()> {
        self.0 = Some(p.clone());
        Ok(())
    }
}

/// What the workload reported of its own time shape.
struct Shape {
    tids: Vec<u32>,
    burst: (u64, u64),
    naps: Vec<(u64, u64)>,
}

fn window(line: &str) -> (u64, u64) {
    let mut f = line
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse::<u64>().unwrap());
    (f.next().unwrap(), f.next().unwrap())
}

/// Runs `tool` (configured by `config` for the workload's pid) with
/// times kept around one run of timeshape, and returns the profile and
/// the workload's shape.
fn run(config: impl FnOnce(u32) -> ToolConfig) -> (Profile, Shape) {
    run_with(|pid| {
        let mut tool = config(pid);
        tool.keep_times();
        tools::start(tool).expect("the tool starts")
    })
}

/// [`run`] with the collector `start` makes for the workload's pid.
fn run_with(start: impl FnOnce(u32) -> Box<dyn Collector>) -> (Profile, Shape) {
    let mut w = Workload::start("timeshape", &[]);
    let collector = start(w.pid);
    let (tx, stop) = mpsc::channel();
    let worker = thread::spawn(move || {
        w.go();
        w.wait_done();
        tx.send(()).unwrap();
        w
    });
    let mut keep = Keep::default();
    let plan = Plan {
        duration: None,
        mode: Mode::Once,
        symbolize: Default::default(),
        gate: None,
    };
    pipeline::run(collector, &mut [&mut keep], &plan, &stop).expect("the pipeline runs");
    let w = worker.join().unwrap();
    let shape = Shape {
        tids: w.tids.clone(),
        burst: window(w.reports.iter().find(|l| l.starts_with("burst ")).unwrap()),
        naps: w
            .reports
            .iter()
            .filter(|l| l.starts_with("nap "))
            .map(|l| window(l))
            .collect(),
    };
    assert_eq!(shape.naps.len(), 3, "reports: {:?}", w.reports);
    (keep.0.expect("a report"), shape)
}

fn has(s: &Sample, name: &str) -> bool {
    s.task
        .user
        .frames()
        .iter()
        .chain(s.task.kernel.frames())
        .any(|f| &*f.name == name)
}

/// The events of thread `tid`, with their samples.
fn events_of(p: &Profile, tid: u32) -> Vec<(&Event, &Sample)> {
    let t = p.timeline.as_ref().expect("a timeline");
    t.events
        .iter()
        .filter(|e| e.tid == tid)
        .map(|e| (e, &p.samples[e.sample as usize]))
        .collect()
}

/// Every sample's value is the sum of its events'.
fn assert_sums(p: &Profile) {
    let t = p.timeline.as_ref().expect("a timeline");
    let mut sums = vec![0u64; p.samples.len()];
    for e in &t.events {
        sums[e.sample as usize] += e.value;
    }
    for (s, sum) in p.samples.iter().zip(sums) {
        assert_eq!(s.value, sum, "a sample's value is its events' sum");
    }
}

/// Thread 0's share of `burst` inside the burst window and outside it
/// (edges widened by `edge` ns), in percent, with the sample counts.
fn burst_shares(p: &Profile, shape: &Shape, edge: u64) -> ((f64, usize), (f64, usize)) {
    let (b0, b1) = shape.burst;
    let (mut inside, mut outside) = ((0, 0), (0, 0));
    for (e, s) in events_of(p, shape.tids[0]) {
        let t = e.time_ns;
        let slot = if t >= b0 + edge && t + edge <= b1 {
            &mut inside
        } else if t + edge < b0 || t > b1 + edge {
            &mut outside
        } else {
            continue;
        };
        slot.1 += 1;
        if has(s, "burst") {
            slot.0 += 1;
        }
    }
    let pct = |(n, all): (usize, usize)| (100.0 * n as f64 / all.max(1) as f64, all);
    (pct(inside), pct(outside))
}

fn assert_burst_in_its_window(p: &Profile, shape: &Shape, edge: u64, what: &str) {
    let ((inside, n_in), (outside, n_out)) = burst_shares(p, shape, edge);
    let lost = &p.meta.lost;
    eprintln!("{what}: burst {inside:.1} % of {n_in} samples inside its window, {outside:.1} % of {n_out} outside; lost {lost:?}");
    // Emulated guests sample unevenly (timers lag, a frequency's period
    // is adjusted late): 5.10 under TCG once gave perf-event mode 13 of
    // the burst's 100 or so samples, all of them inside its window.
    let min_in = if std::env::var_os("FLARE_EMULATED").is_some() {
        10
    } else {
        20
    };
    assert!(
        n_in >= min_in && n_out >= 2 * min_in,
        "{what}: too few samples of thread 0 ({n_in} in the burst, {n_out} outside; lost {lost:?})"
    );
    assert!(inside >= 90.0, "{what}: burst has {inside:.1} % of thread 0's {n_in} samples inside its window (>= 90 % expected)");
    assert!(outside <= 5.0, "{what}: burst has {outside:.1} % of thread 0's {n_out} samples outside its window (<= 5 % expected)");
}

#[test]
fn profile_samples_happen_when_the_workload_says() {
    if !require_bpf() {
        return;
    }
    let _cpu = serial();
    let (p, shape) = run(|pid| {
        ToolConfig::Profile(profile::Config {
            target: Target::Pids(vec![pid]),
            sampling: flare::bpf::perf::Sampling::Frequency(199),
            per_thread: true,
            ..Default::default()
        })
    });
    assert_sums(&p);
    assert_burst_in_its_window(&p, &shape, 5_000_000, "profile");
    // Thread 1 never runs burst; every event is its own thread's.
    let other = events_of(&p, shape.tids[1]);
    assert!(other.len() >= 100, "thread 1 has {} samples", other.len());
    let in_other = other.iter().filter(|(_, s)| has(s, "other")).count();
    assert!(
        in_other * 100 >= other.len() * 95,
        "thread 1: {in_other} of {} samples in other()",
        other.len()
    );
    assert!(other.iter().all(|(_, s)| !has(s, "burst")));
    // The profile of the burst's range is the burst.
    let t = p.timeline.as_ref().unwrap();
    let (b0, b1) = shape.burst;
    let r = p
        .range(b0 - t.origin_ns + 5_000_000, b1 - t.origin_ns - 5_000_000)
        .expect("a range");
    let thread0: Vec<&Sample> = r
        .samples
        .iter()
        .filter(|s| s.task.tid == Some(shape.tids[0]))
        .collect();
    let all: u64 = thread0.iter().map(|s| s.value).sum();
    let burst: u64 = thread0
        .iter()
        .filter(|s| has(s, "burst"))
        .map(|s| s.value)
        .sum();
    assert!(
        all > 0 && burst * 100 >= all * 90,
        "range of the burst: {burst} of {all} samples in burst"
    );
}

#[test]
fn perf_event_mode_samples_happen_when_the_workload_says() {
    perf_event_mode_in_time(None, "perf-event mode");
}

/// Walking samples may stall for seconds (unwind tables built on a slow
/// or emulated CPU): the samples taken meanwhile wait to be walked, none
/// lost. Here the walk is held back from the start until past the burst,
/// which a reader that walked as it emptied the kernel's 4 MiB buffers
/// (some 250 samples each) lost entirely.
#[test]
fn perf_event_mode_keeps_samples_while_the_walk_stalls() {
    // Thread 0's lead and burst take 1.5 s of its CPU time, about 2.25 s
    // of wall time beside the two other threads on two CPUs.
    perf_event_mode_in_time(Some(Duration::from_secs(4)), "perf-event mode, walk held");
}

/// Perf-event mode's samples of timeshape, the walk held for `pause`.
fn perf_event_mode_in_time(pause: Option<Duration>, what: &str) {
    if !require_bpf() {
        return;
    }
    let _cpu = serial();
    let (p, shape) = run_with(|pid| {
        let config = profile::Config {
            target: Target::Pids(vec![pid]),
            sampling: flare::bpf::perf::Sampling::Frequency(199),
            per_thread: true,
            recording: Recording {
                timed: true,
                ..Recording::default()
            },
            ..Default::default()
        };
        let s = flare::tools::perfmode::Session::start(config).expect("perf events open");
        if let Some(pause) = pause {
            s.pause_walking(pause);
        }
        Box::new(s)
    });
    assert_sums(&p);
    assert_burst_in_its_window(&p, &shape, 5_000_000, what);
}

/// For each of the workload's naps, the longest blocked period of thread
/// 2 that began between its call (1 ms of slack) and its return, as
/// (start, length) in nanoseconds. Not found by name: walking frame
/// pointers (5.10) loses nap(), the caller of libc's frameless nanosleep.
fn naps(p: &Profile, shape: &Shape) -> Vec<Option<(u64, u64)>> {
    let periods: Vec<(u64, u64)> = events_of(p, shape.tids[2])
        .into_iter()
        .map(|(e, _)| (e.time_ns, e.value * 1_000))
        .collect();
    shape
        .naps
        .iter()
        .map(|&(n0, n1)| {
            periods
                .iter()
                .filter(|&&(start, _)| start + 1_000_000 >= n0 && start <= n1)
                .max_by_key(|&&(_, len)| len)
                .copied()
        })
        .collect()
}

fn assert_naps(p: &Profile, shape: &Shape, what: &str) {
    let seen = naps(p, shape);
    for (found, (n0, n1)) in seen.iter().zip(&shape.naps) {
        let Some((start, len)) = found else {
            panic!("{what}: no blocked period of thread 2 began during its nap {n0} .. {n1}");
        };
        eprintln!(
            "{what}: nap began {:+.3} ms from the workload's call, lasted {:+.3} ms off its own measure",
            (*start as f64 - *n0 as f64) / 1e6,
            (*len as f64 - (*n1 - *n0) as f64) / 1e6
        );
    }
    let seen: Vec<(u64, u64)> = seen.into_iter().flatten().collect();
    for ((start, len), (n0, n1)) in seen.iter().zip(&shape.naps) {
        let (start, len) = (*start as i64, *len as i64);
        let (n0, n1) = (*n0 as i64, *n1 as i64);
        // Always: the period lies within the workload's call and return
        // (1 ms of slack) and lasts about the 300 ms asked for: at least
        // 299 ms, or, emulated, 290 ms (the sleep's timer starts at the
        // syscall, and an emulated guest can take milliseconds from there
        // to the switch: 298.3 ms once in the 5.10 guest, the switch 5.3
        // ms after the call).
        assert!(
            start + 1_000_000 >= n0 && start + len <= n1 + 1_000_000,
            "{what}: a nap of {len} ns began at {start}, outside the workload's call {n0} .. return {n1}"
        );
        let floor = if common::bpf::emulated() {
            290_000_000
        } else {
            299_000_000
        };
        assert!(len >= floor, "{what}: a nap of 300 ms lasted {len} ns");
        if common::bpf::emulated() {
            continue;
        }
        assert!(
            (start - n0).abs() <= 5_000_000,
            "{what}: a nap began at {start}, the workload called nanosleep at {n0}"
        );
        assert!(
            (len - (n1 - n0)).abs() <= 5_000_000,
            "{what}: a nap lasted {len} ns, the workload measured {} ns",
            n1 - n0
        );
    }
}

#[test]
fn offcpu_periods_keep_their_start_and_length() {
    if !require_bpf() {
        return;
    }
    let _cpu = serial();
    let (p, shape) = run(|pid| {
        let mut c = offcpu::Config::new(offcpu::Tool::OffCpu);
        c.threads = offcpu::Threads::Pids(vec![pid]);
        ToolConfig::OffCpu(c)
    });
    assert_sums(&p);
    assert_naps(&p, &shape, "offcputime");
}

#[test]
fn wallclock_keeps_samples_and_periods_in_time() {
    if !require_bpf() {
        return;
    }
    let _cpu = serial();
    let (p, shape) = run(|pid| {
        ToolConfig::Wallclock(wallclock::Config {
            target: Target::Pids(vec![pid]),
            frequency: 199,
            ..Default::default()
        })
    });
    assert_sums(&p);
    assert_naps(&p, &shape, "wallclock");
    assert_burst_in_its_window(&p, &shape, 5_000_000, "wallclock");
}

#[test]
fn stackcount_events_happen_at_each_call() {
    if !require_bpf() {
        return;
    }
    let _cpu = serial();
    let (p, shape) = run(|pid| {
        ToolConfig::Stackcount(stackcount::Config {
            pattern: format!("{}:nap", common::bpf::workload("timeshape").display()),
            pid: Some(pid),
            per_process: true,
            ..Default::default()
        })
    });
    assert_sums(&p);
    let mut calls: Vec<u64> = p
        .timeline
        .as_ref()
        .unwrap()
        .events
        .iter()
        .map(|e| e.time_ns)
        .collect();
    calls.sort_unstable();
    assert_eq!(calls.len(), 3, "one event per call of nap: {calls:?}");
    for (&t, &(n0, n1)) in calls.iter().zip(&shape.naps) {
        assert!(
            (n0..=n1).contains(&t),
            "nap was entered at {t}, outside the workload's call {n0} .. return {n1}"
        );
        assert!(
            common::bpf::emulated() || t - n0 <= 5_000_000,
            "nap was entered at {t}, the workload called it at {n0}"
        );
    }
}

#[test]
fn a_firefox_file_of_a_real_run_has_the_burst_at_its_time() {
    if !require_bpf() {
        return;
    }
    let _cpu = serial();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.json.gz");
    let mut w = Workload::start("timeshape", &[]);
    let pid = w.pid.to_string();
    let flare = common::session::Flare::start(
        &[
            "profile",
            "-F",
            "199",
            "-p",
            &pid,
            "-o",
            file.to_str().unwrap(),
        ],
        4,
    );
    w.go();
    w.wait_done();
    flare.stop();
    let burst_wall = window(
        w.reports
            .iter()
            .find(|l| l.starts_with("burstwall "))
            .unwrap(),
    );
    // Read back by flare's reader of Firefox Profiler files (tested
    // against the profiler's own loader in firefox_consumer.rs): times
    // are offsets from the file's start date, so the burst's window is
    // compared in Unix time.
    let p = flare::analysis::timed::read_file(&file).expect("the file reads");
    let t = p.timeline.as_ref().expect("a timed file");
    let shape = Shape {
        tids: w.tids.clone(),
        burst: (
            burst_wall.0.saturating_sub(t.origin_unix_ns),
            burst_wall.1.saturating_sub(t.origin_unix_ns),
        ),
        naps: Vec::new(),
    };
    let threads: std::collections::HashSet<u32> = t.events.iter().map(|e| e.tid).collect();
    for tid in &shape.tids[..2] {
        assert!(
            threads.contains(tid),
            "thread {tid} has its own track: {threads:?}"
        );
    }
    // One more millisecond of edge: the file keeps times in milliseconds.
    assert_burst_in_its_window(&p, &shape, 6_000_000, "firefox file");
    // flare heatmap's cells of burst(): all within one slice of the
    // burst's window.
    let opts = flare::output::heatmap::HeatmapOptions {
        grep: Some(regex_lite::Regex::new("^burst$").unwrap()),
        ..Default::default()
    };
    let grid = flare::output::heatmap::grid(&p, t, &opts);
    assert!(
        grid.total() >= 20,
        "{} burst samples in the heat map",
        grid.total()
    );
    // Natively every hot cell is within one slice of the burst's window.
    // An emulated guest's clock lags (timers fire late, the guest's
    // wall clock is stepped): 6.1 under TCG once stamped a burst sample
    // 31 ms after the burst's end. There the cells outside may hold no
    // more than the 5 % of the burst's samples that the window check
    // above allows outside.
    let (b0, b1) = shape.burst;
    let mut astray = Vec::new();
    for (column, rows) in grid.counts.iter().enumerate() {
        for (row, &n) in rows.iter().enumerate() {
            let at = column as u64 * 1_000_000_000 + row as u64 * grid.slice_ns;
            if n != 0 && !(at + grid.slice_ns >= b0 && at < b1 + grid.slice_ns) {
                astray.push((at, n));
            }
        }
    }
    let n_astray: u64 = astray.iter().map(|&(_, n)| n).sum();
    let allowed = if common::bpf::emulated() {
        grid.total() / 20
    } else {
        0
    };
    assert!(
        n_astray <= allowed,
        "hot cells (ns, samples) {astray:?} outside the burst {b0} .. {b1}: \
         {n_astray} of {} samples, {allowed} allowed",
        grid.total()
    );
}
