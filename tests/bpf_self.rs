//! flare leaves its own process out of what it records, unless
//! `--include-self`: the main thread blocks for the whole run (offcputime
//! sees it), writes bcc's header after attaching (stackcount on write()
//! sees it), and the symbolizer warms up while sampling (profile would
//! see it on an idle machine).

mod common;

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use common::bpf::{flare, require_bpf, serial};
use common::session::parse_text;

/// Runs flare with `args` and returns its pid and standard output.
fn run(args: &[&str]) -> (u32, String) {
    let child = flare()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting flare");
    let pid = child.id();
    let out = child.wait_with_output().expect("waiting for flare");
    assert!(
        out.status.success(),
        "flare {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (pid, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn offcputime_sees_flare_only_with_include_self() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    for include in [false, true] {
        let mut args = vec!["offcputime", "-u", "-K"];
        if include {
            args.push("--include-self");
        }
        args.push("2");
        let (pid, out) = run(&args);
        // offcputime prints each thread's id; flare's main thread has
        // flare's pid and blocks for the whole run.
        let blocked: u64 = parse_text(&out)
            .iter()
            .filter(|e| e.pid == pid)
            .map(|e| e.count)
            .sum();
        if include {
            assert!(
                blocked >= 1_000_000,
                "flare's main thread blocked {blocked} us of 2 s:\n{out}"
            );
        } else {
            assert_eq!(blocked, 0, "flare traced itself:\n{out}");
        }
    }
}

#[test]
fn stackcount_counts_flare_only_with_include_self() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    for include in [false, true] {
        let mut args = vec!["stackcount", "-P", "-K", "-D", "1"];
        if include {
            args.push("--include-self");
        }
        args.push("t:syscalls:sys_enter_write");
        let (pid, out) = run(&args);
        // bcc's process line: "    comm [pid]".
        let mine = format!(" [{pid}]");
        let seen = out
            .lines()
            .any(|l| l.starts_with("    ") && l.ends_with(&mine));
        assert_eq!(
            seen, include,
            "flare's own header write() (include_self={include}):\n{out}"
        );
    }
}

#[test]
fn profile_leaves_flare_out() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    // On an idle machine profile sees nothing at all (bcc leaves the idle
    // task out), so this test spins a thread of its own for flare to see.
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        })
    };
    let (pid, out) = run(&["profile", "-F", "997", "2"]);
    stop.store(true, Ordering::Relaxed);
    spinner.join().expect("the spinning thread");
    let entries = parse_text(&out);
    let me = std::process::id();
    assert!(
        entries.iter().any(|e| e.pid == me),
        "the test's spinning thread is not in the profile:\n{out}"
    );
    assert!(
        entries.iter().all(|e| e.pid != pid),
        "flare sampled itself:\n{out}"
    );
}
