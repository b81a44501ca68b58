//! The namer against live Node.js 20, 22, 24 and 26 processes: the
//! functions of live_tests.rs's scripts named from their shared function
//! infos as each kind of frame gives them (name, file, the line they
//! start on); the bytecode positions of a function checked against what
//! `--print-bytecode` lists; and what is not a frame's any more (a
//! process gone, an object of another type) naming nothing.

use crate::collect::Namer;
use crate::runtime::memory::ProcessMemory;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::*;
use crate::runtime::tracker::Found;
use crate::runtime::v8::detect::Detector;
use crate::runtime::v8::live_tests::{
    host_node, main_js, run, start, Running, FUNCTIONS, MAIN, MODULE, MODULE_MJS, OTHER, OTHER_JS,
};
use crate::unwind::procs::exec_mappings;

/// Frames the tests make carry the test runtime's type.
const RUNTIME: Runtime = Runtime::Test;

/// The namer of `running`'s process, and that process.
fn namer_of(running: &Running) -> (V8Namer, Arc<Process>) {
    let pid = running.child.id();
    let maps = exec_mappings(pid).expect("its mappings");
    let process = match Detector::new().detect(pid, &maps, &ProcessMemory { pid }) {
        Found::Yes(p) => Arc::new(p),
        other => panic!("not detected: {other:?}"),
    };
    let registry: Registry = Arc::new(Mutex::new(HashMap::from([(pid, Arc::clone(&process))])));
    (V8Namer::new(registry, RUNTIME), process)
}

fn frame(kind: Kind, sfi: u64, offset: u32, cookie: u64) -> RuntimeFrame {
    RuntimeFrame {
        runtime: RUNTIME,
        ids: FrameId {
            kind,
            sfi,
            offset: offset.into(),
        }
        .encode(),
        cookie,
    }
}

/// (name, file, line) of a named frame.
fn named(frames: Option<Vec<Frame>>) -> Option<(String, Option<String>, Option<u32>)> {
    let [f] = frames?.try_into().ok()?;
    let source = f.source.as_deref();
    Some((
        f.name.to_string(),
        source.map(|s| s.file.to_string()),
        source.and_then(|s| s.line),
    ))
}

/// The 1-based line of `marker` in `text`.
fn line_of(text: &str, marker: &str) -> u32 {
    let at = text.find(marker).unwrap_or_else(|| panic!("{marker}"));
    text[..at].matches('\n').count() as u32 + 1
}

fn check(major: u8) {
    let Some(node) = host_node(major) else {
        return;
    };
    let running = start(&node);
    let pid = running.child.id();
    let (mut namer, process) = namer_of(&running);
    let v = process.layout.version;
    let dir = std::fs::canonicalize(running.dir.path()).expect("its directory");
    let path = |f: &str| dir.join(f).display().to_string();
    // The ES module is named by URL, given as its path.
    let files = [
        (path("main.js"), main_js()),
        (path("other.js"), OTHER_JS.to_string()),
        (path("module.mjs"), MODULE_MJS.to_string()),
    ];
    assert_eq!((MAIN, OTHER, MODULE), (0, 1, 2));
    for ((what, name, marker, file), p) in FUNCTIONS.iter().zip(&running.printed) {
        let (file, text) = &files[*file];
        // A function never called is not compiled: no scope info, no
        // start.
        let line = (!p.code_kind.contains("CompileLazy")).then(|| line_of(text, marker));
        let want = Some((name.to_string(), Some(file.clone()), line));
        let by_function = frame(Kind::Function, p.shared, 0, 0);
        assert_eq!(named(namer.name(pid, &by_function)), want, "{v} {what}");
        // Compiled, at its code's start (the trampoline's, when
        // interpreted: a Code all the same).
        let compiled = frame(Kind::Compiled, p.shared, 0, p.code);
        let frames = namer.name(pid, &compiled).expect("named");
        assert_eq!(frames[0].kind, FrameKind::Jit, "{v} {what}");
        assert_eq!(named(Some(frames)), want, "{v} {what}");
        // Past its code's end: not the code BPF saw.
        let past = frame(Kind::Compiled, p.shared, 1 << 24, p.code);
        assert_eq!(namer.name(pid, &past), None, "{v} {what}");
        // Interpreted: a line of the function's own.
        if let Some(ba) = p.bytecode {
            let interpreted = frame(Kind::Interpreted, p.shared, slot(&process, 0), ba);
            let frames = namer.name(pid, &interpreted).expect("named");
            assert_eq!(frames[0].kind, FrameKind::Interpreted, "{v} {what}");
            let (n, f, l) = named(Some(frames)).expect("one frame");
            assert_eq!((n, f), (name.to_string(), Some(file.clone())), "{v} {what}");
            let first = line.expect("compiled");
            assert!(
                (first..first + 3).contains(&l.expect("a line")),
                "{v} {what}: {l:?} from {first}"
            );
            // The code as the cookie: not the bytecode BPF saw, so the
            // function at its own line.
            let wrong = frame(Kind::Interpreted, p.shared, slot(&process, 0), p.code);
            assert_eq!(named(namer.name(pid, &wrong)), want, "{v} {what}");
        }
        // The function itself where its shared info should be.
        assert_eq!(
            namer.name(pid, &frame(Kind::Function, p.function, 0, 0)),
            None
        );
    }
    // `path.join`: node's own script.
    let join = running.printed.last().expect("join").shared;
    let (n, f, _) = named(namer.name(pid, &frame(Kind::Function, join, 0, 0))).unwrap();
    assert_eq!((n.as_str(), f.as_deref()), ("join", Some("node:path")));
    // Another runtime's frame, an unknown kind, an unknown process.
    let other = RuntimeFrame {
        runtime: Runtime::Java,
        ..frame(Kind::Function, join, 0, 0)
    };
    assert_eq!(namer.name(pid, &other), None);
    let bad_kind = RuntimeFrame {
        ids: [join, 9 << 56],
        ..other
    };
    assert_eq!(
        namer.name(
            pid,
            &RuntimeFrame {
                runtime: RUNTIME,
                ..bad_kind
            }
        ),
        None
    );
    assert_eq!(
        namer.name(pid + 1, &frame(Kind::Function, join, 0, 0)),
        None
    );
    // The process gone (still in the registry): nothing.
    drop(running);
    assert_eq!(namer.name(pid, &frame(Kind::Function, join, 0, 0)), None);
}

#[test]
fn node20_frames_are_named() {
    check(20);
}

#[test]
fn node22_frames_are_named() {
    check(22);
}

#[test]
fn node24_frames_are_named() {
    check(24);
}

#[test]
fn node26_frames_are_named() {
    check(26);
}

/// A function of several statements, each on its line.
const WORK: &str = r#"function work(n) {
  let s = 0;
  for (let i = 0; i < n; i++) {
    s += i * 2;
  }
  if (s > 10) {
    s = s - 1;
  }
  return s;
}
for (let k = 0; k < 3; k++) work(5);
%DebugPrint(work);
require("fs").writeSync(1, "READY\n");
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
"#;

/// (bytecode offset, source position printed there if any, address)
/// of each bytecode `--print-bytecode` lists (`   28 S> 0x... @    0 :
/// ...`).
fn listing(lines: &[String]) -> Vec<(u32, Option<u32>, u64)> {
    lines
        .iter()
        .filter_map(|l| {
            let (left, right) = l.split_once(" @ ")?;
            let offset = right.split(':').next()?.trim().parse().ok()?;
            let mut words = left.split_whitespace();
            let marked = left.contains(" S> ") || left.contains(" E> ");
            let position = marked.then(|| words.next()?.parse().ok()).flatten();
            let address = words.last()?.strip_prefix("0x")?;
            Some((offset, position, u64::from_str_radix(address, 16).ok()?))
        })
        .collect()
}

fn check_positions(major: u8) {
    let Some(node) = host_node(major) else {
        return;
    };
    let args = ["--print-bytecode", "--print-bytecode-filter=work"];
    let running = run(&node, &args, &[("main.js", WORK.to_string())]);
    let pid = running.child.id();
    let (mut namer, process) = namer_of(&running);
    let v = process.layout.version;
    let work = &running.printed[0];
    let ba = work.bytecode.expect("work's bytecode");
    let listed = listing(&running.lines);
    assert!(listed.len() > 10, "{v}: {listed:?}");
    // The table as V8 prints it, entry for entry.
    let mem = ProcessMemory { pid };
    let heap = Heap::new(&process.layout, &mem);
    let positions = heap.bytecode_positions(ba).expect("its positions");
    let marked: Vec<(u32, u32)> = listed
        .iter()
        .filter_map(|&(o, p, _)| Some((o, p?)))
        .collect();
    assert_eq!(positions.entries(), &marked[..], "{v}");
    // Each bytecode's line: its position's, or the one before it.
    let mut last = None;
    for &(offset, position, address) in &listed {
        // The frame's slot would hold it from the array's tagged address.
        let in_frame = address as i64 - ba as i64;
        let layout = &process.layout;
        assert_eq!(bytecode_offset(layout, in_frame), Some(offset), "{v}");
        last = position.or(last);
        let want = last.map(|p| WORK[..p as usize].matches('\n').count() as u32 + 1);
        let f = frame(Kind::Interpreted, work.shared, slot(&process, offset), ba);
        let (name, _, line) = named(namer.name(pid, &f)).expect("named");
        assert_eq!(name, "work");
        // Before the first position: the line the function starts on.
        assert_eq!(line, want.or(Some(1)), "{v}: bytecode {offset}");
    }
    let lines: Vec<u32> = [2, 3, 4, 6, 7, 9]
        .into_iter()
        .filter(|l| {
            listed.iter().any(|&(o, _, _)| {
                let f = frame(Kind::Interpreted, work.shared, slot(&process, o), ba);
                named(namer.name(pid, &f)).and_then(|n| n.2) == Some(*l)
            })
        })
        .collect();
    assert_eq!(
        lines,
        [2, 3, 4, 6, 7, 9],
        "{v}: every statement's line is met"
    );
    // Past the bytecodes (a slot compiled code reused): the function at
    // its own line.
    let past = frame(Kind::Interpreted, work.shared, slot(&process, 1 << 20), ba);
    let start = frame(Kind::Function, work.shared, 0, 0);
    assert_eq!(
        named(namer.name(pid, &past)),
        named(namer.name(pid, &start)),
        "{v}"
    );
}

/// What an interpreted frame's bytecode offset slot holds at bytecode
/// `offset` (BPF passes it as it is).
fn slot(process: &Process, offset: u32) -> u32 {
    offset + process.layout.bytecode_array_data as u32 - 1
}

#[test]
fn node20_bytecode_lines() {
    check_positions(20);
}

#[test]
fn node22_bytecode_lines() {
    check_positions(22);
}

#[test]
fn node24_bytecode_lines() {
    check_positions(24);
}

#[test]
fn node26_bytecode_lines() {
    check_positions(26);
}

#[test]
fn frame_ids_round_trip() {
    for kind in [Kind::Interpreted, Kind::Compiled, Kind::Function] {
        let id = FrameId {
            kind,
            sfi: 0x1234_5678_9ab1,
            offset: 0xabcd,
        };
        assert_eq!(FrameId::decode(id.encode()), Some(id));
    }
    // A pc in other code: 56 bits of it.
    let elsewhere = FrameId {
        kind: Kind::Elsewhere,
        sfi: 0x1234_5678_9ab1,
        offset: 0x7f12_3456_789a,
    };
    assert_eq!(FrameId::decode(elsewhere.encode()), Some(elsewhere));
    assert_eq!(FrameId::decode([1, 0]), None);
    assert_eq!(FrameId::decode([1, 5 << 56]), None);
    // An offset past 32 bits is no offset BPF writes.
    assert_eq!(FrameId::decode([1, 1 << 56 | 1 << 40]), None);
    assert_eq!(FrameId::decode([1, 2 << 56 | 1 << 40]), None);
}

#[test]
fn module_urls_are_named_by_their_paths() {
    assert_eq!(file_name("file:///srv/app/main.mjs"), "/srv/app/main.mjs");
    assert_eq!(
        file_name("file:///srv/my%20app/%C3%A9.mjs"),
        "/srv/my app/é.mjs"
    );
    // Escapes that are not, or do not make UTF-8: as they are.
    assert_eq!(file_name("file:///a%2/b%zz%+f"), "/a%2/b%zz%+f");
    assert_eq!(file_name("file:///a%ff"), "/a%ff");
    assert_eq!(file_name("/srv/app/main.js"), "/srv/app/main.js");
    assert_eq!(file_name("node:internal/main"), "node:internal/main");
    assert!(Path::new(&file_name("file:///x")).is_absolute());
}
