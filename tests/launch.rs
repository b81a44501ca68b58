//! `flare TOOL -- CMD ARGS`: flare starts the command, profiles it and the
//! processes it starts until it exits, and exits with its status. The
//! workload `wallwork SECONDS PCT PERIOD_MS EXIT` computes in `compute()`
//! for PCT % of each PERIOD_MS cycle and sleeps in `rest()` (one
//! clock_nanosleep) for the rest, so the truth is known. Frame-pointer
//! stacks through libc skip rest() itself, so sleeps are found by their
//! libc frame, clock_nanosleep.

mod common;

use std::process::{Output, Stdio};

use common::bpf::{flare, require_bpf, serial, workload};

/// The workload's command name (15 bytes of its file name).
const COMM: &str = "workload-wallwo";

/// Runs flare with `args` to the end; stdin closed.
fn run(args: &[&str]) -> Output {
    flare()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running flare")
}

/// Sums folded lines' values of `of_comm`: (lines containing `frame`,
/// all lines).
fn folded_share(out: &str, frame: &str, of_comm: &str) -> (u64, u64) {
    let (mut hit, mut all) = (0, 0);
    for line in out.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        if !stack.starts_with(of_comm) {
            continue;
        }
        all += n;
        // libc's internal names may carry leading underscores.
        if stack.split(';').any(|f| f.trim_start_matches('_') == frame) {
            hit += n;
        }
    }
    (hit, all)
}

#[test]
fn missing_command_exits_127_with_a_clear_error() {
    // Needs no privileges: the command is looked up before anything loads.
    let out = run(&["profile", "--", "flare-no-such-command"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert!(
        err.contains("cannot run 'flare-no-such-command': command not found"),
        "{err}"
    );
}

#[test]
fn profile_exits_with_the_commands_status_and_follows_its_children() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let w = workload("wallwork");
    // sh forks wallwork (it is not the last command), so it is a child.
    let script = format!("{} 1 100; exit 7", w.display());
    let out = run(&["profile", "-F", "199", "-f", "--", "sh", "-c", &script]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    let (hit, all) = folded_share(&text, "compute", COMM);
    // About 1 s of CPU at 199 Hz; nearly all of it in compute().
    assert!(all >= 100, "too few samples of wallwork ({all}):\n{text}");
    let share = hit as f64 / all as f64;
    assert!(share >= 0.9, "compute share {share:.2}:\n{text}");
}

#[test]
fn a_command_killed_by_a_signal_gives_128_plus_the_signal() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let out = run(&["profile", "-f", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(
        out.status.code(),
        Some(128 + 15),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn offcputime_sees_the_commands_sleep() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let w = workload("wallwork");
    // 1 s at 30 % compute: about 0.7 s asleep in rest().
    let script = format!("{} 1 30 20; exit 3", w.display());
    let out = run(&["offcputime", "-f", "-U", "--", "sh", "-c", &script]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    let (_, off_us) = folded_share(&text, "", COMM);
    // The truth is the workload's own: wall time minus CPU time (on a busy
    // machine it is also preempted, which is off-CPU time too).
    let (cpu, wall, _) = common::bpf::wallwork_figures(&err);
    let truth = (wall - cpu) * 1e6;
    assert!(
        (off_us as f64 - truth).abs() < truth * 0.1 + 20_000.0,
        "off-CPU {off_us} us, the workload measured {truth:.0}:\n{text}"
    );
}

/// offcputime -s of a command: each frame with one offset into its
/// function (the collector's tidy step appends them, once).
#[test]
fn offcputime_offsets_of_a_command_appear_once() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let w = workload("wallwork");
    let script = format!("{} 1 30 20; exit 0", w.display());
    let out = run(&["offcputime", "-s", "--", "sh", "-c", &script]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    let frames: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("    ") && !l.starts_with("    -") && !l.starts_with("     "))
        .map(str::trim)
        .filter(|f| !f.starts_with('[') && *f != "--")
        .collect();
    assert!(
        frames.iter().any(|f| f.starts_with("clock_nanosleep+0x")),
        "{text}"
    );
    for f in &frames {
        assert_eq!(f.matches("+0x").count(), 1, "{f}:\n{text}");
    }
}

#[test]
fn stackcount_counts_every_event_of_the_command() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let w = workload("wallwork");
    let path = w.to_string_lossy().into_owned();
    // 100 cycles of 10 ms, each one clock_nanosleep from rest().
    let out = run(&[
        "stackcount",
        "-f",
        "-U",
        "t:syscalls:sys_enter_clock_nanosleep",
        "--",
        &path,
        "1",
        "30",
        "10",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    let (hit, _) = folded_share(&text, "clock_nanosleep", COMM);
    assert!((95..=101).contains(&hit), "{hit} calls:\n{text}");
}
