//! Detection of the CPythons installed here (pyenv's shared-library
//! builds, Debian's static one) in live processes, checked against what
//! the processes say of themselves; and of the slot search, names and
//! versions on made-up inputs.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::*;
use crate::runtime::memory::{Buffer, ProcessMemory};
use crate::unwind::procs::exec_mappings;

/// Starts two threads, prints what the test checks, waits on stdin.
const SCRIPT: &str = r#"
import sys, threading, ctypes
ready = []
ev = threading.Event()
lock = threading.Lock()
def run():
    with lock:
        ready.append(threading.get_ident())
    ev.wait()
for _ in range(2):
    threading.Thread(target=run, daemon=True).start()
while True:
    with lock:
        if len(ready) == 2:
            break
api = ctypes.pythonapi
print("code_type", id(type((lambda: 0).__code__)))
try:
    print("runtime", ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime")))
except ValueError:  # 3.6: none
    print("runtime", 0)
print("eval", ctypes.cast(api._PyEval_EvalFrameDefault, ctypes.c_void_p).value)
print("thread", threading.get_ident())
for i in ready:
    print("thread", i)
print("ready", flush=True)
sys.stdin.read()
"#;

/// Runs in any Python, 2.7 included.
const IDLE: &str =
    "import sys\nsys.stdout.write('ready\\n')\nsys.stdout.flush()\nsys.stdin.read()\n";

/// A child process, killed when dropped.
struct Running {
    child: Child,
    /// Its lines up to "ready".
    lines: Vec<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The numbers after `key` on its lines.
    fn values(&self, key: &str) -> Vec<u64> {
        self.lines
            .iter()
            .filter_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .collect()
    }

    fn value(&self, key: &str) -> u64 {
        let v = self.values(key);
        assert_eq!(v.len(), 1, "{key} in {:?}", self.lines);
        v[0]
    }
}

/// Runs `program` with `args`, reading its output up to "ready".
fn run(program: &Path, args: &[&str]) -> Running {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let mut running = Running {
        child,
        lines: Vec::new(),
    };
    let out = running.child.stdout.take().expect("stdout");
    for line in BufReader::new(out).lines() {
        let line = line.expect("reading the child");
        if line == "ready" {
            return running;
        }
        running.lines.push(line);
    }
    panic!(
        "{} ended before it was ready: {:?}",
        program.display(),
        running.lines
    );
}

fn python(program: &Path, script: &str) -> Running {
    let mut r = run(program, &["-c", script]);
    // Keeps stdin open: the child waits on it until killed.
    let _ = r.child.stdin.as_mut().map(|s| s.flush());
    r
}

fn detect(pid: u32) -> Detected {
    let maps = exec_mappings(pid).expect("maps");
    Detector::new().detect(pid, &maps, &ProcessMemory { pid })
}

fn required() -> bool {
    std::env::var("FLARE_REQUIRE_BPF").is_ok_and(|v| v == "1")
}

fn pyenv(version: &str) -> PathBuf {
    let root = std::env::var("PYENV_ROOT").unwrap_or_else(|_| "/root/.pyenv".into());
    PathBuf::from(root).join("versions").join(version)
}

/// `name`'s value and size in `object`'s symbol tables, as readelf
/// prints them (`None` without readelf or the symbol).
fn readelf(object: &Path, name: &str) -> Option<Option<(u64, u64)>> {
    let out = Command::new("readelf")
        .args(["-W", "-s"])
        .arg(object)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let number = |s: &str| match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    };
    Some(text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 8 || f[7] != name || f[6] == "UND" {
            return None;
        }
        Some((u64::from_str_radix(f[1], 16).ok()?, number(f[2])?))
    }))
}

/// Whether `object` has a `.symtab` section, as readelf says.
fn has_symtab(object: &Path) -> bool {
    Command::new("readelf")
        .arg("-SW")
        .arg(object)
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(".symtab"))
}

/// Detects `exe` (whose interpreter is in `object`) running [`SCRIPT`] and
/// checks what was found against what the process printed.
fn check_live(exe: &Path, object: &Path, minor: u8) {
    if !exe.exists() {
        assert!(!required(), "{} is missing", exe.display());
        eprintln!("skipped: no {}", exe.display());
        return;
    }
    let r = python(exe, SCRIPT);
    let pid = r.pid();
    let p = match detect(pid) {
        Found::Yes(p) => p,
        other => panic!("{}: {other:?}", exe.display()),
    };
    eprintln!(
        "{}: slot {:#x} eval {:x?}",
        exe.display(),
        p.tstate_slot,
        p.eval
    );
    assert_eq!(p.layout.version, (3, minor));
    assert_eq!(p.code_type, r.value("code_type"));
    // 3.6 reads `interp_head` in its place (checked below).
    if minor != 6 {
        assert_eq!(p.runtime, r.value("runtime"));
    }
    assert_eq!(p.eval[0].start, r.value("eval"));
    // The loop, in the symbol's range or the part gcc moved out of it.
    let len = |r: &std::ops::Range<u64>| r.end.saturating_sub(r.start);
    assert!(len(&p.eval[0]) + len(&p.eval[1]) > 10_000, "{:?}", p.eval);
    // Sizes and the cold part against the file's symbols, placed where
    // _PyRuntime says the object is.
    let runtime_symbol = if minor == 6 {
        "interp_head"
    } else {
        "_PyRuntime"
    };
    match readelf(object, runtime_symbol) {
        Some(Some((runtime, _))) => {
            let bias = p.runtime - runtime;
            let (eval, size) = readelf(object, "_PyEval_EvalFrameDefault")
                .flatten()
                .expect("_PyEval_EvalFrameDefault");
            assert_eq!(p.eval[0], eval + bias..eval + bias + size);
            match readelf(object, "_PyEval_EvalFrameDefault.cold").flatten() {
                Some((v, s)) => assert_eq!(p.eval[1], v + bias..v + bias + s),
                // With symbols and no such part: none.
                None if has_symtab(object) => assert_eq!(p.eval[1], 0..0),
                // Stripped (Debian's): the part gcc moved out of it, found
                // from its jumps (all 379 of 3.11's land there).
                None => {
                    let (cold, eval) = (&p.eval[1], &p.eval[0]);
                    assert!(cold.end > cold.start + 1000, "{cold:x?}");
                    assert!(cold.end <= eval.start || cold.start >= eval.end);
                }
            }
        }
        Some(None) => panic!("readelf finds no {runtime_symbol} in {}", object.display()),
        None => eprintln!("readelf not found: sizes not checked"),
    }
    // Every thread finds its own thread state at fs base + slot.
    let mem = ProcessMemory { pid };
    let threads = r.values("thread");
    assert_eq!(threads.len(), 3, "{:?}", r.lines);
    for ident in threads {
        let tstate = mem
            .read_u64(ident.wrapping_add(p.tstate_slot))
            .expect("slot");
        assert_ne!(tstate, 0, "thread {ident:#x}");
        let id = mem
            .read_u64(tstate + u64::from(p.layout.tstate_thread_id))
            .expect("thread_id");
        assert_eq!(id, ident, "thread {ident:#x}");
    }
    // BPF's view of it is made without trouble.
    assert_eq!(p.bpf_bytes()[..8], p.eval[0].start.to_ne_bytes());
}

fn check_pyenv(version: &str) {
    let minor: u8 = version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .expect("minor");
    let dir = pyenv(version);
    // 3.7's library carries its ABI flag (pymalloc).
    let flags = if minor < 8 { "m" } else { "" };
    check_live(
        &dir.join(format!("bin/python3.{minor}")),
        &dir.join(format!("lib/libpython3.{minor}{flags}.so.1.0")),
        minor,
    );
}

/// Debian sid's 3.`minor`: an executable that holds the interpreter,
/// stripped, its eval loop split by gcc.
fn check_sid(minor: u8) {
    let Some(exe) = crate::testutil::sid_python(minor) else {
        return;
    };
    check_live(&exe, &exe, minor);
}

#[test]
fn sid_3_14() {
    check_sid(14);
}

#[test]
fn sid_3_15() {
    check_sid(15);
}

#[test]
fn pyenv_3_6() {
    check_pyenv("3.6.15");
}

#[test]
fn pyenv_3_7() {
    check_pyenv("3.7.16");
}

#[test]
fn pyenv_3_8() {
    check_pyenv("3.8.18");
}

#[test]
fn pyenv_3_9() {
    check_pyenv("3.9.18");
}

#[test]
fn pyenv_3_10() {
    check_pyenv("3.10.13");
}

#[test]
fn pyenv_3_11() {
    check_pyenv("3.11.7");
}

#[test]
fn pyenv_3_12() {
    check_pyenv("3.12.1");
}

#[test]
fn pyenv_3_13() {
    check_pyenv("3.13.0");
}

#[test]
fn debian_static_stripped_3_11() {
    let exe = Path::new("/usr/bin/python3.11");
    if !exe.exists() {
        eprintln!("skipped: no {}", exe.display());
        return;
    }
    check_live(exe, exe, 11);
}

#[test]
fn old_and_new_pythons_are_unsupported() {
    for (version, exe, want) in [("2.7.18", "python2.7", "CPython 2.7 is not supported")] {
        let exe = pyenv(version).join("bin").join(exe);
        if !exe.exists() {
            eprintln!("skipped: no {}", exe.display());
            continue;
        }
        let r = python(&exe, IDLE);
        match detect(r.pid()) {
            Found::Unsupported(why) => assert!(why.starts_with(want), "{why}"),
            other => panic!("{}: {other:?}", exe.display()),
        }
    }
}

#[test]
fn a_program_that_is_not_python() {
    let r = run(Path::new("/bin/sh"), &["-c", "echo ready; exec sleep 30"]);
    // `sleep` once exec'd: wait for the shell to be replaced.
    let exe = format!("/proc/{}/exe", r.pid());
    for _ in 0..200 {
        if std::fs::read_link(&exe).is_ok_and(|p| p.ends_with("sleep")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(detect(r.pid()), Found::No);
    // And this test program, which maps no CPython either.
    assert_eq!(detect(std::process::id()), Found::No);
}

#[test]
fn one_interpreter_is_read_once_for_all_its_processes() {
    let dir = pyenv("3.12.1");
    let exe = dir.join("bin/python3.12");
    if !exe.exists() {
        eprintln!("skipped: no {}", exe.display());
        return;
    }
    let (a, b) = (python(&exe, SCRIPT), python(&exe, SCRIPT));
    let mut d = Detector::new();
    let found = |d: &mut Detector, r: &Running| {
        let pid = r.pid();
        let maps = exec_mappings(pid).expect("maps");
        d.detect(pid, &maps, &ProcessMemory { pid })
    };
    let first = found(&mut d, &a);
    let lib = dir.join("lib/libpython3.12.so.1.0");
    let meta = std::fs::metadata(&lib).expect("libpython");
    let key = exec_mappings(b.pid())
        .expect("maps")
        .iter()
        .find(|m| m.backing == Backing::File(lib.to_string_lossy().into_owned()))
        .map(|m| m.dev_ino)
        .expect("libpython mapped");
    assert_eq!(key.1, meta.ino());
    let read = d.objects.get(&key).cloned().expect("libpython read");
    let second = found(&mut d, &b);
    assert!(
        Arc::ptr_eq(&read, &d.objects[&key]),
        "the second process's libpython was not read again"
    );
    let (Found::Yes(p), Found::Yes(q)) = (first, second) else {
        panic!("not both Python");
    };
    assert_eq!(p.layout, q.layout);
    assert_eq!(p.tstate_slot, q.tstate_slot);
}

#[test]
fn names_and_versions() {
    let n = |s: &str| parse_name(s).map(|n| (n.library, n.major, n.minor, n.abiflags));
    assert_eq!(n("python3.11"), Some((false, 3, 11, String::new())));
    assert_eq!(n("python3.8"), Some((false, 3, 8, String::new())));
    assert_eq!(n("python3.13t"), Some((false, 3, 13, "t".into())));
    assert_eq!(n("python3.11d"), Some((false, 3, 11, "d".into())));
    assert_eq!(n("python3.7m"), Some((false, 3, 7, "m".into())));
    assert_eq!(n("python2.7"), Some((false, 2, 7, String::new())));
    assert_eq!(n("python3.12-real"), Some((false, 3, 12, String::new())));
    assert_eq!(
        n("libpython3.12.so.1.0"),
        Some((true, 3, 12, String::new()))
    );
    assert_eq!(n("libpython3.13t.so.1.0"), Some((true, 3, 13, "t".into())));
    assert_eq!(n("libpython3.6m.so"), Some((true, 3, 6, "m".into())));
    for not in [
        "python3",
        "python",
        "python3.",
        "python3.x",
        "python3.11+",
        "libpython3.so",
        "libpython3.11.a",
        "pythonista",
        "python3.1234",
        "ipython3.11",
        "",
    ] {
        assert_eq!(n(not), None, "{not}");
    }
    assert_eq!(refusal(3, 8, ""), None);
    assert_eq!(refusal(3, 13, "m"), None);
    assert_eq!(refusal(3, 15, ""), None);
    for (major, minor, flags, want) in [
        (
            3,
            16,
            "",
            "CPython 3.16 is not supported: flare walks the frames of CPython 3.6 to 3.15",
        ),
        (3, 5, "m", "CPython 3.5 is not supported"),
        (2, 7, "", "CPython 2.7 is not supported"),
        (4, 0, "", "CPython 4.0 is not supported"),
        (
            3,
            13,
            "t",
            "CPython 3.13t is not supported: a free-threaded build",
        ),
        (
            3,
            15,
            "t",
            "CPython 3.15t is not supported: a free-threaded build",
        ),
        (3, 11, "d", "CPython 3.11d is not supported: a debug build"),
    ] {
        let why = refusal(major, minor, flags).expect("refused");
        assert!(why.starts_with(want), "{why}");
    }
    let v = Version::from_hex(0x030b_07f0, "");
    assert_eq!((v.major, v.minor, v.alpha), (3, 11, false));
    assert!(Version::from_hex(0x030e_00a1, "").alpha);
    let rc = Version::from_hex(0x030f_00c1, "");
    assert!(rc.pre_release && !rc.alpha);
    assert!(!Version::from_hex(0x030f_02f0, "").pre_release);
}

#[test]
fn symbols_naming_one_huge_string_are_passed_over() {
    // 2,000 symbols all naming one 1 MB string (no NUL in reach), then
    // `_PyRuntime`: the scan looks a bounded way for each name's end.
    let mut strs = vec![0u8];
    strs.extend(b"_PyRuntime\0");
    let huge = strs.len() as u32;
    strs.extend(std::iter::repeat_n(b'A', 1 << 20));
    strs.push(0);
    let entry = |name: u32, value: u64| {
        let mut e = vec![0u8; 24];
        e[0..4].copy_from_slice(&name.to_le_bytes());
        e[6..8].copy_from_slice(&1u16.to_le_bytes());
        e[8..16].copy_from_slice(&value.to_le_bytes());
        e
    };
    let mut syms: Vec<u8> = (0..2000).flat_map(|i| entry(huge, i)).collect();
    syms.extend(entry(1, 0x4000));
    let mut seen = Vec::new();
    crate::elf::each_symbol(crate::elf::Layout::HOST, &syms, &strs, |s| {
        seen.push((s.name.to_vec(), s.value))
    });
    assert_eq!(seen, vec![(b"_PyRuntime".to_vec(), 0x4000)]);
    let mut found = Symbols::default();
    scan_symbols(&syms, &strs, &mut found);
    assert_eq!(found.runtime.map(|s| s.value), Some(0x4000));
}

#[test]
fn outlined_parts_of_the_eval_loop() {
    let s = |value, size| Sym { value, size };
    assert_eq!(cold_part(&[]), None);
    assert_eq!(cold_part(&[s(0x100, 8)]), Some(s(0x100, 8)));
    assert_eq!(
        cold_part(&[s(0x200, 8), s(0x100, 8)]),
        Some(s(0x100, 0x108))
    );
    assert_eq!(
        cold_part(&[s(0x100, 8), s(0x10_0000, 0x40)]),
        Some(s(0x10_0000, 0x40))
    );
}

#[test]
fn garbage_files_are_not_objects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).expect("write");
        File::open(p).expect("open")
    };
    assert!(read_object(&write("empty", b""), true).is_none());
    assert!(read_object(&write("text", b"#!/bin/sh\necho hi\n"), true).is_none());
    // An ELF header whose tables lie past the end of the file.
    let mut h = vec![0u8; 64];
    h[..6].copy_from_slice(b"\x7fELF\x02\x01");
    h[16] = 3;
    h[18] = 62;
    h[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
    h[40..48].copy_from_slice(&0x1000u64.to_le_bytes());
    h[54] = 56;
    h[56] = 0xff;
    h[58] = 64;
    h[60] = 0xff;
    assert!(read_object(&write("cut", &h), true).is_none());
    // A real library cut short: whatever is read, nothing panics.
    let lib = "/lib/x86_64-linux-gnu/libc.so.6";
    if let Ok(d) = std::fs::read(lib) {
        for len in [64, 4096, d.len() / 2] {
            let _ = read_object(&write("part", &d[..len]), true);
        }
        let whole = read_object(&write("libc", &d), true).expect("libc");
        assert!(whole.symbols.runtime.is_none());
        assert!(whole.segments.iter().any(|s| s.executable));
    }
    // Symbol entries and names out of bounds.
    let mut syms = vec![0u8; 24 * 3];
    syms[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    syms[24..28].copy_from_slice(&5u32.to_le_bytes());
    syms[30] = 1;
    let mut out = Symbols::default();
    scan_symbols(&syms, b"\0xx\0\0_PyRuntime", &mut out);
    assert_eq!(out.runtime, None, "a name without its NUL is not the name");
    scan_symbols(&syms[..30], b"\0xx\0\0_PyRuntime\0", &mut out);
    assert_eq!(out.runtime, None);
    scan_symbols(&syms, b"\0xx\0\0_PyRuntime\0", &mut out);
    assert_eq!(out.runtime, Some(Sym { value: 0, size: 0 }));
}

#[test]
fn arm64_waits_for_the_loader_to_map_libc() {
    let map = |path: &str| ExecMapping {
        start: 0x1000,
        end: 0x2000,
        offset: 0,
        backing: Backing::File(path.into()),
        dev_ino: (1, 2),
        opened: None,
    };
    let mut d = Detector::new();
    let arm64 = Machine::Aarch64;
    let python = map("/usr/bin/python3.11");
    // Sampled as it starts: glibc's loader, no libc yet.
    let starting = [python.clone(), map("/lib/ld-linux-aarch64.so.1")];
    assert_eq!(d.thread_pointer_offset(arm64, 1, &starting), Ok(None));
    // No glibc loader, no libc: not glibc.
    let musl = [python.clone(), map("/lib/ld-musl-aarch64.so.1")];
    assert!(d.thread_pointer_offset(arm64, 1, &musl).is_err());
    // A libc without the size (here a file that is not there).
    let other = [python.clone(), map("/nowhere/libc.so.6")];
    assert!(d.thread_pointer_offset(arm64, 1, &other).is_err());
    // The host's libc (its size, whichever machine reads it).
    let libc = if cfg!(target_arch = "aarch64") {
        "/lib/aarch64-linux-gnu/libc.so.6"
    } else {
        "/lib/x86_64-linux-gnu/libc.so.6"
    };
    let glibc = [python.clone(), map(libc)];
    let me = std::process::id();
    assert!(matches!(
        d.thread_pointer_offset(arm64, me, &glibc),
        Ok(Some(0x100..=0xffff))
    ));
    // x86-64 needs none of it.
    assert_eq!(
        d.thread_pointer_offset(Machine::X86_64, 1, &musl),
        Ok(Some(0))
    );
}

#[test]
fn maps_of_files_that_are_not_there() {
    let m = ExecMapping {
        start: 0x1000,
        end: 0x2000,
        offset: 0,
        backing: Backing::File("/nowhere/libpython3.12.so.1.0".into()),
        dev_ino: (1, 2),
        opened: None,
    };
    let mem = Buffer::default();
    assert_eq!(Detector::new().detect(u32::MAX, &[m], &mem), Found::No);
}

/// A made-up 3.12 process in one buffer: `_PyRuntime`, an interpreter,
/// thread states and glibc `struct pthread`s whose thread-specific block
/// is at `specific` (not glibc 2.36's).
struct Fake {
    mem: Buffer,
    layout: Layout,
    runtime: u64,
}

const BASE: u64 = 0x10_0000;
const KEY: u64 = 3;

impl Fake {
    fn put(&mut self, at: u64, v: u64) {
        let i = (at - BASE) as usize;
        self.mem.bytes[i..i + 8].copy_from_slice(&v.to_ne_bytes());
    }

    fn put_u32(&mut self, at: u64, v: u32) {
        let i = (at - BASE) as usize;
        self.mem.bytes[i..i + 4].copy_from_slice(&v.to_ne_bytes());
    }

    /// Thread states T1, T2 (threads P1, P2) and T3: one made for P1 it
    /// has not taken up; T4 of a thread gone (its memory unmapped).
    fn new(specific: u64) -> Fake {
        let layout = layout::for_version(12).expect("3.12");
        let mut f = Fake {
            mem: Buffer {
                base: BASE,
                bytes: vec![0; 0x10000],
            },
            runtime: BASE,
            layout,
        };
        let l = f.layout.clone();
        let tss = BASE + u64::from(l.runtime_autotss.expect("autoTSSkey"));
        f.put_u32(tss, 1);
        f.put_u32(tss + 4, KEY as u32);
        let interp = BASE + 0x1000;
        f.put(BASE + u64::from(l.runtime_interpreters_head), interp);
        let (t1, t2, t3, t4) = (BASE + 0x2000, BASE + 0x2400, BASE + 0x2800, BASE + 0x2c00);
        let (p1, p2) = (BASE + 0x4000, BASE + 0x6000);
        f.put(interp + u64::from(l.interp_threads_head), t1);
        for (t, next, id) in [
            (t1, t2, p1),
            (t2, t3, p2),
            (t3, t4, p1),
            (t4, 0, 0x7fff_0000_0000),
        ] {
            f.put(t + u64::from(l.tstate_next), next);
            f.put(t + u64::from(l.tstate_thread_id), id);
        }
        let rel = 16 * KEY + 8;
        f.put(p1 + specific + rel, t1);
        f.put(p2 + specific + rel, t2);
        // A decoy: T1 at a lower offset, but junk there for P2.
        f.put(p1 + 0x200 + rel, t1);
        f.put(p2 + 0x200 + rel, 0xdead_beef);
        f
    }

    fn slot(&self, maps: &[ExecMapping]) -> Result<u64, Detected> {
        tstate_slot(&self.layout, self.runtime, maps, &self.mem)
    }
}

#[test]
fn the_slot_is_learnt_from_the_threads() {
    let rel = 16 * KEY + 8;
    assert_eq!(
        Fake::new(GLIBC_SPECIFIC).slot(&[]),
        Ok(GLIBC_SPECIFIC + rel)
    );
    assert_eq!(Fake::new(0x2c0).slot(&[]), Ok(0x2c0 + rel));
}

#[test]
fn the_slot_must_agree_for_every_thread() {
    // P2's slot holds a thread state of another thread.
    let mut f = Fake::new(0x2c0);
    f.put(BASE + 0x6000 + 0x2c0 + 16 * KEY + 8, BASE + 0x2000);
    assert_eq!(f.slot(&[]), Err(Found::NotReady));
    // Nowhere at all (not glibc): musl says so, else try later.
    let mut f = Fake::new(0x2c0);
    for p in [BASE + 0x4000, BASE + 0x6000] {
        for off in [0x200, 0x2c0] {
            f.put(p + off + 16 * KEY + 8, 0);
        }
    }
    assert_eq!(f.slot(&[]), Err(Found::NotReady));
    let musl = ExecMapping {
        start: 0x1000,
        end: 0x2000,
        offset: 0,
        backing: Backing::File("/lib/ld-musl-x86_64.so.1".into()),
        dev_ino: (1, 2),
        opened: None,
    };
    assert!(matches!(f.slot(&[musl]), Err(Found::Unsupported(w)) if w.contains("musl")));
}

#[test]
fn a_runtime_not_set_up_is_not_ready() {
    let l = layout::for_version(12).expect("3.12");
    let tss = BASE + u64::from(l.runtime_autotss.expect("autoTSSkey"));
    let mut f = Fake::new(GLIBC_SPECIFIC);
    f.put_u32(tss, 0);
    assert_eq!(f.slot(&[]), Err(Found::NotReady));
    let mut f = Fake::new(GLIBC_SPECIFIC);
    f.put_u32(tss + 4, 40);
    assert!(matches!(f.slot(&[]), Err(Found::Unsupported(w)) if w.contains("key 40")));
    let mut f = Fake::new(GLIBC_SPECIFIC);
    f.put(BASE + u64::from(l.runtime_interpreters_head), 0);
    assert_eq!(f.slot(&[]), Err(Found::NotReady));
    let mut f = Fake::new(GLIBC_SPECIFIC);
    f.put(BASE + 0x1000 + u64::from(l.interp_threads_head), 0);
    assert_eq!(f.slot(&[]), Err(Found::NotReady));
    // Thread states bound to no thread yet.
    let mut f = Fake::new(GLIBC_SPECIFIC);
    for t in [0x2000, 0x2400, 0x2800, 0x2c00] {
        f.put(BASE + t + u64::from(l.tstate_thread_id), 0);
    }
    assert_eq!(f.slot(&[]), Err(Found::NotReady));
    // A cycle of thread states ends the walk.
    let mut f = Fake::new(GLIBC_SPECIFIC);
    f.put(BASE + 0x2c00 + u64::from(l.tstate_next), BASE + 0x2000);
    assert_eq!(f.slot(&[]), Ok(GLIBC_SPECIFIC + 16 * KEY + 8));
    // Memory that is not there.
    let f = Fake {
        mem: Buffer::default(),
        ..Fake::new(GLIBC_SPECIFIC)
    };
    assert_eq!(f.slot(&[]), Err(Found::NotReady));
}

#[test]
fn libc_says_how_large_its_struct_pthread_is() {
    // arm64 finds thread states below the thread pointer by this size
    // (glibc's _thread_db_sizeof_pthread): read here from the host's libc,
    // whose value readelf and the file agree on (x86-64 2.36: 0x940; arm64
    // 2.36: 0x740).
    let lib = if cfg!(target_arch = "aarch64") {
        "/lib/aarch64-linux-gnu/libc.so.6"
    } else {
        "/lib/x86_64-linux-gnu/libc.so.6"
    };
    let file = std::fs::File::open(lib).expect("the host's libc");
    let o = read_object(&file, false).expect("libc reads");
    let size = o.pthread_size.expect("_thread_db_sizeof_pthread");
    assert!(
        (0x100..0x10000).contains(&size) && size % 64 == 0,
        "sizeof(struct pthread) = {size:#x}"
    );
    if cfg!(target_arch = "x86_64") {
        assert_eq!(size, 0x940, "Debian 12's glibc 2.36");
    }
}
