//! CPython's own table of where its structures keep their fields,
//! `_Py_DebugOffsets` (3.13+, at the start of `_PyRuntime`), read from the
//! live process: a patch release that moves a field is read as it is,
//! with no new flare.
//!
//! The table's own shape differs between minor versions (3.14 added
//! fields inside its sections, 3.15 more), so each version's is written
//! down here as its header declares it (`pycore_runtime.h` of 3.13,
//! `pycore_debug_offsets.h` of 3.14 and 3.15): the sections in order,
//! each a list of 64-bit fields, a field found by its section and name.

use super::layout::Layout;

/// A section of the table: its name and its fields, in order, each a
/// `uint64_t`; the first is the structure's size where it has one.
type Section = (&'static str, &'static [&'static str]);

/// The cookie, the version and `free_threaded` come first.
const HEADER: usize = 24;

const RUNTIME: Section = (
    "runtime_state",
    &["size", "finalizing", "interpreters_head"],
);
const PYOBJECT: Section = ("pyobject", &["size", "ob_type"]);
const TUPLE: Section = ("tuple_object", &["size", "ob_item", "ob_size"]);
const LIST: Section = ("list_object", &["size", "ob_item", "ob_size"]);
const SET: Section = ("set_object", &["size", "used", "table", "mask"]);
const DICT: Section = ("dict_object", &["size", "ma_keys", "ma_values"]);
const FLOAT: Section = ("float_object", &["size", "ob_fval"]);
const LONG: Section = ("long_object", &["size", "lv_tag", "ob_digit"]);
const BYTES: Section = ("bytes_object", &["size", "ob_size", "ob_sval"]);
const GEN: Section = (
    "gen_object",
    &["size", "gi_name", "gi_iframe", "gi_frame_state"],
);
const LLIST: Section = ("llist_node", &["next", "prev"]);
const DEBUGGER: Section = (
    "debugger_support",
    &[
        "eval_breaker",
        "remote_debugger_support",
        "remote_debugging_enabled",
        "debugger_pending_call",
        "debugger_script_path",
        "debugger_script_path_size",
    ],
);
const INTERP_314: Section = (
    "interpreter_state",
    &[
        "size",
        "id",
        "next",
        "threads_head",
        "threads_main",
        "gc",
        "imports_modules",
        "sysdict",
        "builtins",
        "ceval_gil",
        "gil_runtime_state",
        "gil_runtime_state_enabled",
        "gil_runtime_state_locked",
        "gil_runtime_state_holder",
        "code_object_generation",
        "tlbc_generation",
    ],
);
const FRAME_314: Section = (
    "interpreter_frame",
    &[
        "size",
        "previous",
        "executable",
        "instr_ptr",
        "localsplus",
        "owner",
        "stackpointer",
        "tlbc_index",
    ],
);
const CODE_314: Section = (
    "code_object",
    &[
        "size",
        "filename",
        "name",
        "qualname",
        "linetable",
        "firstlineno",
        "argcount",
        "localsplusnames",
        "localspluskinds",
        "co_code_adaptive",
        "co_tlbc",
    ],
);

/// 3.13's sections that 3.14 kept as they were.
const THREAD_313: Section = (
    "thread_state",
    &[
        "size",
        "prev",
        "next",
        "interp",
        "current_frame",
        "thread_id",
        "native_thread_id",
        "datastack_chunk",
        "status",
    ],
);
const TYPE_313: Section = ("type_object", &["size", "tp_name", "tp_repr", "tp_flags"]);
const UNICODE_313: Section = (
    "unicode_object",
    &["size", "state", "length", "asciiobject_size"],
);
const GC_313: Section = ("gc", &["size", "collecting"]);

/// 3.13 (70 fields, 584 bytes).
const V3_13: &[Section] = &[
    RUNTIME,
    (
        "interpreter_state",
        &[
            "size",
            "id",
            "next",
            "threads_head",
            "gc",
            "imports_modules",
            "sysdict",
            "builtins",
            "ceval_gil",
            "gil_runtime_state",
            "gil_runtime_state_enabled",
            "gil_runtime_state_locked",
            "gil_runtime_state_holder",
        ],
    ),
    THREAD_313,
    (
        "interpreter_frame",
        &[
            "size",
            "previous",
            "executable",
            "instr_ptr",
            "localsplus",
            "owner",
        ],
    ),
    (
        "code_object",
        &[
            "size",
            "filename",
            "name",
            "qualname",
            "linetable",
            "firstlineno",
            "argcount",
            "localsplusnames",
            "localspluskinds",
            "co_code_adaptive",
        ],
    ),
    PYOBJECT,
    TYPE_313,
    TUPLE,
    LIST,
    DICT,
    FLOAT,
    LONG,
    BYTES,
    UNICODE_313,
    GC_313,
];

/// 3.14 (92 fields, 760 bytes).
const V3_14: &[Section] = &[
    RUNTIME,
    INTERP_314,
    THREAD_313,
    FRAME_314,
    CODE_314,
    PYOBJECT,
    TYPE_313,
    TUPLE,
    LIST,
    SET,
    DICT,
    FLOAT,
    LONG,
    BYTES,
    UNICODE_313,
    GC_313,
    GEN,
    LLIST,
    DEBUGGER,
];

/// 3.15 (108 fields, 888 bytes; the release's, not its betas').
const V3_15: &[Section] = &[
    RUNTIME,
    INTERP_314,
    (
        "thread_state",
        &[
            "size",
            "prev",
            "next",
            "interp",
            "current_frame",
            "base_frame",
            "last_profiled_frame",
            "last_profiled_frame_seq",
            "thread_id",
            "native_thread_id",
            "datastack_chunk",
            "status",
            "holds_gil",
            "gil_requested",
            "current_exception",
            "exc_state",
        ],
    ),
    ("err_stackitem", &["exc_value"]),
    FRAME_314,
    CODE_314,
    PYOBJECT,
    (
        "type_object",
        &[
            "size",
            "tp_name",
            "tp_repr",
            "tp_flags",
            "tp_basicsize",
            "tp_dictoffset",
        ],
    ),
    ("heap_type_object", &["size", "ht_cached_keys"]),
    TUPLE,
    LIST,
    SET,
    DICT,
    FLOAT,
    LONG,
    BYTES,
    (
        "unicode_object",
        &[
            "size",
            "state",
            "length",
            "asciiobject_size",
            "compactunicodeobject_size",
        ],
    ),
    (
        "gc",
        &[
            "size",
            "collecting",
            "frame",
            "generation_stats_size",
            "generation_stats",
        ],
    ),
    GEN,
    LLIST,
    DEBUGGER,
];

/// The shape of 3.`minor`'s table, for the versions that have one.
fn shape(minor: u8) -> Option<&'static [Section]> {
    match minor {
        13 => Some(V3_13),
        14 => Some(V3_14),
        15 => Some(V3_15),
        _ => None,
    }
}

/// The size of 3.`minor`'s table: what [`from_debug_offsets`] reads.
pub fn table_size(minor: u8) -> Option<usize> {
    let fields: usize = shape(minor)?.iter().map(|(_, f)| f.len()).sum();
    Some(HEADER + 8 * fields)
}

/// The most any version's table takes.
pub const MAX_TABLE: usize = 888;

/// Where `section.field` is in the table of shape `shape`.
fn position(shape: &[Section], section: &str, field: &str) -> Option<usize> {
    let mut at = HEADER;
    for (name, fields) in shape {
        if *name == section {
            return fields.iter().position(|f| *f == field).map(|i| at + 8 * i);
        }
        at += 8 * fields.len();
    }
    None
}

/// `_Py_DebugOffsets.cookie`.
const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";

/// `base` (a layout from [`super::layout::for_version`], 3.13+) with the
/// offsets CPython's own table gives (`table`: the first
/// [`table_size`] bytes of `_PyRuntime`, read from the live process).
///
/// The table is the process's word, so it is checked before it is
/// believed: its cookie, its version (the same major.minor as `base`), a
/// default build (not free-threaded), and every offset taken (and those
/// of `base` it has no entry for) inside the size the table gives for its
/// structure. An error says what failed.
pub fn from_debug_offsets(base: Layout, table: &[u8]) -> Result<Layout, String> {
    let Some(shape) = shape(base.version.1).filter(|_| base.version.0 == 3) else {
        return Err(format!(
            "no _Py_DebugOffsets known for {}.{}",
            base.version.0, base.version.1
        ));
    };
    let word = |at: usize| -> Result<u64, String> {
        table
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| format!("_Py_DebugOffsets cut short at {} bytes", table.len()))
    };
    if table.get(..8) != Some(&DEBUG_COOKIE[..]) {
        return Err("no _Py_DebugOffsets (its cookie is not there)".into());
    }
    let hex = word(8)?;
    let (major, minor) = ((hex >> 24) & 0xff, (hex >> 16) & 0xff);
    if hex >> 32 != 0 || (major, minor) != (u64::from(base.version.0), u64::from(base.version.1)) {
        return Err(format!(
            "_Py_DebugOffsets is for version {hex:#x}, not {}.{}",
            base.version.0, base.version.1
        ));
    }
    if word(16)? != 0 {
        return Err("a free-threaded build (its objects have another layout)".into());
    }
    let at = |section: &str, field: &str| -> Result<usize, String> {
        position(shape, section, field)
            .ok_or_else(|| format!("_Py_DebugOffsets of 3.{minor} has no {section}.{field}"))
    };
    // Offset `off` (`width` bytes there) into `section`'s structure,
    // inside the size the table gives it.
    let inside = |name: &str, section: &str, off: u64, width: u64| -> Result<u16, String> {
        let size = word(at(section, "size")?)?;
        match off.checked_add(width) {
            Some(end) if end <= size => u16::try_from(off)
                .map_err(|_| format!("_Py_DebugOffsets: {name} at {off} is out of reach")),
            _ => Err(format!(
                "_Py_DebugOffsets: {name} at {off} is past its structure's {size} bytes"
            )),
        }
    };
    let take = |section: &str, field: &str, width: u64| -> Result<u16, String> {
        let name = format!("{section} {field}");
        inside(&name, section, word(at(section, field)?)?, width)
    };
    let ascii_size = take("unicode_object", "asciiobject_size", 0)?;
    // PyCompactUnicodeObject: PyASCIIObject, utf8_length and utf8 (3.15
    // gives its size).
    let compact_size = match at("unicode_object", "compactunicodeobject_size") {
        Ok(_) => take("unicode_object", "compactunicodeobject_size", 0)?,
        Err(_) => inside(
            "the compact unicode header",
            "unicode_object",
            u64::from(ascii_size) + 16,
            0,
        )?,
    };
    let runtime_autotss = match base.runtime_autotss {
        Some(off) => Some(inside(
            "runtime autoTSSkey",
            "runtime_state",
            off.into(),
            8,
        )?),
        None => None,
    };
    Ok(Layout {
        runtime_autotss,
        runtime_interpreters_head: take("runtime_state", "interpreters_head", 8)?,
        interp_threads_head: take("interpreter_state", "threads_head", 8)?,
        tstate_next: take("thread_state", "next", 8)?,
        tstate_frame: take("thread_state", "current_frame", 8)?,
        tstate_thread_id: take("thread_state", "thread_id", 8)?,
        frame_previous: take("interpreter_frame", "previous", 8)?,
        frame_code: take("interpreter_frame", "executable", 8)?,
        frame_instr: take("interpreter_frame", "instr_ptr", 8)?,
        frame_entry: take("interpreter_frame", "owner", 1)?,
        code_filename: take("code_object", "filename", 8)?,
        code_name: take("code_object", "name", 8)?,
        code_qualname: Some(take("code_object", "qualname", 8)?),
        code_linetable: take("code_object", "linetable", 8)?,
        code_firstlineno: take("code_object", "firstlineno", 4)?,
        code_argcount: take("code_object", "argcount", 4)?,
        code_flags: inside("code flags", "code_object", base.code_flags.into(), 4)?,
        code_adaptive: Some(take("code_object", "co_code_adaptive", 2)?),
        bytes_size: take("bytes_object", "ob_size", 8)?,
        bytes_data: take("bytes_object", "ob_sval", 1)?,
        unicode_state: take("unicode_object", "state", 4)?,
        unicode_ascii_size: ascii_size,
        unicode_compact_size: compact_size,
        ..base
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::python::layout::for_version;

    /// 3.13.0's table, as gdb prints `_PyRuntime.debug_offsets` of
    /// libpython3.13.so.1.0 (pyenv, x86-64).
    fn table_3_13() -> Vec<u8> {
        let words: [(usize, u64); 41] = [
            (8, 0x030d_00f0),
            (16, 0),
            (24, 283_320),
            (32, 608),
            (40, 632),
            (48, 194_968),
            (56, 7272),
            (64, 7264),
            (72, 7344),
            (152, 304),
            (160, 0),
            (168, 8),
            (176, 16),
            (184, 72),
            (192, 152),
            (200, 160),
            (224, 80),
            (232, 8),
            (240, 0),
            (248, 56),
            (256, 72),
            (264, 70),
            (272, 208),
            (280, 112),
            (288, 120),
            (296, 128),
            (304, 136),
            (312, 68),
            (320, 52),
            (328, 96),
            (336, 104),
            (344, 200),
            (512, 40),
            (520, 16),
            (528, 32),
            (536, 64),
            (544, 32),
            (552, 16),
            (560, 40),
            (568, 240),
            (576, 200),
        ];
        let mut t = vec![0u8; table_size(13).unwrap()];
        t[..8].copy_from_slice(DEBUG_COOKIE);
        for (at, v) in words {
            t[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        t
    }

    fn set(t: &mut [u8], at: usize, v: u64) {
        t[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// A table from its nonzero words (the cookie added).
    fn table_of(minor: u8, words: &[(usize, u64)]) -> Vec<u8> {
        let mut t = vec![0u8; table_size(minor).unwrap()];
        t[..8].copy_from_slice(DEBUG_COOKIE);
        for &(at, v) in words {
            t[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        t
    }

    /// The nonzero words of Debian sid's 3.14.10 `_PyRuntime.debug_offsets`
    /// (its initial value in the executable's data).
    const WORDS_3_14_10: [(usize, u64); 85] = [
        (8, 0x30e0af0),
        (24, 316_616),
        (32, 784),
        (40, 808),
        (48, 225_864),
        (56, 7280),
        (64, 7272),
        (72, 7344),
        (80, 7360),
        (88, 7408),
        (96, 7688),
        (104, 7672),
        (112, 7680),
        (120, 16),
        (128, 7784),
        (144, 7800),
        (152, 7792),
        (160, 7992),
        (176, 832),
        (192, 8),
        (200, 16),
        (208, 72),
        (216, 152),
        (224, 160),
        (232, 232),
        (240, 32),
        (248, 88),
        (256, 8),
        (272, 56),
        (280, 80),
        (288, 74),
        (296, 64),
        (312, 216),
        (320, 112),
        (328, 120),
        (336, 128),
        (344, 136),
        (352, 68),
        (360, 52),
        (368, 96),
        (376, 104),
        (384, 208),
        (400, 16),
        (408, 8),
        (416, 416),
        (424, 24),
        (432, 88),
        (440, 168),
        (448, 40),
        (456, 32),
        (464, 16),
        (472, 40),
        (480, 24),
        (488, 16),
        (496, 200),
        (504, 24),
        (512, 40),
        (520, 32),
        (528, 48),
        (536, 32),
        (544, 40),
        (552, 24),
        (560, 16),
        (568, 32),
        (576, 16),
        (584, 24),
        (592, 40),
        (600, 16),
        (608, 32),
        (616, 64),
        (624, 32),
        (632, 16),
        (640, 40),
        (648, 264),
        (656, 192),
        (664, 160),
        (672, 24),
        (680, 72),
        (688, 67),
        (704, 8),
        (712, 24),
        (720, 304),
        (728, 8076),
        (744, 4),
        (752, 512),
    ];

    /// The same of Debian sid's 3.15.2.
    const WORDS_3_15_2: [(usize, u64); 100] = [
        (8, 0x30f02f0),
        (24, 346_568),
        (32, 912),
        (40, 936),
        (48, 226_240),
        (56, 7272),
        (64, 7264),
        (72, 7336),
        (80, 7352),
        (88, 7400),
        (96, 7592),
        (104, 7576),
        (112, 7584),
        (120, 16),
        (128, 7736),
        (144, 7752),
        (152, 7744),
        (160, 7944),
        (176, 888),
        (192, 8),
        (200, 16),
        (208, 72),
        (216, 80),
        (224, 88),
        (232, 96),
        (240, 176),
        (248, 184),
        (256, 256),
        (264, 32),
        (272, 36),
        (280, 40),
        (288, 136),
        (296, 288),
        (312, 88),
        (320, 8),
        (336, 56),
        (344, 80),
        (352, 74),
        (360, 64),
        (376, 216),
        (384, 112),
        (392, 120),
        (400, 128),
        (408, 136),
        (416, 68),
        (424, 52),
        (432, 96),
        (440, 104),
        (448, 208),
        (464, 16),
        (472, 8),
        (480, 424),
        (488, 24),
        (496, 88),
        (504, 168),
        (512, 32),
        (520, 288),
        (528, 944),
        (536, 888),
        (544, 40),
        (552, 32),
        (560, 16),
        (568, 40),
        (576, 24),
        (584, 16),
        (592, 200),
        (600, 24),
        (608, 40),
        (616, 32),
        (624, 48),
        (632, 32),
        (640, 40),
        (648, 24),
        (656, 16),
        (664, 32),
        (672, 16),
        (680, 24),
        (688, 40),
        (696, 16),
        (704, 32),
        (712, 64),
        (720, 32),
        (728, 16),
        (736, 40),
        (744, 56),
        (752, 176),
        (760, 112),
        (768, 120),
        (776, 1120),
        (784, 104),
        (792, 160),
        (800, 24),
        (808, 72),
        (816, 67),
        (832, 8),
        (840, 24),
        (848, 344),
        (856, 8028),
        (872, 4),
        (880, 512),
    ];

    #[test]
    fn the_shapes_add_up_to_the_sizes_cpython_gives() {
        assert_eq!(table_size(13), Some(584));
        assert_eq!(table_size(14), Some(760));
        assert_eq!(table_size(15), Some(MAX_TABLE));
        assert_eq!(table_size(12), None);
        // 3.15's thread state has three more fields before thread_id.
        assert_eq!(position(V3_14, "thread_state", "thread_id"), Some(216));
        assert_eq!(position(V3_15, "thread_state", "thread_id"), Some(240));
        assert_eq!(position(V3_15, "interpreter_frame", "owner"), Some(352));
    }

    #[test]
    fn the_3_14_and_3_15_tables_agree_with_their_headers() {
        for (minor, words) in [(14, &WORDS_3_14_10[..]), (15, &WORDS_3_15_2[..])] {
            let base = for_version(minor).unwrap();
            let got = from_debug_offsets(base.clone(), &table_of(minor, words))
                .unwrap_or_else(|e| panic!("3.{minor}: {e}"));
            assert_eq!(got, base, "3.{minor}");
        }
    }

    #[test]
    fn a_patch_release_that_moves_a_field_is_read_as_it_is() {
        let mut t = table_of(15, &WORDS_3_15_2);
        set(&mut t, 240, 184); // thread_state.thread_id
        set(&mut t, 352, 75); // interpreter_frame.owner
        let got = from_debug_offsets(for_version(15).unwrap(), &t).expect("inside");
        assert_eq!((got.tstate_thread_id, got.frame_entry), (184, 75));
        // Another version's table is refused, not misread.
        let other = from_debug_offsets(for_version(14).unwrap(), &t).expect_err("3.15's");
        assert!(other.contains("version"), "{other}");
    }

    #[test]
    fn the_3_13_table_agrees_with_the_figures_read_with_gdb() {
        let base = for_version(13).unwrap();
        let got = from_debug_offsets(base.clone(), &table_3_13()).expect("a good table");
        assert_eq!(got, base);
    }

    #[test]
    fn the_table_is_taken_over_the_figures() {
        let mut t = table_3_13();
        set(&mut t, 192, 160); // thread_id
        set(&mut t, 560, 48); // asciiobject_size
        let got = from_debug_offsets(for_version(13).unwrap(), &t).expect("still inside");
        assert_eq!(got.tstate_thread_id, 160);
        assert_eq!((got.unicode_ascii_size, got.unicode_compact_size), (48, 64));
    }

    #[test]
    fn a_table_that_fails_its_checks_is_refused() {
        let base = for_version(13).unwrap();
        let refused = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut t = table_3_13();
            edit(&mut t);
            from_debug_offsets(base.clone(), &t).expect_err("refused")
        };
        assert!(refused(&|t| t[0] = b'y').contains("cookie"));
        assert!(refused(&|t| set(t, 8, 0x030c_01f0)).contains("version"));
        assert!(refused(&|t| set(t, 8, 0x1_030d_00f0)).contains("version"));
        assert!(refused(&|t| set(t, 16, 1)).contains("free-threaded"));
        // thread_id past sizeof(PyThreadState).
        assert!(refused(&|t| set(t, 192, 300)).contains("thread_id"));
        assert!(refused(&|t| set(t, 192, u64::MAX)).contains("thread_id"));
        // A structure said to be small enough that the base's own figure
        // (autoTSSkey) falls outside it.
        assert!(refused(&|t| set(t, 24, 1000)).contains("autoTSSkey"));
        // An offset that fits its (huge) structure but not a u16.
        assert!(refused(&|t| {
            set(t, 48, 1 << 40);
            set(t, 72, 1 << 20);
        })
        .contains("out of reach"));
        assert!(refused(&|t| t.truncate(300)).contains("cut short"));
        assert!(from_debug_offsets(base.clone(), b"").is_err());
    }
}
