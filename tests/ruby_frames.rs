//! Ruby frames in real CRuby processes started with no flag: Debian 12's
//! Ruby 3.1 (interpreted and with YJIT), and 3.3 and 3.4 from Debian's
//! sid and experimental builds (`scripts/runtimes ruby`, cached outside
//! the clone). `tests/workloads/rbservice.rb` runs main -> serve ->
//! handle -> parse_request | render_page and times each leaf with the
//! thread's CPU clock. flare's profile must show that chain in the Ruby
//! frames of nearly every sample and give each leaf its share within 4
//! points of the program's own figures. Threads and Ractors (each on its
//! own native thread, 3.3's M:N ones included) must each show their own
//! chain and share.
//!
//! At 997 Hz for 4 s (some 4,000 samples, a binomial spread under 0.8
//! points), 4 points is five spreads.
//! Under FLARE_REQUIRE_BPF=1 a machine without the Ruby builds fails.

mod common;

use std::path::Path;

use common::bpf::{require_bpf, serial};
use common::receivers::decode_pprof;
use common::ruby::{check_chains, check_names, from_main, method, script, Chains};
use common::runtimes::ruby;
use common::session::{under, Flare, Workload};

/// Profiles `rbservice.rb MODE 4` under `ruby flags` with flare's `extra`
/// options; returns the samples' chains of the workload's own methods
/// (from the pprof file: those whose file is the script), the program's
/// own figures and flare's stderr.
fn profile(
    ruby: &Path,
    flags: &[&str],
    mode: &str,
) -> (Chains, Vec<(String, f64)>, String, Vec<String>) {
    let _guard = serial();
    let script = script();
    let mut args: Vec<&str> = flags.to_vec();
    args.extend_from_slice(&[script.to_str().expect("utf-8 path"), mode, "4"]);
    let mut w = Workload::start_exe(&[], ruby, &args);
    let out = tempfile::tempdir().expect("a directory for flare's files");
    let pprof_path = out.path().join("p.pb.gz");
    let pid = w.pid.to_string();
    let flare = Flare::start(
        &[
            "profile",
            "-U",
            "-F",
            "997",
            "-p",
            &pid,
            "-f",
            "-o",
            pprof_path.to_str().expect("utf-8 path"),
        ],
        1,
    );
    w.go();
    let cpu = w.wait_done();
    let (_, stderr) = flare.stop();
    let own = w.shares();
    drop(w);
    assert!(cpu > 1.0, "the workload ran {cpu} s");
    let p = decode_pprof(&std::fs::read(&pprof_path).expect("flare's pprof file"));
    let s = |i: i64| p.string_table[i as usize].as_str();
    let ours = |id: u64| {
        p.function
            .iter()
            .find(|f| f.id == id)
            .filter(|f| s(f.filename).ends_with("rbservice.rb"))
            .map(|f| method(s(f.name)))
    };
    let chains = p
        .sample
        .iter()
        .map(|sample| {
            // Locations leaf first, each's lines innermost first.
            let mut chain: Vec<String> = sample
                .location_id
                .iter()
                .flat_map(|&id| p.location[id as usize - 1].line.iter())
                .filter_map(|l| ours(l.function_id))
                .collect();
            chain.reverse();
            (from_main(chain), sample.value[0] as u64)
        })
        .collect();
    let names = p.function.iter().map(|f| s(f.name).to_string()).collect();
    (chains, own, stderr, names)
}

/// Checks the chain and the shares of a run of Ruby `version` under
/// `flags`.
fn check(version: &str, ruby: &Path, flags: &[&str]) {
    let (chains, own, stderr, names) = profile(ruby, flags, "cpu");
    let want = if common::bpf::emulated() { 500 } else { 2000 };
    let what = format!("Ruby {version} {flags:?}");
    check_chains(&what, &chains, &own, (want, 4.0), &stderr);
    check_names(&what, names.iter().map(String::as_str));
}

#[test]
fn ruby31_chain_and_shares() {
    if !require_bpf() {
        return;
    }
    let Some(ruby) = ruby("3.1") else {
        return;
    };
    check("3.1", &ruby, &[]);
}

#[test]
fn ruby31_yjit_chain_and_shares() {
    if !require_bpf() || cfg!(target_arch = "aarch64") {
        // Ruby 3.1's YJIT is x86-64's only.
        return;
    }
    let Some(ruby) = ruby("3.1") else {
        return;
    };
    check("3.1", &ruby, &["--yjit", "--yjit-call-threshold=1"]);
}

#[test]
fn ruby33_chain_and_shares() {
    if !require_bpf() {
        return;
    }
    let Some(ruby) = ruby("3.3") else {
        return;
    };
    check("3.3", &ruby, &[]);
}

#[test]
fn ruby34_chain_and_shares() {
    if !require_bpf() {
        return;
    }
    let Some(ruby) = ruby("3.4") else {
        return;
    };
    check("3.4", &ruby, &[]);
}

/// The program's own figures: its "share NAME SECONDS" lines.
type Own = Vec<(String, f64)>;

/// Runs flare with `flare_args` (then `-p PID -f`) over `rbservice.rb MODE
/// SECONDS` on Ruby `version`: the stacks, each frame its method alone
/// ([`method`]), flare's stderr and output for messages, and the
/// program's own figures.
fn folded_run(
    version: &str,
    flare_args: &[&str],
    mode: &str,
    seconds: &str,
) -> Option<(Chains, String, Own)> {
    let ruby = ruby(version)?;
    let _guard = serial();
    let script = script();
    let args = [script.to_str().expect("utf-8 path"), mode, seconds];
    let mut w = Workload::start_exe(&[], &ruby, &args);
    let pid = w.pid.to_string();
    let mut args = flare_args.to_vec();
    args.extend_from_slice(&["-p", &pid, "-f"]);
    let flare = Flare::start(&args, 1);
    w.go();
    w.wait_done();
    let (folded, stderr) = if mode == "exit" {
        flare.stop_at_end()
    } else {
        flare.stop()
    };
    let own = w.shares();
    drop(w);
    let stacks = common::session::parse_folded(&folded)
        .into_iter()
        .map(|(f, n)| (f.iter().map(|x| method(x)).collect(), n))
        .collect();
    Some((stacks, format!("{stderr}\n{folded}"), own))
}

#[test]
fn each_thread_has_its_own_stacks() {
    if !require_bpf() {
        return;
    }
    // Two Threads, one in parse_request, one in render_page, sharing the
    // interpreter's lock: some 700 samples each at 499 Hz for 3 s.
    let flare = ["profile", "-U", "-F", "499"];
    let Some((stacks, ctx, _)) = folded_run("3.3", &flare, "threads", "3") else {
        return;
    };
    let has = |f: &[String], name: &str| f.iter().any(|x| x == name);
    let count = |pred: &dyn Fn(&[String]) -> bool| -> u64 {
        stacks.iter().filter(|(f, _)| pred(f)).map(|(_, n)| n).sum()
    };
    let want = if common::bpf::emulated() { 100 } else { 300 };
    for (lp, leaf) in [
        ("parser_loop", "parse_request"),
        ("renderer_loop", "render_page"),
    ] {
        let in_loop = count(&|f| has(f, lp));
        let in_leaf = under(&stacks, lp, leaf);
        assert!(
            in_loop >= want && in_leaf as f64 >= 0.9 * in_loop as f64,
            "{in_loop} samples in {lp}, {in_leaf} in {leaf}: {ctx}"
        );
    }
    // Each thread runs its own loop: a stack holding both threads'
    // methods could only come from mixing them.
    let mixed = count(&|f| {
        (has(f, "parser_loop") && (has(f, "renderer_loop") || has(f, "render_page")))
            || (has(f, "renderer_loop") && has(f, "parse_request"))
    });
    assert_eq!(mixed, 0, "stacks of both threads: {ctx}");
    // Whole: each loop under the block its Thread runs.
    let loops = count(&|f| has(f, "parser_loop") || has(f, "renderer_loop"));
    let whole = count(&|f| {
        let block = f
            .iter()
            .position(|x| x.starts_with("block") && x.ends_with(" in main"));
        let lp = f
            .iter()
            .position(|x| x == "parser_loop" || x == "renderer_loop");
        matches!((block, lp), (Some(b), Some(l)) if b < l)
    });
    assert!(
        whole as f64 >= 0.95 * loops as f64,
        "{whole} of {loops} samples in the loops under their Thread's block: {ctx}"
    );
}

#[test]
fn each_ractor_has_its_own_stacks() {
    if !require_bpf() {
        return;
    }
    // Two Ractors running at once, each on its own native thread (from
    // 3.3 M:N threads: the scheduler gives each running Ractor one), each
    // its execution context in that thread's ruby_current_ec, main waiting
    // in Ractor#take: some 1,000 samples each at 499 Hz for 2 s on an idle
    // machine. Each Ractor's stack starts at its block: `block (2 levels)
    // in ractors` (Ractor.new's block inside map's), as Ruby's own
    // backtraces name it.
    let flare = ["profile", "-U", "-F", "499"];
    let want = if common::bpf::emulated() { 50 } else { 200 };
    for version in ["3.1", "3.3", "3.4"] {
        let Some((stacks, ctx, own)) = folded_run(version, &flare, "ractors", "2") else {
            return;
        };
        let ctx = format!("Ruby {version}: {own:?}\n{ctx}");
        let has = |f: &[String], name: &str| f.iter().any(|x| x == name);
        let count = |pred: &dyn Fn(&[String]) -> bool| -> u64 {
            stacks.iter().filter(|(f, _)| pred(f)).map(|(_, n)| n).sum()
        };
        // Whole: the Ractor's block, its method, the leaf, in that order
        // and next to each other.
        let chain = |f: &[String], fun: &str, leaf: &str| {
            f.windows(3)
                .any(|w| w[0] == "block (2 levels) in ractors" && w[1] == fun && w[2] == leaf)
        };
        let pairs = [("ractor_a", "parse_request"), ("ractor_b", "render_page")];
        let mut whole = Vec::new();
        for (fun, leaf) in pairs {
            let all = count(&|f| has(f, fun));
            let good = count(&|f| chain(f, fun, leaf));
            assert!(
                all >= want && good as f64 >= 0.95 * all as f64,
                "{all} samples in {fun}, {good} under block (2 levels) in ractors;{fun};{leaf}: {ctx}"
            );
            whole.push(good);
        }
        let mixed = count(&|f| {
            (has(f, "ractor_a") && (has(f, "ractor_b") || has(f, "render_page")))
                || (has(f, "ractor_b") && has(f, "parse_request"))
        });
        assert_eq!(mixed, 0, "stacks of both Ractors: {ctx}");
        // Each its share by its thread's clock: 2,000 samples give a
        // spread near 1.1 points, 800 (a busy machine) 1.8; 6 points is
        // over three.
        let spent: f64 = own.iter().map(|(_, s)| s).sum();
        let sampled: u64 = whole.iter().sum();
        for ((fun, _), good) in pairs.iter().zip(&whole) {
            let truth = own
                .iter()
                .find(|(name, _)| name == fun)
                .map(|(_, s)| 100.0 * s / spent);
            let share = 100.0 * *good as f64 / sampled as f64;
            eprintln!(
                "Ruby {version}: {fun}: {share:.1} % of the samples, {truth:?} % by its clock"
            );
            assert!(
                truth.is_some_and(|t| (share - t).abs() <= 6.0),
                "{fun}: {share:.1} % of the samples, {truth:?} % by its clock: {ctx}"
            );
        }
    }
}

#[test]
fn a_ruby_process_that_exited_is_named_as_when_alive() {
    if !require_bpf() {
        return;
    }
    // 2 s of work, then ruby exits; flare runs 4 s and names at its end.
    let flare = ["profile", "-U", "-F", "499", "4"];
    for version in ["3.1", "3.3"] {
        let Some((stacks, ctx, _)) = folded_run(version, &flare, "exit", "2") else {
            return;
        };
        let named = under(&stacks, "handle", "parse_request");
        // None are named when names do not outlive the process.
        let want = if common::bpf::emulated() { 50 } else { 200 };
        assert!(
            named >= want,
            "Ruby {version}: {named} samples in parse_request: {ctx}"
        );
    }
}

#[test]
fn sleeping_and_pipe_reads_are_off_cpu_under_the_ruby_caller() {
    if !require_bpf() {
        return;
    }
    for version in ["3.1", "3.3"] {
        // nap() -> Kernel#sleep for 100 ms at a time, 2 s.
        let Some((stacks, ctx, _)) = folded_run(version, &["offcputime", "-U"], "sleep", "2")
        else {
            return;
        };
        let slept = under(&stacks, "nap", "sleep");
        assert!(
            slept >= 1_500_000,
            "Ruby {version}: {slept} us blocked under nap;sleep: {ctx}"
        );
        // await_request() -> IO#read of a pipe, a byte every 100 ms, 2 s.
        let Some((stacks, ctx, _)) = folded_run(version, &["offcputime", "-U"], "pipe", "2") else {
            return;
        };
        let read = under(&stacks, "await_request", "read");
        assert!(
            read >= 1_500_000,
            "Ruby {version}: {read} us blocked under await_request;read: {ctx}"
        );
    }
}
