//! Whole stacks of deep programs, and a mark where one is cut: every
//! tool on tests/workloads/deeprec.c, which recurses a known number of
//! levels through level() from main, then spins in leaf(), naps in nap()
//! or calls mark() an exact number of times. Built with and without frame
//! pointers. Needs root; see `common::bpf::require_bpf`.
//!
//! Ground truth and tolerances:
//! - 600 levels: at least 99 % of the samples in leaf() hold main and
//!   all 601 level() frames (the walk's first stack of a run may lose its
//!   tail to the kernel's allocator; that is all the 1 % allows).
//! - 3,000 levels (past the 1,024-frame limit): at least 95 % keep the
//!   leaf end, 1,000 level() frames or more, and begin with one
//!   `[truncated]` frame at the root, never main.
//! - The off-CPU family and stackcount see the same 601 frames under
//!   nap() and mark(): offcputime's blocked time under whole stacks at
//!   least 95 % of its total, stackcount's count exactly the calls.
//! - CPython 3.12 (tests/workloads/deeprec.py) and OpenJDK 17
//!   (tests/workloads/DeepRec.java, interpreted and compiled) 300 levels
//!   deep: at least 99 % of leaf samples hold main and all 301 level()
//!   frames with BPF; CPython's in perf-event mode too (as without root:
//!   fewer of its samples carry Python frames there, as reading 300 frames
//!   after each sample lags; those that do must be whole).
//! - Kernels whose BPF has no table walk (5.10: no bpf_loop) walk frame
//!   pointers in the kernel: only the last test's holds there.
//! - `--unwind fp` (the kernel's own walk, stopped at
//!   `kernel.perf_event_max_stack`, 127 by default) marks its cut stacks
//!   and says so once.

mod common;

use std::path::PathBuf;

use common::bpf::{attached, build, require_bpf, serial};
use common::java::classes;
use common::python::pyenv_required;
use common::session::{parse_folded, Flare, Workload};

/// deeprec built with (`fp`) or without (`nofp`) frame pointers.
fn deeprec(fp: bool) -> PathBuf {
    let (out, flag) = match fp {
        true => ("deeprec-fp", "-fno-omit-frame-pointer"),
        false => ("deeprec-nofp", "-fomit-frame-pointer"),
    };
    build(out, "deeprec.c", &["gcc", "-O2", "-g", flag])
}

/// How the leaf samples of a folded profile (frames root first, after
/// the comm) came out.
#[derive(Debug, Default)]
struct Tally {
    /// Samples (or time) with `leaf` in the stack.
    samples: u64,
    /// ... holding main and exactly `levels` level() frames.
    whole: u64,
    /// ... starting with `[truncated]` at the root, no main, and at least
    /// 1,000 level() frames.
    cut: u64,
    /// The stacks that were neither, for the failure message.
    other: Vec<String>,
}

impl Tally {
    /// Fails unless `part` (of `what`) is at least `percent` % of the
    /// samples; `context` names the run.
    fn assert_share(&self, part: u64, what: &str, percent: u64, context: &str) {
        assert!(
            part * 100 >= self.samples * percent,
            "{context}: {part} of {} {what} (at least {percent} %): {:?}",
            self.samples,
            self.other
        );
    }
}

fn tally(folded: &[(Vec<String>, u64)], leaf: &str, levels: usize) -> Tally {
    let mut t = Tally::default();
    for (frames, n) in folded {
        let names: Vec<&str> = frames.iter().skip(1).map(|f| bare(f)).collect();
        if !names.contains(&leaf) {
            continue;
        }
        t.samples += n;
        let count = names.iter().filter(|&&f| f == "level").count();
        let main = names.contains(&"main");
        if main && count == levels {
            t.whole += n;
        } else if !main && names.first() == Some(&"[truncated]") && count >= 1000 {
            t.cut += n;
        } else if t.other.len() < 5 {
            let head: Vec<&str> = names.iter().take(6).copied().collect();
            t.other.push(format!(
                "{n} x {} frames, {count} level(), root {head:?}",
                names.len()
            ));
        }
    }
    t
}

/// Whether this kernel's BPF walks user stacks with tables (bpf_loop):
/// said on stderr when not.
fn table_walk() -> bool {
    let can = common::bpf::kernel_can("unwind") != Some(false);
    if !can {
        eprintln!("skipping: this kernel walks user stacks by frame pointers, in the kernel");
    }
    can
}

/// A frame's function name: without a Python frame's `(file:line)`, a
/// Java frame's class and parameters.
fn bare(f: &str) -> &str {
    let f = f.split([' ', '(']).next().unwrap_or(f);
    f.strip_prefix("DeepRec.").unwrap_or(f)
}

/// Profiles deeprec spinning `levels` deep for `seconds` of CPU time.
fn profile(fp: bool, levels: &str, seconds: &str, args: &[&str]) -> (Tally, String) {
    let seconds = if common::bpf::emulated() {
        "4"
    } else {
        seconds
    };
    let mut w = Workload::start_exe(&[], &deeprec(fp), &[levels, "spin", seconds]);
    let pid = w.pid.to_string();
    let mut argv = vec!["profile", "-F", "499", "-U", "-f", "-p", &pid];
    argv.extend_from_slice(args);
    let flare = Flare::start(&argv, 1);
    w.go();
    w.wait_done();
    let (out, err) = flare.stop();
    let depth: usize = levels.parse().expect("levels");
    let t = tally(&parse_folded(&out), "leaf", depth + 1);
    assert!(t.samples > 200, "too few samples ({t:?}); stderr: {err}");
    (t, err)
}

#[test]
fn c_recursion_600_deep_is_whole_with_and_without_frame_pointers() {
    if !require_bpf() || !table_walk() {
        return;
    }
    let _guard = serial();
    for fp in [true, false] {
        let (t, err) = profile(fp, "600", "2", &[]);
        t.assert_share(t.whole, "whole", 99, &format!("fp {fp}; stderr: {err}"));
    }
}

#[test]
fn c_recursion_3000_deep_keeps_the_leaf_end_under_one_truncated_frame() {
    if !require_bpf() || !table_walk() {
        return;
    }
    let _guard = serial();
    for fp in [true, false] {
        let (t, err) = profile(fp, "3000", "2", &[]);
        let context = format!("fp {fp}; stderr: {err}");
        t.assert_share(t.cut, "cut at the root", 95, &context);
        assert_eq!(t.whole, 0, "3,000 levels cannot be whole");
    }
}

/// The kernel's own walk (`--unwind fp`) stops at its limit: the stacks
/// it cut are marked, and flare says why once.
#[test]
fn the_kernels_frame_pointer_walk_marks_its_cut_and_says_so() {
    if !require_bpf() {
        return;
    }
    let limit = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(127);
    if limit >= 600 {
        eprintln!("skipping: kernel.perf_event_max_stack is {limit}, nothing is cut");
        return;
    }
    let _guard = serial();
    let mut w = Workload::start_exe(&[], &deeprec(true), &["600", "spin", "2"]);
    let pid = w.pid.to_string();
    let flare = Flare::start(
        &[
            "profile", "-F", "499", "-U", "-f", "-p", &pid, "--unwind", "fp",
        ],
        1,
    );
    w.go();
    let cpu = w.wait_done();
    let (out, err) = flare.stop();
    let folded = parse_folded(&out);
    let (mut leaf, mut marked) = (0, 0);
    for (frames, n) in &folded {
        if frames.iter().any(|f| bare(f) == "leaf") {
            leaf += n;
            if frames.get(1).map(String::as_str) == Some("[truncated]") {
                marked += n;
            }
            assert!(
                frames.len() <= limit + 2,
                "{} frames from a walk that stops at {limit}",
                frames.len()
            );
        }
    }
    // Emulated, a 127-frame walk per interrupt is slow and the guest's
    // perf events came out far below their rate: 17 samples of 2 s once,
    // after the 600-deep tests before it (about 500 in other runs).
    let floor = if common::bpf::emulated() { 10 } else { 100 };
    assert!(
        leaf > floor,
        "too few samples ({leaf} in {cpu:.2} s of CPU): {out}"
    );
    assert!(marked * 100 >= leaf * 95, "{marked} of {leaf} marked");
    let warnings = err
        .lines()
        .filter(|l| l.contains("kernel.perf_event_max_stack"))
        .count();
    assert_eq!(warnings, 1, "said once: {err}");
}

/// Runs `tool ARGS -p PID` around deeprec doing `what` 600 levels deep;
/// the folded output and stderr. The workload starts once flare has
/// attached: once it said so on stderr where the tool says so even with
/// -f (stackcount's "Tracing ..."), else once `links` of its links are
/// open (regression: stackcount's links were counted before its uprobe
/// was among them, and the first 163 of 1,000 calls went uncounted in an
/// emulated guest).
fn trace(tool: &[&str], links: usize, what: &str, n: &str) -> (String, String) {
    use std::io::{BufRead, Read};
    let mut w = Workload::start_exe(&[], &deeprec(false), &["600", what, n]);
    let pid = w.pid.to_string();
    let mut argv: Vec<&str> = tool.to_vec();
    argv.extend(["-f", "-p", &pid]);
    let mut tracer = common::bpf::flare()
        .args(&argv)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting flare");
    let mut err = std::io::BufReader::new(tracer.stderr.take().expect("stderr"));
    let mut said = String::new();
    if tool[0] == "stackcount" {
        while !said.contains("Hit Ctrl-C") {
            let n = err.read_line(&mut said).expect("flare's stderr");
            assert!(n > 0, "flare {argv:?} ended before it attached: {said}");
        }
    } else {
        let started = std::time::Instant::now();
        while !attached(tracer.id(), links) {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(60),
                "flare {argv:?} did not attach"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    w.go();
    w.wait_done();
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(tracer.id() as i32, libc::SIGINT) };
    let out = tracer.wait_with_output().expect("waiting for flare");
    let _ = err.read_to_string(&mut said);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "flare {argv:?}: {said}");
    (stdout, said)
}

#[test]
fn offcputime_sees_the_whole_stack_600_deep() {
    if !require_bpf() || !table_walk() {
        return;
    }
    let _guard = serial();
    let (out, err) = trace(&["offcputime", "-U"], 1, "sleep", "50");
    let t = tally(&parse_folded(&out), "nap", 601);
    // 50 naps of 10 ms, in microseconds.
    assert!(t.samples >= 400_000, "{t:?}; stderr: {err}");
    t.assert_share(t.whole, "us under whole stacks", 95, "offcputime");
}

#[test]
fn stackcount_counts_every_call_600_deep_under_its_whole_stack() {
    if !require_bpf() || !table_walk() {
        return;
    }
    let _guard = serial();
    let exe = deeprec(false);
    let probe = format!("{}:mark", exe.display());
    let (out, err) = trace(&["stackcount", "-U", &probe], 1, "call", "1000");
    let folded = parse_folded(&out);
    let t = tally(&folded, "mark", 601);
    let elsewhere: Vec<String> = folded
        .iter()
        .filter(|(frames, _)| !frames.iter().any(|f| bare(f) == "mark"))
        .take(5)
        .map(|(frames, n)| {
            let tail: Vec<&str> = frames.iter().rev().take(8).map(|f| bare(f)).collect();
            format!("{n} x {} frames, leaf end {tail:?}", frames.len())
        })
        .collect();
    assert_eq!(
        t.samples, 1000,
        "every call counted; {t:?}; without mark: {elsewhere:?}; stderr: {err}"
    );
    t.assert_share(t.whole, "calls under whole stacks", 99, "stackcount");
}

/// Profiles a runtime's deeprec (`command`, which takes DEPTH SECONDS)
/// 300 levels deep, with BPF or in perf-event mode: the leaf samples,
/// stderr, and all samples of the thread that ran the leaf.
fn runtime_profile(command: &[&str], perf_events: bool) -> (Tally, String, u64) {
    let (exe, args) = command.split_first().expect("a command");
    let mut args = args.to_vec();
    args.extend(["300", "3"]);
    let mut w = Workload::start_exe(&[], std::path::Path::new(exe), &args);
    let pid = w.pid.to_string();
    let env: &[(&str, &str)] = match perf_events {
        true => &[("FLARE_TEST_PERF_EVENTS", "1")],
        false => &[],
    };
    let flare = Flare::start_with_env(&["profile", "-F", "499", "-U", "-f", "-p", &pid], 1, env);
    w.go();
    w.wait_done();
    let (out, err) = flare.stop();
    let folded = parse_folded(&out);
    // The leaf's thread (its name, the stacks' first frame): samples
    // without the leaf there lost the runtime's frames.
    let thread = folded
        .iter()
        .find(|(f, _)| f.iter().any(|x| bare(x) == "leaf"))
        .and_then(|(f, _)| f.first().cloned());
    let all = folded
        .iter()
        .filter(|(f, _)| f.first() == thread.as_ref())
        .map(|(_, n)| n)
        .sum();
    (tally(&folded, "leaf", 301), err, all)
}

/// Checks a runtime 300 levels deep in both modes (`what` names it in
/// failures). A kernel whose BPF walks frame pointers only (no
/// bpf_loop, 5.10) has no runtime frames to check there.
fn check_runtime(what: &str, command: &[&str], modes: &[bool]) {
    for &perf_events in modes {
        if !perf_events && common::bpf::kernel_can("unwind") == Some(false) {
            continue;
        }
        let (t, err, all) = runtime_profile(command, perf_events);
        let context = format!("{what} (perf events {perf_events}); stderr: {err}");
        // Every sample of the spinning thread has the runtime's leaf (in
        // perf-event mode too, whose reader keeps up with deep stacks).
        assert!(
            t.samples * 100 >= all * 95 && t.samples > 300,
            "{context}: {} of the thread's {all} samples in the leaf: {t:?}",
            t.samples
        );
        t.assert_share(t.whole, "whole", 99, &context);
    }
}

#[test]
fn python_recursion_300_deep_is_whole() {
    if !require_bpf() {
        return;
    }
    let Some(python) = pyenv_required(12) else {
        return;
    };
    let _guard = serial();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/deeprec.py");
    check_runtime(
        "CPython 3.12",
        &[
            python.to_str().expect("a path"),
            script.to_str().expect("a path"),
        ],
        &[false, true],
    );
}

#[test]
fn java_recursion_300_deep_is_whole_interpreted_and_compiled() {
    if !require_bpf() {
        return;
    }
    let Some(dir) = classes("DeepRec") else {
        return;
    };
    let _guard = serial();
    let cp = dir.to_str().expect("a path");
    // In perf-event mode a JVM's samples copy 64 KiB of its stack, some
    // 500 Java frames.
    check_runtime(
        "java -Xint",
        &["java", "-Xint", "-cp", cp, "DeepRec"],
        &[false, true],
    );
    check_runtime("java", &["java", "-cp", cp, "DeepRec"], &[false, true]);
}
