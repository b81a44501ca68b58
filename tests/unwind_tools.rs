//! Ground truth for `--unwind` in stackcount and offcputime, on workloads
//! built with -O2 -fomit-frame-pointer: `libccalls` calls a frameless leaf
//! a known number of times from each of two callers and reads /dev/zero
//! through libc a known number of times from each of two functions;
//! `pipeblock` blocks in read() from known functions. Counts are exact;
//! off-CPU time is compared with the workload's own measure. Needs root;
//! see `common::bpf::require_bpf`.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::bpf::{build, flare, require_bpf, serial, Reaper};

const CALLS: u64 = 2000;
const READS: u64 = 300;

fn no_fp(out: &str, src: &str) -> std::path::PathBuf {
    build(
        out,
        src,
        &["gcc", "-O2", "-fomit-frame-pointer", "-g", "-pthread"],
    )
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory preconditions.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0, "kill {pid}");
}

/// `libccalls`, waiting for SIGUSR1.
struct Calls {
    child: Reaper,
    out: BufReader<ChildStdout>,
}

impl Calls {
    fn start() -> Calls {
        let mut child = Command::new(no_fp("libccalls", "libccalls.c"))
            .args([CALLS.to_string(), READS.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting libccalls");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut c = Calls {
            child: Reaper(child),
            out,
        };
        c.expect("ready");
        c
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    fn expect(&mut self, want: &str) {
        let mut line = String::new();
        self.out.read_line(&mut line).expect("reading workload");
        assert_eq!(line.trim(), want, "workload output");
    }

    fn go(&mut self) {
        signal(self.pid(), libc::SIGUSR1);
        self.expect("done");
    }
}

/// Runs `flare stackcount -f ARGS` around one run of `libccalls`; returns
/// folded counts (root first, comm dropped).
fn stackcount(args: &[&str]) -> HashMap<String, u64> {
    let mut w = Calls::start();
    let pid = w.pid().to_string();
    let mut child: Child = flare()
        .args(["stackcount", "-f", "-p", &pid])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting flare");
    // The header (on stderr with -f) is printed once attached.
    let mut err = child.stderr.take().expect("stderr");
    let mut header = Vec::new();
    let mut b = [0u8; 1];
    while err.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
        header.push(b[0]);
    }
    assert!(
        header.starts_with(b"Tracing "),
        "flare did not start: {}",
        String::from_utf8_lossy(&header)
    );
    let mut child = Reaper(child);
    w.go();
    signal(child.0.id(), libc::SIGINT);
    let mut out = String::new();
    child
        .0
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("reading flare");
    let mut rest = String::new();
    let _ = err.read_to_string(&mut rest);
    assert!(
        child.0.wait().expect("flare").success(),
        "flare failed: {rest}"
    );
    let mut counts = HashMap::new();
    for line in out.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("folded line");
        let stack = stack.split_once(';').map_or(stack, |(_, s)| s);
        *counts.entry(stack.to_string()).or_default() += n.parse::<u64>().expect("count");
    }
    counts
}

/// The count of stacks ending in `tail` (root first, `;`-joined).
fn ending(counts: &HashMap<String, u64>, tail: &str) -> u64 {
    counts
        .iter()
        .filter(|(k, _)| k.ends_with(tail))
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn uprobe_on_a_frameless_leaf_counts_each_caller_exactly() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let bin = no_fp("libccalls", "libccalls.c");
    let pattern = format!("{}:leaf", bin.display());
    let counts = stackcount(&["-U", &pattern]);
    let dump = format!("{counts:#?}");
    assert_eq!(ending(&counts, ";main;caller_a;leaf"), CALLS / 2, "{dump}");
    assert_eq!(ending(&counts, ";main;caller_b;leaf"), CALLS / 2, "{dump}");
    assert_eq!(counts.values().sum::<u64>(), CALLS, "{dump}");
    // Every stack runs from _start.
    assert!(counts.keys().all(|k| k.starts_with("_start;")), "{dump}");

    // Frame pointers cannot tell the callers apart: at the leaf's first
    // instruction nothing of its caller is on the frame-pointer chain.
    let fp = stackcount(&["-U", "--unwind", "fp", &pattern]);
    assert_eq!(
        ending(&fp, ";caller_a;leaf") + ending(&fp, ";caller_b;leaf"),
        0,
        "{fp:#?}"
    );
}

#[test]
fn tracepoint_through_libc_counts_each_caller_exactly() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let counts = stackcount(&["-U", "t:syscalls:sys_enter_read"]);
    let dump = format!("{counts:#?}");
    // libc's wrapper is `read` (or one of its aliases).
    let via = |f: &str| {
        counts
            .iter()
            .filter(|(k, _)| k.starts_with("_start;") && k.contains(&format!(";main;{f};")))
            .map(|(_, v)| v)
            .sum::<u64>()
    };
    assert_eq!(via("read_a"), READS, "{dump}");
    assert_eq!(via("read_b"), 2 * READS, "{dump}");
}

#[test]
fn blocked_read_shows_its_caller_under_the_libc_wrapper() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let exe = no_fp("pipeblock", "pipeblock.c");
    let mut child = Command::new(exe)
        .args(["10", "50"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting pipeblock");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let _w = Reaper(child);
    let mut field = |name: &str| -> String {
        let l = lines.next().and_then(Result::ok).expect("workload line");
        l.strip_prefix(&format!("{name} "))
            .unwrap_or_else(|| panic!("expected {name}, got {l}"))
            .to_string()
    };
    let pid = field("pid");
    let _ = (field("blocker"), field("waker"));
    let mut tracer = Reaper(
        flare()
            .args(["offcputime", "-U", "-f", "-p", &pid])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting flare"),
    );
    // Attached once it holds a BPF link and catches SIGINT.
    let fpid = tracer.0.id();
    let started = Instant::now();
    loop {
        let links = std::fs::read_dir(format!("/proc/{fpid}/fd"))
            .map(|d| {
                d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .filter(|t| t.to_string_lossy() == "anon_inode:bpf_link")
                    .count()
            })
            .unwrap_or(0);
        if links >= 1 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "flare did not attach"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    writeln!(stdin, "go").expect("starting the rounds");
    let blocked_us: f64 = field("blocked_us").parse().expect("blocked_us");
    signal(fpid, libc::SIGINT);
    let mut out = String::new();
    tracer
        .0
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("reading flare");
    assert!(tracer.0.wait().expect("flare").success());
    drop(stdin);
    // The wrapper's name depends on libc's symbols: read, __libc_read,
    // __GI___libc_read.
    let got: u64 = out
        .lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            let (_, below) = stack.split_once(";blocker;block_in_read;read_byte;")?;
            below.contains("read").then(|| n.parse::<u64>().ok())?
        })
        .sum();
    let err = (got as f64 - blocked_us).abs() / blocked_us;
    assert!(
        err <= 0.10,
        "time under block_in_read;read_byte;<libc read>: {got} us, the workload measured {blocked_us:.0} us\n{out}"
    );
}
