//! Processes another user runs, met by root's flare: what they map and
//! what their runtimes hold is theirs to choose, and must neither stall
//! flare nor reach its output unbounded or raw. Each workload runs as user
//! nobody (`setpriv`), flare as root, as in a fleet.
//!
//! - A file mapped executable whose 100,000 symbols all name one 16 MB
//!   string: reading its symbols was quadratic (hours), stalling `-p`
//!   past its duration and SIGINT, and system-wide the loader thread, so
//!   that processes started later lost their Python frames.
//! - Python functions and files named with Unicode format and separator
//!   characters (U+202E, U+2028, U+2029, U+FEFF), and with 4,096-byte
//!   names: printed raw, and whole (246 KB folded lines).
//!
//! Needs root, `setpriv` and user nobody: without them the tests are
//! skipped, unless `FLARE_REQUIRE_BPF=1`, when they fail.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::bpf::{flare, require_bpf, serial, Reaper};

/// Debian's CPython (3.11, which flare reads): every Debian 12 machine has it.
const PYTHON: &str = "/usr/bin/python3";

/// True when root can run workloads as nobody here.
fn can_run_as_nobody() -> bool {
    if !require_bpf() {
        return false;
    }
    let setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let nobody = std::fs::read_to_string("/etc/passwd")
        .is_ok_and(|p| p.lines().any(|l| l.starts_with("nobody:x:65534:")));
    let python = Path::new(PYTHON).exists();
    if setpriv && nobody && python {
        return true;
    }
    let why = format!("setpriv {setpriv}, user nobody {nobody}, {PYTHON} {python}");
    if std::env::var("FLARE_REQUIRE_BPF").as_deref() == Ok("1") {
        panic!("hostile-process tests are required (FLARE_REQUIRE_BPF=1) but cannot run: {why}");
    }
    eprintln!("skipping hostile-process test: {why}");
    false
}

/// `script` run by Debian's Python as nobody in `dir` (made nobody's),
/// once it has printed its first line (`ready`).
fn as_nobody(dir: &Path, script: &str) -> Reaper {
    std::os::unix::fs::chown(dir, Some(65534), Some(65534)).expect("chown");
    let mut child = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            PYTHON,
            "-c",
            script,
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the workload as nobody");
    let mut ready = String::new();
    common::stackcount::read_line_unbuffered(child.stdout.as_mut().expect("stdout"), &mut ready);
    assert_eq!(ready, "ready\n", "the workload did not start");
    Reaper(child)
}

/// Waits for `child` at most `limit`; kills it and panics past that.
fn wait_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let begun = Instant::now();
    while child.try_wait().expect("waiting").is_none() {
        if begun.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: flare had not exited after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = Output {
        status: child.wait().expect("waiting"),
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_end(&mut out.stdout);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_end(&mut out.stderr);
    }
    out
}

fn spawn_flare(args: &[&str]) -> Child {
    flare()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting flare")
}

/// Writes `quadratic.so` (an ELF file of this machine's architecture:
/// one executable page, 100,000 `.dynsym` entries all naming one 16 MB
/// string), then runs `./mapexec` (tests/workloads/mapexec.c), which maps
/// it executable and spins: no Python, so that detection reads every
/// mapping.
const QUADRATIC: &str = r#"
import os, platform, struct
machine = {"x86_64": 62, "aarch64": 183}[platform.machine()]
n, huge = 100_000, 16 << 20
syms_at = 4096
strs_at = syms_at + 24 * n
strs = b"\0_" + b"A" * huge + b"\0"
sh_at = (strs_at + len(strs) + 7) & ~7
ehdr = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack(
    "<HHIQQQIHHHHHH", 3, machine, 1, 0, 64, sh_at, 0, 64, 56, 1, 64, 3, 0)
phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, 4096, 4096, 4096)
sym = struct.pack("<IBBHQQ", 1, 0x12, 0, 1, 0, 0)
shdrs = bytes(64) + struct.pack("<IIQQQQIIQQ", 0, 11, 2, 0, syms_at, 24 * n, 2, 1, 8, 24) \
    + struct.pack("<IIQQQQIIQQ", 0, 3, 2, 0, strs_at, len(strs), 0, 0, 1, 0)
with open("quadratic.so", "wb") as f:
    f.write((ehdr + phdr).ljust(4096, b"\0"))
    f.write(sym * n)
    f.write(strs)
    f.write(bytes(sh_at - strs_at - len(strs)))
    f.write(shdrs)
os.execv("./mapexec", ["mapexec", "quadratic.so"])
"#;

/// A Python program started after flare, named `flare-after`: its
/// samples keep their Python frame (`python_after`).
const AFTER: &str = r#"
import ctypes, time
ctypes.CDLL(None).prctl(15, b"flare-after", 0, 0, 0)  # PR_SET_NAME
print("ready", flush=True)
def python_after():
    x, end = 0, time.time() + 3
    while time.time() < end:
        x += 1
python_after()
"#;

#[test]
fn a_file_of_symbols_naming_one_huge_string_stalls_nothing() {
    if !can_run_as_nobody() {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let mapexec = dir.path().join("mapexec");
    std::fs::copy(common::bpf::workload("mapexec"), &mapexec).expect("copying mapexec");
    let w = as_nobody(dir.path(), QUADRATIC);
    let pid = w.0.id().to_string();

    // -p for 2 s: ends on time (before: not after 30 s).
    let out = wait_within(
        spawn_flare(&["profile", "-F", "99", "-f", "-p", &pid, "2"]),
        Duration::from_secs(15),
        "profile -p for 2 s",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("main;spin "), "no stack of spin:\n{stdout}");

    // -p with no duration: SIGINT is honoured.
    let child = spawn_flare(&["profile", "-F", "99", "-f", "-p", &pid]);
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: kill only signals the flare process started above.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = wait_within(child, Duration::from_secs(5), "profile -p after SIGINT");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // System-wide: a Python program started once flare has met the file
    // keeps its Python frames (the loader is not stuck).
    let child = spawn_flare(&["profile", "-F", "199", "-f", "6"]);
    std::thread::sleep(Duration::from_secs(2));
    let later = tempfile::tempdir().expect("tempdir");
    let after = as_nobody(later.path(), AFTER);
    let out = wait_within(child, Duration::from_secs(20), "system-wide profile");
    drop(after);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (mut all, mut framed) = (0u64, 0u64);
    for line in stdout.lines().filter(|l| l.starts_with("flare-after;")) {
        let n: u64 = line
            .rsplit_once(' ')
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(0);
        all += n;
        if line.contains("python_after (<string>:") {
            framed += n;
        }
    }
    assert!(all >= 50, "{all} samples of the later program:\n{stdout}");
    assert!(
        framed * 10 >= all * 9,
        "{framed} of {all} samples of the later program have its Python frame:\n{stdout}"
    );
    drop(w);
}

/// Python functions named with format and separator characters, and with
/// 4,096-byte names and files, each run in turn.
const NAMES: &str = r#"
SRC = "def f(n):\n    x = 0\n    for i in range(n):\n        x += i\n    return x\n"
def make(name, filename):
    ns = {}
    exec(compile(SRC, filename, "exec"), ns)
    f = ns["f"]
    f.__code__ = f.__code__.replace(co_name=name, co_qualname=name)
    return f
evil = make("evil\u202eright\u2028line\u2029para\ufeffbom\u200dzwj", "/srv/evil\u202efile\u2028.py")
long = make("L" * 4096, "/srv/" + "F" * 4096 + ".py")
print("ready", flush=True)
while True:
    evil(20000)
    long(20000)
"#;

#[test]
fn names_are_cleaned_of_format_characters_and_cut() {
    if !can_run_as_nobody() {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let w = as_nobody(dir.path(), NAMES);
    let pid = w.0.id().to_string();
    let out = wait_within(
        spawn_flare(&["profile", "-F", "499", "-f", "-p", &pid, "3"]),
        Duration::from_secs(20),
        "profile -p for 3 s",
    );
    drop(w);
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for c in ['\u{202E}', '\u{2028}', '\u{2029}', '\u{FEFF}', '\u{200D}'] {
        assert!(
            !stdout.contains(c),
            "U+{:04X} printed raw:\n{stdout}",
            c as u32
        );
    }
    let count = |needle: &str| -> u64 {
        stdout
            .lines()
            .filter(|l| l.contains(needle))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum()
    };
    let evil = count("evil?right?line?para?bom?zwj (srv/evil?file?.py:1)");
    let long = count(&format!("{}… (", "L".repeat(512)));
    assert!(
        evil >= 50 && long >= 50,
        "evil {evil}, long {long}:\n{stdout}"
    );
    // A frame of the long function: its name and file cut at 512 bytes
    // each (before: 8 KiB, whole).
    let widest = stdout
        .lines()
        .flat_map(|l| l.split(';'))
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(widest <= 1100, "a frame of {widest} bytes");
}
