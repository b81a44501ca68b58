//! Starting twofuncs and `flare profile --serve` against it, for the live
//! view's tests: the workload once it is ready, and the profiler once it
//! has printed its URL.

use std::io::BufReader;
use std::process::{ChildStderr, ChildStdout, Command, Stdio};

use super::bpf::Reaper;
use super::session::Workload;
use super::webdriver::{lines, read_until};

/// Starts twofuncs for `seconds` with func_a's share `share_a` (percent)
/// and lets it work at once.
pub fn twofuncs(seconds: &str, share_a: &str) -> Workload {
    let mut w = Workload::start("twofuncs", &[seconds, share_a]);
    w.go();
    w
}

/// Calls leafcalls makes on its signal: half through caller_a, half
/// through caller_b.
#[allow(dead_code)] // Not every test binary counts calls.
pub const LEAF_CALLS: u64 = 20_000;

/// Starts leafcalls and `flare stackcount -p PID EXTRA.. LEAF --serve`
/// counting its leaf(), then lets it make its calls.
#[allow(dead_code)] // Not every test binary counts calls.
pub fn leafcalls_counted(extra: &[&str]) -> (Workload, Served) {
    let work = Workload::start("leafcalls", &[&LEAF_CALLS.to_string()]);
    let pattern = format!("{}:leaf", super::bpf::workload("leafcalls").display());
    let pid = work.pid.to_string();
    let mut args = vec!["-p", &pid];
    args.extend_from_slice(extra);
    args.extend([pattern.as_str(), "--serve"]);
    let served = serve_tool("stackcount", &args);
    // leafcalls makes its calls on SIGUSR1.
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { kill(work.pid as i32, SIGUSR1) };
    (work, served)
}

const SIGUSR1: i32 = 10;

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

/// A running `flare profile ... --serve`.
pub struct Served {
    pub flare: Reaper,
    pub url: String,
    pub port: u16,
    /// The URL's path: `/TOKEN/`, the prefix of every route.
    pub base: String,
    /// The profile printed at the end of the run.
    pub stdout: Option<ChildStdout>,
    err: BufReader<ChildStderr>,
}

impl Served {
    /// The path of a route (`api/profile?..`) under the URL's token.
    pub fn path(&self, route: &str) -> String {
        format!("{}{route}", self.base)
    }

    /// Everything flare printed on stderr after its URL, up to its exit.
    #[allow(dead_code)] // Not every test binary reads it.
    pub fn stderr_rest(&mut self) -> String {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.err, &mut rest).expect("flare stderr");
        rest
    }
}

/// Runs `flare profile ARGS` (which must include `--serve` on loopback)
/// and waits for the URL it prints.
pub fn serve(args: &[&str]) -> Served {
    serve_tool("profile", args)
}

/// Runs `flare TOOL ARGS` (ARGS with `--serve` on loopback) and waits for
/// the URL it prints.
pub fn serve_tool(tool: &str, args: &[&str]) -> Served {
    let mut flare = Command::new(env!("CARGO_BIN_EXE_flare"))
        .arg(tool)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting flare");
    let mut err = lines(flare.stderr.take().expect("flare stderr"));
    let stdout = flare.stdout.take();
    let flare = Reaper(flare);
    let line = read_until(&mut err, "Live flame graph at ");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no loopback URL in {line:?}"))
        .to_string();
    let (port, base) = url
        .trim_start_matches("http://127.0.0.1:")
        .split_once('/')
        .unwrap_or_else(|| panic!("no path in {url}"));
    let port = port.parse().unwrap_or_else(|_| panic!("no port in {url}"));
    let base = format!("/{base}");
    Served {
        flare,
        url,
        port,
        base,
        stdout,
        err,
    }
}
