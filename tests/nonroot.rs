//! `flare profile` without root: perf-event mode. flare runs as user
//! nobody (`setpriv --reuid=nobody --regid=nogroup --clear-groups`, from a
//! test run as root; a test run as another user runs flare as itself),
//! with its binary and the workloads copied into a directory nobody can
//! read, and `XDG_CACHE_HOME` in a directory nobody owns.
//!
//! Ground truth: twofuncs' worker spends 25 % of its CPU time in func_a
//! (the rest in func_b); nofp, built without frame pointers, runs
//! clone3 → start_thread → worker → run → func_a/func_b (→ spin), so a
//! complete stack holds `clone3;start_thread;worker;run;func_X` (the two
//! libc frames named or not, as libc's local symbols are installed or
//! not). Tolerances:
//! func_a's share within 5 points; ≥ 95 % complete stacks with `--unwind
//! auto`, < 50 % with `--unwind fp` (which proves the tables did it).
//!
//! Needs `setpriv` and user nobody when run as root; without them the
//! tests are skipped, unless `FLARE_REQUIRE_BPF=1`, when they fail.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::bpf::{build, serial};

extern "C" {
    fn geteuid() -> u32;
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { geteuid() == 0 }
}

/// True when flare can be run without root here; otherwise the test is
/// skipped (or fails with FLARE_REQUIRE_BPF=1).
fn can_run_as_nobody() -> bool {
    if !is_root() {
        return true;
    }
    let Some(why) = common::nobody::missing() else {
        return true;
    };
    if std::env::var("FLARE_REQUIRE_BPF").as_deref() == Ok("1") {
        panic!("non-root tests are required (FLARE_REQUIRE_BPF=1) but cannot run: {why}");
    }
    eprintln!("skipping non-root test: {why}");
    false
}

/// A directory nobody can use: flare and the workloads in it (0755), a
/// cache directory nobody owns.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new(workloads: &[(&str, &Path)]) -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let copy = |from: &Path, name: &str| {
            let to = dir.path().join(name);
            fs::copy(from, &to).expect("copying a binary");
            fs::set_permissions(&to, fs::Permissions::from_mode(0o755)).expect("chmod");
        };
        copy(Path::new(env!("CARGO_BIN_EXE_flare")), "flare");
        for (name, path) in workloads {
            copy(path, name);
        }
        let s = Sandbox { dir };
        let cache = s.path("cache");
        fs::create_dir(&cache).expect("cache dir");
        s.give(&cache);
        s
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Makes `p` nobody's (when running as root).
    fn give(&self, p: &Path) {
        if is_root() {
            std::os::unix::fs::chown(
                p,
                Some(common::nobody::NOBODY),
                Some(common::nobody::NOBODY),
            )
            .expect("chown");
        }
    }

    /// flare, as nobody, in the sandbox, with `cache` as XDG_CACHE_HOME.
    fn flare(&self, args: &[&str], cache: &Path) -> Command {
        let mut c = if is_root() {
            let mut c = common::nobody::setpriv();
            c.arg("--inh-caps=-all").arg(self.path("flare"));
            c
        } else {
            Command::new(self.path("flare"))
        };
        c.args(args)
            .current_dir(self.dir.path())
            .env("XDG_CACHE_HOME", cache)
            .env_remove("FLARE_CACHE_DIR");
        c
    }

    /// Runs flare to the end with `input` on its (and the command's) stdin.
    fn run(&self, args: &[&str], cache: &Path, input: &str) -> Output {
        let mut child = self
            .flare(args, cache)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running flare");
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write;
            let _ = stdin.write_all(input.as_bytes());
        }
        child.wait_with_output().expect("waiting for flare")
    }
}

fn twofuncs() -> PathBuf {
    build(
        "nonroot-twofuncs",
        "twofuncs.c",
        &[
            "gcc",
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-fno-inline",
            "-pthread",
        ],
    )
}

fn nofp() -> PathBuf {
    build(
        "nonroot-nofp",
        "nofp.c",
        &["gcc", "-O2", "-g", "-fomit-frame-pointer", "-pthread"],
    )
}

/// Folded stacks (comm first) of `comm` in flare's standard output (the
/// workload's own lines are mixed in; they are not folded stacks).
/// A workload's own figures in its output: each `share NAME SECONDS`
/// line, and its `cpu SECONDS` line.
fn figures(stdout: &str) -> (Vec<(String, f64)>, f64) {
    let field = |prefix: &str| -> Vec<(String, f64)> {
        stdout
            .lines()
            .filter_map(|l| {
                let mut f = l.strip_prefix(prefix)?.split_whitespace();
                let name = if prefix == "cpu " {
                    String::new()
                } else {
                    f.next()?.to_string()
                };
                Some((name, f.next()?.parse().ok()?))
            })
            .collect()
    };
    let own = field("share ");
    let cpu = field("cpu ")
        .first()
        .map(|c| c.1)
        .expect("the workload's cpu line");
    assert_eq!(own.len(), 2, "the workload's figures: {stdout}");
    (own, cpu)
}

/// The samples of `stacks` with a frame that `function` names `name`.
fn samples_with(
    stacks: &[(Vec<String>, u64)],
    function: &dyn Fn(&str) -> Option<String>,
    name: &str,
) -> u64 {
    stacks
        .iter()
        .filter(|(f, _)| f.iter().any(|x| function(x).as_deref() == Some(name)))
        .map(|(_, n)| n)
        .sum()
}

/// Each leaf of the program's own figures (`own`, over `cpu` seconds)
/// holds a share of flare's `total` samples (`with` counts those naming
/// `prefix` + the leaf) within `within` points of the program's.
fn assert_shares(
    own: &[(String, f64)],
    cpu: f64,
    prefix: &str,
    with: &dyn Fn(&str) -> u64,
    (total, within): (u64, f64),
    stdout: &str,
) {
    for (name, spent) in own {
        let ours = 100.0 * with(&format!("{prefix}{name}")) as f64 / total as f64;
        let theirs = 100.0 * spent / cpu;
        eprintln!("{name}: {ours:.1} % of {total} samples, {theirs:.1} % by its own clock");
        assert!(
            (ours - theirs).abs() <= within,
            "{name}: {ours:.1} % of flare's samples, {theirs:.1} % by the program's clock:\n{stdout}"
        );
    }
}

fn stacks_of(out: &[u8], comm: &str) -> Vec<(Vec<String>, u64)> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            let frames: Vec<String> = stack.split(';').map(str::to_string).collect();
            (frames.len() > 1 && frames[0] == comm).then_some((frames, n.parse().ok()?))
        })
        .collect()
}

#[test]
fn a_command_is_profiled_without_root_with_its_shares_and_exit_status() {
    if !can_run_as_nobody() {
        return;
    }
    let _g = serial();
    let sb = Sandbox::new(&[("twofuncs", &twofuncs())]);
    let out_dir = sb.path("out");
    fs::create_dir(&out_dir).expect("out dir");
    sb.give(&out_dir);
    let svg = out_dir.join("cpu.svg");
    let svg_arg = svg.to_string_lossy().into_owned();
    // sh starts twofuncs as its child, then exits 7.
    let out = sb.run(
        &[
            "profile",
            "-F",
            "499",
            "-f",
            "-o",
            &svg_arg,
            "--",
            "sh",
            "-c",
            "./twofuncs 3 25; exit 7",
        ],
        &sb.path("cache"),
        "go\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(7),
        "the command's status; stderr: {err}"
    );
    assert!(
        err.contains("not root: sampling with perf events"),
        "stderr names the mode: {err}"
    );
    let (mut a, mut b) = (0, 0);
    for (frames, n) in stacks_of(&out.stdout, "twofuncs") {
        if frames.iter().any(|f| f == "func_a") {
            a += n;
        } else if frames.iter().any(|f| f == "func_b") {
            b += n;
        }
    }
    assert!(
        a + b > 200,
        "too few samples in func_a/func_b ({a} + {b}); stdout:\n{}\nstderr: {err}",
        String::from_utf8_lossy(&out.stdout)
    );
    let share = 100.0 * a as f64 / (a + b) as f64;
    assert!(
        (share - 25.0).abs() <= 5.0,
        "func_a has {share:.1} % of samples, the workload gave it 25 %"
    );
    let svg = fs::read_to_string(&svg).expect("the -o flame graph was written");
    assert!(svg.contains("func_a"), "the flame graph names func_a");
}

/// Profiles nofp without frame pointers as nobody with `--unwind mode`:
/// (complete samples, all samples, stderr).
fn nofp_stacks(sb: &Sandbox, mode: &str, cache: &Path) -> (u64, u64, String) {
    let out = sb.run(
        &[
            "profile",
            "-F",
            "499",
            "-f",
            "--unwind",
            mode,
            "--unknown",
            "offset",
            "--",
            "./nofp",
            "3",
            "25",
        ],
        cache,
        "go\n",
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    let (mut complete, mut all) = (0, 0);
    let mut incomplete = Vec::new();
    for (frames, n) in stacks_of(&out.stdout, "nofp") {
        // The main thread's start-up, walked to its root (the dynamic
        // loader's entry, unnamed: `object+0xSTART` with --unknown
        // offset): not the worker's, which the shares are of.
        if mode == "auto" && frames[1].starts_with("ld-linux") {
            continue;
        }
        all += n;
        // clone3 and start_thread (unnamed where libc's local symbols
        // are not installed, as in the arm64 guests), then worker.
        // (frames[0] is the comm).
        let full = frames.len() >= 6
            && frames[3] == "worker"
            && frames[4] == "run"
            && (frames[5] == "func_a" || frames[5] == "func_b");
        if full {
            complete += n;
        } else {
            incomplete.push(format!("{} {n}", frames.join(";")));
        }
    }
    assert!(
        all >= 100,
        "--unwind {mode}: too few samples ({all}); stderr: {err}"
    );
    if mode == "auto" && (complete as f64) < 0.95 * all as f64 {
        panic!(
            "--unwind auto: {complete} of {all} samples complete; incomplete:\n{}",
            incomplete.join("\n")
        );
    }
    (complete, all, err)
}

#[test]
fn code_without_frame_pointers_has_full_stacks_from_the_copied_stack() {
    if !can_run_as_nobody() {
        return;
    }
    let _g = serial();
    let sb = Sandbox::new(&[("nofp", &nofp())]);
    let (complete, all, _) = nofp_stacks(&sb, "auto", &sb.path("cache"));
    assert!(complete as f64 >= 0.95 * all as f64);
    // Frame pointers alone (the kernel's callchain) lose the callers.
    let (complete, all, _) = nofp_stacks(&sb, "fp", &sb.path("cache"));
    assert!(
        (complete as f64) < 0.5 * all as f64,
        "--unwind fp: {complete} of {all} samples complete, expected frame pointers to lose callers"
    );
}

#[test]
fn an_unwritable_cache_is_not_fatal() {
    if !can_run_as_nobody() {
        return;
    }
    let _g = serial();
    let sb = Sandbox::new(&[("nofp", &nofp())]);
    // The sandbox itself: readable, not writable by nobody (as root), and
    // a path under a file, which no one can create.
    let not_a_dir = sb.path("flare");
    for cache in [sb.dir.path(), not_a_dir.as_path()] {
        let (complete, all, err) = nofp_stacks(&sb, "auto", cache);
        assert!(
            complete as f64 >= 0.95 * all as f64,
            "cache {}: {complete} of {all}; {err}",
            cache.display()
        );
    }
}

#[test]
fn another_users_process_is_a_clear_error() {
    if !can_run_as_nobody() {
        return;
    }
    let sb = Sandbox::new(&[]);
    let out = sb.run(&["profile", "-p", "1", "1"], &sb.path("cache"), "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for word in ["root", "CAP_PERFMON", "perf_event_paranoid", "PID 1"] {
        assert!(err.contains(word), "the error names {word}: {err}");
    }
}

#[test]
fn system_wide_without_root_is_a_clear_error() {
    if !can_run_as_nobody() {
        return;
    }
    let sb = Sandbox::new(&[]);
    let out = sb.run(&["profile", "1"], &sb.path("cache"), "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for word in ["-- CMD", "-p PID", "root", "CAP_BPF"] {
        assert!(err.contains(word), "the error names {word}: {err}");
    }
    // Tools that need BPF say so, and what does run.
    let out = sb.run(&["offcputime", "1"], &sb.path("cache"), "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("needs root") && err.contains("flare profile"),
        "{err}"
    );
}

/// tests/workloads/twofuncs with `args`, as nobody when root, once it
/// said "ready"; its stdout to read on.
fn twofuncs_ready(
    sb: &Sandbox,
    args: &[&str],
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    use std::io::BufRead;
    let mut workload = if is_root() {
        let mut c = common::nobody::setpriv();
        c.arg(sb.path("twofuncs"));
        c
    } else {
        Command::new(sb.path("twofuncs"))
    };
    let mut w = workload
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting twofuncs");
    let mut out = std::io::BufReader::new(w.stdout.take().expect("stdout"));
    let mut line = String::new();
    while line.trim() != "ready" {
        line.clear();
        let n = out.read_line(&mut line).expect("twofuncs output");
        assert!(n > 0, "twofuncs {args:?} ended before it was ready");
    }
    (w, out)
}

/// The CPU seconds of each of twofuncs' workers, worker 0's first, read
/// from its output up to its "cpu S" line ("tcpu TID S" lines).
fn workers_cpu(out: &mut impl std::io::BufRead) -> Vec<f64> {
    let mut tcpu = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).expect("twofuncs output") == 0 || line.starts_with("cpu ") {
            return tcpu;
        }
        if let Some(s) = line.trim().strip_prefix("tcpu ") {
            let seconds = s.split_whitespace().nth(1).and_then(|v| v.parse().ok());
            tcpu.push(seconds.expect("a tcpu line: tcpu TID SECONDS"));
        }
    }
}

/// flare (`flare`, a command of [`Sandbox::flare`]) started, once its
/// events are open: it, its stderr to read on, and the mode's note it
/// printed then.
fn attached(
    mut flare: Command,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStderr>,
    String,
) {
    use std::io::BufRead;
    let mut child = flare
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running flare");
    let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut note = String::new();
    err.read_line(&mut note).expect("flare's stderr");
    assert!(note.contains("sampling with perf events"), "{note}");
    (child, err, note)
}

/// The user's own running process (`-p`), every thread of it: the
/// workers were started before flare attached (regression: events of all
/// but the first thread were closed as soon as sampling began).
#[test]
fn an_own_process_is_profiled_by_pid_with_all_its_threads() {
    if !can_run_as_nobody() {
        return;
    }
    let _g = serial();
    use std::io::Write;
    let sb = Sandbox::new(&[("twofuncs", &twofuncs())]);
    // Its stdout stays open: twofuncs writes to it at the end.
    let (mut w, mut out_w) = twofuncs_ready(&sb, &["2", "25", "2"]);
    let pid = w.id().to_string();
    let (flare, mut err, note) = attached(sb.flare(
        &["profile", "-F", "499", "-f", "-p", &pid, "4"],
        &sb.path("cache"),
    ));
    let mut stdin = w.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").expect("go");
    let out = flare.wait_with_output().expect("flare");
    let tcpu = workers_cpu(&mut out_w);
    drop(stdin);
    let _ = w.wait();
    let (mut a, mut b) = (0, 0);
    for (frames, n) in stacks_of(&out.stdout, "twofuncs") {
        if frames.iter().any(|f| f == "func_a") {
            a += n;
        } else if frames.iter().any(|f| f == "func_b") {
            b += n;
        }
    }
    let mut said = String::new();
    let _ = std::io::Read::read_to_string(&mut err, &mut said);
    assert!(
        a + b > 300,
        "too few samples ({a} + {b}):\n{}\n{note}{said}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Two workers with swapped shares (25/75 and 75/25): func_a's share is
    // half of both only if they ran alike; on a busy machine one may run
    // more, so the truth is weighed by each worker's own CPU time.
    assert_eq!(tcpu.len(), 2, "the workers' CPU times: {tcpu:?}");
    let truth = 100.0 * (0.25 * tcpu[0] + 0.75 * tcpu[1]) / (tcpu[0] + tcpu[1]);
    let share = 100.0 * a as f64 / (a + b) as f64;
    assert!(
        (share - truth).abs() <= 7.0,
        "func_a has {share:.1} % of both workers' samples, {truth:.1} % by their clocks ({tcpu:?})"
    );
}

/// Threads started while flare attaches (`-p`): listed too late, and not
/// inheriting events opened after they started, they went unsampled,
/// with every thread they start (a JVM attached in its first milliseconds
/// had no sample at all). flare is held between listing the threads and
/// opening the events while the workers start.
#[test]
fn threads_started_while_attaching_are_sampled() {
    if !can_run_as_nobody() {
        return;
    }
    let _g = serial();
    use std::io::{BufRead, Write};
    let sb = Sandbox::new(&[("twofuncs", &twofuncs())]);
    let (mut w, mut w_out) = twofuncs_ready(&sb, &["2", "25", "2", "late", "held"]);
    let mut line = String::new();
    let held = sb.path("held");
    fs::create_dir(&held).expect("mkdir");
    sb.give(&held);
    let listed = held.join("listed");
    let pid = w.id().to_string();
    let flare = sb
        .flare(
            &["profile", "-F", "499", "-f", "-p", &pid, "4"],
            &sb.path("cache"),
        )
        .env("FLARE_TEST_HOLD_AFTER_LISTING", &listed)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running flare");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !listed.exists() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(listed.exists(), "flare did not list the threads");
    // The workers start (each prints its tid) while flare is held.
    let mut stdin = w.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").expect("go");
    let mut started = 0;
    while started < 2 {
        line.clear();
        if w_out.read_line(&mut line).expect("twofuncs output") == 0 {
            break;
        }
        started += usize::from(line.starts_with("tid "));
    }
    fs::remove_file(&listed).expect("releasing flare");
    // They work once flare has opened its events (its note says so): an
    // emulated guest beside others took longer to attach than their 2 s.
    let mut flare = flare;
    let mut err = std::io::BufReader::new(flare.stderr.take().expect("stderr"));
    let mut note = String::new();
    err.read_line(&mut note).expect("flare's stderr");
    stdin.write_all(b"work\n").expect("work");
    let cpu: f64 = workers_cpu(&mut w_out).iter().sum();
    let mut out = flare.wait_with_output().expect("flare");
    note.push_str(&String::from_utf8_lossy(&out.stderr));
    let _ = std::io::Read::read_to_string(&mut err, &mut note);
    out.stderr = note.into_bytes();
    drop(stdin);
    let _ = w.wait();
    let n: u64 = stacks_of(&out.stdout, "twofuncs")
        .into_iter()
        .filter(|(frames, _)| frames.iter().any(|f| f == "func_a" || f == "func_b"))
        .map(|(_, n)| n)
        .sum();
    // Two workers for 2 s at 499 Hz: half of 499 Hz over the CPU time
    // they got (about 4 s on an idle machine, less beside other work).
    // Emulated, timers lose ticks: 15 %.
    let part = if common::bpf::emulated() { 0.15 } else { 0.5 };
    assert!(
        n as f64 >= part * 499.0 * cpu && cpu > 0.5,
        "{n} samples of the workers started while flare attached, in {cpu:.2} s of their CPU:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Once the target of `-p` exits, flare waits for Ctrl-C (as bcc's tools
/// do) without using the CPU: the buffer of an exited thread's event
/// reports a hang-up to every poll, and the reading thread spun on it
/// (regression: a whole CPU, in the kernel, until the end).
#[test]
fn flare_idles_once_its_target_exits() {
    if !can_run_as_nobody() {
        return;
    }
    let _g = serial();
    let sb = Sandbox::new(&[("twofuncs", &twofuncs())]);
    let (mut w, _out) = twofuncs_ready(&sb, &["1", "25", "1"]);
    let pid = w.id().to_string();
    let (flare, _, _) = attached(sb.flare(
        &["profile", "-F", "99", "-f", "-p", &pid],
        &sb.path("cache"),
    ));
    // The workload works a second, then exits as its stdin closes.
    std::io::Write::write_all(&mut w.stdin.take().expect("stdin"), b"go\n").expect("go");
    let _ = w.wait();
    let ticks = || -> u64 {
        let stat = fs::read_to_string(format!("/proc/{}/stat", flare.id())).expect("flare's stat");
        let after = &stat[stat.rfind(')').expect("stat") + 2..];
        let f: Vec<&str> = after.split(' ').collect();
        f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
    };
    // What was sampled is walked and named first (seconds under
    // emulation); then flare idles. Spinning never does: clock ticks are
    // 10 ms, and spinning used some 200 in each 2 s.
    let mut used = Vec::new();
    while used.len() < 15 && used.last().is_none_or(|&u| u >= 50) {
        let before = ticks();
        std::thread::sleep(std::time::Duration::from_secs(2));
        used.push(ticks() - before);
    }
    // SAFETY: kill has no memory preconditions; flare is our child.
    unsafe { libc::kill(flare.id() as i32, libc::SIGINT) };
    let out = flare.wait_with_output().expect("flare");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        used.last().is_some_and(|&u| u < 50),
        "flare's clock ticks in each 2 s with nothing to sample: {used:?}"
    );
}

/// Python frames without root: Debian's python3.11 (started by flare as
/// nobody) runs tests/workloads/pyservice.py, which measures each leaf's
/// share with its own thread clock; flare reads the frames from user
/// space after each sample. The chain, and each leaf within 3 points of
/// the program's own figures.
#[test]
fn python_frames_without_root() {
    if !can_run_as_nobody() {
        return;
    }
    let python = Path::new("/usr/bin/python3.11");
    if !python.exists() {
        if std::env::var("FLARE_REQUIRE_BPF").as_deref() == Ok("1") {
            panic!("/usr/bin/python3.11 is missing: .ci/run installs python3");
        }
        eprintln!("skipping: /usr/bin/python3.11 is not installed");
        return;
    }
    let _g = serial();
    let sb = Sandbox::new(&[("pyservice.py", &pyservice())]);
    python_shares_without_root(&sb, &["/usr/bin/python3.11"], "python3.11");
}

/// Python frames without root on Debian sid's CPython 3.`minor`
/// (scripts/runtimes keeps it outside /root, where nobody can run it).
fn sid_python_without_root(minor: u32) {
    if !can_run_as_nobody() {
        return;
    }
    let Some(python) = common::python::sid_required(minor) else {
        return;
    };
    let _g = serial();
    let sb = Sandbox::new(&[("pyservice.py", &pyservice())]);
    let python = python.to_string_lossy().into_owned();
    python_shares_without_root(&sb, &[&python], &format!("python3.{minor}"));
}

#[test]
fn sid_python_frames_without_root_3_14() {
    sid_python_without_root(14);
}

#[test]
fn sid_python_frames_without_root_3_15() {
    sid_python_without_root(15);
}

fn pyservice() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/pyservice.py")
}

/// Runs pyservice.py for 4 s under `python` (a command line) started by
/// flare as nobody in `sb`, and checks the chain and the shares of the
/// samples of `comm` under serve().
fn python_shares_without_root(sb: &Sandbox, python: &[&str], comm: &str) {
    let mut args = vec!["profile", "-F", "997", "-f", "--"];
    args.extend_from_slice(python);
    let seconds = 4;
    let seconds_arg = seconds.to_string();
    args.extend_from_slice(&["pyservice.py", &seconds_arg]);
    let out = sb.run(&args, &sb.path("cache"), "go\n");
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    let (own, cpu) = figures(&stdout);
    // `name (dir/file.py:LINE)`: the Python function, or None.
    let function = |f: &str| -> Option<String> {
        let (name, rest) = f.split_once(" (")?;
        rest.contains(".py:").then(|| name.to_string())
    };
    // The service's samples (its own clock runs only while it serves).
    let stacks: Vec<(Vec<String>, u64)> = stacks_of(&out.stdout, comm)
        .into_iter()
        .filter(|(f, _)| f.iter().any(|x| function(x).as_deref() == Some("serve")))
        .collect();
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    // Emulated, half: timers lose ticks there, and the late-libpython
    // run spends seconds starting up (995 samples under serve once in the
    // arm64 6.1 guest, 1,265-1,628 in three other runs).
    let want = if common::bpf::emulated() { 500 } else { 1000 };
    assert!(total >= want, "{total} samples:\n{stdout}\n{err}");
    let with = |name: &str| samples_with(&stacks, &function, name);
    // Over the two functions alone, as the Java test below: perf-event
    // mode reads a sample's Python frames after the sample, and on a busy
    // machine (a parallel build beside it) some reads come late enough to
    // find the thread back in handle(), between its calls: handle's own
    // samples grew from 1.1-1.3 % to 2.5-4.3 % there, taken from
    // parse_request, which came out 64.5 % of the samples under serve
    // against 68.7 % by its clock (67.5 % and 69.0 % over the two). Those
    // late reads are bounded on their own.
    let both: u64 = own.iter().map(|(name, _)| with(name)).sum();
    let spent_both: f64 = own.iter().map(|(_, spent)| spent).sum();
    let neither = 100.0 * (total - both) as f64 / total as f64;
    eprintln!("{neither:.1} % of {total} samples under serve in neither function");
    assert!(
        neither <= 8.0,
        "{neither:.1} % of {total} samples under serve in neither function:\n{stdout}"
    );
    // Emulated (the arm64 guests), within 6 points: parse_request came
    // out 3.6 low there once (64.4 % of 1,265 samples, 68.0 % by the
    // program's clock, the late-libpython run), as Java's perf-event
    // shares do there (below); so on a machine busy enough to starve the
    // workload itself (under 95 % of a CPU over its 4 s), where the reader
    // waits too; natively within 3.
    let starved = common::bpf::starved(cpu, f64::from(seconds));
    let within = if common::bpf::emulated() || starved {
        6.0
    } else {
        3.0
    };
    assert_shares(&own, spent_both, "", &with, (both, within), &stdout);
    let chained: u64 = stacks
        .iter()
        .filter(|(f, _)| {
            let py: Vec<String> = f.iter().filter_map(|x| function(x)).collect();
            py == ["<module>", "main", "serve", "handle", "parse_request"]
        })
        .map(|(_, n)| n)
        .sum();
    assert!(
        chained * 100 >= with("parse_request") * 95,
        "{chained} samples with the whole chain:\n{stdout}"
    );
}

/// Python frames without root in a process that loads libpython only
/// after 0.3 s of its own CPU time (tests/workloads/embed/latepy.c): its
/// first samples have no Python in them, which must not rule Python out.
#[test]
fn python_frames_without_root_when_libpython_comes_late() {
    if !can_run_as_nobody() {
        return;
    }
    let lib = Path::new("/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0");
    let lib_arm = Path::new("/usr/lib/aarch64-linux-gnu/libpython3.11.so.1.0");
    if !lib.exists() && !lib_arm.exists() {
        if std::env::var("FLARE_REQUIRE_BPF").as_deref() == Ok("1") {
            panic!("libpython3.11.so.1.0 is missing: scripts/deps.sh --test installs libpython3.11-dev");
        }
        eprintln!("skipping: libpython3.11 is not installed");
        return;
    }
    // glibc 2.34+ has dlopen in libc itself: no -ldl.
    let exe = build("nonroot-latepy", "embed/latepy.c", &["gcc", "-O2"]);
    let _g = serial();
    let sb = Sandbox::new(&[("pyservice.py", &pyservice()), ("latepy", &exe)]);
    let latepy = sb.path("latepy");
    python_shares_without_root(&sb, &[latepy.to_str().unwrap(), "0.3"], "latepy");
}

/// Java without root: flare (as nobody) starts a JVM running
/// tests/workloads/Service.java, which measures each leaf's share with its
/// thread's CPU clock. No BPF: each sample's copied stack is walked with
/// the user-space twin of the BPF Java step, the code cache read from the
/// live JVM. The chain from the thread's start through JavaMain to the
/// leaf on ≥ 95 % of the leaf's samples, each leaf within 3 points of
/// the program's own figures (interpreted phase included: flare runs from
/// the JVM's start), and emit, which the JIT inlines, under renderPage.
#[test]
fn java_frames_without_root() {
    java_without_root("java");
}

/// The same on OpenJDK 11 (scripts/runtimes keeps it outside /root,
/// where nobody can run it).
#[test]
fn jdk11_frames_without_root() {
    jre_without_root(11);
}

/// The same on OpenJDK 8 (Debian sid's): one code heap, and a launcher,
/// libjvm and libc without symbols.
#[test]
fn jdk8_frames_without_root() {
    jre_without_root(8);
}

/// [`java_frames_without_root`] on scripts/runtimes' OpenJDK `major`.
fn jre_without_root(major: u32) {
    if !can_run_as_nobody() {
        return;
    }
    let Some(java) = common::java::jre(major) else {
        return;
    };
    java_without_root(&java.to_string_lossy());
}

/// [`java_frames_without_root`] on the JVM `java`.
fn java_without_root(java: &str) {
    if !can_run_as_nobody() {
        return;
    }
    let jvm = std::path::Path::new(java);
    let Some(classes) = common::java::classes_for_jvm("Service", jvm) else {
        return;
    };
    let _g = serial();
    let class = classes.join("Service.class");
    let sb = Sandbox::new(&[("Service.class", &class)]);
    // The heap filled in advance: renderPage's CPU time is otherwise some
    // 6 % page faults on fresh heap, which samples without root cannot
    // see (the kernel drops samples taken in it), while the program's
    // clock counts them.
    // Emulated, the JVM records every inlined range, as in
    // tests/java_frames.rs' JIT test: a leaf inlined into handle() is
    // otherwise placed by the next debug point, which one compilation of
    // handle() may put in handle() itself. The arm64 guest's CI run once
    // saw 781 of 1,810 samples in the two leaves (1,501-1,549 of
    // 1,619-1,677 in three runs after it); its stacks were not kept, so
    // the placement is the likely cause, not a seen one (the assertion
    // now prints them). Natively the JVM runs without such flags, but for
    // JDK 8, whose JIT keeps no debug point in a counted loop
    // (tests/java_frames.rs' jit_flags_on).
    let seconds = common::java::seconds(4);
    let mut command = vec!["profile", "-F", "997", "-f", "--", java];
    if common::bpf::emulated() || common::java::jdk8(jvm) {
        command.extend(["-XX:+UnlockDiagnosticVMOptions", "-XX:+DebugNonSafepoints"]);
    }
    command.extend([
        "-XX:+AlwaysPreTouch",
        "-Xms128m",
        "-Xmx128m",
        "-cp",
        ".",
        "Service",
        "cpu",
        &seconds,
    ]);
    // Emulated, warmed up first (tests/java_frames.rs' start_on says why).
    if common::bpf::emulated() {
        command.push("6");
    }
    let out = sb.run(&command, &sb.path("cache"), "go\n");
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    assert!(!err.contains("HotSpot is not supported"), "{java}: {err}");
    let (own, cpu) = figures(&stdout);
    // The worker's samples: those under serve.
    let method = |f: &str| f.split_once('(').map(|(m, _)| m.to_string());
    let stacks: Vec<(Vec<String>, u64)> = stacks_of(&out.stdout, "java")
        .into_iter()
        .filter(|(f, _)| {
            f.iter()
                .any(|x| method(x).as_deref() == Some("Service.serve"))
        })
        .collect();
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    // Emulated, fewer: perf events there lose half their timer ticks or
    // more (1,298 and 1,908 samples of 4.9 and 4.1 s of CPU in the arm64
    // guests; 807 of 3.4 s once on a busier host, 1,500-1,620 in four
    // other runs that day).
    let want = if common::bpf::emulated() { 500 } else { 2000 };
    assert!(total >= want, "{total} samples:\n{stdout}\n{err}");
    let with = |name: &str| samples_with(&stacks, &method, name);
    // Over the two functions alone, as tests/java_frames.rs: the program
    // charges its clock reads in handle() (2-6 % of its CPU time here,
    // more under emulation) to both.
    let both: u64 = own
        .iter()
        .map(|(name, _)| with(&format!("Service.{name}")))
        .sum();
    let spent_both: f64 = own.iter().map(|(_, spent)| spent).sum();
    let most = if common::bpf::emulated() { 7 } else { 8 };
    eprintln!("{both} of {total} samples in the two functions");
    assert!(
        both * 10 >= total * most,
        "{both} of {total} samples in the two functions:\n{stdout}\n{err}"
    );
    if common::bpf::emulated() {
        // Emulated (the arm64 guests), perf-event mode's parseRequest
        // comes out 0.3 to 5.8 points low (BPF mode's within 1.5 in the
        // same guests), not explained: there the shares are shown and the
        // chain below is checked.
        for (name, spent) in &own {
            let ours = 100.0 * with(&format!("Service.{name}")) as f64 / both as f64;
            eprintln!(
                "emulated: {name}: {ours:.1} %, {:.1} % by its own clock",
                100.0 * spent / spent_both
            );
        }
    } else {
        // On a machine busy enough to starve the workload itself (under
        // 95 % of a CPU over its seconds), the reader waits for a CPU too,
        // and reads frames later: 3.2 points off beside a parallel build
        // once, so 5 there.
        let ran: f64 = seconds.parse().expect("seconds");
        let within = if common::bpf::starved(cpu, ran) {
            5.0
        } else {
            3.0
        };
        // Time in the kernel (the thread's CPU time outside user mode),
        // which a profile without root cannot see but the program's clock
        // counts, may all be one leaf's: the bound grows by its share.
        // CI once saw parseRequest 3.9 points above its clock on x86-64,
        // 0.5-2.4 in fifteen runs here after it (0.4-0.7 % of the time in
        // the kernel); that run did not print its kernel time.
        let user = stdout
            .lines()
            .find_map(|l| l.strip_prefix("user ")?.trim().parse::<f64>().ok())
            .expect("the workload's user line");
        let kernel = (100.0 * (cpu - user) / cpu).max(0.0);
        eprintln!("{kernel:.1} % of the worker's CPU time in the kernel");
        let within = within + kernel;
        assert_shares(&own, spent_both, "Service.", &with, (both, within), &stdout);
    }
    let want = [
        "Service.main",
        "Service.serve",
        "Service.handle",
        "Service.parseRequest",
    ];
    // Debian sid's JDK 8 package strips its launcher, libjvm and libc:
    // their frames are there, unnamed.
    let stripped = common::java::stripped_launcher(jvm);
    let chained: u64 = stacks
        .iter()
        .filter(|(f, _)| {
            let java: Vec<String> = f
                .iter()
                .filter_map(|x| method(x))
                .filter(|m| m.starts_with("Service.") && m != "Service.mix")
                .collect();
            // Emulated (after the warm-up there), main's frame is often
            // an on-stack-replaced compilation of its loop, which
            // perf-event mode does not name yet (docs/runtimes.md): an
            // unnamed frame in its place, right under the call stub,
            // keeps the chain (146 of 570 samples in one arm64 run).
            let osr_main = common::bpf::emulated()
                && java == want[1..]
                && f.windows(3).any(|w| {
                    w[0].starts_with("[StubRoutines")
                        && w[1] == "[unknown]"
                        && method(&w[2]).as_deref() == Some("Service.serve")
                });
            (java == want || osr_main) && common::java::rooted(f, stripped)
        })
        .map(|(_, n)| n)
        .sum();
    let leaf = with("Service.parseRequest");
    assert!(
        chained * 100 >= leaf * 95,
        "{chained} of {leaf} samples in parseRequest have the whole chain:\n{stdout}"
    );
    let inlined = stacks.iter().any(|(f, _)| {
        f.windows(2).any(|w| {
            method(&w[0]).as_deref() == Some("Service.renderPage")
                && method(&w[1]).as_deref() == Some("Service.emit")
        })
    });
    assert!(inlined, "emit is not under renderPage:\n{stdout}");
}

/// JavaScript frames without root: Node.js 20, 22 and 24 (before and
/// with the dispatch table) from scripts/runtimes run nodeservice.js's
/// chain under V8 `flags`; the chain and each leaf's share of its own
/// clock.
fn node_without_root(major: u32, flags: &[&str]) {
    if !can_run_as_nobody() {
        return;
    }
    let Some(node) = common::runtimes::node(major) else {
        return;
    };
    let _g = serial();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/nodeservice.js");
    let sb = Sandbox::new(&[("nodeservice.js", &script)]);
    let node = node.to_string_lossy().into_owned();
    let warm = if common::bpf::emulated() { "6" } else { "1" };
    let mut command = vec!["profile", "-F", "997", "-f", "--", &node];
    command.extend_from_slice(flags);
    command.extend_from_slice(&["nodeservice.js", "cpu", "4", warm]);
    let out = sb.run(&command, &sb.path("cache"), "go\n");
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    let (own, cpu) = figures(&stdout);
    // Node 24 on names its main thread "MainThread".
    let stacks: Vec<(Vec<String>, u64)> = ["node", "MainThread"]
        .into_iter()
        .flat_map(|comm| stacks_of(&out.stdout, comm))
        .filter(|(f, _)| f.iter().any(|x| x == "serve"))
        .collect();
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let want = if common::bpf::emulated() { 500 } else { 2000 };
    assert!(total >= want, "{total} samples:\n{stdout}\n{err}");
    // The whole chain, main;serve;handle;leaf, in the JavaScript frames.
    let chained = |f: &[String], leaf: &str| {
        f.windows(4)
            .any(|w| w[0] == "main" && w[1] == "serve" && w[2] == "handle" && w[3] == leaf)
    };
    let function = |f: &str| Some(f.to_string());
    let with = |name: &str| -> u64 {
        stacks
            .iter()
            .filter(|(f, _)| chained(f, name))
            .map(|(_, n)| n)
            .sum()
    };
    let both: u64 = own.iter().map(|(name, _)| with(name)).sum();
    // The program reading its clocks (serve's now(), handle's phaseCpu).
    let clock =
        samples_with(&stacks, &function, "now") + samples_with(&stacks, &function, "phaseCpu");
    // Emulated (the arm64 guest), handle's own work (next(), its random
    // numbers: multiplies and shifts TCG makes dear) and V8's compile
    // jobs took 6-7 % of the samples of Node 24 at default flags.
    let chain = if common::bpf::emulated() { 0.9 } else { 0.95 };
    assert!(
        both as f64 >= chain * (total - clock) as f64,
        "{both} of {total} samples ({clock} reading clocks) under the chain:\n{stdout}\n{err}"
    );
    let spent_both: f64 = own.iter().map(|(_, spent)| spent).sum();
    if common::bpf::emulated() {
        for (name, spent) in &own {
            let ours = 100.0 * with(name) as f64 / both as f64;
            eprintln!(
                "emulated: {name}: {ours:.1} %, {:.1} % by its own clock",
                100.0 * spent / spent_both
            );
        }
    } else {
        let within = if common::bpf::starved(cpu, 4.0) {
            6.0
        } else {
            4.0
        };
        assert_shares(&own, spent_both, "", &with, (both, within), &stdout);
    }
}

/// Baseline code: each leaf a frame of its own.
#[test]
fn node20_frames_without_root() {
    node_without_root(20, &["--no-opt", "--no-maglev"]);
}

/// Maglev alone: serve's loop compiled on stack replacement, found in
/// serve's feedback.
#[test]
fn node22_frames_without_root() {
    node_without_root(22, &["--maglev", "--no-turbofan"]);
}

/// Default flags: the leaves inlined into handle, their samples mostly
/// in builtins that keep no frame.
#[test]
fn node24_frames_without_root() {
    node_without_root(24, &[]);
}

/// Two worker threads without root, each running one loop that V8
/// compiles on stack replacement with its leaf inlined (Node 26 at
/// default flags): the leaf in nearly all of the loop's samples, as in
/// tests/node_frames.rs with BPF (its floor, 80 %, says why not all). A
/// sample in a builtin that keeps no frame, called from that code, finds
/// the interpreter's slots still in the frame; the user-space walk
/// (src/runtime/v8/walk.rs) must not take it for an interpreted frame,
/// which loses the leaf.
#[test]
fn node26_workers_without_root() {
    if !can_run_as_nobody() {
        return;
    }
    let Some(node) = common::runtimes::node(26) else {
        return;
    };
    let _g = serial();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/nodeservice.js");
    let sb = Sandbox::new(&[("nodeservice.js", &script)]);
    let node = node.to_string_lossy().into_owned();
    let command = [
        "profile",
        "-F",
        "499",
        "-f",
        "--",
        &node,
        "nodeservice.js",
        "threads",
        "3",
    ];
    let out = sb.run(&command, &sb.path("cache"), "go\n");
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    let stacks: Vec<(Vec<&str>, u64)> = stdout
        .lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            let frames: Vec<&str> = stack.split(';').collect();
            (frames.len() > 1).then_some((frames, n.parse().ok()?))
        })
        .collect();
    for (lp, leaf) in [("parseLoop", "parseRequest"), ("renderLoop", "renderPage")] {
        let count = |pred: &dyn Fn(&[&str]) -> bool| -> u64 {
            stacks.iter().filter(|(f, _)| pred(f)).map(|(_, n)| n).sum()
        };
        let in_loop = count(&|f| f.contains(&lp));
        let in_leaf = count(&|f| {
            f.iter()
                .rposition(|x| *x == lp)
                .is_some_and(|at| f[at..].contains(&leaf))
        });
        let want = if common::bpf::emulated() { 100 } else { 700 };
        assert!(
            in_loop >= want && in_leaf as f64 >= 0.8 * in_loop as f64,
            "{in_loop} samples in {lp}, {in_leaf} in {leaf}:\n{stdout}\n{err}"
        );
    }
}

/// Ruby frames without root: CRuby `version` (Debian 12's 3.1, or
/// `scripts/runtimes`' builds) under `flags`, started by flare as nobody,
/// runs tests/workloads/rbservice.rb, which measures each leaf's share
/// with its thread's CPU clock; flare reads each sample's control frames
/// from user space, the thread's execution context found through glibc's
/// thread list. The rules of tests/ruby_frames.rs: the chain in ≥ 95 % of
/// the work's samples not reading clocks, each leaf within 4 points.
fn ruby_without_root(version: &str, flags: &[&str]) {
    if !can_run_as_nobody() {
        return;
    }
    let Some(ruby) = common::runtimes::ruby(version) else {
        return;
    };
    let _g = serial();
    let sb = Sandbox::new(&[("rbservice.rb", &common::ruby::script())]);
    let ruby = ruby.to_string_lossy().into_owned();
    let mut args = vec!["profile", "-F", "997", "-f", "--", &ruby];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["rbservice.rb", "cpu", "4"]);
    let out = sb.run(&args, &sb.path("cache"), "go\n");
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    let (own, cpu) = figures(&stdout);
    // Folded stacks, root first, and their counts (the workload's own
    // lines end in no count).
    let stacks: Vec<(&str, u64)> = stdout
        .lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            Some((stack, n.parse().ok()?))
        })
        .collect();
    // The workload's own methods of each.
    let chains: common::ruby::Chains = stacks
        .iter()
        .map(|&(stack, n)| {
            let methods = stack
                .split(';')
                .filter(|f| f.contains("rbservice.rb:"))
                .map(common::ruby::method)
                .collect();
            (common::ruby::from_main(methods), n)
        })
        .collect();
    // In an emulated guest beside another, the workload's 4 s of work
    // got as little as a fraction of a CPU: there at least half the
    // samples its own CPU time makes at 997 Hz must carry its frames
    // (reads dropped as late keep native frames only), up to 500. On a
    // machine busy enough to starve the workload, 2000. Otherwise 85 %:
    // 97-98 % do, where 75 % did while a sample whose frame had
    // returned by the read kept native frames only.
    let starved = common::bpf::starved(cpu, 4.0);
    let want = if common::bpf::emulated() {
        ((997.0 * cpu / 2.0) as u64).clamp(100, 500)
    } else if starved {
        2000
    } else {
        (0.85 * 997.0 * cpu) as u64
    };
    // As Node's above: a machine busy enough to starve the workload
    // starves the reader too.
    let within = if common::bpf::emulated() || starved {
        6.0
    } else {
        4.0
    };
    let what = format!("Ruby {version} {flags:?} without root");
    common::ruby::check_chains(&what, &chains, &own, (want, within), &err);
    let frames = stacks.iter().flat_map(|(stack, _)| stack.split(';'));
    common::ruby::check_names(&what, frames);
}

#[test]
fn ruby31_frames_without_root() {
    ruby_without_root("3.1", &[]);
}

/// YJIT's code has no unwind table: the frames left go in where the walk
/// meets it, as BPF puts them.
#[test]
fn ruby31_yjit_frames_without_root() {
    if cfg!(target_arch = "aarch64") {
        // Ruby 3.1's YJIT is x86-64's only.
        return;
    }
    ruby_without_root("3.1", &["--yjit", "--yjit-call-threshold=1"]);
}

#[test]
fn ruby33_frames_without_root() {
    ruby_without_root("3.3", &[]);
}

#[test]
fn ruby34_frames_without_root() {
    ruby_without_root("3.4", &[]);
}
