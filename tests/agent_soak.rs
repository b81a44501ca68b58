//! Soak: `flare agent` with one-second windows for minutes (120 s, or
//! `FLARE_SOAK_SECS`), pushing to a loopback Pyroscope receiver while a
//! CPU-bound workload runs and short-lived processes come and go. After a
//! warm-up, resident memory must stay flat, and every window must arrive.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::bpf::{require_bpf, serial, Reaper};
use common::receivers::HttpReceiver;
use common::session::Workload;

/// Resident set size of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn mean(v: &[u64]) -> f64 {
    v.iter().sum::<u64>() as f64 / v.len().max(1) as f64
}

#[test]
fn rss_stays_flat_over_minutes_of_one_second_windows() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let secs: u64 = std::env::var("FLARE_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120)
        .max(60);
    let warmup = (secs / 4).max(20);
    let server = HttpReceiver::start(0);
    let mut w = Workload::start("twofuncs", &[&(secs + 30).to_string(), "25", "1"]);
    w.go();
    // Short-lived processes: new pids, labels and binaries every window.
    let churn = Arc::new(AtomicBool::new(true));
    let c = Arc::clone(&churn);
    let churner = std::thread::spawn(move || {
        while c.load(Ordering::Relaxed) {
            let _ = Command::new("sh")
                .args(["-c", "i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done"])
                .status();
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let mut agent = Reaper(
        Command::new(env!("CARGO_BIN_EXE_flare"))
            .args([
                "agent",
                "-F",
                "99",
                "--interval",
                "1",
                "--pyroscope",
                &server.url(),
            ])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting flare agent"),
    );
    let pid = agent.0.id();
    let start = Instant::now();
    let mut rss = Vec::new();
    while start.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(1));
        rss.push(rss_kib(pid));
    }
    churn.store(false, Ordering::Relaxed);
    let _ = churner.join();
    // SAFETY: kill has no memory-safety preconditions; the pid is our own
    // child, not yet reaped.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = agent.0.wait().expect("waiting for flare agent");
    let mut err = String::new();
    if let Some(mut e) = agent.0.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "{err}");

    let after_warmup = &rss[warmup as usize..];
    let first = mean(&after_warmup[..10]);
    let last = mean(&after_warmup[after_warmup.len() - 10..]);
    let peak = *after_warmup.iter().max().unwrap_or(&0);
    eprintln!(
        "soak {secs} s: RSS after warm-up {first:.0} KiB, at the end {last:.0} KiB, peak {peak} KiB; {} windows received",
        server.requests().len()
    );
    // Flat: at most 1 MiB of growth from just after warm-up to the end.
    assert!(
        last - first <= 1024.0,
        "RSS grew from {first:.0} to {last:.0} KiB: {rss:?}"
    );
    let line = err.lines().find(|l| l.contains("delivered")).unwrap_or("");
    assert!(
        line.contains(" 0 dropped") && line.contains(" 0 left"),
        "{err}"
    );
    assert!(server.requests().len() as u64 >= secs - 5, "{err}");
}
