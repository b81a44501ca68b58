//! The heap reader on made-up heaps (a buffer laid out as V8 12.4 lays
//! its objects): every kind of string, names in each place a shared
//! function info keeps them, line tables, and garbage that must give
//! `None` rather than a panic or a hang. live_tests.rs reads real ones.

use std::collections::BTreeMap;

use super::*;
use crate::runtime::memory::Buffer;
use crate::runtime::tracker::Weight;
use crate::runtime::v8::layout::{
    CodeLayout, External, FeedbackLayout, FrameSlots, FrameTypes, Strings, Types, Version,
};

// Instance types as V8 12.4 numbers them.
const SEQ_TWO: u16 = 32;
const CONS_ONE: u16 = 41;
const SLICED_ONE: u16 = 43;
const EXTERNAL_ONE: u16 = 42;
const UNCACHED_EXTERNAL_ONE: u16 = 58;
const THIN_ONE: u16 = 45;
const SEQ_ONE: u16 = 40;
const ODDBALL: u16 = 131;
const SFI: u16 = 274;
const SCOPE_INFO: u16 = 272;
const SCRIPT: u16 = 167;
const FIXED_ARRAY: u16 = 174;
const JS_FUNCTION: u16 = 2066;
const FEEDBACK_VECTOR: u16 = 150;
const CODE_WRAPPER: u16 = 151;
const FEEDBACK_CELL: u16 = 152;

/// Node 22's layout (V8 12.4.254.21), as layout_tests.rs checks it.
fn layout() -> Layout {
    Layout {
        version: Version {
            major: 12,
            minor: 4,
            build: 254,
            patch: 21,
        },
        frame: FrameSlots {
            context: -8,
            function: -16,
            bytecode_array: -32,
            bytecode_offset: -40,
        },
        frame_types: FrameTypes {
            entry: 1,
            construct_entry: 2,
            exit: 3,
            builtin_exit: 26,
            interpreted: 13,
            baseline: 14,
            maglev: 15,
            turbofan: 16,
            stub: 17,
            names: BTreeMap::new(),
        },
        types: Types {
            js_function: JS_FUNCTION..=JS_FUNCTION + 16,
            shared_function_info: SFI,
            code: 206,
            bytecode_array: 205,
            script: SCRIPT,
            scope_info: SCOPE_INFO,
            fixed_array: FIXED_ARRAY,
        },
        strings: Strings {
            not_string_mask: 0xff80,
            representation_mask: 7,
            seq_tag: 0,
            cons_tag: 1,
            external_tag: 2,
            sliced_tag: 3,
            thin_tag: 5,
            encoding_mask: 8,
            one_byte_tag: 8,
            length: 12,
            seq_one_byte_chars: 16,
            seq_two_byte_chars: 16,
            cons_first: 16,
            cons_second: 24,
            thin_actual: 16,
            sliced_parent: 16,
            sliced_offset: 24,
            external: Some(External {
                data: 24,
                uncached_mask: 16,
            }),
        },
        heap_object_map: 0,
        map_instance_type: 12,
        function_shared: 32,
        function_code: FunctionCode::Pointer(24),
        sfi_name_or_scope_info: 16,
        sfi_script: 32,
        script_source: 8,
        script_name: 16,
        script_line_ends: 56,
        fixed_array_length: 8,
        fixed_array_data: 16,
        code: CodeLayout {
            instruction_start: 40,
            instruction_size: 52,
            flags: 48,
            kind_mask: 15,
            kind_shift: 0,
            kind_interpreted: 9,
            kind_baseline: 10,
        },
        bytecode_array_data: 64,
        bytecode_array_length: 8,
        scope_info: Some(ScopeInfoLayout {
            ncontextlocals: 2,
            first_vars: 3,
        }),
        source: crate::runtime::v8::source::SourceLayout::default(),
        feedback: Some(FeedbackLayout {
            function_cell: 40,
            cell_value: 8,
            vector_type: FEEDBACK_VECTOR,
            code_wrapper_type: Some(CODE_WRAPPER),
        }),
    }
}

const BASE: u64 = 0x10_0000;

/// A made-up heap: objects one after another from [`BASE`], each map
/// made once per type.
#[derive(Default)]
struct Fake {
    bytes: Vec<u8>,
    maps: Vec<(u16, u64)>,
}

fn smi_word(v: i64) -> u64 {
    (v << 32) as u64
}

impl Fake {
    /// Room for `len` bytes (rounded up to words); its untagged address.
    fn alloc(&mut self, len: usize) -> u64 {
        let at = BASE + self.bytes.len() as u64;
        self.bytes.resize(self.bytes.len() + len.div_ceil(8) * 8, 0);
        at
    }

    fn put(&mut self, addr: u64, bytes: &[u8]) {
        let at = (addr - BASE) as usize;
        self.bytes[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn put_u64(&mut self, addr: u64, v: u64) {
        self.put(addr, &v.to_ne_bytes());
    }

    /// The (tagged) map of instance type `ty`.
    fn map(&mut self, ty: u16) -> u64 {
        if let Some(&(_, m)) = self.maps.iter().find(|(t, _)| *t == ty) {
            return m;
        }
        let m = self.alloc(16);
        self.put(m + 12, &ty.to_ne_bytes());
        self.maps.push((ty, m + 1));
        m + 1
    }

    /// An object of type `ty` with `words` words after its map; tagged.
    fn object(&mut self, ty: u16, words: &[u64]) -> u64 {
        let map = self.map(ty);
        let at = self.alloc(8 + 8 * words.len());
        self.put_u64(at, map);
        for (i, w) in words.iter().enumerate() {
            self.put_u64(at + 8 + 8 * i as u64, *w);
        }
        at + 1
    }

    /// A string header of type `ty` and length `len`, `room` bytes of
    /// fields after it; tagged.
    fn string(&mut self, ty: u16, len: i32, room: usize) -> u64 {
        let map = self.map(ty);
        let at = self.alloc(16 + room);
        self.put_u64(at, map);
        self.put(at + 12, &len.to_ne_bytes());
        at + 1
    }

    fn one_byte(&mut self, text: &[u8]) -> u64 {
        let s = self.string(SEQ_ONE, text.len() as i32, text.len());
        self.put(s - 1 + 16, text);
        s
    }

    fn two_byte(&mut self, text: &str) -> u64 {
        let units: Vec<u16> = text.encode_utf16().collect();
        let s = self.string(SEQ_TWO, units.len() as i32, units.len() * 2);
        let bytes: Vec<u8> = units.iter().flat_map(|u| u.to_ne_bytes()).collect();
        self.put(s - 1 + 16, &bytes);
        s
    }

    fn with(&mut self, ty: u16, len: i32, fields: &[(u64, u64)]) -> u64 {
        let s = self.string(ty, len, 16);
        for &(at, v) in fields {
            self.put_u64(s - 1 + at, v);
        }
        s
    }

    fn memory(&self) -> Buffer {
        Buffer {
            base: BASE,
            bytes: self.bytes.clone(),
        }
    }
}

/// `text` read back as a string of `heap`.
fn string_of(f: &Fake, obj: u64) -> Option<String> {
    let l = layout();
    let mem = f.memory();
    Heap::new(&l, &mem).read_string(obj)
}

#[test]
fn strings_of_every_representation_read() {
    let mut f = Fake::default();
    let plain = f.one_byte(b"fooBar");
    let latin1 = f.one_byte(b"caf\xe9");
    let wide = f.two_byte("m\u{fc}nchen\u{2192}");
    let left = f.one_byte(b"Socket.");
    let right = f.two_byte("_wr\u{ee}te");
    let cons = f.with(CONS_ONE, 13, &[(16, left), (24, right)]);
    let nested = f.with(CONS_ONE, 19, &[(16, cons), (24, plain)]);
    let thin = f.with(THIN_ONE, 6, &[(16, plain)]);
    let whole = f.one_byte(b"node:internal/modules/cjs/loader");
    let sliced = f.with(SLICED_ONE, 7, &[(16, whole), (24, smi_word(14))]);
    let data = f.alloc(8);
    f.put(data, b"external");
    let external = f.with(EXTERNAL_ONE, 8, &[(16, 0xdead_0000), (24, data)]);
    assert_eq!(string_of(&f, plain).as_deref(), Some("fooBar"));
    assert_eq!(string_of(&f, latin1).as_deref(), Some("caf\u{e9}"));
    assert_eq!(string_of(&f, wide).as_deref(), Some("m\u{fc}nchen\u{2192}"));
    assert_eq!(string_of(&f, cons).as_deref(), Some("Socket._wr\u{ee}te"));
    assert_eq!(
        string_of(&f, nested).as_deref(),
        Some("Socket._wr\u{ee}tefooBar")
    );
    assert_eq!(string_of(&f, thin).as_deref(), Some("fooBar"));
    assert_eq!(string_of(&f, sliced).as_deref(), Some("modules"));
    assert_eq!(string_of(&f, external).as_deref(), Some("external"));
    let empty = f.one_byte(b"");
    assert_eq!(string_of(&f, empty).as_deref(), Some(""));
}

#[test]
fn long_strings_are_cut_and_say_so() {
    let mut f = Fake::default();
    let long = f.one_byte(&[b'a'; MAX_NAME + 10]);
    let s = string_of(&f, long).unwrap();
    assert_eq!(s.chars().count(), MAX_NAME + 1);
    assert!(s.ends_with("a…"));
    // A cons string cut inside its second half.
    let first = f.one_byte(&[b'x'; MAX_NAME - 2]);
    let second = f.one_byte(b"yyyy");
    let cons = f.with(CONS_ONE, MAX_NAME as i32 + 2, &[(16, first), (24, second)]);
    let s = string_of(&f, cons).unwrap();
    assert!(s.ends_with("xyy…"), "{s}");
}

#[test]
fn garbage_strings_give_none() {
    let mut f = Fake::default();
    let plain = f.one_byte(b"ok");
    // A negative length, a huge one.
    let negative = f.string(SEQ_ONE, -5, 8);
    let huge = f.string(SEQ_ONE, i32::MAX, 8);
    // A cons string that is its own part: the depth bound ends it.
    let cyclic = f.string(CONS_ONE, 20, 16);
    f.put_u64(cyclic - 1 + 16, cyclic);
    f.put_u64(cyclic - 1 + 24, cyclic);
    // A cons string whose first part is longer than it.
    let long = f.one_byte(b"much too long");
    let short = f.with(CONS_ONE, 4, &[(16, long), (24, plain)]);
    // An uncached external string has no pointer to its characters.
    let uncached = f.with(UNCACHED_EXTERNAL_ONE, 8, &[(16, 0x1000)]);
    // Not a string: an oddball; an untagged word; outside the heap.
    let undefined = f.object(ODDBALL, &[0, 0]);
    let chars_away = f.with(EXTERNAL_ONE, 8, &[(24, 0x7777_0000)]);
    for (what, obj) in [
        ("negative length", negative),
        ("huge length", huge),
        ("cyclic cons", cyclic),
        ("part longer than the whole", short),
        ("uncached external", uncached),
        ("oddball", undefined),
        ("untagged", plain - 1),
        ("Smi", smi_word(3)),
        ("outside the heap", 0x9999_0001),
        ("external data outside", chars_away),
    ] {
        assert_eq!(string_of(&f, obj), None, "{what}");
    }
    // Without the external strings' layout, none is read.
    let data = f.alloc(8);
    f.put(data, b"external");
    let external = f.with(EXTERNAL_ONE, 8, &[(24, data)]);
    let mut l = layout();
    l.strings.external = None;
    let mem = f.memory();
    assert_eq!(Heap::new(&l, &mem).read_string(external), None);
}

/// A ScopeInfo with `locals` context locals (names inlined below 75, a
/// hash table slot from 75), then `tail` (the function variable's name
/// and slot, the inferred name, ...).
fn scope_info(f: &mut Fake, locals: usize, tail: &[u64]) -> u64 {
    let local = f.one_byte(b"local");
    let mut words = vec![smi_word(0x171c2), smi_word(1), smi_word(locals as i64)];
    let names = if locals < 75 { locals } else { 1 };
    words.extend(std::iter::repeat_n(local, names));
    words.extend(std::iter::repeat_n(smi_word(0), locals));
    words.extend_from_slice(tail);
    f.object(SCOPE_INFO, &words)
}

#[test]
fn function_names_come_from_where_v8_keeps_them() {
    let mut f = Fake::default();
    let undefined = f.object(ODDBALL, &[0, 0]);
    let name = f.one_byte(b"renderPage");
    let empty = f.one_byte(b"");
    let inferred = f.one_byte(b"Socket._write");
    let outer = scope_info(&mut f, 0, &[]);
    let minus_one = smi_word(-1);
    let cases = [
        // Not compiled: the name itself.
        ("a string", name, "renderPage"),
        ("no shared name", smi_word(0), ANONYMOUS),
        ("an empty string", empty, ANONYMOUS),
        (
            "named",
            scope_info(&mut f, 2, &[name, minus_one, undefined, outer]),
            "renderPage",
        ),
        (
            "inferred",
            scope_info(&mut f, 0, &[empty, minus_one, inferred, smi_word(10)]),
            "Socket._write",
        ),
        (
            "neither",
            scope_info(&mut f, 1, &[smi_word(0), minus_one, undefined, outer]),
            ANONYMOUS,
        ),
        (
            "a class's saved variable first",
            scope_info(&mut f, 3, &[smi_word(2), name, minus_one, undefined]),
            "renderPage",
        ),
        (
            "locals in a hash table",
            scope_info(&mut f, 80, &[name, minus_one, undefined, outer]),
            "renderPage",
        ),
    ];
    let l = layout();
    let mem = f.memory();
    let heap = Heap::new(&l, &mem);
    for (what, value, want) in cases {
        let mut g = Fake {
            bytes: f.bytes.clone(),
            maps: f.maps.clone(),
        };
        let sfi = g.object(SFI, &[0, value]);
        let mem = g.memory();
        let heap = Heap::new(&l, &mem);
        assert_eq!(heap.function_name(sfi).as_deref(), Some(want), "{what}");
        // Not a shared function info.
        assert_eq!(heap.function_name(value), None, "{what}");
    }
    // A ScopeInfo read where its layout was not checked: no guess.
    let si = scope_info(&mut f, 0, &[name, minus_one, undefined]);
    let sfi = f.object(SFI, &[0, si]);
    let mut unchecked = layout();
    unchecked.scope_info = None;
    let mem = f.memory();
    assert_eq!(Heap::new(&unchecked, &mem).function_name(sfi), None);
    assert_eq!(
        Heap::new(&l, &mem).function_name(sfi).as_deref(),
        Some("renderPage")
    );
    // A local count that is not one.
    let bad = f.object(SCOPE_INFO, &[0, smi_word(0), smi_word(-3), name]);
    let sfi = f.object(SFI, &[0, bad]);
    let mem = f.memory();
    assert_eq!(Heap::new(&l, &mem).function_name(sfi), None);
    assert_eq!(heap.function_name(0), None);
}

#[test]
fn scripts_name_their_functions_files() {
    let mut f = Fake::default();
    let source = f.one_byte(b"// one\nfunction two() {}\r\n\r\nfour\rfive");
    let path = f.one_byte(b"/srv/app/server.js");
    let undefined = f.object(ODDBALL, &[0, 0]);
    let script = f.object(SCRIPT, &[source, path, 0, 0, 0, 0, undefined]);
    let sfi = f.object(SFI, &[0, 0, 0, script]);
    let fn_map_sfi = f.object(JS_FUNCTION + 16, &[0, 0, 0, sfi]);
    let not_fn = f.object(JS_FUNCTION + 17, &[0, 0, 0, sfi]);
    let l = layout();
    let mem = f.memory();
    let heap = Heap::new(&l, &mem);
    assert!(heap.is_js_function(fn_map_sfi));
    assert!(!heap.is_js_function(not_fn));
    assert!(!heap.is_js_function(sfi));
    assert_eq!(heap.shared(fn_map_sfi), Some(sfi));
    assert_eq!(heap.shared(not_fn), None);
    assert_eq!(heap.script(sfi), Some(script));
    assert_eq!(heap.script(script), None);
    assert_eq!(heap.script_name(sfi).as_deref(), Some("/srv/app/server.js"));
    let table = heap.line_table(script).unwrap();
    assert_eq!(table.from, LineSource::Source);
    assert!(table.weight() >= 4 * 4);
    // "// one\n" ends at 6; "function" starts at 7, line 2; "\r\n" is one
    // end (at its "\n", 25); "\r" alone ends line 4.
    for (position, line) in [
        (0, 1),
        (6, 1),
        (7, 2),
        (25, 2),
        (26, 3),
        (28, 4),
        (33, 5),
        (37, 5),
    ] {
        assert_eq!(
            heap.line_of(script, position),
            Some(line),
            "position {position}"
        );
    }
    assert_eq!(heap.line_of(script, 38), None, "past the source");
    assert_eq!(heap.line_of(sfi, 0), None, "not a script");
}

#[test]
fn a_source_longer_than_a_read_is_counted_across_its_pieces() {
    // Two-byte text whose "\r\n" straddles the end of the first read
    // (READ_CHUNK bytes: READ_CHUNK / 2 code units).
    let half = READ_CHUNK / 2;
    let mut text = "x".repeat(half - 1);
    text.push_str("\r\nline two\u{2028}three");
    let mut f = Fake::default();
    let source = f.two_byte(&text);
    let undefined = f.object(ODDBALL, &[0, 0]);
    let script = f.object(SCRIPT, &[source, 0, 0, 0, 0, 0, undefined]);
    let l = layout();
    let mem = f.memory();
    let heap = Heap::new(&l, &mem);
    let table = heap.line_table(script).unwrap();
    let units: Vec<u16> = text.encode_utf16().collect();
    assert_eq!(table, count_lines(&units, true), "as if read at once");
    // One end at the "\n" (not two), one at U+2028, and the length.
    assert_eq!(
        table.ends,
        [half as u32, half as u32 + 9, units.len() as u32]
    );
}

#[test]
fn line_ends_v8_filled_are_taken_when_sane() {
    let mut f = Fake::default();
    let source = f.one_byte(b"not read");
    let name = f.one_byte(b"file:///srv/app/main.mjs");
    let ends = f.object(
        FIXED_ARRAY,
        &[smi_word(3), smi_word(10), smi_word(20), smi_word(25)],
    );
    let script = f.object(SCRIPT, &[source, name, 0, 0, 0, 0, ends]);
    let descending = f.object(
        FIXED_ARRAY,
        &[smi_word(3), smi_word(10), smi_word(5), smi_word(25)],
    );
    let bad = f.object(SCRIPT, &[source, name, 0, 0, 0, 0, descending]);
    let l = layout();
    let mem = f.memory();
    let heap = Heap::new(&l, &mem);
    assert_eq!(heap.line_table(script).unwrap().from, LineSource::LineEnds);
    assert_eq!(heap.line_of(script, 10), Some(1));
    assert_eq!(heap.line_of(script, 11), Some(2));
    assert_eq!(heap.line_of(script, 25), Some(3));
    assert_eq!(heap.line_of(script, 26), None);
    assert_eq!(heap.line_table(bad), None);
}

/// 4,000 of `parts`, picked by a xorshift from `seed`, each followed by
/// up to `run - 1` of `filler`.
fn mixed<T: Copy>(parts: &[&[T]], filler: T, run: usize, seed: u32) -> Vec<T> {
    let mut out = Vec::new();
    let mut seed = seed;
    for _ in 0..4000 {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        out.extend_from_slice(parts[seed as usize % parts.len()]);
        out.extend(std::iter::repeat_n(filler, seed as usize % run));
    }
    out
}

#[test]
fn lines_scanned_in_runs_end_where_unit_by_unit_they_do() {
    // Every terminator, doubled and mixed, control characters that end
    // no line, and text: counted whole and in pieces of several sizes,
    // so that "\r" and "\n" fall on both sides of a piece's end.
    let parts: [&[u16]; 9] = [
        &[0x0d, 0x0a],
        &[0x0d],
        &[0x0a],
        &[0x2028],
        &[0x2029],
        &[0x09, 0x0b, 0x0c],
        &[0x0d, 0x0d, 0x0a],
        &[0x2027, 0x202a, 0x41, 0x42],
        &[0xd83d, 0xde00, 0x0e],
    ];
    let units = mixed(&parts, 0x61, 5, 0x2545_f491);
    for whole in [true, false] {
        let want = count_lines(&units, whole);
        assert!(want.ends.len() > 2000, "{}", want.ends.len());
        for cuts in [&[usize::MAX][..], &[1], &[2, 3], &[7, 1, 64], &[4096]] {
            assert_eq!(scan_lines(&units, cuts, whole), want, "cuts {cuts:?}");
        }
        // Ending on a "\r" cut off.
        let cut = &units[..units.iter().rposition(|&u| u == 0x0d).unwrap() + 1];
        assert_eq!(scan_lines(cut, &[5, 9], whole), count_lines(cut, whole));
    }
}

#[test]
fn one_byte_sources_end_their_lines_where_unit_by_unit_they_do() {
    // Latin-1 only: "\r", "\n" and "\r\n" end lines; NEL (0x85), the
    // other controls and letters do not.
    let parts: [&[u8]; 7] = [
        b"\r\n",
        b"\r",
        b"\n",
        b"\r\r\n",
        &[0x09, 0x0b, 0x0c, 0x85],
        &[0xe9, 0xff, 0x41],
        b"\n\n",
    ];
    let bytes = mixed(&parts, b'a', 40, 0x9e37_79b9);
    let units: Vec<u16> = bytes.iter().map(|&b| u16::from(b)).collect();
    for whole in [true, false] {
        let want = count_lines(&units, whole);
        assert!(want.ends.len() > 2000, "{}", want.ends.len());
        for cuts in [&[usize::MAX][..], &[1], &[2, 3], &[7, 1, 64], &[4096]] {
            assert_eq!(scan_byte_lines(&bytes, cuts, whole), want, "cuts {cuts:?}");
        }
        let cut = &bytes[..bytes.iter().rposition(|&b| b == b'\r').unwrap() + 1];
        let cut_units = &units[..cut.len()];
        assert_eq!(
            scan_byte_lines(cut, &[5, 9], whole),
            count_lines(cut_units, whole)
        );
    }
}

#[test]
fn a_source_cut_short_has_lines_up_to_its_last_end() {
    let cut: Vec<u16> = "a\nbc\r".encode_utf16().collect();
    let t = count_lines(&cut, false);
    assert_eq!(t.line(1), Some(1));
    assert_eq!(t.line(2), None, "the \\r may be half of \\r\\n");
    let seps: Vec<u16> = "a\u{2028}b\u{2029}c".encode_utf16().collect();
    let t = count_lines(&seps, true);
    assert_eq!(
        (t.line(0), t.line(2), t.line(4), t.line(5)),
        (Some(1), Some(2), Some(3), Some(3))
    );
    assert_eq!(count_lines(&[], true).line(0), Some(1));
}

#[test]
fn code_fields_read_through_a_checked_code_object() {
    let mut f = Fake::default();
    // Flags (kind 12) at 48, size at 52.
    let flags_size = 12u64 | (180u64 << 32);
    let code = f.object(206, &[0, 0, 0, 0, 0x7f00_0000_1000, flags_size]);
    let function = f.object(JS_FUNCTION, &[0, 0, code, 0]);
    let l = layout();
    let mem = f.memory();
    let heap = Heap::new(&l, &mem);
    assert_eq!(heap.code(function, None), Some(code));
    assert_eq!(heap.code_kind(code), Some(12));
    assert_eq!(
        heap.instructions(code),
        Some(0x7f00_0000_1000..0x7f00_0000_10b4)
    );
    assert_eq!(heap.code_kind(function), None);
    assert_eq!(heap.instructions(function), None);
    // Leaptiering: the handle's entry in a dispatch table.
    let table = f.alloc(16 * 4);
    f.put_u64(table + 3 * 16 + 8, ((code - 1) << 16) | 2);
    let with_handle = f.object(JS_FUNCTION, &[0, 0, 3 << 8, 0]);
    let mut leap = layout();
    leap.function_code = FunctionCode::DispatchHandle { offset: 24 };
    let mem = f.memory();
    let heap = Heap::new(&leap, &mem);
    assert_eq!(heap.code(with_handle, Some(table)), Some(code));
    assert_eq!(heap.code(with_handle, None), None);
    assert_eq!(heap.code(with_handle, Some(table + 8)), None);
}

#[test]
fn code_compiled_on_stack_replacement_is_found_in_the_functions_feedback() {
    let mut f = Fake::default();
    let code_at =
        |f: &mut Fake, start: u64| f.object(206, &[0, 0, 0, 0, start, 12 | (0x100 << 32)]);
    // The function's own code, and two more its feedback keeps: one
    // directly (weakly), one through its wrapper (V8 12 on).
    let own = code_at(&mut f, 0x7f00_0000_1000);
    let other = code_at(&mut f, 0x7f00_0000_2000);
    let osr = code_at(&mut f, 0x7f00_0000_3000);
    let wrapper = f.object(CODE_WRAPPER, &[osr]);
    let unrelated = f.one_byte(b"not code");
    let vector = f.object(
        FEEDBACK_VECTOR,
        &[smi_word(7), unrelated, other | 2, smi_word(0), wrapper | 2],
    );
    let cell = f.object(FEEDBACK_CELL, &[vector]);
    let function = f.object(JS_FUNCTION, &[0, 0, own, 0, cell]);
    let no_vector = f.object(FEEDBACK_CELL, &[unrelated]);
    let fresh = f.object(JS_FUNCTION, &[0, 0, own, 0, no_vector]);
    // Room after the last object, as a page would have.
    f.alloc(4096);
    let l = layout();
    let mem = f.memory();
    let heap = Heap::new(&l, &mem);
    assert_eq!(heap.feedback_code(function, 0x7f00_0000_3010), Some(osr));
    assert_eq!(heap.feedback_code(function, 0x7f00_0000_20ff), Some(other));
    // A pc in no code.
    assert_eq!(heap.feedback_code(function, 0x7f00_0000_3100), None);
    assert_eq!(heap.feedback_code(function, 0x7f00_0000_0fff), None);
    // No vector yet; not a function; no layout for it.
    assert_eq!(heap.feedback_code(fresh, 0x7f00_0000_3010), None);
    assert_eq!(heap.feedback_code(vector, 0x7f00_0000_3010), None);
    let mut without = layout();
    without.feedback = None;
    assert_eq!(
        Heap::new(&without, &mem).feedback_code(function, 0x7f00_0000_3010),
        None
    );
}
