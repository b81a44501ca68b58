//! Driving `flare stackcount` against workloads that wait for SIGUSR1
//! (so that the probes are attached before the counted work starts), and
//! reading its output back as counts per stack.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, Stdio};

use super::bpf::{flare, workload, Reaper};

/// A workload waiting for SIGUSR1, with its stdout for "ready"/"done".
pub struct Workload {
    pub child: Reaper,
    pub out: BufReader<ChildStdout>,
}

impl Workload {
    pub fn start(name: &str, args: &[&str]) -> Self {
        Self::start_path(&workload(name), args)
    }

    /// As [`Workload::start`], for an executable built elsewhere.
    pub fn start_path(exe: &std::path::Path, args: &[&str]) -> Self {
        let mut child = Command::new(exe)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting workload");
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut w = Workload {
            child: Reaper(child),
            out,
        };
        w.expect_line("ready");
        w
    }

    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    pub fn expect_line(&mut self, want: &str) {
        let mut line = String::new();
        self.out.read_line(&mut line).expect("reading workload");
        assert_eq!(line.trim(), want, "workload output");
    }

    /// Starts the work and waits until it is all done.
    pub fn go(&mut self) {
        signal(self.pid(), libc::SIGUSR1);
        self.expect_line("done");
    }
}

pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory preconditions.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0, "kill {pid}");
}

/// flare stackcount running until interrupted.
pub struct Tracer {
    pub child: Reaper,
    pub header: String,
}

impl Tracer {
    /// Starts flare and waits for its header (stdout, or stderr with -f),
    /// which it prints once every probe is attached.
    pub fn start(args: &[&str]) -> Self {
        Self::try_start(args).unwrap_or_else(|e| panic!("flare {args:?} did not start: {e}"))
    }

    /// As [`Tracer::start`], or flare's output when it exits instead.
    pub fn try_start(args: &[&str]) -> Result<Self, String> {
        Self::try_start_with(args, &[])
    }

    /// As [`Tracer::start`], with `env` set for flare.
    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::try_start_with(args, env)
            .unwrap_or_else(|e| panic!("flare {args:?} did not start: {e}"))
    }

    fn try_start_with(args: &[&str], env: &[(&str, &str)]) -> Result<Self, String> {
        let mut child = flare()
            .arg("stackcount")
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting flare");
        let folded = args.contains(&"-f");
        let mut header = String::new();
        let mut n = 1;
        // Warnings come first on stderr (e.g. a kernel without bpf_loop
        // walks frame pointers): with -f they precede the header there.
        while n > 0 && (header.is_empty() || header.starts_with("WARNING:")) {
            header.clear();
            n = if folded {
                read_line_unbuffered(child.stderr.as_mut().expect("stderr"), &mut header)
            } else {
                read_line_unbuffered(child.stdout.as_mut().expect("stdout"), &mut header)
            };
        }
        if n == 0 || !header.starts_with("Tracing ") {
            // Still running (an unexpected first line): stop it, so that
            // reading the rest of stderr ends.
            let _ = child.kill();
            let mut rest = String::new();
            if let Some(e) = child.stderr.as_mut() {
                let _ = e.read_to_string(&mut rest);
            }
            let _ = child.wait();
            return Err(format!("{header}{rest}"));
        }
        Ok(Tracer {
            child: Reaper(child),
            header: header.trim_end().to_string(),
        })
    }

    /// Interrupts flare and returns the rest of its standard output.
    pub fn finish(mut self) -> String {
        signal(self.child.0.id(), libc::SIGINT);
        wait_output(&mut self.child.0)
    }

    /// Interrupts flare and returns the rest of its standard output and
    /// its standard error.
    pub fn finish_both(mut self) -> (String, String) {
        signal(self.child.0.id(), libc::SIGINT);
        wait_both(&mut self.child.0)
    }
}

/// Reads one line byte by byte, so that nothing after it is buffered away.
pub fn read_line_unbuffered(r: &mut impl Read, line: &mut String) -> usize {
    let mut byte = [0u8; 1];
    let mut bytes = Vec::new();
    while r.read(&mut byte).unwrap_or(0) == 1 {
        bytes.push(byte[0]);
        if byte[0] == b'\n' {
            break;
        }
    }
    line.push_str(&String::from_utf8_lossy(&bytes));
    bytes.len()
}

pub fn wait_output(child: &mut Child) -> String {
    wait_both(child).0
}

/// Waits for flare to succeed; its standard output and standard error.
pub fn wait_both(child: &mut Child) -> (String, String) {
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("reading flare output");
    let status = child.wait().expect("waiting for flare");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "flare failed ({status}): {err}\n{out}");
    (out, err)
}

/// Counts of the multi-line output, keyed by the stack's frames joined
/// with `;` (leaf first), summed over intervals.
pub fn text_counts(out: &str) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for block in out.split("\n\n") {
        let lines: Vec<&str> = block.lines().filter(|l| !l.is_empty()).collect();
        let Some(last) = lines.last() else { continue };
        let Ok(n) = last.trim().parse::<u64>() else {
            continue;
        };
        let frames: Vec<&str> = lines[..lines.len() - 1]
            .iter()
            .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
            .map(|l| l.trim())
            .collect();
        *counts.entry(frames.join(";")).or_default() += n;
    }
    counts
}

pub fn folded_counts(out: &str) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for line in out.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("folded line");
        *counts.entry(stack.to_string()).or_default() += n.parse::<u64>().expect("count");
    }
    counts
}
