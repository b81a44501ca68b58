//! Processes named after they exit (issue 11): a storm of short-lived
//! processes during a system-wide profile, and each tool on a process
//! that exits before the run ends, compared with the same process staying
//! alive; libc's local functions from Debian's libc6-dbg.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::bpf::{attached, flare, require_bpf, serial, workload, Reaper};
use common::session::parse_folded;

/// flare running in the background, its output read on threads.
struct Running {
    child: Reaper,
    stdout: std::thread::JoinHandle<String>,
    stderr: std::thread::JoinHandle<String>,
}

fn start_flare(args: &[String]) -> Running {
    let mut child = Reaper(
        flare()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting flare"),
    );
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let stdout = drain(child.0.stdout.take().map(|o| Box::new(o) as _));
    let stderr = drain(child.0.stderr.take().map(|o| Box::new(o) as _));
    // Attached: flare handles SIGINT from its start, before it has even
    // checked its -p (a slow start, as under emulation, found the process
    // gone). profile holds an event and its link on each CPU.
    let links = match args.first().map(String::as_str) {
        // SAFETY: sysconf has no memory-safety preconditions.
        Some("profile") => 2 * unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize,
        Some("offwaketime") => 2,
        _ => 1,
    };
    let started = Instant::now();
    while !attached(child.0.id(), links) {
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("flare {args:?} exited ({status}) before attaching");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "flare {args:?} did not attach within a minute"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Running {
        child,
        stdout,
        stderr,
    }
}

impl Running {
    fn stop(mut self) -> (String, String) {
        // SAFETY: kill only sends a signal to the flare process we started.
        unsafe { libc::kill(self.child.0.id() as i32, libc::SIGINT) };
        // A flare that does not stop fails the test instead of hanging it.
        let asked = Instant::now();
        let status = loop {
            if let Some(status) = self.child.0.try_wait().expect("waiting for flare") {
                break status;
            }
            if asked.elapsed() > Duration::from_secs(30) {
                let _ = self.child.0.kill();
                let _ = self.child.0.wait();
                panic!(
                    "flare did not stop within 30 s of SIGINT:\n{}",
                    self.stderr.join().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = self.stdout.join().unwrap_or_default();
        let err = self.stderr.join().unwrap_or_default();
        assert!(status.success(), "flare failed ({status}):\n{err}");
        (out, err)
    }
}

/// Runs `shortlived MODE 1 exit|stay` under `flare TOOL ARGS` (`{pid}` and
/// `{exe}` replaced) and returns flare's folded output. With `exit`, the
/// process has exited well before flare stops.
fn traced(tool: &str, args: &[&str], mode: &str, exits: bool) -> String {
    run_under("shortlived", &[mode, "1"], &[], tool, args, exits).0
}

/// Runs `NAME PRE.. 1 exit|stay POST..` (the stdio protocol of
/// tests/workloads/shortlived.c) under flare; returns its stdout and stderr.
fn run_under(
    name: &str,
    pre: &[&str],
    post: &[&str],
    tool: &str,
    args: &[&str],
    exits: bool,
) -> (String, String) {
    let exe = workload(name);
    run_command(Command::new(&exe), &exe, name, pre, post, tool, args, exits)
}

/// [`run_under`] for a workload started by `cmd` (`exe` is its binary).
#[allow(clippy::too_many_arguments)]
fn run_command(
    mut cmd: Command,
    exe: &std::path::Path,
    name: &str,
    pre: &[&str],
    post: &[&str],
    tool: &str,
    args: &[&str],
    exits: bool,
) -> (String, String) {
    let mut child = Reaper(
        cmd.args(pre)
            .arg(if exits { "exit" } else { "stay" })
            .args(post)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting shortlived"),
    );
    let pid = child.0.id();
    let mut stdin = child.0.stdin.take();
    let mut lines = BufReader::new(child.0.stdout.take().expect("stdout")).lines();
    let mut expect = |want: &str| {
        let line = lines.next().and_then(Result::ok);
        assert_eq!(line.as_deref(), Some(want), "{name} {pre:?}");
    };
    expect("ready");
    let mut argv = vec![tool.to_string()];
    argv.extend(args.iter().map(|a| {
        a.replace("{pid}", &pid.to_string())
            .replace("{exe}", &exe.display().to_string())
    }));
    let flare = start_flare(&argv);
    writeln!(stdin.as_mut().expect("stdin"), "go").expect("go");
    expect("done");
    if exits {
        child.0.wait().expect("waiting for the workload");
        // Long enough for a process table reader to have missed it.
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "the process is gone before flare stops"
        );
    }
    let out = flare.stop();
    drop(stdin.take());
    out
}

/// The stacks that carry at least 5 % of the total, as folded lines
/// without counts. Only the workload's own: offwaketime also shows the
/// task a timer interrupt happened to run in as the waker of its sleeps.
fn heavy(tool: &str, folded: &str) -> BTreeSet<String> {
    let stacks: Vec<(Vec<String>, u64)> = parse_folded(folded)
        .into_iter()
        .filter(|(f, _)| tool != "offwaketime" || f.last().is_some_and(|w| w == "shortlived"))
        .collect();
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    stacks
        .into_iter()
        .filter(|(_, n)| *n * 20 >= total)
        .map(|(f, _)| f.join(";"))
        .collect()
}

/// Checks that `tool` shows the same main stacks for a process that exits
/// as for one that stays, and that they name `function`.
fn same_after_exit(tool: &str, args: &[&str], mode: &str, function: &str) {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let (alive, alive_err) = run_under("shortlived", &[mode, "1"], &[], tool, args, false);
    let (exited, exited_err) = run_under("shortlived", &[mode, "1"], &[], tool, args, true);
    let (alive, exited) = (heavy(tool, &alive), heavy(tool, &exited));
    assert!(
        alive.iter().any(|s| s.contains(function)),
        "{tool} names {function} in a live process: {alive:#?}\n{alive_err}"
    );
    assert_eq!(
        exited, alive,
        "{tool}: stacks of a process that exited differ from one that lives\n{exited_err}"
    );
}

#[test]
fn profile_names_an_exited_process() {
    same_after_exit(
        "profile",
        &["-p", "{pid}", "-U", "-f", "-F", "499"],
        "burn",
        ";sl_burn_outer;sl_burn",
    );
}

#[test]
fn offcputime_names_an_exited_process() {
    same_after_exit(
        "offcputime",
        &["-p", "{pid}", "-U", "-f"],
        "sleep",
        "sl_sleep_outer",
    );
}

#[test]
fn offwaketime_names_an_exited_process() {
    same_after_exit(
        "offwaketime",
        &["-p", "{pid}", "-U", "-f"],
        "pingpong",
        // The waker's user stack, by frame pointers: sl_wake is skipped
        // on x86-64 (libc's write keeps no frame pointer; arm64's walk has
        // it from the link register), and start_thread is named only
        // where libc's debug file is installed.
        ";waker;",
    );
}

#[test]
fn stackcount_names_an_exited_process() {
    same_after_exit(
        "stackcount",
        &["-p", "{pid}", "-U", "-f", "{exe}:sl_leaf"],
        "calls",
        // The unwinder (--unwind auto) sees the caller at a uprobe on entry.
        ";main;sl_caller;sl_leaf",
    );
}

/// Debian's libc6-dbg (scripts/deps.sh --test) has the local functions
/// libc's own symbol table lacks; `__libc_start_call_main` calls main.
#[test]
fn libc_local_function_from_debug_file() {
    if !require_bpf() {
        return;
    }
    assert!(
        std::path::Path::new("/usr/lib/debug/.build-id").is_dir(),
        "libc6-dbg is not installed (scripts/deps.sh --test)"
    );
    let _serial = serial();
    let out = traced(
        "profile",
        &["-p", "{pid}", "-U", "-f", "-F", "499"],
        "burn",
        true,
    );
    assert!(
        out.lines()
            .any(|l| l.contains(";__libc_start_call_main;main;sl_burn_outer;sl_burn ")),
        "libc's caller of main is named:\n{out}"
    );
}

/// The fork storm: 100 processes of a test binary, each burning 20 ms of
/// CPU in `storm_burn` and exiting, during a system-wide profile. Of their
/// samples with a user stack (a stack the kernel could not store is
/// reported as lost, not named; one taken after the process's memory is
/// gone has none), at least 95 % name a function of that
/// binary (`storm_burn`, `main` or `_start`: all three are lost with the
/// process when symbols do not outlive it), and, where the burn is most
/// of a child's life, at least 95 % name `storm_burn`. Under emulation a
/// child's exit costs some 5 ms of its CPU: a quarter of its samples are
/// in `exit` under `main`, in arm64 guests.
#[test]
fn fork_storm_is_named() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let storm = workload("forkstorm");
    let flare = start_flare(&[
        "profile".into(),
        "-F".into(),
        "999".into(),
        "-f".into(),
        "-a".into(),
        "--stack-storage-size".into(),
        "262144".into(),
    ]);
    let out = Command::new(&storm)
        .args(["100", "20"])
        .output()
        .expect("running forkstorm");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done 100");
    let (folded, _) = flare.stop();
    let (mut named, mut burn, mut all) = (0, 0, 0);
    let mut unnamed: Vec<(Vec<String>, u64)> = Vec::new();
    for (frames, n) in parse_folded(&folded) {
        // Not a user stack: lost, or none (a sample in exit_group after
        // the process's memory is gone has kernel frames alone).
        if frames[0] != "stormchild"
            || frames.iter().any(|f| f == "[Missed User Stack]")
            || frames[1..].iter().all(|f| f.ends_with("_[k]"))
        {
            continue;
        }
        all += n;
        if frames.iter().any(|f| f == "storm_burn") {
            burn += n;
        }
        if frames
            .iter()
            .any(|f| matches!(f.as_str(), "storm_burn" | "main" | "_start"))
        {
            named += n;
        } else {
            unnamed.push((frames, n));
        }
    }
    assert!(all >= 500, "too few samples of the storm: {all}\n{folded}");
    unnamed.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    unnamed.truncate(10);
    assert!(
        named * 100 >= all * 95,
        "only {named} of {all} storm samples name the storm's functions; the most common others: {unnamed:#?}"
    );
    if std::env::var_os("FLARE_EMULATED").is_none() {
        assert!(
            burn * 100 >= all * 95,
            "only {burn} of {all} storm samples name storm_burn"
        );
    }
}

/// Runs `jitmap 1 exit|stay HOW` under a profile of it; returns the share
/// of its samples in `jit_spin_loop`, and flare's stderr.
fn jit_share(how: &str, exits: bool) -> (f64, String) {
    let (share, _, err) = jit_run(&[how], exits);
    (share, err)
}

/// [`jit_share`] with `post` after `exit|stay`; also flare's output.
fn jit_run(post: &[&str], exits: bool) -> (f64, String, String) {
    let (out, err) = run_under(
        "jitmap",
        &["1"],
        post,
        "profile",
        &["-p", "{pid}", "-U", "-f", "-F", "499"],
        exits,
    );
    let stacks = parse_folded(&out);
    let all: u64 = stacks.iter().map(|(_, n)| n).sum();
    let jit: u64 = stacks
        .iter()
        .filter(|(f, _)| f.iter().any(|f| f == "jit_spin_loop"))
        .map(|(_, n)| n)
        .sum();
    assert!(all >= 20, "too few samples ({all}):\n{out}{err}");
    (jit as f64 / all as f64, out, err)
}

/// A perf map written by the process's own user (root here) names its
/// JIT code, also once the process has exited and removed its map.
#[test]
fn perf_map_of_own_user_is_used_after_exit() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let (share, err) = jit_share("", true);
    assert!(
        share >= 0.8,
        "{:.0} % in jit_spin_loop\n{err}",
        share * 100.0
    );
}

/// The same for a process running as another user (uid 65534) that owns
/// its map.
#[test]
fn perf_map_of_unprivileged_process_is_used() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let (share, err) = jit_share("drop", false);
    assert!(
        share >= 0.8,
        "{:.0} % in jit_spin_loop\n{err}",
        share * 100.0
    );
}

/// A map owned by a user other than the process's (and not root) is not
/// trusted: ignored, with a note.
#[test]
fn perf_map_of_another_user_is_ignored() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let (share, err) = jit_share("other", false);
    assert_eq!(share, 0.0, "the untrusted map was used\n{err}");
    assert!(
        err.contains("ignoring /tmp/perf-") && err.contains("owned by uid 65534"),
        "a note says why: {err}"
    );
}

/// A process of another user whose "perf map" is a symbolic link to a
/// file only root may read: root's flare does not follow it (it printed
/// the file's lines as frame names), and says why it ignored the map.
#[test]
fn perf_map_symlinked_by_its_owner_is_not_followed() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = dir.path().join("secret");
    // A line naming every address: followed, it names the JIT frames.
    std::fs::write(&secret, "0 ffffffffffffffff root_only_secret\n").expect("write");
    let secret = secret.display().to_string();
    let (share, out, err) = jit_run(&["symlink", &secret], false);
    assert_eq!(share, 0.0, "{out}");
    assert!(
        !out.contains("root_only_secret"),
        "the link was followed:\n{out}"
    );
    assert!(
        err.contains("ignoring /tmp/perf-"),
        "a note says why: {err}"
    );
}

/// A process of another user whose "perf map" is a FIFO nobody writes:
/// flare does not block on it (it hung for good, deaf to SIGINT), and
/// stops as asked.
#[test]
fn perf_map_that_is_a_fifo_does_not_hang_flare() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let (share, out, err) = jit_run(&["fifo"], false);
    assert_eq!(share, 0.0, "{out}");
    assert!(err.contains("not a regular file"), "a note says why: {err}");
}

/// A process in its own mount and PID namespace, running a binary that
/// exists only there (on a tmpfs mounted inside), is named by a
/// system-wide profile, alive and after it exited.
#[test]
fn binary_only_in_a_container_is_named() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let exe = workload("shortlived");
    let dir = tempfile::tempdir().expect("temp dir");
    let inside = dir.path().join("shortlived");
    for exits in [false, true] {
        let script = format!(
            "mount -t tmpfs none {d} && cp {exe} {inside} && exec {inside} \"$@\"",
            d = dir.path().display(),
            exe = exe.display(),
            inside = inside.display(),
        );
        let mut cmd = Command::new("unshare");
        cmd.args(["-m", "-p", "-f", "sh", "-c", &script, "sh"]);
        let (out, err) = run_command(
            cmd,
            &exe,
            "shortlived",
            &["burn", "1"],
            &[],
            "profile",
            &["-U", "-f", "-F", "499"],
            exits,
        );
        assert!(
            !inside.exists(),
            "the binary exists only inside the namespace"
        );
        let stacks: Vec<(Vec<String>, u64)> = parse_folded(&out)
            .into_iter()
            .filter(|(f, _)| f[0] == "shortlived")
            .collect();
        let all: u64 = stacks.iter().map(|(_, n)| n).sum();
        let named: u64 = stacks
            .iter()
            .filter(|(f, _)| f.join(";").contains(";sl_burn_outer;sl_burn"))
            .map(|(_, n)| n)
            .sum();
        assert!(all >= 20, "too few samples ({all}):\n{out}{err}");
        assert!(
            named * 10 >= all * 9,
            "exits={exits}: {named} of {all} samples named:\n{out}"
        );
    }
}
