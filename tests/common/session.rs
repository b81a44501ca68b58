//! Driving workloads and the flare binary in BPF tests, and parsing what
//! flare prints (bcc's text and folded formats).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use super::bpf::{flare, workload};

/// A workload speaking the tests/workloads stdio protocol: "tid N" lines,
/// "ready", wait for a line, work, "cpu S", wait for stdin to close.
pub struct Workload {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pub pid: u32,
    pub tids: Vec<u32>,
    /// CPU seconds of each worker thread, once the work is done.
    pub thread_cpu: std::collections::HashMap<u32, f64>,
    /// Other lines the workload printed while working (its own reports).
    pub reports: Vec<String>,
}

impl Workload {
    /// Starts `tests/workloads/<name>.c` (built on first use) and waits
    /// until it is ready. `wrapper` runs it under another command (e.g.
    /// `taskset -c 1`).
    pub fn start_with(wrapper: &[&str], name: &str, args: &[&str]) -> Self {
        Self::start_exe(wrapper, &workload(name), args)
    }

    /// Starts the workload executable `exe` (see [`Self::start_with`]).
    pub fn start_exe(wrapper: &[&str], exe: &std::path::Path, args: &[&str]) -> Self {
        let name = exe.display().to_string();
        let mut cmd = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = cmd
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting workload");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let pid = child.id();
        let mut tids: Vec<(u32, u32)> = Vec::new();
        loop {
            let mut line = String::new();
            if stdout.read_line(&mut line).expect("reading workload") == 0 {
                panic!("workload {name} exited before it was ready");
            }
            let line = line.trim();
            if line == "ready" {
                break;
            }
            // "tid TID [INDEX]": workers print in any order.
            if let Some(t) = line.strip_prefix("tid ") {
                let mut f = t
                    .split_whitespace()
                    .map(|n| n.parse::<u32>().expect("tid line"));
                let tid = f.next().expect("tid");
                let index = f.next().unwrap_or(tids.len() as u32);
                tids.push((index, tid));
            }
        }
        tids.sort_unstable();
        let tids = tids.into_iter().map(|(_, tid)| tid).collect();
        Workload {
            child,
            stdin,
            stdout,
            pid,
            tids,
            thread_cpu: Default::default(),
            reports: Vec::new(),
        }
    }

    pub fn start(name: &str, args: &[&str]) -> Self {
        Self::start_with(&[], name, args)
    }

    /// The workload's own figures, its "share NAME SECONDS" reports.
    pub fn shares(&self) -> Vec<(String, f64)> {
        self.reports
            .iter()
            .filter_map(|l| {
                let mut f = l.strip_prefix("share ")?.split_whitespace();
                Some((f.next()?.to_string(), f.next()?.parse().ok()?))
            })
            .collect()
    }

    /// Lets the workload start working.
    pub fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(b"go\n").expect("writing to workload");
        stdin.flush().expect("flushing workload stdin");
    }

    /// Waits for the work to end; returns the process CPU seconds it used.
    pub fn wait_done(&mut self) -> f64 {
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).expect("reading workload") == 0 {
                panic!("workload exited before reporting its CPU time");
            }
            if let Some((tid, s)) = line
                .trim()
                .strip_prefix("tcpu ")
                .and_then(|l| l.split_once(' '))
            {
                self.thread_cpu
                    .insert(tid.parse().expect("tid"), s.parse().expect("cpu seconds"));
            }
            if let Some(s) = line.trim().strip_prefix("cpu ") {
                return s.parse().expect("cpu seconds");
            }
            self.reports.push(line.trim().to_string());
        }
    }
}

impl Workload {
    /// Closes stdin and waits for the workload to exit by itself (node
    /// writes its `--cpu-prof` file then); returns how it ended.
    pub fn finish(mut self) -> std::process::ExitStatus {
        self.stdin.take();
        self.child.wait().expect("waiting for the workload")
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `flare` whose output is read when it is stopped.
pub struct Flare {
    child: Child,
}

/// Counts the descriptors `pid` holds whose target (`anon_inode:bpf_link`,
/// `anon_inode:[perf_event]`, a path) `want` takes.
pub fn fds_matching(pid: u32, want: impl Fn(&str) -> bool) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|l| want(&l.to_string_lossy()))
                .count()
        })
        .unwrap_or(0)
}

/// Counts the perf-event descriptors `pid` holds.
fn perf_event_fds(pid: u32) -> usize {
    fds_matching(pid, |t| t.contains("perf_event"))
}

impl Flare {
    /// Starts flare and waits until it holds at least `events` perf events
    /// (i.e. it is sampling).
    pub fn start(args: &[&str], events: usize) -> Self {
        Self::start_with_env(args, events, &[])
    }

    /// [`Flare::start`] with `env` set for flare (e.g. a test knob).
    pub fn start_with_env(args: &[&str], events: usize, env: &[(&str, &str)]) -> Self {
        let mut child = flare()
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting flare");
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(30);
        while perf_event_fds(pid) < events {
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                panic!("flare {args:?} exited ({status}) before attaching: {err}");
            }
            if Instant::now() > deadline {
                panic!("flare {args:?} did not attach within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Flare { child }
    }

    /// Sends `signal` and returns stdout and stderr; fails the test if
    /// flare exits unsuccessfully.
    pub fn stop_with(self, signal: i32) -> (String, String) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { kill(self.child.id() as i32, signal) };
        self.stop_at_end()
    }

    pub fn stop(self) -> (String, String) {
        self.stop_with(SIGINT)
    }

    /// Waits for flare to end by itself (its duration); returns stdout
    /// and stderr, failing the test if it exits unsuccessfully.
    pub fn stop_at_end(self) -> (String, String) {
        let out = self.child.wait_with_output().expect("waiting for flare");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "flare failed ({}): {stderr}",
            out.status
        );
        (stdout, stderr)
    }
}

pub const SIGINT: i32 = 2;
pub const SIGTERM: i32 = 15;

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

/// One entry of bcc's multi-line output.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Frames as printed, leaf first (including `--` and placeholders).
    pub frames: Vec<String>,
    pub comm: String,
    pub pid: u32,
    pub count: u64,
}

/// Parses bcc's multi-line output (after the header and blank line).
pub fn parse_text(out: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut frames = Vec::new();
    let mut task: Option<(String, u32)> = None;
    for line in out.lines().skip(1) {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("    -                ") {
            let open = rest.rfind(" (").expect("task line");
            let pid = rest[open + 2..rest.len() - 1].parse().expect("pid");
            task = Some((rest[..open].to_string(), pid));
        } else if let Some(n) = line.strip_prefix("        ") {
            let (comm, pid) = task.take().expect("count after task line");
            entries.push(Entry {
                frames: std::mem::take(&mut frames),
                comm,
                pid,
                count: n.trim().parse().expect("count"),
            });
        } else if let Some(f) = line.strip_prefix("    ") {
            frames.push(f.to_string());
        } else {
            panic!("unexpected line in flare output: {line:?}");
        }
    }
    entries
}

/// Parses folded output into (frames root first, count).
pub fn parse_folded(out: &str) -> Vec<(Vec<String>, u64)> {
    out.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').expect("folded line has a count");
            (
                stack.split(';').map(str::to_string).collect(),
                n.parse().expect("folded count"),
            )
        })
        .collect()
}

/// Of folded `stacks` (root first), the count of those where `outer`
/// calls (at any depth) `inner`.
pub fn under(stacks: &[(Vec<String>, u64)], outer: &str, inner: &str) -> u64 {
    stacks
        .iter()
        .filter(|(f, _)| {
            let o = f.iter().position(|x| x == outer);
            let i = f.iter().rposition(|x| x == inner);
            matches!((o, i), (Some(o), Some(i)) if o < i)
        })
        .map(|(_, n)| n)
        .sum()
}
