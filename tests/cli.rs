//! The `flare` binary's behaviour at its edges: bad input gets one clear
//! line and a non-zero exit, Ctrl-C/SIGTERM still print the profile, a
//! closed pipe ends quietly, help has examples.

mod common;

use std::process::{Command, Stdio};

use common::bpf::{flare, require_bpf, serial};
use common::session::{parse_text, Flare, Workload, SIGTERM};

fn fails_with(args: &[&str], needle: &str) {
    let out = flare().args(args).stdin(Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "flare {args:?} should fail");
    assert!(
        err.contains(needle),
        "flare {args:?}: expected {needle:?} in:\n{err}"
    );
    assert!(!err.contains("panicked"), "no panics: {err}");
    // One error line (clap adds a pointer to --help after usage errors).
    assert_eq!(
        err.lines().filter(|l| l.contains("error")).count(),
        1,
        "{err}"
    );
}

#[test]
fn help_has_examples_and_bcc_options() {
    let out = flare().args(["profile", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--pid",
        "--tid",
        "--user-stacks-only",
        "--kernel-stacks-only",
        "--frequency",
        "--count",
        "--delimited",
        "--annotations",
        "--include-idle",
        "--folded",
        "--hash-storage-size",
        "--stack-storage-size",
        "--cpu",
        "--cgroupmap",
        "--mntnsmap",
        "[DURATION]",
        "Examples:",
    ] {
        assert!(help.contains(opt), "help lacks {opt}");
    }
    assert!(help.contains("[default: 40960]") && help.contains("[default: 16384]"));
}

#[test]
fn bad_input_is_one_clear_line() {
    if !require_bpf() {
        return;
    }
    fails_with(
        &["profile", "-p", "4000000", "1"],
        "no process with PID 4000000",
    );
    fails_with(
        &["profile", "-L", "4000000", "1"],
        "no thread with TID 4000000",
    );
    fails_with(&["profile", "-C", "4096", "1"], "CPU 4096 does not exist");
    fails_with(
        &["profile", "-F", "0"],
        "'0' is not allowed: give a whole number greater than zero",
    );
    fails_with(&["profile", "-p", "1", "-L", "1"], "cannot be used with");
    fails_with(
        &["profile", "-p", "1,two"],
        "'two' is not a process or thread id",
    );
    // A frequency the kernel refuses is explained.
    fails_with(
        &["profile", "-F", "100000000", "1"],
        "perf_event_max_sample_rate",
    );
}

#[test]
fn without_privileges_the_fix_is_named() {
    let runs_as_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if !runs_as_root {
        return;
    }
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_flare"))
        .args(["profile", "1"])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("needs root") && err.contains("CAP_BPF"),
        "{err}"
    );
}

#[test]
fn sigterm_prints_the_profile() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let mut w = Workload::start("twofuncs", &["1", "25"]);
    let f = Flare::start(&["profile", "-F", "199", "-p", &w.pid.to_string()], 1);
    w.go();
    w.wait_done();
    let (out, _) = f.stop_with(SIGTERM);
    let entries = parse_text(&out);
    assert!(
        entries
            .iter()
            .any(|e| e.frames.iter().any(|f| f == "func_b")),
        "{out}"
    );
}

#[test]
fn closed_pipe_ends_quietly() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let cmd = format!(
        "set -o pipefail; {} profile -F 999 -I -f 1 | head -n 1 >/dev/null",
        env!("CARGO_BIN_EXE_flare")
    );
    let out = Command::new("bash").args(["-c", &cmd]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {}: {err}", out.status);
    // bcc's warnings about lost stacks may follow; nothing else may.
    assert!(
        err.lines().all(|l| l.starts_with("WARNING: ")),
        "no errors or panics on stderr: {err}"
    );
}

#[test]
fn min_block_time_above_max_is_refused() {
    fails_with(
        &["offcputime", "-m", "100", "-M", "10", "1"],
        "the minimum block time (100 us, -m) is above the maximum (10 us, -M)",
    );
}

#[test]
fn completions_and_man_page_come_from_the_parser() {
    for (shell, start) in [
        ("bash", "_flare()"),
        ("zsh", "#compdef flare"),
        ("fish", ""),
    ] {
        let out = flare().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "completions {shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with(start), "{shell}: {text:.80}");
        // Every tool and a recent option are in there.
        assert!(
            text.contains("offwaketime") && text.contains("kprobe-multi"),
            "{shell}"
        );
    }
    let out = flare().arg("man").output().unwrap();
    let man = String::from_utf8_lossy(&out.stdout);
    assert!(
        man.starts_with(".ie") || man.contains(".TH flare 1"),
        "{man:.200}"
    );
    assert!(
        man.contains("FLARE STACKCOUNT") && man.contains("Examples:"),
        "{man:.200}"
    );
    fails_with(&["completions", "tcsh"], "invalid value 'tcsh'");
}

/// The largest durations, intervals and block times a user can type run
/// until stopped instead of panicking ("overflow when adding duration to
/// instant"); out-of-range agent intervals and push timeouts are refused
/// with the range.
#[test]
fn huge_durations_run_until_stopped() {
    if !require_bpf() {
        return;
    }
    let _guard = serial();
    const MAX: &str = "18446744073709551615";
    for args in [
        &["profile", MAX][..],
        &["stackcount", "-D", MAX, "t:sched:sched_switch"],
        &["stackcount", "-i", MAX, "t:sched:sched_switch"],
        &["offcputime", "-m", MAX, MAX],
        &["offwaketime", MAX],
        &["wallclock", "-m", MAX, MAX],
    ] {
        let mut f = flare()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting flare");
        std::thread::sleep(std::time::Duration::from_millis(1500));
        assert!(
            f.try_wait().expect("status").is_none(),
            "{args:?} ended early"
        );
        // SAFETY: kill only signals the flare process we started.
        unsafe { libc::kill(f.id() as i32, libc::SIGINT) };
        let out = f.wait_with_output().expect("waiting for flare");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    fails_with(
        &[
            "agent",
            "--interval",
            "1e300",
            "--pyroscope",
            "http://127.0.0.1:1",
        ],
        "give 0.1 to 86400 seconds",
    );
    fails_with(
        &[
            "agent",
            "--push-timeout",
            MAX,
            "--pyroscope",
            "http://127.0.0.1:1",
        ],
        "give 1 to 3600 seconds",
    );
}
