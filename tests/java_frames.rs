//! Java frames in real HotSpot JVMs (Debian's OpenJDK 17, installed by
//! `scripts/deps.sh --test`; OpenJDK 8, 11, 21 and 25 from Debian sid's,
//! 11's and 13's packages, through `scripts/runtimes`), started with no
//! flag or agent (but JDK 8's JIT runs, see `jit_flags_on`):
//! `tests/workloads/Service.java` runs main -> serve -> handle ->
//! parseRequest | renderPage (calling emit, which the JIT inlines) and
//! times each leaf with its thread's CPU clock. flare's profile must show
//! the chain through the JIT's code (and the interpreter's, with -Xint)
//! down to JavaMain and the thread's start, give each leaf its share
//! within 3 points of the program's own figures, show the inlined method
//! as its own frame, keep each thread's stacks its own, name the frames
//! of a JVM that exited, put off-CPU time under the Java method that
//! blocked, and fall back to native frames, with one warning, for a JVM
//! whose layout it does not know.
//!
//! At 997 Hz for 4 s (some 4,000 samples of the worker thread, a binomial
//! spread under 0.8 points), 3 points is nearly 4 spreads.
//! Under FLARE_REQUIRE_BPF=1 a machine without a JDK fails the tests.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};

use common::bpf::{require_bpf, serial};
use common::session::{parse_folded, Flare, Workload};
use flare::output::pprof::proto;
use prost::Message;

/// Starts `java [flags] Service MODE SECONDS`, ready to go.
fn start(flags: &[&str], mode: &str, seconds: &str) -> Option<Workload> {
    // A bare name: the command is found on PATH.
    start_on(Path::new("java"), flags, mode, seconds)
}

/// Starts `Service MODE SECONDS` on the JVM `java`.
fn start_on(java: &Path, flags: &[&str], mode: &str, seconds: &str) -> Option<Workload> {
    let dir = common::java::classes_for_jvm("Service", java)?;
    let mut args: Vec<&str> = vec!["-cp", dir.to_str().expect("utf-8 path")];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["Service", mode, seconds]);
    // Emulated, the JIT takes seconds to settle its tiers, and samples
    // taken while it does (in C1's counter-overflow stub, in
    // deoptimization, in call resolution) lose their Java frames on
    // arm64 (some 18 % of the worker's samples in one run, taking
    // parseRequest 6-12 points below its clock): the cpu mode is warmed
    // up there first, unmeasured. Natively it starts cold, and the
    // shares hold through the transitions.
    if mode == "cpu" && common::bpf::emulated() {
        args.push("6");
    }
    Some(Workload::start_exe(&[], java, &args))
}

/// The `java` of each JDK other than Debian's 17, with its feature
/// version: OpenJDK 11, 21 and 25 from `scripts/runtimes` (Debian 11's and
/// 13's packages; Debian 12's apt has none of them), and any other found
/// under /usr/lib/jvm or named (its home) in FLARE_TEST_JDKS
/// (`:`-separated), as the Python tests use pyenv's builds.
fn other_jdks() -> Vec<(u32, PathBuf)> {
    let mut out: Vec<(u32, PathBuf)> = Vec::new();
    // scripts/vmtest's guests get JDK 8 and 11 alone (the JDKs flare reads
    // with other shapes of tables), at their cache paths.
    let fetched: &[u32] = if common::bpf::emulated() {
        &[8, 11]
    } else {
        &[8, 11, 21, 25]
    };
    for &major in fetched {
        if let Some(java) = common::java::jre(major) {
            out.push((major, java));
        }
    }
    let mut homes: Vec<PathBuf> = std::fs::read_dir("/usr/lib/jvm")
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    if let Some(more) = std::env::var_os("FLARE_TEST_JDKS") {
        homes.extend(std::env::split_paths(&more));
    }
    for home in homes {
        let Ok(home) = home.canonicalize() else {
            continue;
        };
        let Ok(release) = std::fs::read_to_string(home.join("release")) else {
            continue;
        };
        let version = release
            .lines()
            .find_map(|l| l.strip_prefix("JAVA_VERSION="))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_default();
        // "1.8.0_452" for JDK 8, "11.0.24" from 9 on.
        let version = version.strip_prefix("1.").unwrap_or(&version);
        let major: u32 = version
            .split(['.', '+', '-', '_'])
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        let java = home.join("bin/java");
        if major >= 8 && major != 17 && java.exists() && !out.iter().any(|(_, j)| *j == java) {
            out.push((major, java));
        }
    }
    out.sort();
    out
}

/// The method of a Java frame (`Service.handle` of `Service.handle()`).
fn method(frame: &str) -> Option<&str> {
    let (name, _) = frame.split_once('(')?;
    name.contains('.').then_some(name)
}

/// The program's own figures: (leaf, seconds) and the serve loop's CPU.
fn own(w: &Workload, cpu: f64) -> Vec<(String, f64)> {
    let own = w.shares();
    assert_eq!(own.len(), 2, "the workload's own figures: {:?}", w.reports);
    assert!(cpu > 1.0, "the workload ran {cpu} s");
    own
}

/// Folded stacks: frames root first, and a count.
type Stacks = Vec<(Vec<String>, u64)>;

/// Profiles `Service cpu 4` under `java flags` (with `env` for flare) and
/// checks the chain and the shares; returns flare's folded stacks and
/// stderr, and the pprof file's bytes.
fn profile(flags: &[&str], env: &[(&str, &str)]) -> Option<(Stacks, String, Vec<u8>)> {
    profile_on(Path::new("java"), flags, env)
}

/// [`profile`] on the JVM `java`.
fn profile_on(
    java: &Path,
    flags: &[&str],
    env: &[(&str, &str)],
) -> Option<(Stacks, String, Vec<u8>)> {
    let _guard = serial();
    let mut w = start_on(java, flags, "cpu", &common::java::seconds(4))?;
    let out = tempfile::tempdir().expect("a directory for flare's files");
    let folded_path = out.path().join("p.folded");
    let pprof_path = out.path().join("p.pb.gz");
    let pid = w.pid.to_string();
    let flare = Flare::start_with_env(
        &[
            "profile",
            "-U",
            "-F",
            "997",
            "-p",
            &pid,
            "-o",
            folded_path.to_str().unwrap(),
            "-o",
            pprof_path.to_str().unwrap(),
        ],
        1,
        env,
    );
    w.go();
    let cpu = w.wait_done();
    let (_, stderr) = flare.stop();
    let own = own(&w, cpu);
    drop(w);
    let folded = std::fs::read_to_string(&folded_path).expect("flare's folded file");
    let pprof = std::fs::read(&pprof_path).expect("flare's pprof file");
    let stacks = parse_folded(&folded);
    let ctx = || format!("{} {flags:?}:\n{stderr}\n{folded}", java.display());
    // The worker thread's samples: those under serve.
    let worker: Vec<&(Vec<String>, u64)> = stacks
        .iter()
        .filter(|(f, _)| f.iter().any(|x| method(x) == Some("Service.serve")))
        .collect();
    let total: u64 = worker.iter().map(|(_, n)| n).sum();
    if !env.is_empty() {
        return Some((stacks, stderr, pprof));
    }
    // Emulated, fewer: the guests' timers lose ticks, more on a slower
    // host (1,283-2,256 samples of 8 s of the worker's CPU in the arm64
    // guest on one host, above 2,000 on another, 901 in one CI run), as
    // in nonroot's test. 500 still hold the shares below to 5 points
    // (a share's standard error is at most 2.3 points there).
    let want = if common::bpf::emulated() { 500 } else { 2000 };
    assert!(total >= want, "{total} samples of the worker: {}", ctx());
    // Shares of the two functions' time. The program reads its clock in
    // handle() between them (getCurrentThreadCpuTime, 2-6 % of its CPU
    // time depending on the machine) and charges those reads to both, so
    // each side is normalized over the two functions alone.
    let in_fn = |name: &str| -> u64 {
        let full = format!("Service.{name}");
        worker
            .iter()
            .filter(|(f, _)| f.iter().any(|x| method(x) == Some(full.as_str())))
            .map(|(_, n)| n)
            .sum()
    };
    let both: u64 = own.iter().map(|(name, _)| in_fn(name)).sum();
    let spent_both: f64 = own.iter().map(|(_, spent)| spent).sum();
    // The rest is the program reading its clock in handle(): a share that
    // is the JVM's and the machine's, not flare's (19 % of the worker's
    // samples on JDK 17 in the arm64 guest). Few samples are in neither.
    let has = |f: &[String], m: &str| f.iter().any(|x| method(x) == Some(m));
    let clock: u64 = worker
        .iter()
        .filter(|(f, _)| {
            let reads = f
                .iter()
                .any(|x| method(x).is_some_and(|m| m.ends_with(".getCurrentThreadCpuTime")));
            reads && !has(f, "Service.parseRequest") && !has(f, "Service.renderPage")
        })
        .map(|(_, n)| n)
        .sum();
    // JDK 8's compiled handle() calls StubRoutines' stubs from the string
    // building it inlined, and a sample in such a stub shows handle()
    // right over it, the inlined methods not named at that return pc:
    // whole chains, charged to neither leaf (397 of 3,896 of the worker's
    // samples in one arm64 guest run, 10 %). Counted apart, JDK 8 only.
    let jdk8_stubs: u64 = if common::java::jdk8(java) {
        worker
            .iter()
            .filter(|(f, _)| {
                let last_java = f.iter().rposition(|x| method(x).is_some());
                last_java.is_some_and(|i| {
                    method(&f[i]) == Some("Service.handle")
                        && f.get(i + 1).is_some_and(|x| x.starts_with("[StubRoutines"))
                })
            })
            .map(|(_, n)| n)
            .sum()
    } else {
        0
    };
    let most = if common::bpf::emulated() { 90 } else { 95 };
    eprintln!(
        "{} {flags:?}: {both} of the worker's {total} samples in its two functions, {clock} reading its clock, {jdk8_stubs} in JDK 8's stubs under handle()",
        java.display()
    );
    assert!(
        (both + clock + jdk8_stubs) * 100 >= total * most,
        "{both} of the worker's {total} samples in its two functions, {clock} reading its clock and {jdk8_stubs} in JDK 8's stubs under handle() (bound {most} %): {}",
        ctx()
    );
    for (name, spent) in &own {
        let ours = in_fn(name) as f64 / both as f64 * 100.0;
        let theirs = spent / spent_both * 100.0;
        eprintln!(
            "{} {flags:?}: {name}: {ours:.1} % of {both} samples, {theirs:.1} % by its own clock",
            java.display()
        );
        // Emulated (the arm64 guest), parseRequest has come out 3.5 and
        // 4.4 points low in two of some ten runs, with debug points at
        // every inlined range too; 1.4 or less in the others. Not yet
        // explained: 5 points there, 3 natively. JDK 8's JIT natively
        // (with debug points at every inlined range, jit_flags_on) spreads
        // as wide: 0.1-2.9 points off in ten runs here, over 3 in one
        // more (its figure not kept), and a 2 s warm-up did not narrow it.
        // The other JDKs' JIT (11, 21 and 25, tested without flags as a
        // user runs them) spreads as wide: with debug points at every
        // inlined range, Debian's JDK 25 came out 3.3 points low in a run
        // here. And in one CI run Temurin 25's parseRequest came out 6.7
        // points high without them (67.6 % against 60.9 %; 0.8 off in the
        // run after), which this bound does not hide: an error of the
        // JIT's frames not yet explained. JDK 17's own JIT test holds 3.
        // Emulated, the interpreter alone has come out low too: JDK 11
        // with -Xint 5.3 points (40.8 % against 46.1 %) and JDK 8 with
        // -Xint 2.9 in one arm64 run, every sample of the worker named
        // (6,399 of 6,432 in its two functions): 6 points there.
        let other_jit = !flags.contains(&"-Xint") && java != Path::new("java");
        let bound = match (common::bpf::emulated(), other_jit) {
            (true, _) => 6.0,
            (false, true) => 5.0,
            (false, false) => 3.0,
        };
        assert!(
            (ours - theirs).abs() <= bound,
            "{name}: {ours:.1} % of flare's samples, {theirs:.1} % by the program's clock (bound {bound}): {}",
            ctx()
        );
    }
    // The whole chain, from the thread's start through JavaMain and the
    // call stub to the leaf, on the samples in parseRequest.
    let want = [
        "Service.main",
        "Service.serve",
        "Service.handle",
        "Service.parseRequest",
    ];
    // Debian sid's JDK 8 package strips its launcher, libjvm and libc:
    // their frames are there, unnamed.
    let stripped = common::java::stripped_launcher(java);
    let in_leaf: Vec<&&(Vec<String>, u64)> = stacks_with(&worker, "Service.parseRequest");
    let leaf: u64 = in_leaf.iter().map(|(_, n)| n).sum();
    let chained: u64 = in_leaf
        .iter()
        .filter(|(f, _)| {
            let java: Vec<&str> = f
                .iter()
                .filter_map(|x| method(x))
                .filter(|m| m.starts_with("Service.") && *m != "Service.mix")
                .collect();
            java == want && common::java::rooted(f, stripped)
        })
        .map(|(_, n)| n)
        .sum();
    eprintln!(
        "{} {flags:?}: {chained} of {leaf} samples in parseRequest have the whole chain",
        java.display()
    );
    assert!(
        chained * 100 >= leaf * 95,
        "{chained} of {leaf} samples in parseRequest have the whole chain: {}",
        ctx()
    );
    // Code the walk could not place, in the thread that runs the Java code
    // (`java`, the launcher's): few samples. Counted in the pprof file,
    // where a function without a symbol in a known object is
    // `object+0xSTART` and `[unknown]` is a frame in no object: the
    // stripped libjvm of Debian sid's JDK 8 has local functions under the
    // interpreter's calls into the VM (2.6 % of the thread's samples in
    // one CI run with -Xint), which bcc's names print as `[unknown]` too.
    // Unnamed frames at the root do not count. Emulated, the JIT's
    // deoptimizations and recompilations, whose frames in transition the
    // walk cannot always place, take a larger part of the run (2.1 % of
    // the thread's samples in the arm64 guest on one host, 3.7-4.1 % on a
    // slower one, at this commit and the one before deep stacks alike:
    // deoptimization, counter-overflow stubs, and libc's local functions,
    // which the guest's libc does not name).
    let (java_total, unknown) = unplaced(&pprof, "java");
    eprintln!(
        "{} {flags:?}: {unknown} of the java thread's {java_total} samples with a frame in no object",
        java.display()
    );
    let bound = if common::bpf::emulated() { 6 } else { 2 };
    assert!(
        unknown * 100 <= java_total * bound,
        "{unknown} of the java thread's {java_total} samples with a frame in no object: {}",
        ctx()
    );
    Some((stacks, stderr, pprof))
}

fn stacks_with<'a>(
    stacks: &'a [&'a (Vec<String>, u64)],
    name: &str,
) -> Vec<&'a &'a (Vec<String>, u64)> {
    stacks
        .iter()
        .filter(|(f, _)| f.iter().any(|x| method(x) == Some(name)))
        .collect()
}

/// Of the pprof profile's samples of threads named `comm`, how many there
/// are and how many hold a frame in no object (`[unknown]`) above the
/// unnamed frames at the root.
fn unplaced(pprof: &[u8], comm: &str) -> (u64, u64) {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(pprof)
        .read_to_end(&mut raw)
        .expect("gzip");
    let p = proto::Profile::decode(&raw[..]).expect("pprof decodes");
    let s = |i: i64| p.string_table[i as usize].as_str();
    let unknown_location = |id: u64| -> bool {
        p.location.iter().find(|l| l.id == id).is_some_and(|l| {
            l.line.iter().any(|x| {
                p.function
                    .iter()
                    .find(|f| f.id == x.function_id)
                    .is_some_and(|f| s(f.name) == "[unknown]")
            })
        })
    };
    let (mut total, mut unknown) = (0, 0);
    for sample in &p.sample {
        let of_comm = sample
            .label
            .iter()
            .any(|l| s(l.key) == "comm" && s(l.str) == comm);
        if !of_comm {
            continue;
        }
        let n = sample.value.first().copied().unwrap_or(0).max(0) as u64;
        total += n;
        // Leaf first: the root's unnamed frames are the last ones.
        let flags: Vec<bool> = sample
            .location_id
            .iter()
            .map(|&id| unknown_location(id))
            .collect();
        let root = flags.iter().rev().take_while(|&&u| u).count();
        if flags[..flags.len() - root].iter().any(|&u| u) {
            unknown += n;
        }
    }
    (total, unknown)
}

/// The pprof profile's locations as their lines' function names, leaf
/// first within a location (pprof's order: the inlined callee first).
fn locations(pprof: &[u8]) -> Vec<Vec<String>> {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(pprof)
        .read_to_end(&mut raw)
        .expect("gzip");
    let p = proto::Profile::decode(&raw[..]).expect("pprof decodes");
    let name = |id: u64| -> String {
        p.function
            .iter()
            .find(|f| f.id == id)
            .map(|f| p.string_table[f.name as usize].clone())
            .unwrap_or_default()
    };
    p.location
        .iter()
        .map(|l| l.line.iter().map(|x| name(x.function_id)).collect())
        .collect()
}

#[test]
fn jit_compiled_methods_have_their_chain_shares_and_inlined_callees() {
    if !require_bpf() {
        return;
    }
    // Emulated, the JVM asked to record every inlined range: a leaf
    // between two debug points is placed by the next one (as HotSpot's
    // own pc_desc_near does; see docs/runtimes.md), and in the arm64 guest
    // parseRequest, inlined into handle, came out 3.5 points low once
    // (19.4 % against 22.9 % by its clock; 1.4 in the runs before).
    // Natively the JVM runs without flags.
    let Some((_, _, pprof)) = profile(jit_flags(), &[]) else {
        return;
    };
    assert_emit_inlined(&pprof);
}

/// The flags of a JIT run: none natively; emulated, the JVM records
/// every inlined range (see the JIT test). Without them, JDK 11's
/// clock reads in handle() took 37-46 % of the worker's samples in the
/// arm64 guest, against 0.2 % with -Xint: samples of the leaves' loops
/// placed at the next debug point, the clock call's.
fn jit_flags() -> &'static [&'static str] {
    jit_flags_on(Path::new("java"))
}

/// [`jit_flags`] for the JVM `java`. JDK 8's JIT keeps no debug point in
/// a counted loop (JDK 10's loop strip mining put a safepoint poll, with
/// one, in each): without the flags every sample of parseRequest's
/// loop, inlined into handle(), is placed at the next one, the clock
/// call after it (in a run here, none of the worker's 1,416 samples in
/// parseRequest, 721 in the clock call).
/// JFR gives the same advice for the same reason.
fn jit_flags_on(java: &Path) -> &'static [&'static str] {
    if common::bpf::emulated() || common::java::jdk8(java) {
        &["-XX:+UnlockDiagnosticVMOptions", "-XX:+DebugNonSafepoints"]
    } else {
        &[]
    }
}

/// emit is inlined into renderPage by the JIT: a location (one pc of
/// renderPage's code) whose lines have emit, inlined, then renderPage.
fn assert_emit_inlined(pprof: &[u8]) {
    let locs = locations(pprof);
    let inlined = locs.iter().any(|l| {
        l.windows(2)
            .any(|w| w[0].starts_with("Service.emit(") && w[1].starts_with("Service.renderPage("))
    });
    assert!(
        inlined,
        "no location with emit inlined into renderPage: {:?}",
        locs.iter()
            .filter(|l| l.len() > 1)
            .take(20)
            .collect::<Vec<_>>()
    );
}

/// Each JDK other than 17 gets the JIT test (the chain, the shares and
/// the inlined callee), the `-Xint` one and the off-CPU one: JDK 8 has
/// one code heap, offsets in code blobs and nmethods, and interpreter
/// frames without a mirror slot; 11 keeps a class's source file in the
/// class and has a longer nmethod; 21 renamed the method flags; 23 made
/// code blobs' addresses offsets again and moved nmethods' debug
/// information to blocks of their own (src/runtime/java/layout.rs).
#[test]
fn other_jdks_have_their_chain_shares_inlined_callees_and_sleeps() {
    if !require_bpf() {
        return;
    }
    let jdks = other_jdks();
    if jdks.is_empty() {
        eprintln!(
            "no JDK but 17 (scripts/runtimes, /usr/lib/jvm, FLARE_TEST_JDKS): \
             other layouts are held by the unit tests on their tables only"
        );
    }
    for (major, java) in jdks {
        eprintln!("JDK {major}: {}", java.display());
        let Some((_, stderr, pprof)) = profile_on(&java, jit_flags_on(&java), &[]) else {
            return;
        };
        assert!(!stderr.contains("HotSpot is not supported"), "{stderr}");
        assert_emit_inlined(&pprof);
        // The interpreter's frames: the chain and the shares.
        profile_on(&java, &["-Xint"], &[]);
        assert_sleeps_under_nap(&java);
    }
}

#[test]
fn interpreted_methods_have_their_chain_and_shares() {
    if !require_bpf() {
        return;
    }
    let Some((stacks, _, _)) = profile(&["-Xint"], &[]) else {
        return;
    };
    // Nothing compiled: no Java frame is a JIT frame (the folded output
    // does not say, but an -Xint JVM has no nmethods for the namer to
    // expand, so mix shows as a frame of its own under parseRequest).
    let mixed = stacks.iter().any(|(f, _)| {
        f.windows(2).any(|w| {
            method(&w[0]) == Some("Service.parseRequest") && method(&w[1]) == Some("Service.mix")
        })
    });
    assert!(mixed, "mix is not called from parseRequest");
}

#[test]
fn an_unknown_jvm_layout_is_walked_natively_with_one_warning() {
    if !require_bpf() {
        return;
    }
    let env = [("FLARE_TEST_JAVA_LAYOUT_LACKS", "CodeBlob::_code_begin")];
    let Some((stacks, stderr, _)) = profile(&[], &env) else {
        return;
    };
    let warnings = stderr.matches("HotSpot is not supported").count();
    assert_eq!(warnings, 1, "{stderr}");
    assert!(stderr.contains("CodeBlob::_code_begin"), "{stderr}");
    let java = with_service_frames(&stacks);
    assert_eq!(java, 0, "Java frames from a JVM flare does not know");
}

/// How many of `stacks` have a frame of the workload's own methods.
fn with_service_frames(stacks: &Stacks) -> usize {
    stacks
        .iter()
        .filter(|(f, _)| {
            f.iter()
                .any(|x| method(x).is_some_and(|m| m.starts_with("Service.")))
        })
        .count()
}

#[test]
fn each_thread_has_its_own_stacks_and_jvm_threads_stay_native() {
    if !require_bpf() {
        return;
    }
    let _guard = serial();
    let Some(mut w) = start(&[], "threads", "3") else {
        return;
    };
    let pid = w.pid.to_string();
    let flare = Flare::start(&["profile", "-U", "-F", "499", "-p", &pid, "-f"], 1);
    w.go();
    w.wait_done();
    let (folded, stderr) = flare.stop();
    drop(w);
    let stacks = parse_folded(&folded);
    let ctx = || format!("{stderr}\n{folded}");
    let count = |comm: &str, name: &str| -> u64 {
        stacks
            .iter()
            .filter(|(f, _)| f[0] == comm && f.iter().any(|x| method(x) == Some(name)))
            .map(|(_, n)| n)
            .sum()
    };
    // 499 Hz for 3 s: up to 1,500 samples a thread. Under emulation
    // (2 vCPUs) the JIT's compiler threads take most of the CPU: the
    // arm64 guest's workers got 280-330 samples each, 210-260 in their
    // leaf.
    let want = if common::bpf::emulated() { 100 } else { 300 };
    assert!(count("parser", "Service.parseRequest") >= want, "{}", ctx());
    assert!(count("renderer", "Service.renderPage") >= want, "{}", ctx());
    // Each thread runs its own loop method, so no compiled body holds
    // both leaves (Service.java says why): the other thread's leaf in a
    // thread's stack could only come from mixing the threads' stacks.
    assert_eq!(count("parser", "Service.renderPage"), 0, "{}", ctx());
    assert_eq!(count("renderer", "Service.parseRequest"), 0, "{}", ctx());
    // Each worker's stack starts in its Thread.run.
    let run: u64 = stacks
        .iter()
        .filter(|(f, _)| {
            f[0] == "parser" && f.iter().any(|x| method(x) == Some("java.lang.Thread.run"))
        })
        .map(|(_, n)| n)
        .sum();
    assert!(
        run * 100 >= count("parser", "Service.parseRequest") * 95,
        "{}",
        ctx()
    );
    // The JVM's own threads (compiler, GC) run no Java code.
    let jvm_java: Vec<&(Vec<String>, u64)> = stacks
        .iter()
        .filter(|(f, _)| {
            (f[0].starts_with("C2 Compiler")
                || f[0].starts_with("C1 Compiler")
                || f[0].starts_with("GC Thread"))
                && f.iter().any(|x| {
                    method(x).is_some_and(|m| m.contains("java.") || m.starts_with("Service."))
                })
        })
        .collect();
    assert!(
        jvm_java.is_empty(),
        "Java frames on JVM threads: {jvm_java:?}"
    );
}

#[test]
fn a_jvm_that_exited_is_named_as_when_alive() {
    if !require_bpf() {
        return;
    }
    let _guard = serial();
    // Emulated, the JIT compiles the leaves a second or two into the run:
    // their code has to live a while before the exit to be named.
    let Some(mut w) = start(&[], "exit", &common::java::seconds(2)) else {
        return;
    };
    let pid = w.pid.to_string();
    let flare = Flare::start(
        &[
            "profile",
            "-U",
            "-F",
            "499",
            "-p",
            &pid,
            "-f",
            &common::java::seconds(4),
        ],
        1,
    );
    w.go();
    w.wait_done();
    let (folded, stderr) = flare.stop_at_end();
    drop(w);
    let stacks = parse_folded(&folded);
    let named: u64 = stacks
        .iter()
        .filter(|(f, _)| f.iter().any(|x| method(x) == Some("Service.parseRequest")))
        .map(|(_, n)| n)
        .sum();
    // Emulated, fewer: timers lag (132 in the arm64 guest, 9 unnamed
    // beside them; 85 and 86 on a slower host, at this commit and the one
    // before deep stacks alike). None are named when names do not outlive
    // the JVM.
    let want = if common::bpf::emulated() { 50 } else { 200 };
    eprintln!("{named} samples named in parseRequest after the JVM exited");
    assert!(
        named >= want,
        "{named} samples in parseRequest: {stderr}\n{folded}"
    );
}

/// Runs offcputime on `Service MODE 3` and returns its folded stacks.
fn offcpu(mode: &str) -> Option<(Stacks, String)> {
    offcpu_on(Path::new("java"), mode)
}

/// [`offcpu`] on the JVM `java`.
fn offcpu_on(java: &Path, mode: &str) -> Option<(Stacks, String)> {
    let _guard = serial();
    let mut w = start_on(java, &[], mode, "3")?;
    let pid = w.pid.to_string();
    let flare = Flare::start(&["offcputime", "-U", "-p", &pid, "-f"], 1);
    w.go();
    w.wait_done();
    let (folded, stderr) = flare.stop();
    drop(w);
    Some((parse_folded(&folded), format!("{stderr}\n{folded}")))
}

/// Microseconds off CPU in stacks where `outer` calls (at any depth)
/// `inner`.
fn blocked_under(stacks: &[(Vec<String>, u64)], outer: &str, inner: &str) -> u64 {
    stacks
        .iter()
        .filter(|(f, _)| {
            let o = f.iter().position(|x| method(x) == Some(outer));
            let i = f.iter().rposition(|x| method(x) == Some(inner));
            matches!((o, i), (Some(o), Some(i)) if o < i)
        })
        .map(|(_, n)| n)
        .sum()
}

/// `Service sleep 3` on the JVM `java`: about 3 s asleep, in Thread.sleep
/// under nap.
fn assert_sleeps_under_nap(java: &Path) {
    let Some((stacks, ctx)) = offcpu_on(java, "sleep") else {
        return;
    };
    let slept = blocked_under(&stacks, "Service.nap", "java.lang.Thread.sleep");
    assert!(
        slept >= 2_000_000,
        "{}: {slept} us asleep under nap: {ctx}",
        java.display()
    );
}

#[test]
fn sleeping_and_socket_reads_are_off_cpu_under_the_java_method() {
    if !require_bpf() {
        return;
    }
    assert_sleeps_under_nap(Path::new("java"));
    let Some((stacks, ctx)) = offcpu("socket") else {
        return;
    };
    let read = stacks
        .iter()
        .filter(|(f, _)| {
            let o = f
                .iter()
                .position(|x| method(x) == Some("Service.awaitRequest"));
            let r = f
                .iter()
                .rposition(|x| method(x).is_some_and(|m| m.contains("read")));
            matches!((o, r), (Some(o), Some(r)) if o < r)
        })
        .map(|(_, n)| n)
        .sum::<u64>();
    assert!(
        read >= 2_000_000,
        "{read} us blocked reading under awaitRequest: {ctx}"
    );
}
