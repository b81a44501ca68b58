//! Layouts of the official node binaries here, against what
//! /work/notes/v8-facts.md measured (and what the live checks in
//! live_tests.rs read with them); and the refusals: another tagging, a
//! missing constant without a checked fallback.

use super::super::symbols::tests::{binaries, read};
use super::*;

/// What one V8 of the four is expected to give.
struct Expect {
    version: [u32; 4],
    /// Interpreted, baseline, Maglev, TurboFan, stub, builtin exit.
    frames: [u32; 6],
    js_function: RangeInclusive<u16>,
    /// SharedFunctionInfo, Code, BytecodeArray, Script, ScopeInfo,
    /// FixedArray.
    types: [u16; 6],
    function_code: FunctionCode,
    function_shared: u16,
    /// name_or_scope_info, script.
    sfi: [u16; 2],
    /// instruction start, size, flags.
    code: [u16; 3],
    /// Interpreted, baseline.
    kinds: [u32; 2],
    bytecode_array_data: u16,
    first_vars: u32,
}

fn expect(v: &Version) -> Option<Expect> {
    Some(match (v.major, v.minor) {
        (11, 3) => Expect {
            version: [11, 3, 244, 8],
            frames: [13, 14, 15, 16, 17, 25],
            js_function: 2066..=2081,
            types: [262, 245, 191, 167, 261, 175],
            // The fallbacks of V8 11.3.
            function_code: FunctionCode::Pointer(48),
            function_shared: 24,
            sfi: [16, 32],
            code: [40, 56, 48],
            kinds: [10, 11],
            // Packed after a u16 (--print-bytecode's addresses agree).
            bytecode_array_data: 54,
            first_vars: 3,
        },
        (12, 4) => Expect {
            version: [12, 4, 254, 21],
            frames: [13, 14, 15, 16, 17, 26],
            js_function: 2066..=2082,
            types: [274, 206, 205, 167, 272, 174],
            function_code: FunctionCode::Pointer(24),
            function_shared: 32,
            sfi: [16, 32],
            code: [40, 52, 48],
            kinds: [9, 10],
            bytecode_array_data: 64,
            first_vars: 3,
        },
        (13, 6) => Expect {
            version: [13, 6, 233, 17],
            frames: [14, 15, 16, 17, 18, 27],
            js_function: 2065..=2081,
            types: [282, 187, 186, 167, 280, 205],
            function_code: FunctionCode::DispatchHandle { offset: 24 },
            function_shared: 32,
            sfi: [24, 40],
            code: [40, 56, 52],
            kinds: [9, 10],
            bytecode_array_data: 64,
            first_vars: 5,
        },
        (14, 6) => Expect {
            version: [14, 6, 202, 34],
            // Renumbered: the wasm frames moved to the end.
            frames: [4, 5, 6, 7, 8, 17],
            js_function: 2066..=2082,
            types: [288, 186, 185, 166, 286, 205],
            function_code: FunctionCode::DispatchHandle { offset: 24 },
            function_shared: 32,
            sfi: [24, 40],
            code: [40, 56, 52],
            kinds: [10, 11],
            bytecode_array_data: 64,
            first_vars: 5,
        },
        _ => return None,
    })
}

#[test]
fn node_binaries_give_the_layouts_measured() {
    let mut by_version: Vec<(&str, Layout)> = Vec::new();
    for (name, path) in binaries() {
        let layout = Layout::from_symbols(&read(&path)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let v = layout.version;
        let Some(e) = expect(&v) else {
            eprintln!("skipped: {name} is {v}, not one measured");
            continue;
        };
        let l = &layout;
        assert_eq!([v.major, v.minor, v.build, v.patch], e.version, "{name}");
        assert_eq!(
            l.frame,
            FrameSlots {
                context: -8,
                function: -16,
                bytecode_array: -32,
                bytecode_offset: -40,
            },
            "{name}"
        );
        let f = &l.frame_types;
        assert_eq!((f.entry, f.construct_entry, f.exit), (1, 2, 3), "{name}");
        assert_eq!(
            [
                f.interpreted,
                f.baseline,
                f.maglev,
                f.turbofan,
                f.stub,
                f.builtin_exit
            ],
            e.frames,
            "{name}"
        );
        assert_eq!(l.frame_type_name(f.interpreted), Some("InterpretedFrame"));
        let optimized = if v.major >= 13 {
            "TurbofanJSFrame"
        } else {
            "TurbofanFrame"
        };
        assert_eq!(l.frame_type_name(f.turbofan), Some(optimized), "{name}");
        let t = &l.types;
        assert_eq!(t.js_function, e.js_function, "{name}");
        assert_eq!(
            [
                t.shared_function_info,
                t.code,
                t.bytecode_array,
                t.script,
                t.scope_info,
                t.fixed_array
            ],
            e.types,
            "{name}"
        );
        assert_eq!(l.function_code, e.function_code, "{name}");
        assert_eq!(l.function_shared, e.function_shared, "{name}");
        assert_eq!([l.sfi_name_or_scope_info, l.sfi_script], e.sfi, "{name}");
        let c = &l.code;
        assert_eq!(
            [c.instruction_start, c.instruction_size, c.flags],
            e.code,
            "{name}"
        );
        assert_eq!((c.kind_mask, c.kind_shift), (15, 0), "{name}");
        assert_eq!([c.kind_interpreted, c.kind_baseline], e.kinds, "{name}");
        assert_eq!(l.bytecode_array_data, e.bytecode_array_data, "{name}");
        assert_eq!(l.bytecode_array_length, 8, "{name}");
        assert_eq!(
            l.scope_info,
            Some(ScopeInfoLayout {
                ncontextlocals: 2,
                first_vars: e.first_vars
            }),
            "{name}"
        );
        // The same on all four.
        assert_eq!((l.heap_object_map, l.map_instance_type), (0, 12), "{name}");
        assert_eq!(
            [l.script_source, l.script_name, l.script_line_ends],
            [8, 16, 56],
            "{name}"
        );
        assert_eq!((l.fixed_array_length, l.fixed_array_data), (8, 16));
        let s = &l.strings;
        assert_eq!(s.not_string_mask, 0xff80, "{name}");
        assert_eq!(
            (s.representation_mask, s.seq_tag, s.cons_tag, s.external_tag),
            (7, 0, 1, 2)
        );
        assert_eq!(
            (s.sliced_tag, s.thin_tag, s.encoding_mask, s.one_byte_tag),
            (3, 5, 8, 8)
        );
        assert_eq!(
            (s.length, s.seq_one_byte_chars, s.seq_two_byte_chars),
            (12, 16, 16)
        );
        assert_eq!((s.cons_first, s.cons_second, s.thin_actual), (16, 24, 16));
        assert_eq!(
            s.external,
            Some(External {
                data: 24,
                uncached_mask: 16
            }),
            "{name}"
        );
        by_version.push((name, layout));
    }
    // arm64's 22 and x86-64's share V8 12.4.254.21: the same layout.
    let of = |n: &str| by_version.iter().find(|(name, _)| *name == n).map(|x| &x.1);
    if let (Some(arm), Some(x86)) = (of("22 arm64"), of("22 amd64")) {
        assert_eq!(arm, x86);
    }
}

/// The symbols of V8 `version` with tags as official builds have them,
/// and nothing else.
fn tagged(version: [u32; 4]) -> Symbols {
    let mut s = Symbols {
        version: Some(version),
        ..Symbols::default()
    };
    for (k, v) in [
        ("HeapObjectTag", 1),
        ("HeapObjectTagMask", 3),
        ("SmiTag", 0),
        ("SmiTagMask", 1),
        ("SmiShiftSize", 31),
    ] {
        s.dbg.insert(k.into(), v);
    }
    s
}

#[test]
fn pointer_compression_is_refused_by_name() {
    let mut s = tagged([12, 4, 254, 21]);
    s.dbg.insert("SmiShiftSize".into(), 0);
    let e = Layout::from_symbols(&s).unwrap_err();
    assert!(e.contains("pointer compression"), "{e}");
    assert!(e.starts_with("V8 12.4.254.21"), "{e}");
    // Another tagging is refused too, naming the constant.
    let mut s = tagged([12, 4, 254, 21]);
    s.dbg.insert("HeapObjectTagMask".into(), 7);
    let e = Layout::from_symbols(&s).unwrap_err();
    assert!(e.contains("v8dbg_HeapObjectTagMask = 7"), "{e}");
}

#[test]
fn a_missing_constant_names_itself_and_the_version() {
    let e = Layout::from_symbols(&tagged([12, 4, 254, 21])).unwrap_err();
    assert_eq!(e, "V8 12.4.254.21: no v8dbg_off_fp_context");
    let mut s = tagged([12, 4, 254, 21]);
    s.dbg.remove("SmiTagMask");
    assert_eq!(
        Layout::from_symbols(&s).unwrap_err(),
        "V8 12.4.254.21: no v8dbg_SmiTagMask"
    );
}

/// A real V8's symbols with `edit` done, and the error its layout gives.
fn refused(major: u8, edit: impl Fn(&mut Symbols)) -> Option<String> {
    let path = crate::testutil::node(major, "amd64")?;
    let mut s = read(&path);
    edit(&mut s);
    Some(Layout::from_symbols(&s).unwrap_err())
}

#[test]
fn fallbacks_serve_only_the_v8s_they_were_checked_on() {
    // 12.4 has `JSFunction__code`: without it there is no fallback.
    if let Some(e) = refused(22, |s| {
        s.dbg
            .retain(|k, _| !k.starts_with("class_JSFunction__code__"))
    }) {
        assert_eq!(e, "V8 12.4.254.21: no v8dbg_class_JSFunction__code__*");
    }
    // The field's type suffix is left open in the name.
    if let Some(e) = refused(24, |s| {
        s.dbg
            .remove("class_SharedFunctionInfo__name_or_scope_info__Tagged_NameOrScopeInfoT_");
    }) {
        assert_eq!(
            e,
            "V8 13.6.233.17: no v8dbg_class_SharedFunctionInfo__name_or_scope_info__*"
        );
    }
    // 11.3's fallbacks, on another 11 (11.8: Node 21's).
    if let Some(e) = refused(20, |s| s.version = Some([11, 8, 172, 1])) {
        assert_eq!(
            e,
            "V8 11.8.172.1: no v8dbg_FirstJSFunctionType / LastJSFunctionType"
        );
    }
    // Leaptiering's handle offset, on a V8 13 it was not read on.
    if let Some(e) = refused(24, |s| s.version = Some([13, 7, 1, 0])) {
        assert_eq!(e, "V8 13.7.1.0: no v8dbg_class_JSFunction__code__*");
    }
    // Prefixes that disagree are refused, never one taken.
    if let Some(e) = refused(22, |s| {
        s.dbg.insert("class_Script__name__Smi".into(), 24);
    }) {
        assert!(
            e.starts_with("V8 12.4.254.21: v8dbg_class_Script__name__* disagree"),
            "{e}"
        );
    }
}

#[test]
fn versions_order_and_show() {
    let v = Version {
        major: 13,
        minor: 6,
        build: 233,
        patch: 17,
    };
    assert!(v.is(13, 6) && !v.is(13, 7) && !v.is(14, 6));
    assert_eq!(v.to_string(), "V8 13.6.233.17");
    assert!(
        v < Version {
            major: 14,
            ..Version::default()
        }
    );
}
