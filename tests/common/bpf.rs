//! Support for tests that load real BPF programs: the privilege gate, a
//! lock that runs CPU-loading tests one at a time, workload programs built
//! from `tests/workloads/*.c`, and the CPU time a process really got.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// True inside scripts/vmtest's emulated guests (which set
/// FLARE_KERNEL_CAN), where a runnable thread can wait tens of
/// milliseconds for a virtual CPU and work runs many times slower: there
/// times are checked for order and containment, not to within
/// milliseconds, and what takes milliseconds here may take seconds.
pub fn emulated() -> bool {
    std::env::var_os("FLARE_KERNEL_CAN").is_some()
}

/// True when the machine's other work starved a workload: it got under
/// 95 % of a CPU (`cpu` seconds) over the `seconds` it ran (86-93 %
/// beside a parallel build, 99.9 % idle). Perf-event mode's reader, which
/// reads a sample's frames after the sample, then waits for a CPU too.
pub fn starved(cpu: f64, seconds: f64) -> bool {
    cpu < 0.95 * seconds
}

/// True when this test may load BPF programs. Without root or BTF the test
/// is skipped, unless `FLARE_REQUIRE_BPF=1`, when it fails.
pub fn require_bpf() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc_geteuid() } == 0;
    let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    if root && btf {
        return true;
    }
    let why = if root { "no BTF" } else { "not root" };
    if std::env::var("FLARE_REQUIRE_BPF").as_deref() == Ok("1") {
        panic!("BPF tests are required (FLARE_REQUIRE_BPF=1) but cannot run: {why}");
    }
    eprintln!("skipping BPF test: {why}");
    false
}

/// What `scripts/vmtest` says this kernel must be able to do
/// (`FLARE_KERNEL_CAN=kprobe,fentry,...`): Some(true) when `what` is
/// listed, Some(false) when it is not, None outside the matrix or on a
/// kernel it does not know (`unknown`: the host's, or one given by path);
/// then either outcome is accepted, a refusal only when clearly worded.
pub fn kernel_can(what: &str) -> Option<bool> {
    let can = std::env::var("FLARE_KERNEL_CAN").ok()?;
    can_list(&can, what)
}

/// `kernel_can` on the list `can`.
fn can_list(can: &str, what: &str) -> Option<bool> {
    if can.trim() == "unknown" {
        return None;
    }
    Some(can.split(',').any(|c| c.trim() == what))
}

/// Workloads come prebuilt (`FLARE_WORKLOADS=DIR`) where there is no
/// compiler, as inside `scripts/vmtest`'s virtual machines.
fn prebuilt_workload(name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("FLARE_WORKLOADS")?;
    Some(PathBuf::from(dir).join(format!("workload-{name}")))
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// Serializes tests that load the CPUs, so that they do not skew each
/// other's samples. A panicking test does not poison the others.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// wallwork's own figures, from the "cpu S wall S compute S" line it
/// prints on exit (in `stderr`, its own or a stream it shares): its CPU
/// seconds, wall seconds and wall seconds in compute().
pub fn wallwork_figures(stderr: &str) -> (f64, f64, f64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("cpu "))
        .unwrap_or_else(|| panic!("no cpu/wall line from wallwork: {stderr}"));
    let f: Vec<f64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(f.len(), 3, "wallwork's figures: {line}");
    (f[0], f[1], f[2])
}

/// Builds `tests/workloads/<name>.c` (once per test binary) with frame
/// pointers and without inlining, and returns the executable's path.
pub fn workload(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    if let Some(p) = prebuilt_workload(name) {
        built.insert(name.to_string(), p.clone());
        return p;
    }
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/workloads/{name}.c"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("workload-{name}"));
    let status = Command::new("gcc")
        .args([
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-fno-inline",
            "-pthread",
            "-o",
        ])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("running gcc (scripts/deps.sh installs it)");
    assert!(status.success(), "building {}", src.display());
    built.insert(name.to_string(), out.clone());
    out
}

/// Builds `tests/workloads/<src>` with `command` (a compiler and its
/// flags, before `-o OUT SRC`) into `workload-<out>`, once per test
/// binary, and returns the executable's path. With `FLARE_WORKLOADS=DIR`
/// (no compiler, as in `scripts/vmtest`'s guests) it is prebuilt, as
/// `DIR/variants/workload-<out>`: a directory of its own, as `out` may
/// name a `workload()` built with other flags (`pipeblock`).
pub fn build(out: &str, src: &str, command: &[&str]) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(out) {
        return p.clone();
    }
    if let Some(dir) = std::env::var_os("FLARE_WORKLOADS") {
        let p = PathBuf::from(dir).join(format!("variants/workload-{out}"));
        assert!(
            p.exists(),
            "{} is not prebuilt: scripts/vmtest must build {src} with {command:?}",
            p.display()
        );
        built.insert(out.to_string(), p.clone());
        return p;
    }
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/workloads/{src}"));
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("workload-{out}"));
    let status = Command::new(command[0])
        .args(&command[1..])
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("running {} (scripts/deps.sh installs it): {e}", command[0]));
    assert!(
        status.success(),
        "building {} with {command:?}",
        src.display()
    );
    built.insert(out.to_string(), exe.clone());
    exe
}

/// Runs a build tool (gcc, objcopy, strip, nm) to success; its output.
pub fn run_tool(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?} (scripts/deps.sh installs it): {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The flare binary under test.
pub fn flare() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flare"))
}

/// Runs flare to completion, failing the test with its stderr if it fails.
pub fn run_flare(args: &[&str]) -> Output {
    let out = flare()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running flare");
    assert!(
        out.status.success(),
        "flare {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Starts a workload with the given arguments.
pub fn spawn(name: &str, args: &[&str]) -> Child {
    Command::new(workload(name))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting workload")
}

/// Kills a child on drop, so a failing test leaves nothing running.
pub struct Reaper(pub Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU time (user + system) a process or thread has had so far, in
/// seconds, from `/proc/<pid>/stat` (or `/proc/<pid>/task/<tid>/stat`).
pub fn cpu_seconds(stat_path: &str) -> f64 {
    let stat = fs::read_to_string(stat_path).expect("reading stat");
    // The command name may hold spaces; fields after it are fixed.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12
    // after the state field.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// CPU seconds of a whole process.
pub fn process_cpu(pid: u32) -> f64 {
    cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// Starts a workload with piped stdin and stdout; returns it and its stdin.
pub fn spawn_with_stdin(name: &str, args: &[&str]) -> (Child, std::process::ChildStdin) {
    let mut child = Command::new(workload(name))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting workload");
    let stdin = child.stdin.take().expect("piped stdin");
    (child, stdin)
}

/// True once flare has `links` BPF links open and handles SIGINT, i.e. it
/// is attached and will print what it traced when interrupted.
pub fn attached(pid: u32, links: usize) -> bool {
    // Kernels before 5.15 attach kprobes through perf events, with no BPF
    // link object.
    let count = super::session::fds_matching(pid, |t| {
        t == "anon_inode:bpf_link" || t == "anon_inode:[perf_event]"
    });
    let sigint = fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0);
    count >= links && sigint
}
