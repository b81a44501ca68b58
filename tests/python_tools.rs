//! Python frames in every tool, not only profile: off-CPU time of
//! `time.sleep` under its Python caller (offcputime), exact counts of a
//! syscall reached from two Python functions (stackcount), each thread
//! its own Python stack with native code under its Python caller, a
//! process that exits before the end still named, a process in its own
//! mount namespace, a C program embedding libpython, a CPython flare does
//! not know (native frames, one warning) and `--python off`.
//!
//! The workloads are tests/workloads/pytools.py under Debian's python3.11
//! (installed by scripts/deps.sh --test), and all but the namespace and
//! embedding cases again under pyenv's 3.6 and 3.7 and Debian sid's 3.14
//! and 3.15 (`every_tool_on_cpython_*`, off-CPU in a socket read too);
//! pyenv's 2.7 is the version flare does not know.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::bpf::{require_bpf, serial};
use common::python::{pyenv_required, sid_required};
use common::session::{parse_folded, Flare, Workload};

const PYTHON: &str = "/usr/bin/python3.11";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/pytools.py")
}

/// Debian's python3.11, required where BPF tests are.
fn python() -> Option<&'static Path> {
    let p = Path::new(PYTHON);
    if p.exists() {
        return Some(p);
    }
    if std::env::var("FLARE_REQUIRE_BPF").as_deref() == Ok("1") {
        panic!("{PYTHON} is missing: scripts/deps.sh --test installs it");
    }
    eprintln!("skipping: {PYTHON} is not installed");
    None
}

/// The Python frame's function, or None for a native frame.
fn python_function(frame: &str) -> Option<&str> {
    let (name, rest) = frame.split_once(" (")?;
    rest.contains(".py:").then_some(name)
}

/// The Python functions of a stack, root first.
fn chain(frames: &[String]) -> Vec<&str> {
    frames.iter().filter_map(|f| python_function(f)).collect()
}

/// Starts pytools.py in `mode` under `python` (wrapped by `wrapper`).
fn start(wrapper: &[&str], python: &Path, mode: &str, seconds: &str) -> Workload {
    let mut args = wrapper.to_vec();
    args.push(python.to_str().unwrap());
    let (w, rest) = args.split_first().unwrap();
    let exe = Path::new(w);
    let mut tail: Vec<&str> = rest.to_vec();
    let s = script();
    tail.extend([s.to_str().unwrap(), mode, seconds]);
    Workload::start_exe(&[], exe, &tail)
}

/// Runs flare `args` (`-p PID` appended) around one run of `w`; returns
/// the folded stacks (root first) and stderr.
fn around(w: &mut Workload, args: &[&str]) -> (Vec<(Vec<String>, u64)>, String) {
    let pid = w.pid.to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-p", &pid]);
    let flare = Flare::start(&all, 1);
    w.go();
    w.wait_done();
    let (out, err) = flare.stop();
    (parse_folded(&out), err)
}

/// The stacks of `flare stackcount -U -f EXTRA t:syscalls:sys_enter_getppid`
/// around the `calls` workload under `py`, and flare's stderr.
fn getppid_stacks(py: &Path, extra: &[&str]) -> (Vec<(Vec<String>, u64)>, String) {
    let mut w = start(&[], py, "calls", "0");
    let mut args = vec!["stackcount", "-U", "-f"];
    args.extend(extra);
    args.push("t:syscalls:sys_enter_getppid");
    around(&mut w, &args)
}

/// The events or samples of all `stacks`.
fn total(stacks: &[(Vec<String>, u64)]) -> u64 {
    stacks.iter().map(|(_, n)| n).sum()
}

#[test]
fn offcputime_puts_sleep_under_its_python_caller() {
    if !require_bpf() {
        return;
    }
    let Some(py) = python() else { return };
    let _g = serial();
    off_cpu_under_caller(py, "sleep", "napper", "sleep");
}

#[test]
fn stackcount_counts_a_syscall_under_each_python_caller_exactly() {
    if !require_bpf() {
        return;
    }
    let Some(py) = python() else { return };
    let _g = serial();
    getppid_counted_exactly(py);
}

/// stackcount of getppid around the calls workload under `py`: 300 calls
/// under left, 200 under right, each under its whole Python chain.
fn getppid_counted_exactly(py: &Path) {
    let (stacks, err) = getppid_stacks(py, &[]);
    let mut by: HashMap<Vec<&str>, u64> = HashMap::new();
    for (frames, n) in &stacks {
        *by.entry(chain(frames)).or_default() += n;
    }
    let get = |f: &'static str| by.get(&vec!["<module>", "main", f]).copied();
    assert_eq!(get("left"), Some(300), "{err}\n{by:#?}");
    assert_eq!(get("right"), Some(200), "{err}\n{by:#?}");
}

/// Profiles the threads workload (under `wrapper`) and checks that each
/// thread has its own Python stack, with native code under hasher.
fn threads(wrapper: &[&str], py: &Path) {
    threads_of(wrapper, py, true);
}

/// [`threads`], for a CPython whose frames have qualified names
/// (`qualified`: 3.11+) or only bare ones.
fn threads_of(wrapper: &[&str], py: &Path, qualified: bool) {
    let mut w = start(wrapper, py, "threads", "2");
    let (stacks, err) = around(&mut w, &["profile", "-U", "-F", "499", "-f"]);
    let dump = format!("{err}\n{stacks:#?}");
    let count = |f: &str| -> u64 {
        stacks
            .iter()
            .filter(|(s, _)| chain(s).last() == Some(&f))
            .map(|(_, n)| n)
            .sum()
    };
    let (alpha, hasher) = (count("alpha"), count("hasher"));
    assert!(
        alpha >= 100 && hasher >= 100,
        "alpha {alpha}, hasher {hasher}: {dump}"
    );
    // Each thread's samples have its own root and one function. A sample
    // may catch the interpreter between linking a frame and publishing it
    // (once in some 30 runs, one sample whose chain held only worker and
    // alpha): at most 1 % may be short, none may hold another's frames.
    let (mut all, mut short) = (0, Vec::new());
    for (frames, n) in &stacks {
        let c = chain(frames);
        if !(c.contains(&"alpha") || c.contains(&"hasher")) {
            continue;
        }
        all += n;
        assert!(
            !(c.contains(&"alpha") && c.contains(&"hasher")),
            "two threads' frames in one stack: {frames:?}"
        );
        let root = if qualified {
            [
                "Thread._bootstrap",
                "Thread._bootstrap_inner",
                "Thread.run",
                "worker",
            ]
        } else {
            ["_bootstrap", "_bootstrap_inner", "run", "worker"]
        };
        if c.get(..4) == Some(&root[..]) {
            assert_eq!(c.len(), 5, "then one function: {frames:?}");
        } else {
            short.push((frames, n));
        }
    }
    let short_n: u64 = short.iter().map(|(_, n)| **n).sum();
    assert!(
        short_n * 100 <= all,
        "{short_n} of {all} samples without the thread's root: {short:?}"
    );
    // sha256 runs in native code called by hasher: hasher is not the leaf.
    let native_under: u64 = stacks
        .iter()
        .filter(|(s, _)| chain(s).last() == Some(&"hasher"))
        .filter(|(s, _)| !s.last().is_some_and(|l| l.starts_with("hasher (")))
        .map(|(_, n)| n)
        .sum();
    assert!(
        native_under * 10 >= hasher * 8,
        "{native_under} of {hasher} hasher samples in native code: {dump}"
    );
}

#[test]
fn each_thread_has_its_own_python_stack() {
    if !require_bpf() {
        return;
    }
    let Some(py) = python() else { return };
    let _g = serial();
    threads(&[], py);
}

#[test]
fn a_process_in_its_own_mount_namespace() {
    if !require_bpf() {
        return;
    }
    let Some(py) = python() else { return };
    let _g = serial();
    threads(&["unshare", "-m", "--propagation", "private"], py);
}

#[test]
fn a_process_that_exits_before_the_end_is_named() {
    if !require_bpf() {
        return;
    }
    let Some(py) = python() else { return };
    let _g = serial();
    exits_before_the_end(py);
}

/// Profiles the exit workload under `py`, which exits 2 s into a 4 s
/// profile: its samples are still named.
fn exits_before_the_end(py: &Path) {
    let mut w = start(&[], py, "exit", "2");
    let pid = w.pid.to_string();
    let flare = Flare::start(&["profile", "-U", "-F", "499", "-f", "-p", &pid, "4"], 1);
    w.go();
    w.wait_done();
    let (out, err) = flare.stop_at_end();
    let stacks = parse_folded(&out);
    let named: u64 = stacks
        .iter()
        .filter(|(f, _)| chain(f) == ["<module>", "main", "burn", "alpha"])
        .map(|(_, n)| n)
        .sum();
    let total = total(&stacks);
    assert!(total >= 300, "{total} samples: {err}\n{out}");
    assert!(
        named * 100 >= total * 80,
        "{named} of {total} samples named after the exit: {err}\n{out}"
    );
}

#[test]
fn python_off_keeps_the_native_stacks() {
    if !require_bpf() {
        return;
    }
    let Some(py) = python() else { return };
    let _g = serial();
    let (stacks, err) = getppid_stacks(py, &["--python", "off"]);
    assert!(total(&stacks) >= 500, "{err}\n{stacks:#?}");
    assert!(
        stacks.iter().all(|(f, _)| chain(f).is_empty()),
        "no Python frames: {stacks:#?}"
    );
    assert!(
        stacks
            .iter()
            .all(|(f, _)| f.iter().any(|x| x.starts_with("_PyEval_EvalFrameDefault"))),
        "the eval loop stays: {stacks:#?}"
    );
}

/// pyenv's CPython 2.7, which flare does not walk.
fn pyenv_27() -> Option<PathBuf> {
    let dir = std::fs::read_dir("/root/.pyenv/versions").ok()?;
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("2.7."))
        .map(|e| e.path().join("bin/python2.7"))
        .find(|p| p.exists())
}

/// The workloads' protocol in Python 2: 500 getppid calls from `calls`.
const GETPPID_2: &str = "import os, sys
def calls():
    for _ in range(500):
        os.getppid()
sys.stdout.write('ready\\n')
sys.stdout.flush()
sys.stdin.readline()
calls()
sys.stdout.write('cpu 0\\n')
sys.stdout.flush()
sys.stdin.read()
";

#[test]
fn a_cpython_flare_does_not_know_is_walked_natively_with_one_warning() {
    if !require_bpf() {
        return;
    }
    let Some(py) = pyenv_27() else {
        assert!(
            std::env::var("FLARE_REQUIRE_BPF").as_deref() != Ok("1"),
            "pyenv's CPython 2.7 is required (FLARE_REQUIRE_BPF=1)"
        );
        eprintln!("skipping: pyenv's CPython 2.7 is not installed");
        return;
    };
    let _g = serial();
    let mut w = Workload::start_exe(&[], &py, &["-c", GETPPID_2]);
    let (stacks, err) = around(
        &mut w,
        &["stackcount", "-U", "-f", "t:syscalls:sys_enter_getppid"],
    );
    assert_eq!(
        err.matches("CPython 2.7 is not supported").count(),
        1,
        "{err}"
    );
    assert!(total(&stacks) >= 500, "{err}\n{stacks:#?}");
    assert!(
        stacks.iter().all(|(f, _)| chain(f).is_empty()),
        "{stacks:#?}"
    );
}

/// Off-CPU time of `mode`'s blocking function (`napper` in time.sleep,
/// `reader` in a socket read: 50 waits of 20 ms each) under its Python
/// caller, with the blocking call's native frames below it.
fn off_cpu_under_caller(py: &Path, mode: &str, function: &str, native: &str) {
    let mut w = start(&[], py, mode, "0");
    let (stacks, err) = around(&mut w, &["offcputime", "-U", "-f"]);
    let dump = format!("{err}\n{stacks:#?}");
    let blocked: Vec<&(Vec<String>, u64)> = stacks
        .iter()
        .filter(|(f, _)| chain(f) == ["<module>", "main", function])
        .collect();
    let us: u64 = blocked.iter().map(|(_, n)| n).sum();
    // 50 waits of 20 ms: 1 s, and a little more for the timer slack.
    assert!(
        (900_000..=1_500_000).contains(&us),
        "{us} us off the CPU under {function}: {dump}"
    );
    // Most of it in the blocking call: on a busy machine a reader also
    // waits for the GIL back after its read (PyEval_RestoreThread), time
    // under the same caller without the call below it.
    let prefix = format!("{function} (");
    let in_native: u64 = blocked
        .iter()
        .filter(|(frames, _)| {
            let at = frames.iter().position(|f| f.starts_with(&prefix));
            at.is_some_and(|at| frames[at + 1..].iter().any(|f| f.contains(native)))
        })
        .map(|(_, n)| n)
        .sum();
    assert!(
        in_native * 10 >= us * 8,
        "{in_native} of {us} us under {function} with {native} below it: {dump}"
    );
}

/// Every tool on CPython 3.`minor` (pyenv's, or Debian sid's for 3.14
/// and 3.15): off-CPU time in time.sleep and in a socket read under their
/// Python callers, a syscall counted exactly under each caller, each
/// thread its own stack, and a process that exits before the end named.
fn every_tool(minor: u32) {
    if !require_bpf() {
        return;
    }
    let python = if minor >= 14 {
        sid_required(minor)
    } else {
        pyenv_required(minor)
    };
    let Some(py) = python else { return };
    let _g = serial();
    off_cpu_under_caller(&py, "sleep", "napper", "sleep");
    off_cpu_under_caller(&py, "socket", "reader", "recv");
    getppid_counted_exactly(&py);
    threads_of(&[], &py, minor >= 11);
    exits_before_the_end(&py);
}

#[test]
fn every_tool_on_cpython_3_6() {
    every_tool(6);
}

#[test]
fn every_tool_on_cpython_3_7() {
    every_tool(7);
}

#[test]
fn every_tool_on_cpython_3_14() {
    every_tool(14);
}

#[test]
fn every_tool_on_cpython_3_15() {
    every_tool(15);
}
