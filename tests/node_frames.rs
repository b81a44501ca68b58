//! JavaScript frames in real Node.js processes started with no flag: the
//! official builds of Node 20, 22, 24 and 26 (`scripts/runtimes node N`,
//! from the npm registry, cached outside the clone).
//! `tests/workloads/nodeservice.js` runs main -> serve -> handle ->
//! parseRequest | renderPage and times each leaf with the process's CPU
//! clock. flare's profile must show that chain in the JavaScript frames of
//! nearly every sample and give each leaf its share within 4 points of the
//! program's own figures, with V8's tiers pinned one by one: the
//! interpreter alone (`--jitless`), Sparkplug's baseline code
//! (`--no-opt --no-maglev`, `--always-sparkplug`), Maglev alone and the
//! default flags (TurboFan). Optimized code inlines the leaves into
//! handle: there each inlined function must be a frame of its own, marked
//! inlined in pprof.
//!
//! At 997 Hz for 4 s (some 4,000 samples of the main thread, a binomial
//! spread under 0.8 points), 4 points is five spreads.
//! Under FLARE_REQUIRE_BPF=1 a machine without the Node builds fails.

mod common;

use std::path::{Path, PathBuf};

use common::bpf::{require_bpf, serial};
use common::receivers::decode_pprof;
use common::runtimes::node;
use common::session::{under, Flare, Workload};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/nodeservice.js")
}

/// Stacks (a sample's JavaScript frames, the workload's functions, or a
/// folded stack), root first, and their counts.
type Chains = Vec<(Vec<String>, u64)>;

/// Profiles `nodeservice.js cpu 4 1` (a second's warm-up, unmeasured)
/// under `node flags`; returns the samples' chains of the workload's own
/// functions (from the pprof file: those whose file is the script) and
/// the program's own figures.
fn profile(node: &Path, flags: &[&str]) -> (Chains, Vec<(String, f64)>, String) {
    let _guard = serial();
    let script = script();
    let mut args: Vec<&str> = flags.to_vec();
    args.extend_from_slice(&[script.to_str().expect("utf-8 path"), "cpu", "4", "1"]);
    let mut w = Workload::start_exe(&[], node, &args);
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
    assert_eq!(own.len(), 2, "the workload's own figures: {own:?}");
    let p = decode_pprof(&std::fs::read(&pprof_path).expect("flare's pprof file"));
    let s = |i: i64| p.string_table[i as usize].as_str();
    let ours = |id: u64| {
        p.function
            .iter()
            .find(|f| f.id == id)
            .filter(|f| s(f.filename).ends_with("nodeservice.js"))
            .map(|f| s(f.name).to_string())
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
            // From main down (the module's own function calls it).
            let main = chain
                .iter()
                .position(|f| f == "main")
                .unwrap_or(chain.len());
            (chain.split_off(main), sample.value[0] as u64)
        })
        .collect();
    (chains, own, stderr)
}

/// Checks the chain and the shares of a run of Node.js `major` under
/// `flags`.
fn check(major: u32, node: &Path, flags: &[&str]) {
    let (chains, own, stderr) = profile(node, flags);
    let ctx = |what: &str| {
        let mut top: Vec<&(Vec<String>, u64)> = chains.iter().collect();
        top.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        let top: Vec<String> = top
            .iter()
            .take(12)
            .map(|(c, n)| format!("{n} {}", c.join(";")))
            .collect();
        format!(
            "Node {major} {flags:?}: {what}\n{}\n{stderr}",
            top.join("\n")
        )
    };
    // The main thread's samples in the service.
    let served: Vec<&(Vec<String>, u64)> = chains
        .iter()
        .filter(|(c, _)| c.len() >= 2 && c[0] == "main" && c[1] == "serve")
        .collect();
    let total: u64 = served.iter().map(|(_, n)| n).sum();
    let want = if common::bpf::emulated() { 500 } else { 2000 };
    assert!(
        total >= want,
        "{}",
        ctx(&format!("{total} samples in serve"))
    );
    // The program reading its clocks (serve's now(), handle's phaseCpu)
    // is the program's own share, not flare's.
    let clock = |c: &[String]| c.iter().any(|f| f == "now" || f == "phaseCpu");
    let leaf = |c: &[String], name: &str| c.len() >= 4 && c[2] == "handle" && c[3] == name;
    let in_fn = |name: &str| -> u64 {
        served
            .iter()
            .filter(|(c, _)| leaf(c, name))
            .map(|(_, n)| n)
            .sum()
    };
    let not_clock: u64 = served
        .iter()
        .filter(|(c, _)| !clock(c))
        .map(|(_, n)| n)
        .sum();
    let both: u64 = own.iter().map(|(name, _)| in_fn(name)).sum();
    // The whole chain main;serve;handle;parseRequest|renderPage. Under
    // emulation, on a loaded host, fewer samples reached a leaf: 94.6 %
    // in one CI run of the arm64 guest (Node 24, --always-sparkplug, 1,331
    // samples where a quiet host's guest takes 2,600), 99 % in runs here;
    // serve's loop, compiled on stack replacement, may lose its inlined
    // callees as the workers' loops do (below).
    let floor = if common::bpf::emulated() { 0.90 } else { 0.95 };
    eprintln!("Node {major} {flags:?}: {both} of {not_clock} samples (not reading clocks) under the chain");
    assert!(
        both as f64 >= floor * not_clock as f64,
        "{}",
        ctx(&format!(
            "{both} of {not_clock} samples (not reading clocks) under the chain"
        ))
    );
    // Under emulation (the arm64 guest) the chain is checked, not the
    // shares, as for Java there: with the chain whole, Node 24 came out
    // 4.2, 6.0 (default flags) and 6.6 points off (Maglev: 21.0 % against
    // 14.4) in three runs of the guest, within 4 in the others.
    if common::bpf::emulated() {
        return;
    }
    let spent_both: f64 = own.iter().map(|(_, s)| s).sum();
    for (name, spent) in &own {
        let share = 100.0 * in_fn(name) as f64 / both as f64;
        let truth = 100.0 * spent / spent_both;
        assert!(
            (share - truth).abs() <= 4.0,
            "{}",
            ctx(&format!(
                "{name}: {share:.1} % of the samples, {truth:.1} % by its clock"
            ))
        );
    }
}

/// Every tier pinned that names each leaf as its own frame.
fn tiers(major: u32) {
    if !require_bpf() {
        return;
    }
    let Some(node) = node(major) else {
        return;
    };
    check(major, &node, &["--jitless"]);
    check(major, &node, &["--no-opt", "--no-maglev"]);
    check(major, &node, &["--always-sparkplug"]);
    // Maglev alone (V8 12 on: Node 20's is experimental): serve's loop
    // is compiled on stack replacement with handle inlined.
    if major >= 22 {
        check(major, &node, &["--maglev", "--no-turbofan"]);
    }
    // Default flags: TurboFan inlines the leaves into handle, whose
    // samples are mostly in builtins that keep no frame (string
    // concatenation, array growth) called from the inlined code.
    check(major, &node, &[]);
}

#[test]
fn node20_chain_and_shares() {
    tiers(20);
}

#[test]
fn node22_chain_and_shares() {
    tiers(22);
}

#[test]
fn node24_chain_and_shares() {
    tiers(24);
}

#[test]
fn node26_chain_and_shares() {
    tiers(26);
}

/// Folded stacks of `flare ARGS -p PID -f` over `node NODE_FLAGS
/// nodeservice.js MODE SECONDS` on Node.js 20: the stacks, and flare's
/// stderr with them for messages.
fn folded_run(
    flare_args: &[&str],
    node_flags: &[&str],
    mode: &str,
    seconds: &str,
) -> Option<(Chains, String)> {
    folded_run_on(20, flare_args, node_flags, mode, seconds)
}

/// [`folded_run`] on Node.js `major`.
fn folded_run_on(
    major: u32,
    flare_args: &[&str],
    node_flags: &[&str],
    mode: &str,
    seconds: &str,
) -> Option<(Chains, String)> {
    let node = node(major)?;
    let _guard = serial();
    let script = script();
    let mut args = node_flags.to_vec();
    args.extend_from_slice(&[script.to_str().expect("utf-8 path"), mode, seconds]);
    let mut w = Workload::start_exe(&[], &node, &args);
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
    drop(w);
    Some((
        common::session::parse_folded(&folded),
        format!("{stderr}\n{folded}"),
    ))
}

/// Two worker threads (each its own isolate, from V8 12 on running its
/// own copy of the builtins), one in parseRequest, one in renderPage, at
/// default flags: each thread's stacks are its own, whole from
/// workerMain down.
fn workers(major: u32) {
    if !require_bpf() {
        return;
    }
    let flare = ["profile", "-U", "-F", "499"];
    let Some((stacks, ctx)) = folded_run_on(major, &flare, &[], "threads", "3") else {
        return;
    };
    let has = |f: &[String], name: &str| f.iter().any(|x| x == name);
    let count = |pred: &dyn Fn(&[String]) -> bool| -> u64 {
        stacks.iter().filter(|(f, _)| pred(f)).map(|(_, n)| n).sum()
    };
    // 499 Hz for 3 s: some 1,500 samples a thread (on a CPU of its own
    // for half of it or more), nearly all in the leaf or the clock.
    //
    // Each loop runs once, so V8 compiles it on stack replacement,
    // inlining the leaf; that code keeps the interpreter's slots in its
    // frame. A sample in a builtin that keeps no frame (string
    // concatenation, array growth) called from it was taken for an
    // interpreted frame at the loop's jump, the leaf lost: about half of
    // renderLoop's samples on Node 20, 24 and 26 (690-770 of some 1,470 in
    // renderPage on Node 24). Told apart by where the builtin was called
    // from (the interpreter's code, from the binary's labels), 93 to
    // 99.6 % are in the leaf natively (the arm64 guest: 83 and 96 %); the
    // program's own clock has 98-99 % of each loop's time in its leaf.
    // What is still lost: samples of OSR code taken while the function
    // was young, named after the collector moved it (its old address no
    // longer the function: named alone), up to 7 % of a 3 s run. The
    // floor catches the gap come back.
    let (want, floor) = if common::bpf::emulated() {
        (100, 0.65)
    } else {
        (700, 0.80)
    };
    for (lp, leaf) in [("parseLoop", "parseRequest"), ("renderLoop", "renderPage")] {
        // Not the loop reading its clock (now(), its own frame).
        let in_loop = count(&|f| has(f, lp)) - under(&stacks, lp, "now");
        let in_leaf = under(&stacks, lp, leaf);
        eprintln!("Node {major}: {in_leaf} of {in_loop} samples of {lp} (not in now()) in {leaf}");
        assert!(
            in_loop >= want && in_leaf as f64 >= floor * in_loop as f64,
            "Node {major}: {in_loop} samples in {lp}, {in_leaf} in {leaf}: {ctx}"
        );
    }
    // Each thread runs its own loop: a stack holding both threads'
    // functions could only come from mixing them.
    let mixed = count(&|f| {
        (has(f, "parseLoop") && (has(f, "renderLoop") || has(f, "renderPage")))
            || (has(f, "renderLoop") && has(f, "parseRequest"))
    });
    assert_eq!(mixed, 0, "Node {major}: stacks of both threads: {ctx}");
    // Whole: the loops under workerMain, the worker's entry.
    let loops = count(&|f| has(f, "parseLoop") || has(f, "renderLoop"));
    let whole =
        under(&stacks, "workerMain", "parseLoop") + under(&stacks, "workerMain", "renderLoop");
    assert!(
        whole as f64 >= 0.95 * loops as f64,
        "Node {major}: {whole} of {loops} samples in the loops under workerMain: {ctx}"
    );
}

#[test]
fn node20_workers_have_their_own_stacks() {
    workers(20);
}

#[test]
fn node24_workers_have_their_own_stacks() {
    workers(24);
}

#[test]
fn node26_workers_have_their_own_stacks() {
    workers(26);
}

#[test]
fn wallclock_and_stackcount_show_javascript_callers() {
    if !require_bpf() {
        return;
    }
    // nap() -> sleepMs() -> Atomics.wait for 100 ms at a time, 2 s.
    let Some((stacks, ctx)) = folded_run(&["wallclock"], &[], "sleep", "2") else {
        return;
    };
    let waited = under(&stacks, "nap", "sleepMs");
    assert!(
        waited >= 1_000_000,
        "{waited} us of wall-clock time under nap;sleepMs: {ctx}"
    );
    let probe = ["stackcount", "-U", "t:syscalls:sys_enter_futex"];
    let Some((stacks, ctx)) = folded_run(&probe, &[], "sleep", "2") else {
        return;
    };
    // A futex wait each 100 ms, each its own call.
    let waits = under(&stacks, "nap", "sleepMs");
    assert!(waits >= 10, "{waits} futex calls under nap;sleepMs: {ctx}");
}

#[test]
fn a_node_process_that_exited_is_named_as_when_alive() {
    if !require_bpf() {
        return;
    }
    // 2 s of work, then node exits; flare runs 4 s and names at its end.
    // Baseline code (--no-opt): parseRequest is a frame of its own.
    let flare = ["profile", "-U", "-F", "499", "4"];
    let Some((stacks, ctx)) = folded_run(&flare, &["--no-opt"], "exit", "2") else {
        return;
    };
    let named = under(&stacks, "handle", "parseRequest");
    // None are named when names do not outlive the process.
    let want = if common::bpf::emulated() { 50 } else { 200 };
    assert!(named >= want, "{named} samples in parseRequest: {ctx}");
}

#[test]
fn a_read_of_a_fifo_is_off_cpu_under_its_javascript_caller() {
    if !require_bpf() {
        return;
    }
    // About 3 s blocked in fs.readSync of a FIFO, a byte every 100 ms.
    let Some((stacks, ctx)) = folded_run(&["offcputime", "-U"], &[], "pipe", "3") else {
        return;
    };
    let read = under(&stacks, "awaitRequest", "readSync");
    assert!(
        read >= 2_000_000,
        "{read} us blocked reading under awaitRequest: {ctx}"
    );
}

/// TurboFan's code of handle (Node 20, 26: before and after V8's
/// leaptiering and its new position tables) has parseRequest inlined: a
/// sample there is parseRequest's, a line of handle's location, marked
/// inlined in pprof (a location's lines, innermost first). How much of
/// parseRequest's time runs inlined is V8's choice, and it moves between
/// releases: most of it on Node 20 and the 26 this test was written
/// against; about half on 26.12.1, where a parseRequest compiled on its
/// own, called from handle, takes the rest (675 samples inlined, 638
/// called; shares right within 0.3 points). A quarter is asked: a walk
/// that loses the inlined frames has none.
fn inlined_in_pprof(major: u32) {
    if !require_bpf() {
        return;
    }
    let Some(node) = node(major) else {
        return;
    };
    let _guard = serial();
    let script = script();
    let args = [script.to_str().expect("utf-8 path"), "cpu", "4", "1"];
    let mut w = Workload::start_exe(&[], &node, &args);
    let out = tempfile::tempdir().expect("a directory for flare's files");
    let pprof_path = out.path().join("p.pb.gz");
    let pid = w.pid.to_string();
    let pprof = pprof_path.to_str().expect("utf-8 path");
    let flare = Flare::start(&["profile", "-U", "-F", "997", "-p", &pid, "-o", pprof], 1);
    w.go();
    w.wait_done();
    let (_, stderr) = flare.stop();
    let own = w.shares();
    drop(w);
    let p = decode_pprof(&std::fs::read(&pprof_path).expect("flare's pprof file"));
    let s = |i: i64| p.string_table[i as usize].as_str();
    let name = |id: u64| {
        p.function
            .iter()
            .find(|f| f.id == id)
            .map_or("", |f| s(f.name))
    };
    let mut inlined = 0u64;
    let mut parse = 0u64;
    let mut served = 0u64;
    for sample in &p.sample {
        let locs: Vec<&flare::output::pprof::proto::Location> = sample
            .location_id
            .iter()
            .map(|&id| &p.location[id as usize - 1])
            .collect();
        let lines = |l: &flare::output::pprof::proto::Location| -> Vec<&str> {
            l.line.iter().map(|x| name(x.function_id)).collect()
        };
        let all: Vec<&str> = locs.iter().flat_map(|l| lines(l)).collect();
        if !all.contains(&"serve") {
            continue;
        }
        let n = sample.value[0] as u64;
        served += n;
        parse += if all.contains(&"parseRequest") { n } else { 0 };
        // parseRequest a line of the location whose outermost is handle.
        let in_handle = locs.iter().any(|l| {
            let ls = lines(l);
            ls.last() == Some(&"handle") && ls.contains(&"parseRequest")
        });
        inlined += if in_handle { n } else { 0 };
    }
    let spent: f64 = own.iter().map(|(_, s)| s).sum();
    let truth = own
        .iter()
        .find(|(n, _)| n == "parseRequest")
        .map_or(0.0, |(_, s)| 100.0 * s / spent);
    assert!(
        inlined * 4 >= parse && parse * 10 >= served,
        "Node {major}: {inlined} of {parse} samples in parseRequest inlined into handle, of \
         {served} in serve ({truth:.1} % by its clock):\n{stderr}"
    );
}

#[test]
fn node20_inlined_functions_are_frames_marked_inlined() {
    inlined_in_pprof(20);
}

#[test]
fn node26_inlined_functions_are_frames_marked_inlined() {
    inlined_in_pprof(26);
}
