//! The heap reader against live Node.js 20, 22, 24 and 26 processes: a
//! script defines functions of every kind of name, has V8 print them
//! (`%DebugPrint`: the function's and its shared info's addresses, its
//! code, its dispatch handle) and blocks; the test reads the process's
//! memory with the layout of its binary and checks what it reads against
//! what V8 printed and the script's own text.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::heap::{Heap, LineSource, ANONYMOUS};
use super::layout::{FunctionCode, Layout};
use super::symbols::{Symbols, Variable};
use crate::runtime::memory::{Memory, ProcessMemory};

/// The files of the script: main.js (CommonJS), other.js (CommonJS, its
/// line ends filled by V8), module.mjs (an ES module, named by URL).
pub(super) const MAIN: usize = 0;
pub(super) const OTHER: usize = 1;
pub(super) const MODULE: usize = 2;

/// The script's functions: (how it is printed, the name expected, text
/// where it is defined, its file).
pub(super) const FUNCTIONS: &[(&str, &str, &str, usize)] = &[
    ("fooBar", "fooBar", "function fooBar", MAIN),
    (
        "anonInferred",
        "anonInferred",
        "function () { return 2; }",
        MAIN,
    ),
    ("trulyAnon", ANONYMOUS, "function () { return 4; }", MAIN),
    ("obj.methodName", "methodName", "methodName() {", MAIN),
    ("manyLocals", "manyLocals", "function manyLocals", MAIN),
    ("neverCalled", "neverCalled", "function neverCalled", MAIN),
    ("hot", "hot", "function hot", MAIN),
    ("other.inOther", "inOther", "function inOther", OTHER),
    ("esm.inModule", "inModule", "function inModule", MODULE),
    ("esm.arrow", "arrow", "(b) => b * 3", MODULE),
];

/// Context locals of `manyLocals`: past V8's 75, their names are in a
/// hash table.
const LOCALS: usize = 80;

pub(super) fn main_js() -> String {
    let lets = (0..LOCALS)
        .map(|i| format!("v{i} = {i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let sum = (0..LOCALS)
        .map(|i| format!("v{i}"))
        .collect::<Vec<_>>()
        .join(" + ");
    let prints: String = FUNCTIONS
        .iter()
        .map(|(f, ..)| format!("  %DebugPrint({f});\n"))
        .collect();
    format!(
        r#"// flare: V8 heap reader test
function fooBar(a) {{
  return a + 1;
}}
const anonInferred = [function () {{ return 2; }}][0];
function pass(f) {{ return f; }}
const trulyAnon = pass(function () {{ return 4; }});
const obj = {{ methodName() {{ return 3; }} }};
function manyLocals() {{
  let {lets};
  return () => {sum};
}}
function neverCalled() {{ return 5; }}
function hot(a) {{ return a * 2 + 1; }}
const other = require("./other.js");
for (let i = 0; i < 10; i++) {{
  fooBar(i); anonInferred(); trulyAnon(); obj.methodName(); manyLocals()(); hot(i); other.inOther();
}}
%PrepareFunctionForOptimization(hot);
hot(1); hot(2);
%OptimizeFunctionOnNextCall(hot);
hot(3);
import("./module.mjs").then((esm) => {{
  for (let i = 0; i < 10; i++) {{ esm.inModule(i); esm.arrow(i); }}
{prints}  %DebugPrint(require("path").join);
  require("fs").writeSync(1, "READY\n");
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
}});
"#
    )
}

/// Its line ends are filled by V8 (a stack trace of its own frame only);
/// the main script's are not.
pub(super) const OTHER_JS: &str = r#"// the other file
function inOther() { return 7; }
const limit = Error.stackTraceLimit;
Error.stackTraceLimit = 1;
void new Error("lines").stack;
Error.stackTraceLimit = limit;
module.exports = { inOther };
"#;

pub(super) const MODULE_MJS: &str = r#"// an ES module

export function inModule(a) {
  return a - 1;
}
export const arrow = (b) => b * 3;
"#;

/// What `%DebugPrint` said of a function.
#[derive(Debug, Default)]
pub(super) struct Printed {
    pub(super) function: u64,
    pub(super) shared: u64,
    /// `<SharedFunctionInfo NAME>`'s name (V8's debug name).
    pub(super) debug_name: String,
    pub(super) code: u64,
    pub(super) code_kind: String,
    pub(super) dispatch_handle: Option<u64>,
    /// ` - bytecode: ` (an interpreted function's).
    pub(super) bytecode: Option<u64>,
}

pub(super) fn hex(s: &str) -> u64 {
    let s = s.trim_start_matches("0x");
    u64::from_str_radix(s, 16).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// The functions printed in `lines`, in order.
pub(super) fn parse(lines: &[String]) -> Vec<Printed> {
    let mut out: Vec<Printed> = Vec::new();
    for line in lines {
        if let Some(rest) = line.strip_prefix("DebugPrint: ") {
            let addr = rest.split(':').next().unwrap_or("");
            out.push(Printed {
                function: hex(addr),
                ..Printed::default()
            });
            continue;
        }
        let Some(p) = out.last_mut() else { continue };
        let value = |key: &str| {
            line.strip_prefix(key)
                .map(|r| r.split_once(' ').unwrap_or((r, "")))
        };
        if let Some((addr, what)) = value(" - shared_info: ") {
            p.shared = hex(addr);
            let name = what.trim_start_matches("<SharedFunctionInfo");
            p.debug_name = name.trim_end_matches('>').trim().to_string();
        } else if let Some((addr, what)) = value(" - code: ") {
            p.code = hex(addr);
            p.code_kind = what.trim_matches(['<', '>']).to_string();
        } else if let Some((handle, _)) = value(" - dispatch_handle: ") {
            p.dispatch_handle = Some(hex(handle));
        } else if let Some((addr, _)) = value(" - bytecode: ") {
            p.bytecode = Some(hex(addr));
        }
    }
    out
}

/// A node process blocked after printing; killed when dropped.
pub(super) struct Running {
    pub(super) child: Child,
    pub(super) dir: tempfile::TempDir,
    pub(super) printed: Vec<Printed>,
    /// What it wrote before `READY`.
    pub(super) lines: Vec<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) fn start(node: &Path) -> Running {
    let files = [
        ("main.js", main_js()),
        ("other.js", OTHER_JS.to_string()),
        ("module.mjs", MODULE_MJS.to_string()),
    ];
    run(node, &[], &files)
}

/// Runs `node` with `args` on the first of `files` (name, text), written
/// to a new directory, until it prints `READY`.
pub(super) fn run(node: &Path, args: &[&str], files: &[(&str, String)]) -> Running {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("a script");
    }
    let child = Command::new(node)
        .arg("--allow-natives-syntax")
        .args(args)
        .arg(dir.path().join(files[0].0))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", node.display()));
    let mut running = Running {
        child,
        dir,
        printed: Vec::new(),
        lines: Vec::new(),
    };
    let out = running.child.stdout.take().expect("stdout");
    let mut lines = Vec::new();
    for line in BufReader::new(out).lines() {
        let line = line.expect("reading node");
        if line == "READY" {
            running.printed = parse(&lines);
            running.lines = lines;
            return running;
        }
        lines.push(line);
    }
    panic!("{} ended before it was ready: {lines:?}", node.display());
}

/// The process's JS dispatch table (leaptiering), found as the facts
/// found it in a live process (/work/notes/v8-facts.md, "Dispatch
/// table"): Node 24's `js_dispatch_table_address()` reads
/// `[default_isolate_group_] + 0x3270`; Node 26's reads the Isolate's
/// `+0x268`, the Isolate at `[default_isolate_group_] + 0x31b8` in that
/// build. Test-only: where the table is, is not part of the layout.
fn dispatch_table(layout: &Layout, s: &Symbols, mem: &dyn Memory) -> Option<u64> {
    let group = mem.read_u64(s.isolate_group?.addr).ok()?;
    if layout.version.is(13, 6) {
        mem.read_u64(group + 0x3270).ok()
    } else if layout.version.is(14, 6) {
        let isolate = mem.read_u64(group + 0x31b8).ok()?;
        mem.read_u64(isolate + 0x268).ok()
    } else {
        None
    }
}

/// (start, end, file offset, path) of each mapping of process `pid`.
fn maps(pid: u32) -> Vec<(u64, u64, u64, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (start, end) = f.next()?.split_once('-')?;
            let offset = f.nth(1)?;
            let path = f.nth(2).unwrap_or("").to_string();
            Some((hex(start), hex(end), hex(offset), path))
        })
        .collect()
}

/// Whether `addr` of process `pid` is in the embedded builtins: in a
/// mapping of `node` at the blob's file offsets (V8 12 on remaps the blob
/// beside its code range: not at the binary's own addresses).
fn in_blob(pid: u32, node: &Path, blob: Variable, addr: u64) -> bool {
    let file = std::fs::File::open(node).unwrap();
    let elf = crate::elf::Elf::parse(crate::elf::FileSource::new(&file).unwrap()).unwrap();
    let blob_offset = crate::elf::file_offset(elf.loads(), blob.addr).unwrap();
    let real = std::fs::canonicalize(node).unwrap();
    maps(pid).iter().any(|(start, end, offset, path)| {
        (*start..*end).contains(&addr)
            && Path::new(path) == real
            && (blob_offset..blob_offset + blob.size).contains(&(offset + (addr - start)))
    })
}

/// The host's own build of Node `major` (it runs here), if it can be
/// had.
pub(super) fn host_node(major: u8) -> Option<std::path::PathBuf> {
    let arch = if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        "amd64"
    };
    crate::testutil::node(major, arch)
}

fn check(major: u8) {
    let Some(node) = host_node(major) else {
        return;
    };
    let symbols = Symbols::read(&std::fs::File::open(&node).unwrap()).unwrap();
    let layout = Layout::from_symbols(&symbols).unwrap();
    let running = start(&node);
    let pid = running.child.id();
    let mem = ProcessMemory { pid };
    let heap = Heap::new(&layout, &mem);
    let v = layout.version;
    let printed = &running.printed;
    assert_eq!(printed.len(), FUNCTIONS.len() + 1, "{v}: {printed:?}");
    // Node names scripts by their real paths.
    let dir = std::fs::canonicalize(running.dir.path()).expect("the temporary directory");
    let path = |file: &str| dir.join(file).display().to_string();
    // (the script's name, its text, where its lines come from).
    let files = [
        (path("main.js"), main_js(), LineSource::Source),
        (path("other.js"), OTHER_JS.to_string(), LineSource::LineEnds),
        (
            format!("file://{}", path("module.mjs")),
            MODULE_MJS.to_string(),
            LineSource::Source,
        ),
    ];
    let table = match layout.function_code {
        FunctionCode::Pointer(_) => None,
        FunctionCode::DispatchHandle { .. } => {
            Some(dispatch_table(&layout, &symbols, &mem).expect("the dispatch table"))
        }
    };
    for ((what, name, marker, file), p) in FUNCTIONS.iter().zip(printed) {
        let f = p.function;
        assert!(heap.is_js_function(f), "{v} {what}");
        let sfi = heap.shared(f);
        assert_eq!(sfi, Some(p.shared), "{v} {what}: its shared info");
        assert!(!heap.is_js_function(p.shared), "{v} {what}");
        assert_eq!(
            heap.function_name(p.shared).as_deref(),
            Some(*name),
            "{v} {what}"
        );
        if !p.debug_name.is_empty() {
            assert_eq!(p.debug_name, *name, "{v} {what}: V8's debug name");
        }
        let (name_of_script, text, from) = &files[*file];
        assert_eq!(
            heap.script_name(p.shared).as_deref(),
            Some(name_of_script.as_str()),
            "{v} {what}"
        );
        let script = heap.script(p.shared).expect("its script");
        let lines = heap.line_table(script).expect("its lines");
        assert_eq!(lines.from, *from, "{v} {what}");
        let at = text.find(marker).expect("the marker");
        let line = text[..at].matches('\n').count() as u32 + 1;
        assert_eq!(heap.line_of(script, at as u32), Some(line), "{v} {what}");
        assert_eq!(
            heap.line_of(script, text.len() as u32 + 1),
            None,
            "{v} {what}"
        );
        // The code V8 printed, through `code` or the dispatch table.
        if let Some(h) = p.dispatch_handle {
            let FunctionCode::DispatchHandle { offset } = layout.function_code else {
                panic!("{v}: a dispatch handle printed, a code pointer laid out");
            };
            assert_eq!(
                mem.read_u32(f - 1 + u64::from(offset)).ok(),
                Some(h as u32),
                "{v} {what}"
            );
        }
        assert_eq!(
            heap.code(f, table),
            Some(p.code),
            "{v} {what}: {}",
            p.code_kind
        );
        let kind = heap.code_kind(p.code).expect("its kind");
        let range = heap.instructions(p.code).expect("its instructions");
        assert!(
            (1..1 << 20).contains(&(range.end - range.start)),
            "{v} {what}"
        );
        let c = &layout.code;
        let blob = symbols.blob_code.expect("the embedded blob");
        let builtin = in_blob(pid, &node, blob, range.start);
        let printed_kind = p.code_kind.as_str();
        if *what == "hot" {
            assert!(printed_kind.contains("TURBOFAN"), "{v}: {printed_kind}");
        }
        if printed_kind.contains("TURBOFAN") || printed_kind.contains("MAGLEV") {
            assert!(
                kind > c.kind_baseline,
                "{v} {what}: {printed_kind} is {kind}"
            );
            assert!(!builtin, "{v} {what}: JIT code");
        } else if printed_kind.contains("BASELINE") {
            // Sparkplug compiled it (it ran a few times).
            assert_eq!(kind, c.kind_baseline, "{v} {what}");
            assert!(!builtin, "{v} {what}: JIT code");
        } else {
            // The InterpreterEntryTrampoline; CompileLazy for the one
            // never called.
            assert!(
                printed_kind.contains("BUILTIN"),
                "{v} {what}: {printed_kind}"
            );
            assert!(
                kind < c.kind_interpreted,
                "{v} {what}: {printed_kind} is {kind}"
            );
            assert!(builtin, "{v} {what}: in the embedded blob");
        }
    }
    // `path.join`: node's own code, its source an external string.
    let join = printed.last().unwrap();
    assert_eq!(heap.function_name(join.shared).as_deref(), Some("join"));
    assert_eq!(heap.script_name(join.shared).as_deref(), Some("node:path"));
    let script = heap.script(join.shared).unwrap();
    assert_eq!(heap.line_table(script).unwrap().from, LineSource::Source);
    assert!(
        heap.line_of(script, 20_000).is_some_and(|l| l > 300),
        "{v}: node:path's line at 20,000"
    );
    // Not objects of the kinds asked for.
    assert_eq!(heap.shared(join.shared), None);
    assert_eq!(heap.script(join.function), None);
    assert_eq!(heap.function_name(join.function), None);
    assert!(!heap.is_js_function(0));
}

#[test]
fn node20_heap() {
    check(20);
}

#[test]
fn node22_heap() {
    check(22);
}

#[test]
fn node24_heap() {
    check(24);
}

#[test]
fn node26_heap() {
    check(26);
}
