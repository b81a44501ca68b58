//! Inlined functions against live Node.js 20, 22, 24 and 26 processes:
//! `outer` calls a small `inner` in a loop, optimized by TurboFan (and
//! by Maglev where the build has it); the code's positions are checked
//! against what `--print-opt-code` lists, and the namer gives `inner`
//! inlined into `outer` at a pc in the inlined body and `outer` alone
//! elsewhere. Made-up tables (garbage included) check the chain's
//! bounds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::*;
use crate::collect::{Namer, Runtime, RuntimeFrame};
use crate::profile::Frame;
use crate::runtime::memory::{Buffer, ProcessMemory};
use crate::runtime::tracker::Found;
use crate::runtime::v8::detect::Detector;
use crate::runtime::v8::layout::Layout;
use crate::runtime::v8::live_tests::{hex, host_node, run, Printed, Running};
use crate::runtime::v8::namer::{FrameId, Kind, V8Namer};
use crate::runtime::v8::symbols::Symbols;
use crate::runtime::v8::{Process, Registry};
use crate::unwind::procs::exec_mappings;

const SCRIPT: &str = r#"function inner(x) {
  return x * 3 + 1;
}
function outer(n) {
  let s = 0;
  for (let i = 0; i < n; i++) {
    s += inner(i);
  }
  return s;
}
function viaMaglev(n) {
  let s = 0;
  for (let i = 0; i < n; i++) {
    s += inner(i);
  }
  return s;
}
%PrepareFunctionForOptimization(outer);
outer(10); outer(10);
%OptimizeFunctionOnNextCall(outer);
outer(10);
%PrepareFunctionForOptimization(viaMaglev);
viaMaglev(10); viaMaglev(10);
%OptimizeMaglevOnNextCall(viaMaglev);
viaMaglev(10);
%DebugPrint(outer);
%DebugPrint(viaMaglev);
%DebugPrint(inner);
require("fs").writeSync(1, "READY\n");
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
"#;

/// The 1-based line of `marker` in [`SCRIPT`].
fn line_of(marker: &str) -> u32 {
    let at = SCRIPT.find(marker).unwrap_or_else(|| panic!("{marker}"));
    SCRIPT[..at].matches('\n').count() as u32 + 1
}

/// What `--print-opt-code` lists of a code: its positions and inlined
/// functions.
type Listing = (Vec<(u32, u32)>, Vec<u64>);

/// (pc offset, script offset) of each source position `--print-opt-code`
/// lists (`Source positions:`, ` pc offset  position`, then hex and
/// decimal), and the inlined functions' shared infos it lists.
fn listing(lines: &[String]) -> Listing {
    let mut positions = Vec::new();
    let mut functions = Vec::new();
    let mut section = "";
    for line in lines {
        if line.starts_with("Source positions:") {
            section = "positions";
        } else if line.starts_with("Inlined functions") {
            section = "inlined";
        } else if line.trim().is_empty() || line.starts_with("DebugPrint") {
            section = "";
        } else if section == "positions" {
            let mut words = line.split_whitespace();
            let (Some(pc), Some(pos)) = (words.next(), words.next()) else {
                continue;
            };
            if let (Ok(pc), Ok(pos)) = (u32::from_str_radix(pc, 16), pos.parse()) {
                positions.push((pc, pos));
            }
        } else if section == "inlined" {
            if let Some(addr) = line.split_whitespace().next() {
                functions.push(hex(addr));
            }
        }
    }
    (positions, functions)
}

fn namer_of(running: &Running) -> (V8Namer, Arc<Process>) {
    let pid = running.child.id();
    let maps = exec_mappings(pid).expect("its mappings");
    let process = match Detector::new().detect(pid, &maps, &ProcessMemory { pid }) {
        Found::Yes(p) => Arc::new(p),
        other => panic!("not detected: {other:?}"),
    };
    let registry: Registry = Arc::new(Mutex::new(HashMap::from([(pid, Arc::clone(&process))])));
    (V8Namer::new(registry, Runtime::Test), process)
}

fn frame(sfi: u64, offset: u32, code: u64) -> RuntimeFrame {
    RuntimeFrame {
        runtime: Runtime::Test,
        ids: FrameId {
            kind: Kind::Compiled,
            sfi,
            offset: offset.into(),
        }
        .encode(),
        cookie: code,
    }
}

/// (name, line, inlined) of each frame.
fn summary(frames: Option<Vec<Frame>>) -> Option<Vec<(String, Option<u32>, bool)>> {
    Some(
        frames?
            .iter()
            .map(|f| {
                let line = f.source.as_ref().and_then(|s| s.line);
                (f.name.to_string(), line, f.inlined)
            })
            .collect(),
    )
}

/// Checks the code of `function` (of kind `kind`), which inlined
/// `inner`; `listed` is what `--print-opt-code` printed of it, if it did.
fn check_code(
    running: &Running,
    namer: &mut V8Namer,
    process: &Process,
    function: &Printed,
    inner: &Printed,
    kind: u32,
    listed: Option<&Listing>,
) {
    let pid = running.child.id();
    let v = process.layout.version;
    let what = &function.debug_name;
    let mem = ProcessMemory { pid };
    let heap = Heap::new(&process.layout, &mem);
    assert_eq!(heap.code_kind(function.code), Some(kind), "{v} {what}");
    let inlined = heap.inlined(function.code).expect("its tables");
    assert_eq!(inlined.shared, function.shared, "{v} {what}");
    assert!(
        inlined.functions.contains(&inner.shared),
        "{v} {what}: {inlined:?}"
    );
    if let Some((positions, functions)) = listed {
        let got: Vec<(u32, u32)> = inlined
            .positions
            .iter()
            .filter_map(|&(o, p)| Some((o, script_offset(p)?)))
            .collect();
        assert_eq!(&got, positions, "{v} {what}: the positions printed");
        assert_eq!(&inlined.functions, functions, "{v} {what}");
    }
    let code = heap.instructions(function.code).expect("its instructions");
    let size = (code.end - code.start) as u32;
    let outer_lines = line_of("function outer")..line_of("function viaMaglev");
    let maglev_lines = line_of("function viaMaglev")..line_of("%Prepare");
    let body = if what == "outer" {
        outer_lines
    } else {
        maglev_lines
    };
    let (mut inside, mut outside) = (0, 0);
    for (i, &(offset, position)) in inlined.positions.iter().enumerate() {
        let end = inlined.positions.get(i + 1).map_or(size, |n| n.0);
        if end <= offset {
            // An entry the next one at the same offset hides.
            continue;
        }
        // Every pc of the entry's range names the same frames.
        for pc in [offset, (offset + end) / 2, end - 1] {
            let got = summary(namer.name(pid, &frame(function.shared, pc, function.code)))
                .expect("named");
            let at = script_offset(position).expect("a script offset");
            let line = SCRIPT[..at as usize].matches('\n').count() as u32 + 1;
            if position >> 31 & 0xffff == 0 {
                outside += 1;
                assert_eq!(
                    got,
                    [(what.clone(), Some(line), false)],
                    "{v} {what} {pc:#x}"
                );
            } else {
                inside += 1;
                let [(o, o_line, false), (i, i_line, true)] = &got[..] else {
                    panic!("{v} {what} {pc:#x}: {got:?}");
                };
                assert_eq!((o, i), (what, &"inner".to_string()), "{v} {pc:#x}");
                assert_eq!(*i_line, Some(2), "{v} {what} {pc:#x}: inner's line");
                assert_eq!(*i_line, Some(line), "{v} {what} {pc:#x}");
                let o_line = o_line.expect("a line");
                assert!(body.contains(&o_line), "{v} {what} {pc:#x}: {o_line}");
                if what == "outer" {
                    // TurboFan: the call's line.
                    assert_eq!(o_line, line_of("s += inner(i);"), "{v} {pc:#x}");
                }
            }
        }
    }
    assert!(inside > 0 && outside > 0, "{v} {what}: {inside} {outside}");
    // The code as another function's (a stale frame): not read as its.
    let wrong = summary(namer.name(pid, &frame(inner.shared, 0, function.code)));
    assert_eq!(wrong, Some(vec![("inner".into(), Some(1), false)]), "{v}");
}

fn check(major: u8) {
    let Some(node) = host_node(major) else {
        return;
    };
    let args = ["--print-opt-code", "--print-opt-code-filter=outer"];
    let running = run(&node, &args, &[("main.js", SCRIPT.to_string())]);
    let (mut namer, process) = namer_of(&running);
    let v = process.layout.version;
    let il = process.layout.source.inlining.expect("an inlining layout");
    let [outer, maglev, inner] = &running.printed[..] else {
        panic!("{v}: {:?}", running.printed);
    };
    assert!(
        outer.code_kind.contains("TURBOFAN"),
        "{v}: {}",
        outer.code_kind
    );
    let listed = listing(&running.lines);
    assert!(listed.0.len() > 4, "{v}: {listed:?}");
    let turbofan = il.kind_turbofan;
    check_code(
        &running,
        &mut namer,
        &process,
        outer,
        inner,
        turbofan,
        Some(&listed),
    );
    // Maglev, where the build runs it (24 and 26).
    if maglev.code_kind.contains("MAGLEV") {
        let kind = il.kind_maglev;
        check_code(&running, &mut namer, &process, maglev, inner, kind, None);
    } else {
        // Node 20's and 22's builds say "Maglev is not enabled".
        assert!([20, 22].contains(&major), "{v}: {}", maglev.code_kind);
    }
}

#[test]
fn node20_inlined_functions() {
    check(20);
}

#[test]
fn node22_inlined_functions() {
    check(22);
}

#[test]
fn node24_inlined_functions() {
    check(24);
}

#[test]
fn node26_inlined_functions() {
    check(26);
}

/// A position: script offset `at`, inlining id `id` (`None`: the code's
/// own function).
fn pos(at: u32, id: Option<u16>) -> u64 {
    let id = id.map_or(0, |i| u64::from(i) + 1);
    id << 31 | (u64::from(at) + 1) << 1
}

#[test]
fn chains_go_from_the_code_to_the_innermost() {
    // `a` inlined at 40 of the code's function, `b` at 7 of `a`.
    let t = Inlined {
        shared: 0x11,
        positions: vec![(0, pos(3, None)), (8, pos(9, Some(1))), (16, pos(50, None))],
        inlinings: vec![(pos(40, None), 0), (pos(7, Some(0)), 1)],
        functions: vec![0xa1, 0xb1],
    };
    let site = |function, script| Site { function, script };
    assert_eq!(t.at(2), Some(vec![site(None, Some(3))]));
    let want = vec![
        site(None, Some(40)),
        site(Some(0xa1), Some(7)),
        site(Some(0xb1), Some(9)),
    ];
    assert_eq!(t.at(8), Some(want.clone()));
    assert_eq!(t.at(15), Some(want));
    assert_eq!(t.at(u32::MAX), Some(vec![site(None, Some(50))]));
    // Before any position, an id or function out of range, a function
    // that was not one, a cycle: nothing.
    let late = Inlined {
        positions: vec![(4, pos(1, None))],
        ..t.clone()
    };
    assert_eq!(late.at(3), None);
    for bad in [pos(9, Some(2)), pos(9, Some(u16::MAX - 1))] {
        let u = Inlined {
            positions: vec![(0, bad)],
            ..t.clone()
        };
        assert_eq!(u.at(0), None);
    }
    let cycle = Inlined {
        positions: vec![(0, pos(1, Some(0)))],
        inlinings: vec![(pos(2, Some(0)), 0)],
        ..t.clone()
    };
    assert_eq!(cycle.at(0), None, "bounded by MAX_DEPTH");
    let gone = Inlined {
        functions: vec![0, 0xb1],
        ..t.clone()
    };
    assert_eq!(gone.at(8), None);
    // An external position: no script offset.
    let external = Inlined {
        positions: vec![(0, pos(5, None) | 1)],
        ..t
    };
    assert_eq!(external.at(0), Some(vec![site(None, None)]));
}

fn number(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// A source position table of `entries` (ascending offsets), as V8
/// writes it in `format` (every entry a statement's).
fn encode(entries: &[(u32, u64)], format: TableFormat) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut offset, mut position) = (-1i64, 0i64);
    for &(o, p) in entries {
        let delta = i64::from(o) - offset;
        match format {
            TableFormat::Signed => number(&mut out, zigzag(delta)),
            TableFormat::Flags => number(&mut out, (delta as u64) << 2 | 1),
        }
        number(&mut out, zigzag(p as i64 - position));
        (offset, position) = (i64::from(o), p as i64);
    }
    out
}

#[test]
fn optimized_positions_keep_their_inlining_ids() {
    let entries = [
        (0, pos(54, None)),
        (0x8e, pos(29, Some(0))),
        (0x9b, pos(33, Some(0x7ffe))),
        (0xa5, pos(108, None) | 1),
    ];
    for format in [TableFormat::Signed, TableFormat::Flags] {
        let bytes = encode(&entries, format);
        assert_eq!(decode_raw(&bytes, format).as_deref(), Some(&entries[..]));
        // As bytecode positions: the script offsets alone, not the
        // external one.
        let p = crate::runtime::v8::source::decode(&bytes, format).unwrap();
        assert_eq!(p.entries(), &[(0, 54), (0x8e, 29), (0x9b, 33)]);
    }
}

/// A made-up heap: objects laid out from `BASE`, each a map word then
/// its fields; maps carry only their instance type.
struct Made {
    bytes: Vec<u8>,
}

const BASE: u64 = 0x10_0000;

impl Made {
    fn put(&mut self, at: u64, bytes: &[u8]) {
        let i = (at - BASE) as usize;
        if self.bytes.len() < i + bytes.len() {
            self.bytes.resize(i + bytes.len(), 0);
        }
        self.bytes[i..i + bytes.len()].copy_from_slice(bytes);
    }

    /// A map of instance type `ty` at `at`; its tagged address.
    fn map(&mut self, at: u64, ty: u16) -> u64 {
        self.put(at + 12, &ty.to_ne_bytes());
        at + 1
    }

    /// An object of map `map` at `at` with `words` after the map word.
    fn object(&mut self, at: u64, map: u64, words: &[u64]) -> u64 {
        self.put(at, &map.to_ne_bytes());
        for (i, w) in words.iter().enumerate() {
            self.put(at + 8 + 8 * i as u64, &w.to_ne_bytes());
        }
        at + 1
    }

    /// A byte array of map `map` at `at`.
    fn bytes(&mut self, at: u64, map: u64, data: &[u8]) -> u64 {
        self.put(at, &map.to_ne_bytes());
        self.put(at + 8, &((data.len() as u64) << 32).to_ne_bytes());
        self.put(at + 16, data);
        at + 1
    }
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn garbage_tables_give_none_or_a_bounded_chain() {
    // The layout of whichever Node is here (its binary only).
    let Some((layout, il)) = [20, 22, 24, 26].into_iter().find_map(|major| {
        let node = host_node(major)?;
        let s = Symbols::read(&std::fs::File::open(node).ok()?)?;
        let layout = Layout::from_symbols(&s).ok()?;
        let il = layout.source.inlining?;
        Some((layout, il))
    }) else {
        return;
    };
    let t = &layout.types;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut named = 0;
    for round in 0..400 {
        let mut m = Made { bytes: Vec::new() };
        let code_map = m.map(BASE, t.code);
        let positions_map = m.map(BASE + 0x20, il.positions_type);
        let data_map = m.map(BASE + 0x40, il.deopt_data_type);
        let literals_map = m.map(BASE + 0x60, il.literals_type);
        let at_map = m.map(BASE + 0x80, il.inlining_positions_type);
        let sfi_map = m.map(BASE + 0xa0, t.shared_function_info);
        let sfi = m.object(BASE + 0x100, sfi_map, &[]);
        let own = match il.wrapper {
            Some((ty, field)) => {
                let wrapper_map = m.map(BASE + 0xc0, ty);
                let mut words = vec![0; usize::from(field) / 8];
                words.push(sfi);
                m.object(BASE + 0x120, wrapper_map, &words[1..])
            }
            None => sfi,
        };
        // Random tables, half of them made of positions with random
        // inlining ids (out of range, cycles).
        let random_position = |rng: &mut Rng| {
            let id = (rng.next() % 7).checked_sub(1).map(|i| i as u16);
            pos((rng.next() % 200) as u32, id)
        };
        let table = if round % 2 == 0 {
            let n = (rng.next() % 64) as usize;
            rng.bytes(n)
        } else {
            let mut offset = 0;
            let entries: Vec<(u32, u64)> = (0..rng.next() % 16)
                .map(|_| {
                    offset += (rng.next() % 8) as u32;
                    (offset, random_position(&mut rng))
                })
                .collect();
            encode(&entries, il.format)
        };
        let positions = m.bytes(BASE + 0x200, positions_map, &table);
        let inlinings: Vec<u8> = (0..rng.next() % 6)
            .flat_map(|_| {
                let mut e = random_position(&mut rng).to_ne_bytes().to_vec();
                e.extend(((rng.next() % 5) as u32).to_ne_bytes());
                e.extend([0; 4]);
                e
            })
            .collect();
        let inlinings = m.bytes(BASE + 0x400, at_map, &inlinings);
        let literals: Vec<u64> = (0..4)
            .map(|_| match rng.next() % 3 {
                0 => sfi,
                1 => sfi | 2,
                _ => rng.next(),
            })
            .collect();
        let mut lits = vec![(literals.len() as u64) << 32];
        lits.extend(&literals);
        let literals = m.object(BASE + 0x600, literals_map, &lits);
        let mut data = vec![0u64; 20];
        data[0] = 16 << 32;
        for w in data.iter_mut().skip(1) {
            *w = rng.next();
        }
        data[1 + il.inlined_count as usize] = (rng.next() % 6) << 32;
        data[1 + il.literals as usize] = literals;
        data[1 + il.inlining_positions as usize] = inlinings;
        data[1 + il.shared as usize] = own;
        let data = m.object(BASE + 0x800, data_map, &data);
        let mut code = vec![0u64; 12];
        code[usize::from(il.positions) / 8 - 1] = positions;
        code[usize::from(il.deopt_data) / 8 - 1] = data;
        let c = &layout.code;
        let kind = if round % 3 == 0 {
            il.kind_maglev
        } else {
            il.kind_turbofan
        };
        let code = m.object(BASE + 0xa00, code_map, &code);
        m.put(
            code - 1 + u64::from(c.flags),
            &(kind << c.kind_shift).to_ne_bytes(),
        );
        // Garbage over some of it.
        if round % 4 == 3 {
            let n = m.bytes.len();
            for _ in 0..8 {
                let i = (rng.next() as usize) % n;
                m.bytes[i] = rng.next() as u8;
            }
        }
        let mem = Buffer {
            base: BASE,
            bytes: m.bytes,
        };
        let heap = Heap::new(&layout, &mem);
        if let Some(inlined) = heap.inlined(code) {
            for _ in 0..32 {
                if let Some(sites) = inlined.at(rng.next() as u32 % 64) {
                    named += 1;
                    assert!((1..=MAX_DEPTH).contains(&sites.len()));
                    assert_eq!(sites[0].function, None);
                    if round % 4 != 3 {
                        assert!(sites[1..].iter().all(|s| s.function == Some(sfi)));
                    }
                }
            }
        }
    }
    assert!(named > 0, "some chains read");
    // Not code, or all garbage: nothing.
    let mem = Buffer {
        base: BASE,
        bytes: rng.bytes(1 << 12),
    };
    let heap = Heap::new(&layout, &mem);
    for _ in 0..1000 {
        let at = BASE + rng.next() % (1 << 12);
        assert!(heap
            .inlined(at | 1)
            .is_none_or(|i| i.at(0).is_none_or(|s| s.len() <= MAX_DEPTH)));
    }
}
