//! Code objects of live interpreters, read as the namer reads them: each
//! pyenv CPython present (3.8–3.13) and Debian sid's 3.14 and 3.15 run a script that prints what it
//! knows of its own code objects (addresses, names, first lines, flags,
//! and the line of every code unit by `co_lines()` or
//! `dis.findlinestarts`), and the test reads them through
//! `process_vm_readv` with the version's [`layout`] and compares. A
//! missing interpreter is skipped, unless `FLARE_REQUIRE_BPF=1` (then one
//! that is there must run).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::code::read_code;
use super::layout::{self, Layout};
use super::namer::PythonNamer;
use super::{cookie, FrameModel, Process};
use crate::collect::{Namer, Runtime, RuntimeFrame};
use crate::profile::FrameKind;
use crate::runtime::memory::{Buffer, Memory, ProcessMemory};

/// The script: functions of every kind of name and line table the
/// decoder meets (a method and a closure for qualified names; latin-1,
/// BMP and astral names for each string kind; a jump of 300 lines for
/// multi-entry and varint line deltas; loops for negative ones), then the
/// facts about their code objects, then a wait for stdin to close.
fn script() -> String {
    let far_gap = "\n".repeat(300);
    format!(
        r#"import dis, json, sys

class Box:
    def method(self, a, b=2):
        x = a + b
        return x

def outer(n):
    def inner(k):
        return k * n
    return inner

def größe(x, *args, **kw):
    y = x
    return y

def 大小(a):
    return a

def 𠀀𠀁(a, b):
    return a, b

def loop(n):
    t = 0
    for i in range(n):
        if i % 2:
            t += i
        else:
            t -= 1
    while t > 0:
        t -= 3
    return t

def spread(a,
           b):
    return (a +
            b)

def guarded(a):
    try:
        return 1 / a
    except ZeroDivisionError:
        return None
    finally:
        a = 0

def gen():
    yield 1
    yield 2

def caught(x):
    try:
        pass
    except ValueError as e:
        x = e
    return x

async def waiting(x):
    async with x:
        await x

def far(a):
    x = a
{far_gap}
    return x

def rows(code):
    out = []
    if hasattr(code, "co_lines"):
        for start, end, line in code.co_lines():
            for off in range(start, end, 2):
                out.append([off, line])
    else:
        starts = list(dis.findlinestarts(code))
        line = None
        j = 0
        for off in range(0, len(code.co_code), 2):
            while j < len(starts) and starts[j][0] <= off:
                line = starts[j][1]
                j += 1
            out.append([off, line])
    return out

funcs = [Box.method, outer(3), größe, 大小, 𠀀𠀁, loop, spread, guarded, gen, caught, waiting, far, lambda q: q]
codes = [f.__code__ for f in funcs] + [sys._getframe().f_code]
print(json.dumps({{
    "code_type": id(type(codes[0])),
    "codes": [{{
        "id": id(c),
        "name": getattr(c, "co_qualname", c.co_name),
        "filename": c.co_filename,
        "firstlineno": c.co_firstlineno,
        "argcount": c.co_argcount,
        "flags": c.co_flags,
        "rows": rows(c),
    }} for c in codes],
}}))
sys.stdout.flush()
sys.stdin.read()
"#
    )
}

/// The qualified names the script's code objects have on 3.11+ (before,
/// the bare names).
const QUALNAMES: [&str; 14] = [
    "Box.method",
    "outer.<locals>.inner",
    "größe",
    "大小",
    "𠀀𠀁",
    "loop",
    "spread",
    "guarded",
    "gen",
    "caught",
    "waiting",
    "far",
    "<lambda>",
    "<module>",
];

fn required() -> bool {
    std::env::var("FLARE_REQUIRE_BPF").as_deref() == Ok("1")
}

/// A running interpreter, ended when dropped.
struct Running {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts pyenv's `version` (or Debian sid's 3.`minor` for `sid`) on the
/// script and returns what it printed; `None` (the test skipped) when
/// that version is not installed.
fn start(version: &str, minor: u8) -> Option<(Running, Value)> {
    let python = if version == "sid" {
        crate::testutil::sid_python(minor)?
    } else {
        let root = Path::new("/root/.pyenv/versions").join(version);
        if !root.is_dir() {
            eprintln!("skipped: no {}", root.display());
            return None;
        }
        root.join(format!("bin/python3.{minor}"))
    };
    let dir = tempfile::tempdir().unwrap();
    // A latin-1 file name: the file name is a compact non-ASCII string.
    let path = dir.path().join("prøbe.py");
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(script().as_bytes()))
        .unwrap();
    let child = Command::new(&python)
        .arg("-I")
        .arg(&path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if !required() => {
            eprintln!("skipped: {} does not start: {e}", python.display());
            return None;
        }
        Err(e) => panic!("{} does not start: {e}", python.display()),
    };
    let stdout = child.stdout.take().unwrap();
    let running = Running { child, _dir: dir };
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{version} printed {line:?}: {e}"));
    Some((running, value))
}

/// `ids[1]` as BPF reads it for the instruction at byte `offset` into
/// the bytecode of the code object at `code`.
fn instr(layout: &Layout, code: u64, offset: u64) -> u64 {
    match (layout.model, layout.version) {
        (FrameModel::Object, (3, 10)) => offset / 2,
        (FrameModel::Object, _) => offset,
        _ => {
            let instr_ptr = code + u64::from(layout.code_adaptive.unwrap()) + offset;
            instr_ptr.wrapping_sub(code)
        }
    }
}

/// Checks every code object the script printed, read through the
/// process's memory, and the namer on them.
fn check(version: &str, minor: u8) {
    let Some((running, facts)) = start(version, minor) else {
        return;
    };
    let pid = running.child.id();
    let layout = layout::for_version(minor).unwrap();
    let mem = ProcessMemory { pid };
    let code_type = facts["code_type"].as_u64().unwrap();
    let codes = facts["codes"].as_array().unwrap();
    let mut no_line = 0;
    assert_eq!(codes.len(), QUALNAMES.len());
    let process = Arc::new(Process {
        layout: Arc::new(layout.clone()),
        runtime: 0,
        code_type,
        eval: [0..0, 0..0],
        tstate_slot: 0,
    });
    let registry = Arc::new(Mutex::new(HashMap::from([(pid, process)])));
    let mut namer = PythonNamer::new(registry);

    for (c, qualname) in codes.iter().zip(QUALNAMES) {
        let addr = c["id"].as_u64().unwrap();
        let field = |k: &str| u32::try_from(c[k].as_u64().unwrap()).unwrap();
        let info =
            read_code(&mem, &layout, code_type, addr).unwrap_or_else(|| panic!("{version}: {c}"));
        let name = if minor >= 11 {
            qualname
        } else {
            qualname.rsplit('.').next().unwrap()
        };
        assert_eq!(info.name, name, "{version}");
        assert_eq!(info.name, c["name"].as_str().unwrap(), "{version}");
        assert_eq!(info.filename, c["filename"].as_str().unwrap(), "{version}");
        assert!(
            info.filename.ends_with("/prøbe.py"),
            "{version}: {}",
            info.filename
        );
        assert_eq!(info.firstlineno, field("firstlineno"), "{version} {name}");
        let expected_cookie = cookie(field("argcount"), field("flags"), field("firstlineno"));
        assert_eq!(info.cookie, expected_cookie, "{version} {name}");

        let rows = c["rows"].as_array().unwrap();
        assert!(!rows.is_empty(), "{version} {name}");
        for row in rows {
            let offset = row[0].as_u64().unwrap();
            let line = row[1].as_u64().map(|l| u32::try_from(l).unwrap());
            no_line += usize::from(line.is_none());
            let got = info.line(instr(&layout, addr, offset));
            assert_eq!(got, line, "{version} {name}: line of byte {offset}");
        }
        // A frame that has not started: f_lasti -1 gives the first line
        // (3.8–3.10); 3.11/3.12's pointer one unit before the start counts
        // as the first instruction.
        if layout.model == FrameModel::Object {
            assert_eq!(
                info.line(0xffff_ffff),
                Some(info.firstlineno),
                "{version} {name}"
            );
        } else {
            let before = instr(&layout, addr, 0).wrapping_sub(2);
            assert_eq!(
                info.line(before),
                info.line(instr(&layout, addr, 0)),
                "{version} {name}"
            );
        }

        // What is not this code object, of this type, is refused.
        assert!(read_code(&mem, &layout, code_type + 16, addr).is_none());
        assert!(read_code(&mem, &layout, code_type, addr + 8).is_none());
        assert!(read_code(&mem, &layout, code_type, addr ^ (1 << 46)).is_none());

        // The namer: the name, file and line of a frame; nothing for a
        // frame whose cookie is not the code object's, or of a process or
        // runtime it does not know.
        let (offset, line) = rows
            .last()
            .map(|r| (r[0].as_u64().unwrap(), r[1].as_u64()))
            .unwrap();
        let frame = RuntimeFrame {
            runtime: Runtime::Python,
            ids: [addr, instr(&layout, addr, offset)],
            cookie: expected_cookie,
        };
        let named = namer.name(pid, &frame).unwrap();
        assert_eq!(named.len(), 1);
        // `name (dir/file.py:DEFLINE)`: the file's last two parts.
        let file = std::path::Path::new(&info.filename);
        let short = format!(
            "{}/{}",
            file.parent()
                .and_then(|d| d.file_name())
                .unwrap()
                .to_string_lossy(),
            file.file_name().unwrap().to_string_lossy()
        );
        assert_eq!(
            &*named[0].name,
            format!("{name} ({short}:{})", info.firstlineno)
        );
        assert_eq!(named[0].kind, FrameKind::Interpreted);
        let source = named[0].source.as_ref().unwrap();
        assert_eq!(&*source.file, info.filename);
        assert_eq!(source.line.map(u64::from), line);
        let stale = RuntimeFrame {
            cookie: expected_cookie ^ (1 << 32),
            ..frame
        };
        assert!(namer.name(pid, &stale).is_none());
        assert!(namer.name(pid + 1, &frame).is_none());
        let java = RuntimeFrame {
            runtime: Runtime::Java,
            ..frame
        };
        assert!(namer.name(pid, &java).is_none());
        // Again, from what it read once.
        assert_eq!(namer.name(pid, &frame).unwrap(), named);
    }

    // 3.10+ tables mark code without a line (`except ... as`'s cleanup,
    // an async function's start): the decoder met some.
    assert!(minor < 10 || no_line > 0, "{version}");

    // Garbage: the process's own memory read from anywhere near the code
    // objects, taking whatever lies 8 bytes in as the type.
    let first = codes[0]["id"].as_u64().unwrap();
    for addr in (first.saturating_sub(4096)..first + 4096).step_by(8) {
        if let Ok(t) = mem.read_u64(addr + 8) {
            let _ = read_code(&mem, &layout, t, addr).map(|i| i.line(addr));
        }
    }
    drop(running);
}

#[test]
fn reads_code_objects_of_python_3_8() {
    check("3.8.18", 8);
}

#[test]
fn reads_code_objects_of_python_3_6() {
    check("3.6.15", 6);
}

#[test]
fn reads_code_objects_of_python_3_7() {
    check("3.7.16", 7);
}

#[test]
fn reads_code_objects_of_python_3_9() {
    check("3.9.18", 9);
}

#[test]
fn reads_code_objects_of_python_3_10() {
    check("3.10.13", 10);
}

#[test]
fn reads_code_objects_of_python_3_11() {
    check("3.11.7", 11);
}

#[test]
fn reads_code_objects_of_python_3_12() {
    check("3.12.1", 12);
}

#[test]
fn reads_code_objects_of_python_3_13() {
    check("3.13.0", 13);
}

#[test]
fn reads_code_objects_of_python_3_14() {
    check("sid", 14);
}

#[test]
fn reads_code_objects_of_python_3_15() {
    check("sid", 15);
}

/// A small xorshift generator: random bytes without a dependency.
fn random_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn random_memory_gives_none_or_something_never_a_panic() {
    for minor in 6..=15 {
        let layout = layout::for_version(minor).unwrap();
        for seed in 0..64u64 {
            let mut bytes = random_bytes(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), 1 << 14);
            // Pointers back into the buffer, so reads go on past the
            // header: every 8-byte word at a multiple of 64 points inside.
            let base = 0x5000_0000u64;
            for at in (0..bytes.len()).step_by(64) {
                let target = base + (u64::from(bytes[at]) << 6);
                bytes[at..at + 8].copy_from_slice(&target.to_ne_bytes());
            }
            let mem = Buffer { base, bytes };
            for code in (base..base + (1 << 14)).step_by(56) {
                let code_type = mem.read_u64(code + 8).unwrap_or(0);
                if let Some(info) = read_code(&mem, &layout, code_type, code) {
                    for instr in [0, 1, 2, 0xffff_ffff, u64::MAX, code, 1 << 40] {
                        let _ = info.line(instr);
                    }
                }
                assert!(read_code(&mem, &layout, code_type ^ 1, code).is_none());
            }
        }
    }
}
