//! Files another user chooses, met by root's flare: a program's
//! `.gnu_debuglink` names a debug file beside it, and whoever owns that
//! directory decides what lies there. A FIFO hung flare for good; a link
//! to `/dev/zero` kept a thread reading at full speed forever. Both must
//! be passed over, the program named from its own symbols.
//! (Perf maps: tests/symbols_exit.rs.) And names another user chooses: a
//! process name with a line break and a count in it forged a line of
//! folded output.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::bpf::{flare, require_bpf, serial};
use common::stackcount::{text_counts, Workload};

/// leafcalls built into `dir` with its debug information in a separate
/// file linked by `.gnu_debuglink`, which is then replaced by `what`.
fn program_with_debuglink(dir: &Path, what: &str) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/leafcalls.c");
    let exe = dir.join("prog");
    let dbg = dir.join("prog.debug");
    let run = common::bpf::run_tool;
    run(Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-fno-inline", "-o"])
        .arg(&exe)
        .arg(&src));
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(&dbg));
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(format!("--add-gnu-debuglink={}", dbg.display()))
        .arg(&exe));
    std::fs::remove_file(&dbg).expect("rm");
    match what {
        "fifo" => {
            let c = std::ffi::CString::new(dbg.display().to_string()).expect("path");
            // SAFETY: a NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        }
        "zero" => std::os::unix::fs::symlink("/dev/zero", &dbg).expect("symlink"),
        other => panic!("{other}"),
    }
    exe
}

/// stackcount of the program's leaf() calls, stopped with SIGINT; fails
/// (instead of hanging) when flare does not stop within 30 s.
fn count_leaf_calls(exe: &Path) -> (String, String) {
    let mut w = Workload::start_path(exe, &["1000"]);
    let pattern = format!("{}:leaf", exe.display());
    let mut child = flare()
        .args(["stackcount", "-U", "-p", &w.pid().to_string(), &pattern])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting flare");
    // The header says the probe is attached.
    let mut header = String::new();
    common::stackcount::read_line_unbuffered(child.stdout.as_mut().expect("stdout"), &mut header);
    assert!(header.starts_with("Tracing"), "{header}");
    w.go();
    // SAFETY: kill only signals the flare process we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let asked = Instant::now();
    while child.try_wait().expect("waiting").is_none() {
        if asked.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("flare did not stop within 30 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    common::stackcount::wait_both(&mut child)
}

#[test]
fn a_debug_link_to_a_fifo_or_dev_zero_is_passed_over() {
    if !require_bpf() {
        return;
    }
    let _guard = serial();
    for what in ["fifo", "zero"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let exe = program_with_debuglink(dir.path(), what);
        let (out, err) = count_leaf_calls(&exe);
        let counts = text_counts(&out);
        let named: u64 = counts
            .iter()
            .filter(|(k, _)| k.starts_with("leaf;"))
            .map(|(_, v)| *v)
            .sum();
        assert_eq!(named, 1000, "{what}:\n{out}\n{err}");
    }
}

/// A process named "evil 99999999\nx" (a process may name itself so)
/// cannot forge a folded line: the line break becomes `?`, every line
/// ends in its own count, and `flare top` of the output sees one process.
#[test]
fn a_process_name_cannot_forge_a_folded_line() {
    if !require_bpf() {
        return;
    }
    let _guard = serial();
    let mut w = common::bpf::Reaper(
        Command::new(common::bpf::workload("named"))
            .arg("evil 99999999\nx")
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the workload"),
    );
    let mut ready = String::new();
    common::stackcount::read_line_unbuffered(w.0.stdout.as_mut().expect("stdout"), &mut ready);
    assert_eq!(ready, "ready\n");
    let out = common::bpf::run_flare(&[
        "profile",
        "-F",
        "99",
        "-f",
        "-p",
        &w.0.id().to_string(),
        "1",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut total = 0;
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        let n: u64 = n.parse().unwrap_or_else(|_| panic!("{line:?}"));
        assert!(stack.starts_with("evil 99999999?x;"), "{line:?}");
        total += n;
    }
    // 1 s at 99 Hz of one busy thread: nothing near the forged count.
    assert!((1..10_000).contains(&total), "{total} samples:\n{text}");
}
