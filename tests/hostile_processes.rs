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
//! - 20,000 Python functions sharing one 1 MiB line table, called in
//!   turn: each code object's table was kept whole, 2-4 GB of RSS within
//!   a 3 s profile.
//!
//! - A process mapping one page of the real `libjvm.so` beside tables of
//!   its own making (`gHotSpotVMStructs` and the rest: empty): the layout
//!   read from it was kept for the file, and root's JVM started later
//!   showed no Java frame.
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
    let why = match common::nobody::missing() {
        _ if !Path::new(PYTHON).exists() => format!("no {PYTHON}"),
        Some(why) => why.to_string(),
        None => return true,
    };
    if std::env::var("FLARE_REQUIRE_BPF").as_deref() == Ok("1") {
        panic!("hostile-process tests are required (FLARE_REQUIRE_BPF=1) but cannot run: {why}");
    }
    eprintln!("skipping hostile-process test: {why}");
    false
}

/// `script` run by Debian's Python as nobody in `dir` (made nobody's),
/// once it has printed its first line (`ready`).
fn as_nobody(dir: &Path, script: &str) -> Reaper {
    let nobody = common::nobody::NOBODY;
    std::os::unix::fs::chown(dir, Some(nobody), Some(nobody)).expect("chown");
    let mut child = common::nobody::setpriv()
        .args([PYTHON, "-c", script])
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
fn wait_within(child: Child, limit: Duration, what: &str) -> Output {
    wait_measured(child, limit, what).0
}

/// [`wait_within`], and the child's peak RSS in KiB (its `VmHWM`, read
/// every 20 ms while it runs). Its output is read as it comes.
fn wait_measured(mut child: Child, limit: Duration, what: &str) -> (Output, u64) {
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let begun = Instant::now();
    let mut peak = 0;
    let status_path = format!("/proc/{}/status", child.id());
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting") {
            break status;
        }
        let hwm = std::fs::read_to_string(&status_path).ok().and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        });
        peak = peak.max(hwm.unwrap_or(0));
        if begun.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: flare had not exited after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    (out, peak)
}

/// Root's `flare profile -F HZ -f -p PID 3` of `script` run as nobody:
/// its output (which must be a success) and flare's peak RSS in KiB.
fn profile_for_3_s(script: &str, hz: &str) -> (String, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let w = as_nobody(dir.path(), script);
    let pid = w.0.id().to_string();
    let (out, peak_kib) = wait_measured(
        spawn_flare(&["profile", "-F", hz, "-f", "-p", &pid, "3"]),
        Duration::from_secs(20),
        "profile -p for 3 s",
    );
    drop(w);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    (
        String::from_utf8(out.stdout).expect("UTF-8 output"),
        peak_kib,
    )
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
    let (stdout, _) = profile_for_3_s(NAMES, "499");
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

/// 20,000 functions whose code objects share one 1 MiB line table, each
/// defined on a line of its own, called in turn.
const SHARED_TABLE: &str = r#"
import types
SRC = "def f(n):\n    x = 0\n    for i in range(n):\n        x += i\n    return x\n"
ns = {}
exec(compile(SRC, "/srv/shared.py", "exec"), ns)
code = ns["f"].__code__
table = code.co_linetable.ljust(1 << 20, b"\x80")
fs = [types.FunctionType(code.replace(co_linetable=table, co_firstlineno=i + 1), ns)
      for i in range(20_000)]
print("ready", flush=True)
while True:
    for f in fs:
        f(30)
"#;

#[test]
fn code_objects_sharing_one_huge_line_table_keep_memory_bounded() {
    if !can_run_as_nobody() {
        return;
    }
    let _g = serial();
    let (stdout, peak_kib) = profile_for_3_s(SHARED_TABLE, "997");
    // Many of the functions named (each its own line: `f (srv/shared.py:N)`).
    let named: std::collections::HashSet<&str> = stdout
        .split(';')
        .filter_map(|f| f.strip_prefix("f (srv/shared.py:"))
        .filter_map(|f| f.split(')').next())
        .collect();
    eprintln!(
        "{} functions named, peak RSS {} MiB",
        named.len(),
        peak_kib / 1024
    );
    assert!(
        named.len() >= 200,
        "{} functions named:\n{stdout}",
        named.len()
    );
    assert!(
        peak_kib < 300 << 10,
        "flare's peak RSS {} MiB",
        peak_kib / 1024
    );
}

/// Maps the text page of the JDK's `libjvm.so` (that of `java` on PATH)
/// where the library would lie in a reserved range, and pages of its own
/// at the library's `gHotSpot*` variables: every table empty (pointing at
/// zeros), strides 64, offsets 0. Then spins.
const POISON: &str = r#"
import ctypes, os, shutil, struct
java = os.path.realpath(shutil.which("java"))
libjvm = os.path.join(os.path.dirname(os.path.dirname(java)), "lib/server/libjvm.so")
data = open(libjvm, "rb").read()
phoff, shoff = struct.unpack_from("<QQ", data, 32)
phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 54)
loads = []
for i in range(phnum):
    p_type, p_flags, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = \
        struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
    if p_type == 1:
        loads.append((p_flags, p_offset, p_vaddr, p_memsz))
symbols = {}
for i in range(shnum):
    _, sh_type, _, _, off, size, link, _, _, _ = \
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
    if sh_type != 11:
        continue
    str_off = struct.unpack_from("<Q", data, shoff + link * shentsize + 24)[0]
    for e in range(0, size, 24):
        name, _, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", data, off + e)
        end = data.index(b"\0", str_off + name)
        n = data[str_off + name:end]
        if shndx and n.startswith(b"gHotSpot"):
            symbols[n.decode()] = value
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
span = (max(v + m for _, _, v, m in loads) + 4095) & ~4095
base = libc.mmap(None, span, 0, 0x22, -1, 0)
flags, off, vaddr, _ = next(l for l in loads if l[0] & 1)
fd = os.open(libjvm, os.O_RDONLY)
at = libc.mmap(base + vaddr, 4096, 5, 0x12, fd, off)
assert at == base + vaddr, ctypes.get_errno()
zeros = ctypes.create_string_buffer(1 << 16)
for page in sorted({(base + v) & ~4095 for v in symbols.values()}):
    assert libc.mmap(page, 4096, 3, 0x32, -1, 0) == page, ctypes.get_errno()
for name, value in symbols.items():
    v = 64 if name.endswith("Stride") else 0 if "Offset" in name else ctypes.addressof(zeros)
    ctypes.c_uint64.from_address(base + value).value = v
print("ready", flush=True)
while True:
    pass
"#;

#[test]
fn tables_one_process_makes_do_not_reach_another_jvm() {
    if !can_run_as_nobody() {
        return;
    }
    let Some(classes) = common::java::classes("DeepRec") else {
        return;
    };
    let _g = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let poison = as_nobody(dir.path(), POISON);
    let flare = spawn_flare(&["profile", "-F", "199", "-f", "10"]);
    // The poisoning process is met first: it spins from the start.
    std::thread::sleep(Duration::from_secs(2));
    let mut jvm = Reaper(
        Command::new("java")
            .args(["-cp"])
            .arg(&classes)
            .args(["DeepRec", "20", "4"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting java"),
    );
    let mut line = String::new();
    common::stackcount::read_line_unbuffered(jvm.0.stdout.as_mut().expect("stdout"), &mut line);
    assert_eq!(line, "ready\n");
    {
        use std::io::Write;
        let stdin = jvm.0.stdin.as_mut().expect("stdin");
        stdin.write_all(b"go\n").expect("go");
        stdin.flush().expect("flush");
    }
    line.clear();
    common::stackcount::read_line_unbuffered(jvm.0.stdout.as_mut().expect("stdout"), &mut line);
    assert!(line.starts_with("cpu "), "{line}");
    let out = wait_within(flare, Duration::from_secs(30), "system-wide profile");
    drop(jvm);
    drop(poison);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    let leaf: u64 = stdout
        .lines()
        .filter(|l| l.contains("DeepRec.leaf("))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert!(
        leaf >= 200,
        "{leaf} samples in DeepRec.leaf; stderr:\n{err}"
    );
}
