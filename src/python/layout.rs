//! Where CPython keeps what flare reads, per minor version: the thread
//! state's current frame, a frame's code object, caller and instruction,
//! a code object's names, line table and cookie fields, and the strings
//! they point to.
//!
//! 3.8–3.12 have no table of their own: the figures below were read from
//! each version's debug information (x86-64, default GIL build) and are
//! the same in every patch release (CPython keeps these structures stable
//! within a minor version). 3.13 carries its own table, `_Py_DebugOffsets`
//! at the start of `_PyRuntime`: [`from_debug_offsets`] checks it and
//! takes what it gives over these figures.

/// How a version's frames are chained and where a C-level eval call's
/// run of Python frames ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameModel {
    /// 3.8–3.10: heap `PyFrameObject`s (`f_back`, `f_code`, `f_lasti` in
    /// code units or bytes); each runs in an eval call of its own.
    Object,
    /// 3.11: `_PyInterpreterFrame`s on the thread's data stack; the last
    /// frame of an eval call has `is_entry` set.
    Entry,
    /// 3.12+: as 3.11, but an eval call starts with a shim frame owned by
    /// the C stack (`owner == FRAME_OWNED_BY_CSTACK`), which is skipped.
    Owner,
}

impl FrameModel {
    /// Its number in BPF (`struct py_proc`'s `model`).
    pub fn bpf_value(self) -> u8 {
        match self {
            FrameModel::Object => 0,
            FrameModel::Entry => 1,
            FrameModel::Owner => 2,
        }
    }
}

/// Offsets (bytes) into CPython's structures for one minor version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// (3, minor).
    pub version: (u8, u8),
    pub model: FrameModel,
    /// `_PyRuntime`: the `Py_tss_t` of `autoTSSkey` (its key is 4 bytes
    /// further), and the first interpreter.
    pub runtime_autotss: u16,
    pub runtime_interpreters_head: u16,
    /// `PyInterpreterState`: its first thread state.
    pub interp_threads_head: u16,
    /// `PyThreadState`: the next thread state, the thread's `pthread_t`,
    /// and the current frame (3.8–3.10 `frame`, 3.13 `current_frame`) or,
    /// with [`Layout::cframe_current`], the `_PyCFrame *` that holds it.
    pub tstate_next: u16,
    pub tstate_thread_id: u16,
    pub tstate_frame: u16,
    pub cframe_current: Option<u16>,
    /// Frames: caller, code object, instruction (`f_lasti`, an int, for
    /// [`FrameModel::Object`]; else a pointer into the code), and the
    /// entry mark (`is_entry` or `owner`, one byte).
    pub frame_previous: u16,
    pub frame_code: u16,
    pub frame_instr: u16,
    pub frame_entry: u16,
    /// `owner` of an eval call's shim frame ([`FrameModel::Owner`]).
    pub owner_cstack: u8,
    /// Code objects (`argcount`, `flags` and `firstlineno` are 32-bit
    /// ints; the others pointers), and where the bytecode starts
    /// (3.11+: inline, `co_code_adaptive`).
    pub code_argcount: u16,
    pub code_flags: u16,
    pub code_firstlineno: u16,
    pub code_filename: u16,
    pub code_name: u16,
    pub code_qualname: Option<u16>,
    /// `co_lnotab` (3.8, 3.9) or `co_linetable` (3.10+): a bytes object.
    pub code_linetable: u16,
    pub code_adaptive: Option<u16>,
    /// Strings: `PyASCIIObject.state`, and the sizes of the compact ASCII
    /// and compact non-ASCII headers (the characters follow them).
    pub unicode_state: u16,
    pub unicode_ascii_size: u16,
    pub unicode_compact_size: u16,
    /// Bytes objects: `ob_size` and `ob_sval`.
    pub bytes_size: u16,
    pub bytes_data: u16,
}

/// The layout of 3.`minor`, for the versions flare knows (3.8–3.13).
pub fn for_version(minor: u8) -> Option<Layout> {
    let common = Layout {
        version: (3, minor),
        model: FrameModel::Object,
        runtime_autotss: 584,
        runtime_interpreters_head: 32,
        interp_threads_head: 8,
        tstate_next: 8,
        tstate_thread_id: 176,
        tstate_frame: 24,
        cframe_current: None,
        frame_previous: 24,
        frame_code: 32,
        frame_instr: 104,
        frame_entry: 0,
        owner_cstack: 3,
        code_argcount: 16,
        code_flags: 36,
        code_firstlineno: 40,
        code_filename: 104,
        code_name: 112,
        code_qualname: None,
        code_linetable: 120,
        code_adaptive: None,
        unicode_state: 32,
        unicode_ascii_size: 48,
        unicode_compact_size: 72,
        bytes_size: 16,
        bytes_data: 32,
    };
    let code_311 = Layout {
        code_argcount: 56,
        code_flags: 48,
        code_firstlineno: 72,
        code_filename: 112,
        code_name: 120,
        code_qualname: Some(128),
        code_linetable: 136,
        code_adaptive: Some(184),
        ..common.clone()
    };
    let layout = match minor {
        8 => Layout {
            runtime_autotss: 1392,
            ..common
        },
        9 => common,
        10 => Layout {
            frame_instr: 96,
            ..common
        },
        11 => Layout {
            model: FrameModel::Entry,
            runtime_autotss: 592,
            runtime_interpreters_head: 40,
            interp_threads_head: 16,
            tstate_thread_id: 152,
            tstate_frame: 56,
            cframe_current: Some(8),
            frame_previous: 48,
            frame_code: 32,
            frame_instr: 56,
            frame_entry: 68,
            ..code_311
        },
        12 | 13 => {
            let l312 = Layout {
                model: FrameModel::Owner,
                runtime_autotss: 1544,
                runtime_interpreters_head: 40,
                interp_threads_head: 72,
                tstate_thread_id: 136,
                tstate_frame: 56,
                cframe_current: Some(0),
                frame_previous: 8,
                frame_code: 0,
                frame_instr: 56,
                frame_entry: 70,
                code_argcount: 52,
                code_firstlineno: 68,
                code_adaptive: Some(192),
                unicode_ascii_size: 40,
                unicode_compact_size: 56,
                ..code_311
            };
            if minor == 12 {
                l312
            } else {
                Layout {
                    runtime_autotss: 2160,
                    runtime_interpreters_head: 632,
                    interp_threads_head: 7344,
                    tstate_thread_id: 152,
                    tstate_frame: 72,
                    cframe_current: None,
                    code_adaptive: Some(200),
                    ..l312
                }
            }
        }
        _ => return None,
    };
    Some(Layout {
        version: (3, minor),
        ..layout
    })
}

/// How many bytes of 3.13's `_Py_DebugOffsets` (at the start of
/// `_PyRuntime`) [`from_debug_offsets`] reads: the whole structure.
pub const DEBUG_OFFSETS_SIZE: usize = 584;

/// `_Py_DebugOffsets.cookie`.
const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";

/// `base` (a 3.13 layout from [`for_version`]) with the offsets CPython's
/// own table gives (`table`: the first [`DEBUG_OFFSETS_SIZE`] bytes of
/// `_PyRuntime`, read from the live process).
///
/// The table is the process's word, so it is checked before it is
/// believed: its cookie, its version (the same major.minor as `base`), a
/// default build (not free-threaded), and every offset taken (and those
/// of `base` it has no entry for) inside the size the table gives for its
/// structure. An error says what failed.
pub fn from_debug_offsets(base: Layout, table: &[u8]) -> Result<Layout, String> {
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
    // An offset `field_at` of the table into the structure whose size is
    // at `struct_at`, with `width` bytes there.
    let field = |name: &str, struct_at: usize, off: u64, width: u64| -> Result<u16, String> {
        let size = word(struct_at)?;
        match off.checked_add(width) {
            Some(end) if end <= size => u16::try_from(off)
                .map_err(|_| format!("_Py_DebugOffsets: {name} at {off} is out of reach")),
            _ => Err(format!(
                "_Py_DebugOffsets: {name} at {off} is past its structure's {size} bytes"
            )),
        }
    };
    let take = |name: &str, struct_at: usize, field_at: usize, width: u64| -> Result<u16, String> {
        field(name, struct_at, word(field_at)?, width)
    };
    const RUNTIME: usize = 24;
    const INTERP: usize = 48;
    const TSTATE: usize = 152;
    const FRAME: usize = 224;
    const CODE: usize = 272;
    const BYTES: usize = 512;
    const UNICODE: usize = 536;
    let ascii_size = take("unicode asciiobject_size", UNICODE, 560, 0)?;
    // PyCompactUnicodeObject: PyASCIIObject, utf8_length and utf8.
    let compact_size = field(
        "the compact unicode header",
        UNICODE,
        u64::from(ascii_size) + 16,
        0,
    )?;
    Ok(Layout {
        runtime_autotss: field(
            "runtime autoTSSkey",
            RUNTIME,
            base.runtime_autotss.into(),
            8,
        )?,
        runtime_interpreters_head: take("runtime interpreters_head", RUNTIME, 40, 8)?,
        interp_threads_head: take("interpreter threads_head", INTERP, 72, 8)?,
        tstate_next: take("thread state next", TSTATE, 168, 8)?,
        tstate_frame: take("thread state current_frame", TSTATE, 184, 8)?,
        tstate_thread_id: take("thread state thread_id", TSTATE, 192, 8)?,
        frame_previous: take("frame previous", FRAME, 232, 8)?,
        frame_code: take("frame executable", FRAME, 240, 8)?,
        frame_instr: take("frame instr_ptr", FRAME, 248, 8)?,
        frame_entry: take("frame owner", FRAME, 264, 1)?,
        code_filename: take("code filename", CODE, 280, 8)?,
        code_name: take("code name", CODE, 288, 8)?,
        code_qualname: Some(take("code qualname", CODE, 296, 8)?),
        code_linetable: take("code linetable", CODE, 304, 8)?,
        code_firstlineno: take("code firstlineno", CODE, 312, 4)?,
        code_argcount: take("code argcount", CODE, 320, 4)?,
        code_flags: field("code flags", CODE, base.code_flags.into(), 4)?,
        code_adaptive: Some(take("code co_code_adaptive", CODE, 344, 2)?),
        bytes_size: take("bytes ob_size", BYTES, 520, 8)?,
        bytes_data: take("bytes ob_sval", BYTES, 528, 1)?,
        unicode_state: take("unicode state", UNICODE, 544, 4)?,
        unicode_ascii_size: ascii_size,
        unicode_compact_size: compact_size,
        ..base
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut t = vec![0u8; DEBUG_OFFSETS_SIZE];
        t[..8].copy_from_slice(DEBUG_COOKIE);
        for (at, v) in words {
            t[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        t
    }

    fn set(t: &mut [u8], at: usize, v: u64) {
        t[at..at + 8].copy_from_slice(&v.to_le_bytes());
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
