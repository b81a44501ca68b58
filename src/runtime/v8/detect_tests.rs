//! Detection against live Node.js 20, 22, 24 and 26 processes (their
//! builtins where V8 runs them, their dispatch tables leading to the code
//! `%DebugPrint` shows, the record BPF reads), against processes that are
//! not V8 or whose V8 flare refuses (small programs built here), and the
//! mapping and memory logic on made-up processes.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::*;
use crate::runtime::memory::{Buffer, ProcessMemory};
use crate::runtime::v8::heap::Heap;
use crate::runtime::v8::live_tests::{host_node, run};
use crate::runtime::v8::process::{BPF_PROC_SIZE, V8_DISPATCH, V8_START_IS_FIELD};
use crate::unwind::procs::exec_mappings;

/// A function called a few times (it runs the interpreter's entry
/// trampoline, a builtin) and one never called (`CompileLazy`).
const SCRIPT: &str = r#"function called(a) { return a + 1; }
function neverCalled() { return 0; }
for (let i = 0; i < 3; i++) called(i);
%DebugPrint(called);
%DebugPrint(neverCalled);
require("fs").writeSync(1, "READY\n");
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
"#;

fn detect_live(pid: u32) -> Detected {
    let maps = exec_mappings(pid).expect("its mappings");
    Detector::new().detect(pid, &maps, &ProcessMemory { pid })
}

/// A child killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn check(major: u8) {
    let Some(node) = host_node(major) else {
        return;
    };
    let symbols = Symbols::read(&std::fs::File::open(&node).unwrap()).unwrap();
    let own = symbols.blob_code.expect("the builtins").addr;
    // With the default heap (V8's copy of the builtins, on a machine with
    // memory enough), and with a small one (no copy).
    for (args, copied) in [
        (&[][..], None),
        (&["--max-old-space-size=256"][..], Some(false)),
    ] {
        let running = run(&node, args, &[("main.js", SCRIPT.to_string())]);
        let pid = running.child.id();
        let p = match detect_live(pid) {
            Found::Yes(p) => p,
            other => panic!("Node {major} {args:?}: {other:?}"),
        };
        let v = p.layout.version;
        assert_eq!(
            p.blobs[0].start, own,
            "{v} {args:?}: the binary's own first"
        );
        assert!(p.blobs.contains(&p.blob), "{v} {args:?}");
        let copy = p.blobs.len() == 2;
        if let Some(copied) = copied {
            assert_eq!(copy, copied, "{v} {args:?}: {:x?}", p.blobs);
        }
        // V8 12 on runs the copy; V8 11.3 made one it does not run.
        assert_eq!(
            p.blob.start != own,
            copy && major >= 22,
            "{v} {args:?}: the copy is walked"
        );
        assert_eq!(p.blob.end - p.blob.start, symbols.blob_code.unwrap().size);
        let dispatch = matches!(p.layout.function_code, FunctionCode::DispatchHandle { .. });
        assert_eq!(p.dispatch != 0, dispatch, "{v}: {:#x}", p.dispatch);
        let table = dispatch.then_some(p.dispatch);
        let mem = ProcessMemory { pid };
        let heap = Heap::new(&p.layout, &mem);
        assert_eq!(running.printed.len(), 2, "{v}");
        for f in &running.printed {
            assert_eq!(heap.code(f.function, table), Some(f.code), "{v}: {f:?}");
            // Both run builtins: the trampoline, CompileLazy.
            assert!(f.code_kind.contains("BUILTIN"), "{v}: {f:?}");
            let pc = heap.instructions(f.code).expect("its instructions");
            assert!(
                p.blob.contains(&pc.start) && pc.end <= p.blob.end,
                "{v} {args:?}: {pc:x?} in {:x?}",
                p.blob
            );
        }
        check_bpf_bytes(&p, major);
    }
}

/// `struct v8_proc`'s fields at their offsets.
fn check_bpf_bytes(p: &Process, major: u8) {
    let b = p.bpf_bytes();
    assert_eq!(b.len(), BPF_PROC_SIZE);
    let word = |at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap());
    let half = |at: usize| u16::from_ne_bytes(b[at..at + 2].try_into().unwrap());
    assert_eq!(
        (word(0), word(8), word(16)),
        (p.blob.start, p.blob.end, p.dispatch)
    );
    let other = p.other_blob();
    assert_eq!((word(56), word(64)), (other.start, other.end));
    assert!(p.blobs.len() < 2 || (other.start != 0 && other != p.blob));
    let l = &p.layout;
    let t = &l.types;
    assert_eq!(
        [half(24), half(26), half(28), half(30), half(32)],
        [
            *t.js_function.start(),
            *t.js_function.end(),
            t.shared_function_info,
            t.code,
            t.bytecode_array
        ]
    );
    // Map 0, instance type 12, JSFunction.shared, its code (Node 20: +48,
    // 22: +24, a handle on 24 and 26 at +24), Code's start and size.
    let shared = if major == 20 { 24 } else { 32 };
    let code = if major == 20 { 48 } else { 24 };
    let size = match major {
        20 => 56,
        22 => 52,
        _ => 56,
    };
    assert_eq!(
        [
            half(34),
            half(36),
            half(38),
            half(40),
            half(42),
            half(44),
            half(46)
        ],
        [0, 12, shared, code, 40, size, 0]
    );
    // Frame slots -8, -16, -32, -40 on every version.
    assert_eq!(b[48..52], [5, 4, 2, 1]);
    let flags = V8_START_IS_FIELD | if major >= 24 { V8_DISPATCH } else { 0 };
    assert_eq!(b[52..56], [flags, 0, 0, 0]);
    // The interpreter's code: three ranges of offsets in the builtins,
    // the fourth unused.
    let int = |at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap());
    assert_eq!(p.interpreter.len(), 3, "{:x?}", p.interpreter);
    for (i, r) in p.interpreter.iter().enumerate() {
        assert_eq!((int(72 + i * 8), int(76 + i * 8)), (r.start, r.end));
        assert!(r.start < r.end && u64::from(r.end) <= p.blob.end - p.blob.start);
    }
    assert_eq!((int(96), int(100)), (0, 0));
}

#[test]
fn node20_is_detected() {
    check(20);
}

#[test]
fn node22_is_detected() {
    check(22);
}

#[test]
fn node24_is_detected() {
    check(24);
}

#[test]
fn node26_is_detected() {
    check(26);
}

/// Starts `exe`, waiting until the child maps it (spawn may return
/// before the child has exec'd).
fn spawn(exe: &Path, args: &[&str]) -> Killed {
    let child = Killed(
        Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", exe.display())),
    );
    let real = std::fs::canonicalize(exe).expect("the program");
    let pid = child.0.id();
    let mapped = || {
        exec_mappings(pid).is_ok_and(|maps| {
            maps.iter()
                .any(|m| matches!(&m.backing, Backing::File(p) if Path::new(p) == real))
        })
    };
    for _ in 0..500 {
        if mapped() {
            return child;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{} never mapped", exe.display());
}

#[test]
fn other_programs_are_not_v8_and_a_refused_layout_says_why() {
    let sleep = spawn(Path::new("/bin/sleep"), &["30"]);
    assert_eq!(detect_live(sleep.0.id()), Found::No);
    // A program named node without V8's constants.
    let plain = "#include <unistd.h>\nint main(void) { pause(); return 0; }\n";
    let (_dir, exe) = crate::testutil::cc_build("cc", "node", plain, &["-O0"]);
    let p = spawn(&exe, &[]);
    assert_eq!(detect_live(p.0.id()), Found::No);
    // One with them, of a V8 built with pointer compression.
    let compressed = "#include <unistd.h>\n\
        int v8dbg_SmiShiftSize = 0, v8dbg_TaggedSize = 4, v8dbg_SmiTag = 0;\n\
        int _ZN2v88internal7Version6major_E = 12, _ZN2v88internal7Version6minor_E = 4;\n\
        int _ZN2v88internal7Version6build_E = 254, _ZN2v88internal7Version6patch_E = 21;\n\
        int main(void) { pause(); return 0; }\n";
    let (_dir, exe) = crate::testutil::cc_build("cc", "node", compressed, &["-O0"]);
    let p = spawn(&exe, &[]);
    assert_eq!(
        detect_live(p.0.id()),
        Found::Unsupported(
            "Node.js (V8 12.4.254.21): pointer compression (a build with 32-bit tagged values) is not supported"
                .into()
        )
    );
}

#[test]
fn node_binaries_are_named_so() {
    for yes in [
        "/usr/bin/node",
        "/opt/node",
        "/usr/bin/nodejs",
        "/usr/local/bin/node22",
        "/usr/lib/x86_64-linux-gnu/libnode.so.115",
        "/usr/lib/libnode.so",
    ] {
        assert!(is_node(yes), "{yes}");
    }
    for no in [
        "/usr/bin/nodemon",
        "/usr/bin/node-gyp",
        "/usr/bin/nod",
        "/x/libnode.a",
        "/x/node22b",
        "/x/node/bash",
    ] {
        assert!(!is_node(no), "{no}");
    }
}

/// A made-up memory: (address, word) pairs, each its own 8 bytes in one
/// buffer from `base`.
fn memory(base: u64, words: &[(u64, u64)]) -> Buffer {
    let end = words.iter().map(|(a, _)| a + 8).max().unwrap_or(base);
    let mut bytes = vec![0u8; (end - base) as usize + 16];
    for (at, w) in words {
        let i = (at - base) as usize;
        bytes[i..i + 8].copy_from_slice(&w.to_ne_bytes());
    }
    Buffer { base, bytes }
}

#[test]
fn dispatch_tables_are_read_through_the_group_or_its_first_isolate() {
    let (group_var, group, isolate, table) = (0x1000, 0x2000, 0x3000, 0x4000);
    let by_group = DispatchAt::Group {
        group: group_var,
        offset: 0x10,
    };
    let ready = memory(
        0x1000,
        &[(group_var, group), (group + 0x10, table), (table, 0)],
    );
    assert_eq!(dispatch_table(&by_group, 0, &ready).ok(), Some(Some(table)));
    // Before V8 set up its group, or the table.
    let no_group = memory(0x1000, &[(group_var, 0)]);
    assert_eq!(dispatch_table(&by_group, 0, &no_group).ok(), Some(None));
    let no_table = memory(0x1000, &[(group_var, group), (group + 0x10, 0)]);
    assert_eq!(dispatch_table(&by_group, 0, &no_table).ok(), Some(None));
    // A table that cannot be read: not the table; a group that cannot:
    // an error (the process gone or starting).
    let wrong = memory(0x1000, &[(group_var, group), (group + 0x10, 0x9_0000)]);
    assert_eq!(dispatch_table(&by_group, 0, &wrong).ok(), Some(Some(0)));
    assert!(dispatch_table(&by_group, 0x10_0000, &ready).is_err());

    let by_isolate = DispatchAt::Isolate {
        group: group_var,
        main: 0x18,
        offset: 0x20,
    };
    let ready = memory(
        0x1000,
        &[
            (group_var, group),
            (group + 0x18, isolate),
            (isolate + 0x20, table),
            (table, 0),
        ],
    );
    assert_eq!(
        dispatch_table(&by_isolate, 0, &ready).ok(),
        Some(Some(table))
    );
    let no_isolate = memory(0x1000, &[(group_var, group), (group + 0x18, 0)]);
    assert_eq!(dispatch_table(&by_isolate, 0, &no_isolate).ok(), Some(None));
    // No leaptiering, or a table the code did not say where: none.
    for at in [DispatchAt::None, DispatchAt::Unknown("why".into())] {
        assert_eq!(dispatch_table(&at, 0, &no_group).ok(), Some(Some(0)));
    }
}

#[test]
fn a_library_mapped_anywhere_gives_its_builtins_and_their_copy() {
    let Some(node) = host_node(22) else {
        return;
    };
    let symbols = Symbols::read(&std::fs::File::open(&node).unwrap()).unwrap();
    let layout = Arc::new(Layout::from_symbols(&symbols).unwrap());
    // libnode.so: its text at 0x1000 (file offset 0x1000), the builtins
    // 0x3000 bytes at 0x20000 in it.
    let file = NodeFile {
        version: Some(layout.version),
        layout: Ok(layout),
        segments: vec![Segment {
            offset: 0x1000,
            vaddr: 0x1000,
            filesz: 0x10_0000,
            executable: true,
        }],
        kind: 3,
        blob: Some((0x2_0000, 0x2_0000, 0x3000)),
        interpreter: vec![0x100..0x200, 0x2000..0x3000],
        dispatch: DispatchAt::None,
    };
    let mapping = |start: u64, len: u64, offset: u64| ExecMapping {
        start,
        end: start + len,
        offset,
        backing: Backing::File("/usr/lib/libnode.so.127".into()),
        dev_ino: (1, 2),
        opened: None,
    };
    let text = mapping(0x7f00_0000_1000, 0x10_0000, 0x1000);
    let copy = mapping(0x5500_0000_0000, 0x3000, 0x2_0000);
    let mem = memory(0x1000, &[]);
    let own = 0x7f00_0002_0000..0x7f00_0002_3000;
    let Found::Yes(p) = found(&file, (1, 2), &[copy.clone(), text.clone()], &mem) else {
        panic!("not found");
    };
    assert_eq!(p.blob, 0x5500_0000_0000..0x5500_0000_3000);
    assert_eq!(p.blobs, vec![own.clone(), p.blob.clone()]);
    // The interpreter's code, in either copy.
    assert_eq!(p.interpreter, vec![0x100..0x200, 0x2000..0x3000]);
    assert!(p.in_interpreter(p.blob.start, p.blob.start + 0x2fff));
    assert!(p.in_interpreter(own.start, own.start + 0x100));
    assert!(!p.in_interpreter(own.start, own.start + 0x200));
    assert!(!p.in_interpreter(own.start, own.start - 1));
    let Found::Yes(p) = found(&file, (1, 2), &[text], &mem) else {
        panic!("not found");
    };
    assert_eq!((p.blob, p.blobs), (own.clone(), vec![own]));
    // Another file's mappings are not its; the text not mapped yet: wait.
    assert_eq!(found(&file, (1, 3), &[copy], &mem), Found::NotReady);
    // A file without the builtins' symbol is refused, saying so.
    let stripped = NodeFile { blob: None, ..file };
    let Found::Unsupported(why) = found(&stripped, (1, 2), &[], &mem) else {
        panic!("not refused");
    };
    assert!(
        why.starts_with("Node.js (V8 12.4.254.21): no v8_Default_embedded_blob_code_"),
        "{why}"
    );
}
