//! What differs between kernels, tested on whichever kernel runs the
//! tests: every way stackcount attaches kernel functions (kprobes,
//! multi-kprobes, fentry), counted exactly on a kernel alias that
//! `available_filter_functions` does not list, and profile's perf events
//! with -p and system-wide. `scripts/vmtest` boots several kernels and
//! tells the tests what each must be able to do (`FLARE_KERNEL_CAN`);
//! where a kernel cannot, the error is asserted. No sample counts are
//! asserted here: emulated guests do not keep time well enough.

mod common;

use common::bpf::{flare, kernel_can, require_bpf, serial};
use common::session::{parse_text, Entry, Flare};
use common::stackcount::{folded_counts, Tracer, Workload};

/// getppid calls the workload makes.
const CALLS: u64 = 3000;

/// The syscall entry point: an alias of `__do_sys_getppid` in kallsyms.
#[cfg(target_arch = "x86_64")]
const GETPPID: &str = "__x64_sys_getppid";
#[cfg(target_arch = "aarch64")]
const GETPPID: &str = "__arm64_sys_getppid";

/// Counts `pattern` in the workload with `--attach mode`: Ok(count of the
/// workload's calls, flare's output), or Err(flare's stderr) when flare
/// refused. A neighbour makes each of the three syscalls as often, with
/// the same stacks, before the workload: -p must leave its calls out,
/// whichever program counts them.
fn count_getppid(mode: &str, pattern: &[&str]) -> Result<(u64, String, String), String> {
    let calls = CALLS.to_string();
    let mut w = Workload::start("getppid", &[&calls]);
    let mut neighbour = Workload::start("getppid", &[&calls, "all"]);
    let pid = w.pid().to_string();
    let mut args = vec!["-f", "-K", "-p", &pid, "--attach", mode];
    args.extend_from_slice(pattern);
    let t = Tracer::try_start(&args)?;
    let header = t.header.clone();
    neighbour.go();
    w.go();
    let out = t.finish();
    let counts = folded_counts(&out);
    // The traced function is each stack's leaf, whichever way it was
    // attached: fentry's program and trampoline are not the workload's.
    for stack in counts.keys() {
        let leaf = stack.rsplit(';').next().unwrap_or_default();
        assert!(
            leaf.contains("sys_getppid"),
            "--attach {mode}: a stack whose leaf is not getppid: {stack}"
        );
    }
    Ok((counts.values().sum(), header, out))
}

/// Asserts the outcome of one attach mode against what the kernel must do.
fn check_mode(mode: &str, pattern: &[&str], functions: usize, refusal: &[&str]) {
    let _g = serial();
    match (count_getppid(mode, pattern), kernel_can(mode)) {
        (Ok((n, header, out)), must) => {
            assert_ne!(
                must,
                Some(false),
                "--attach {mode} worked where it must not"
            );
            assert!(
                header.starts_with(&format!("Tracing {functions} functions")),
                "{header}"
            );
            assert_eq!(
                n, CALLS,
                "--attach {mode}: every getppid counted once, the neighbour's none:\n{out}"
            );
        }
        (Err(err), Some(true)) => panic!("--attach {mode} must work on this kernel: {err}"),
        (Err(err), _) => {
            let last = err.lines().last().unwrap_or_default();
            assert!(
                last.starts_with("flare: ") && refusal.iter().all(|r| last.contains(r)),
                "--attach {mode}: unclear refusal {err:?}, wanted {refusal:?}"
            );
        }
    }
}

#[test]
fn regression_kprobe_on_a_syscall_alias_counts_every_call() {
    if !require_bpf() {
        return;
    }
    check_mode(
        "kprobe",
        &[GETPPID],
        1,
        &["--attach kprobe: this kernel has no kprobes"],
    );
}

#[test]
fn regression_kprobe_multi_on_a_syscall_alias_counts_every_call() {
    if !require_bpf() {
        return;
    }
    check_mode("kprobe-multi", &[GETPPID], 1, &["--attach kprobe-multi"]);
}

#[test]
fn regression_fentry_on_a_syscall_alias_counts_every_call() {
    if !require_bpf() {
        return;
    }
    check_mode(
        "fentry",
        &[GETPPID],
        1,
        &["fentry", "cannot trace kernel functions"],
    );
}

#[test]
fn several_functions_through_each_attach_mode() {
    if !require_bpf() {
        return;
    }
    // Three syscalls matched, one of them made: exact counts through one
    // multi-link, three kprobes or three fentry programs.
    let re = GETPPID.replace("getppid", "get(ppid|pid|uid)$");
    for (mode, refusal) in [
        ("kprobe", "--attach kprobe"),
        ("kprobe-multi", "--attach kprobe-multi"),
        ("fentry", "fentry"),
    ] {
        check_mode(mode, &["-r", &re], 3, &[refusal]);
    }
}

#[test]
fn automatic_attach_counts_or_says_why_not() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let must = ["kprobe", "kprobe-multi", "fentry"]
        .iter()
        .any(|m| kernel_can(m) == Some(true));
    match count_getppid("auto", &[GETPPID]) {
        Ok((n, _, out)) => assert_eq!(n, CALLS, "{out}"),
        Err(err) => {
            assert!(!must, "a way to attach exists on this kernel: {err}");
            assert!(
                err.contains("cannot trace kernel functions") && err.contains("t:syscalls:"),
                "{err}"
            );
        }
    }
}

#[test]
fn attach_is_refused_for_anything_but_kernel_functions() {
    if !require_bpf() {
        return;
    }
    let out = flare()
        .args(["stackcount", "--attach", "kprobe", "t:sched:sched_switch"])
        .output()
        .expect("running flare");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--attach applies to kernel functions only"),
        "{err}"
    );
}

/// Profiles one run of twofuncs (25 % of its time in func_a, 75 % in
/// func_b) and returns its entries.
fn profile_twofuncs(pid_option: bool) -> Vec<Entry> {
    let _g = serial();
    let mut w = common::session::Workload::start("twofuncs", &["1", "25"]);
    let pid = w.pid.to_string();
    let mut args = vec!["profile", "-F", "199"];
    if pid_option {
        args.extend_from_slice(&["-p", &pid]);
    }
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let flare = Flare::start(&args, if pid_option { 1 } else { ncpu });
    w.go();
    w.wait_done();
    let (out, err) = flare.stop();
    let entries = parse_text(&out);
    assert!(
        entries.iter().all(|e| !pid_option || e.pid == w.pid),
        "-p samples its target only:\n{out}"
    );
    let entries: Vec<Entry> = entries.into_iter().filter(|e| e.pid == w.pid).collect();
    // One arm64 guest once printed no sample at all: say what flare said.
    assert!(
        !entries.is_empty(),
        "no samples of the workload; flare: {err}"
    );
    entries
}

/// Samples in entries whose stack holds `func`.
fn samples_in(entries: &[Entry], func: &str) -> u64 {
    entries
        .iter()
        .filter(|e| e.frames.iter().any(|f| f == func))
        .map(|e| e.count)
        .sum()
}

#[test]
fn profile_pid_sees_where_the_workload_spends_its_time() {
    if !require_bpf() {
        return;
    }
    let entries = profile_twofuncs(true);
    let (a, b) = (
        samples_in(&entries, "func_a"),
        samples_in(&entries, "func_b"),
    );
    assert!(a > 0 && b > a, "func_a {a}, func_b {b}: {entries:?}");
}

#[test]
fn profile_system_wide_sees_the_workload() {
    if !require_bpf() {
        return;
    }
    let entries = profile_twofuncs(false);
    let (a, b) = (
        samples_in(&entries, "func_a"),
        samples_in(&entries, "func_b"),
    );
    assert!(a > 0 && b > a, "func_a {a}, func_b {b}: {entries:?}");
}
