//! Real BPF tests of flare's stack storage (`bpf/stacks.h`), which does not
//! depend on the boot's luck: stacks are keyed by a hash of their frames,
//! a different stack under a taken id is probed apart, and a stack is
//! lost only when the storage is full — then counted, with the option to
//! raise. `callers` calls touch() through N distinct callers, caller i
//! exactly (i + 1) * CALLS times; counts are asserted exactly.
//!
//! Collisions are made on purpose: `FLARE_TEST_STACK_HASH_BITS=1` keeps
//! one bit of each hash, so every stack's first id is one of two.
//!
//! A run without end (the agent) keeps room for new stacks: `coldstacks`
//! recurses a level deeper every 100 ms for 12 s, so its stacks (about
//! ten a second) go cold; with room for 64, an agent that kept every
//! stack lost some in two windows of 1 s (then renewed its storage).
//! With naps of 20 us every 2 ms, most of its off-CPU periods are sampled
//! out after their stacks were stored: no count names those, and an agent
//! that deleted only the stacks it had met filled its storage too.

mod common;

use common::agent::Agent;
use common::bpf::{require_bpf, serial, workload};
use common::receivers::{decode_pprof, resolve};
use common::stackcount::{text_counts, Tracer, Workload};
use common::webdriver::wait_for;
use std::time::Duration;

const CALLS: u64 = 500;

/// The calls counted under each caller (`caller_N` in the stack), and the
/// calls under `[Missed User Stack]`.
fn by_caller(out: &str, n: usize) -> (Vec<u64>, u64) {
    let counts = text_counts(out);
    let callers = (0..n)
        .map(|i| {
            let name = format!(";caller_{i};");
            counts
                .iter()
                .filter(|(k, _)| k.contains(&name))
                .map(|(_, v)| *v)
                .sum()
        })
        .collect();
    let missed = counts
        .iter()
        .filter(|(k, _)| k.contains("[Missed User Stack]"))
        .map(|(_, v)| *v)
        .sum();
    (callers, missed)
}

/// Counts the calls of `callers N` at touch() with `args` and `env`; the
/// output and the warnings.
fn count_callers(n: usize, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let mut w = Workload::start("callers", &[&n.to_string(), &CALLS.to_string()]);
    let pattern = format!("{}:touch", workload("callers").display());
    let pid = w.pid().to_string();
    let mut all = vec!["-U", "-p", &pid];
    all.extend_from_slice(args);
    all.push(&pattern);
    let t = Tracer::start_with(&all, env);
    w.go();
    t.finish_both()
}

/// Different stacks whose hashes collide are each stored under an id of
/// their own and counted exactly, never merged, whether user stacks are
/// walked by frame pointers (bpf_get_stack, as kernel stacks are taken)
/// or with tables.
#[test]
fn colliding_stacks_are_kept_apart_and_counted_exactly() {
    if !require_bpf() {
        return;
    }
    let _guard = serial();
    for unwind in ["fp", "auto"] {
        let (out, err) = count_callers(
            4,
            &["--unwind", unwind],
            &[("FLARE_TEST_STACK_HASH_BITS", "1")],
        );
        let (callers, missed) = by_caller(&out, 4);
        let want: Vec<u64> = (1..=4).map(|i| i * CALLS).collect();
        assert_eq!(callers, want, "--unwind {unwind}:\n{out}\n{err}");
        assert_eq!(missed, 0, "--unwind {unwind}:\n{out}\n{err}");
        assert!(!err.contains("could not be displayed"), "{err}");
    }
}

/// More colliding stacks than the ids probed for one hash: those that
/// find no id are shown as missed with their calls, and counted in the
/// warning; nothing is merged into another stack.
#[test]
fn stacks_past_the_probed_ids_are_missed_not_merged() {
    if !require_bpf() {
        return;
    }
    let _guard = serial();
    let (out, err) = count_callers(
        8,
        &["--unwind", "fp"],
        &[("FLARE_TEST_STACK_HASH_BITS", "1")],
    );
    let (callers, missed) = by_caller(&out, 8);
    // Two first ids, four probes each: five ids in all.
    let named = callers.iter().filter(|&&c| c > 0).count();
    assert!((1..=5).contains(&named), "{out}");
    for (i, &c) in callers.iter().enumerate() {
        assert!(
            c == 0 || c == (i as u64 + 1) * CALLS,
            "caller_{i}: {c}\n{out}"
        );
    }
    let total: u64 = (1..=8).map(|i| i * CALLS).sum();
    assert_eq!(callers.iter().sum::<u64>() + missed, total, "{out}");
    assert!(missed > 0, "{out}");
    assert!(
        err.contains(
            "stack traces could not be displayed. Consider increasing --stack-storage-size."
        ),
        "{err}"
    );
}

/// A storage too small for the distinct stacks: the stacks that fit are
/// counted exactly, the rest shown as missed with their calls, and the
/// warning names the option to raise.
#[test]
fn a_full_storage_counts_the_missed_and_names_the_option() {
    if !require_bpf() {
        return;
    }
    let _guard = serial();
    for unwind in ["fp", "auto"] {
        let (out, err) = count_callers(4, &["--unwind", unwind, "--stack-storage-size", "2"], &[]);
        let (callers, missed) = by_caller(&out, 4);
        let named = callers.iter().filter(|&&c| c > 0).count();
        assert_eq!(named, 2, "--unwind {unwind}:\n{out}");
        for (i, &c) in callers.iter().enumerate() {
            assert!(
                c == 0 || c == (i as u64 + 1) * CALLS,
                "caller_{i}: {c}\n{out}"
            );
        }
        assert_eq!(callers.iter().sum::<u64>() + missed, 10 * CALLS, "{out}");
        assert!(
            err.contains(
                "stack traces could not be displayed. Consider increasing --stack-storage-size."
            ),
            "--unwind {unwind}: {err}"
        );
    }
}

/// Kernel stacks of a workload's context switches as it blocks in many
/// different ways, ROUNDS times each: every way's stack is there, none is
/// missed, and none holds much more than its rounds (two ways merged into
/// one would hold twice as many). The kernel decides how often a round
/// really sleeps: a timer may expire before the task sleeps (44 of 50
/// nanosleeps in a TCG guest), a pipe reader may be woken early and sleep
/// again (52 sleeps in 50 reads on 5.10), hence half the rounds to one
/// and a half.
/// The kernel's stack-trace map lost one or two stacks of a run like
/// this on most boots, a different pair on each.
#[test]
fn kernel_stacks_of_many_paths_are_all_kept() {
    if !require_bpf() {
        return;
    }
    let _guard = serial();
    const ROUNDS: u64 = 50;
    let mut w = Workload::start("blockways", &[&ROUNDS.to_string()]);
    let t = Tracer::start(&["-K", "-p", &w.pid().to_string(), "t:sched:sched_switch"]);
    w.go();
    let (out, err) = t.finish_both();
    assert!(!out.contains("[Missed"), "{out}\n{err}");
    assert!(!err.contains("could not be displayed"), "{err}");
    let counts = text_counts(&out);
    // Functions on the way to schedule() on every kernel flare supports
    // (futex_wait_queue was futex_wait_queue_me before 5.16; pipe_read
    // is anon_pipe_read since 6.16).
    for way in [
        ";do_nanosleep;",
        ";do_sys_poll;",
        ";do_select;",
        ";do_epoll_wait;",
        ";futex_wait",
        ";do_sigtimedwait",
        "pipe_read;",
    ] {
        // Sleeps only: the task called schedule() itself, not a
        // preemption on the way (cond_resched in pipe_read's mutex_lock,
        // an interrupt's return).
        let n: u64 = counts
            .iter()
            .filter(|(k, _)| k.contains(way) && k.contains(";schedule;"))
            .filter(|(k, _)| !k.contains("cond_resched") && !k.contains("preempt"))
            .map(|(_, v)| *v)
            .sum();
        assert!(
            (ROUNDS / 2..=ROUNDS + ROUNDS / 2).contains(&n),
            "{n} switches through {way}, not {ROUNDS}:\n{out}"
        );
    }
}

/// coldstacks with `args` (SECONDS STEP_MS NAP_US) beside `flare agent
/// --profiles PROFILES` with room for 64 stacks and 1 s windows: the
/// windows' profiles, the deepest level the workload reached, its pid,
/// and the agent's stderr.
fn cold_stacks_beside_agent(
    profiles: &str,
    args: &[&str],
) -> (
    Vec<flare::output::pprof::proto::Profile>,
    usize,
    u32,
    String,
) {
    let dir = tempfile::tempdir().unwrap();
    let mut w = common::session::Workload::start("coldstacks", args);
    let pid = w.pid.to_string();
    let out = dir.path().to_str().unwrap();
    let agent = Agent::start(&[
        "-p",
        &pid,
        "-U",
        "-F",
        "99",
        "--interval",
        "1",
        "--profiles",
        profiles,
        "--stack-storage-size",
        "64",
        "-o",
        out,
    ]);
    // Attached once the first window is written.
    let files = || flare::export::dir::Dir::files(dir.path()).unwrap_or_default();
    wait_for("the agent's first window", Duration::from_secs(60), || {
        (!files().is_empty()).then_some(())
    });
    w.go();
    w.wait_done();
    let depth: usize = w
        .reports
        .iter()
        .find_map(|l| l.strip_prefix("depth ")?.parse().ok())
        .expect("a depth line");
    // The window holding the end is whole before the agent stops.
    std::thread::sleep(Duration::from_millis(1500));
    let err = agent.terminate();
    let windows: Vec<_> = files()
        .iter()
        .map(|f| decode_pprof(&std::fs::read(f).unwrap()))
        .collect();
    assert!(windows.len() >= 12, "{} windows: {err}", windows.len());
    (windows, depth, w.pid, err)
}

/// The storage never filled (the agent renews a run when it does, and
/// says so); the workload's samples all have their stacks, the deepest
/// ones too. A stack missed because the storage was busy (its bucket
/// locked when a sample came in NMI) is no sign of a full one.
fn check_cold_stacks(
    (windows, depth, pid, err): (
        Vec<flare::output::pprof::proto::Profile>,
        usize,
        u32,
        String,
    ),
) {
    assert!(!err.contains("renewed early"), "the storage filled: {err}");
    let windows = &windows;
    let (mut all, mut whole, mut deepest) = (0, 0, 0);
    // The samples without the workload's frames, by stack, for the
    // message.
    let mut others: std::collections::HashMap<String, i64> = Default::default();
    // CPU samples (the wall-clock profile holds the waits before and
    // after the work too).
    let cpu = |p: &&flare::output::pprof::proto::Profile| {
        p.string_table[p.sample_type[0].r#type as usize] == "samples"
    };
    for r in windows.iter().filter(cpu).flat_map(resolve) {
        if r.labels.get("pid") != Some(&pid.to_string()) {
            continue;
        }
        all += r.value;
        // A stack stored and read has level() in it, and leaf() unless
        // the sample came in libc's nanosleep, which keeps no frame
        // pointer: walked by frame pointers (5.10 has no bpf_loop for
        // tables) leaf() is then skipped.
        let levels = r.functions.iter().filter(|f| *f == "level").count();
        if r.functions.iter().any(|f| f == "leaf") || levels > 0 {
            whole += r.value;
            deepest = deepest.max(levels);
        } else {
            *others.entry(r.functions.join(";")).or_default() += r.value;
        }
    }
    assert!(all > 0, "no samples of the workload");
    let mut others: Vec<_> = others.into_iter().collect();
    others.sort_by_key(|o| std::cmp::Reverse(o.1));
    others.truncate(8);
    assert!(
        whole as f64 >= 0.9 * all as f64,
        "{whole} of {all} samples in level() or leaf(); the most others: {others:#?}; agent: {err}"
    );
    // Stacks are new until the end (the last steps' within 20 levels).
    assert!(deepest + 20 >= depth, "deepest {deepest} levels of {depth}");
}

#[test]
fn the_cpu_collector_deletes_cold_stacks_and_keeps_room() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    check_cold_stacks(cold_stacks_beside_agent("cpu", &["12", "100", "0"]));
}

#[test]
fn the_wall_clock_collector_deletes_cold_stacks_and_keeps_room() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    check_cold_stacks(cold_stacks_beside_agent("cpu,wall", &["12", "100", "0"]));
}

#[test]
fn the_wall_clock_collector_deletes_stacks_no_count_names() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    // Steps of 200 ms for 20 s: fewer stacks live at a time, and orphans
    // enough to fill the storage when they are kept.
    check_cold_stacks(cold_stacks_beside_agent("cpu,wall", &["20", "200", "20"]));
}
