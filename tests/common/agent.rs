//! A `flare agent` child process for the push tests: started with
//! arguments, stopped with SIGTERM, its stderr and final summary read.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `flare agent`.
pub struct Agent {
    child: Child,
}

/// What the agent's summary line says of one destination.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub delivered: u64,
    pub dropped: u64,
    pub refused: u64,
    pub left: u64,
}

impl Agent {
    pub fn start(args: &[&str]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_flare"))
            .arg("agent")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting flare agent");
        Agent { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM, waits for the exit and returns stderr.
    pub fn terminate(self) -> String {
        self.terminate_within(Duration::from_secs(600)).1
    }

    /// Sends SIGTERM and waits at most `limit` for the exit (panics,
    /// after killing the agent, when it is still running then). Returns
    /// how long the exit took and stderr.
    pub fn terminate_within(mut self, limit: Duration) -> (Duration, String) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our
        // own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("waiting for flare agent") {
                break Some(s);
            }
            if start.elapsed() > limit {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let took = start.elapsed();
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        match status {
            None => panic!("flare agent still running {took:?} after SIGTERM: {err}"),
            Some(s) => assert!(s.success(), "flare agent failed ({s}): {err}"),
        }
        (took, err)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses the agent's summary line (the first destination's).
pub fn summary(err: &str) -> Summary {
    let line = err
        .lines()
        .find(|l| l.contains("window(s) delivered"))
        .unwrap_or_else(|| panic!("no summary in {err}"));
    let count = |what: &str| -> u64 {
        let before = line
            .split(what)
            .next()
            .filter(|b| b.len() < line.len())
            .unwrap_or_else(|| panic!("no '{what}' in {line}"));
        before
            .rsplit(|c: char| !c.is_ascii_digit())
            .find(|n| !n.is_empty())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count before '{what}' in {line}"))
    };
    Summary {
        delivered: count(" window(s) delivered"),
        dropped: count(" dropped"),
        refused: count(" refused"),
        left: count(" left queued"),
    }
}

/// The `.win` files of a disk spool (one subdirectory per destination),
/// with their sizes.
pub fn spool_files(spool: &Path) -> Vec<(PathBuf, u64)> {
    fs::read_dir(spool)
        .into_iter()
        .flatten()
        .filter_map(|d| fs::read_dir(d.ok()?.path()).ok())
        .flatten()
        .filter_map(|f| {
            let f = f.ok()?;
            (f.path().extension()? == "win").then_some(())?;
            Some((f.path(), f.metadata().ok()?.len()))
        })
        .collect()
}

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`); 0 when
/// unreadable.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
