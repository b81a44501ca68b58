//! Where CPython keeps what flare reads, per minor version: the thread
//! state's current frame, a frame's code object, caller and instruction,
//! a code object's names, line table and cookie fields, and the strings
//! they point to.
//!
//! 3.6–3.12 have no table of their own: the figures below were read from
//! each version's debug information (x86-64, default GIL build) and are
//! the same in every patch release (CPython keeps these structures stable
//! within a minor version). 3.13 and later carry their own table,
//! `_Py_DebugOffsets` at the start of `_PyRuntime`:
//! [`super::debug_offsets::from_debug_offsets`] checks it and takes what
//! it gives over these figures, which for 3.14 and 3.15 were read with
//! `offsetof` against the headers of Debian's 3.14.10 and 3.15.2.

/// How a version's frames are chained and where a C-level eval call's
/// run of Python frames ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameModel {
    /// 3.6–3.10: heap `PyFrameObject`s (`f_back`, `f_code`, `f_lasti` in
    /// code units or bytes); each runs in an eval call of its own.
    Object,
    /// 3.11: `_PyInterpreterFrame`s on the thread's data stack; the last
    /// frame of an eval call has `is_entry` set.
    Entry,
    /// 3.12+: as 3.11, but an eval call starts with a shim frame that is
    /// no Python function's (`owner >= FRAME_OWNED_BY_CSTACK` in 3.12 and
    /// 3.13, `FRAME_OWNED_BY_INTERPRETER` and after from 3.14), skipped.
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
    /// further; `None` in 3.6, whose key is a variable of its own, and
    /// from 3.15, which keeps a thread's state in a thread-local variable
    /// instead), and the first interpreter.
    pub runtime_autotss: Option<u16>,
    pub runtime_interpreters_head: u16,
    /// `PyInterpreterState`: its first thread state.
    pub interp_threads_head: u16,
    /// `PyThreadState`: the next thread state, the thread's `pthread_t`,
    /// and the current frame (3.6–3.10 `frame`, 3.13 `current_frame`) or,
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
    /// The first `owner` of a frame that is no Python function's: an eval
    /// call's shim frame, and from 3.14 other frames of the interpreter's
    /// own ([`FrameModel::Owner`]).
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
    /// `co_lnotab` (3.6–3.9) or `co_linetable` (3.10+): a bytes object.
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

/// The layout of 3.`minor`, for the versions flare knows (3.6–3.15).
pub fn for_version(minor: u8) -> Option<Layout> {
    let common = Layout {
        version: (3, minor),
        model: FrameModel::Object,
        runtime_autotss: Some(584),
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
    // 3.7: `_PyRuntime` appeared (with `gilstate.autoTSSkey`), code
    // objects lack 3.8's `co_posonlyargcount`.
    let l37 = Layout {
        runtime_autotss: Some(1504),
        runtime_interpreters_head: 24,
        code_argcount: 16,
        code_flags: 32,
        code_firstlineno: 36,
        code_filename: 96,
        code_name: 104,
        code_linetable: 112,
        ..common.clone()
    };
    let layout = match minor {
        7 => l37.clone(),
        // 3.6: no `_PyRuntime`; the "runtime" read is `interp_head`
        // itself, and the thread-state key the int `autoTLSkey`
        // (src/runtime/python/detect.rs).
        6 => Layout {
            runtime_autotss: None,
            runtime_interpreters_head: 0,
            tstate_thread_id: 152,
            frame_instr: 120,
            ..l37
        },
        8 => Layout {
            runtime_autotss: Some(1392),
            ..common
        },
        9 => common,
        10 => Layout {
            frame_instr: 96,
            ..common
        },
        11 => Layout {
            model: FrameModel::Entry,
            runtime_autotss: Some(592),
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
        12..=15 => {
            let l312 = Layout {
                model: FrameModel::Owner,
                runtime_autotss: Some(1544),
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
            let l313 = Layout {
                runtime_autotss: Some(2160),
                runtime_interpreters_head: 632,
                interp_threads_head: 7344,
                tstate_thread_id: 152,
                tstate_frame: 72,
                cframe_current: None,
                code_adaptive: Some(200),
                ..l312
            };
            // 3.14: `f_executable` is a tagged `_PyStackRef` (BPF and
            // the walk clear its low bits), `owner` moved.
            let l314 = Layout {
                runtime_autotss: Some(2336),
                runtime_interpreters_head: 808,
                frame_entry: 74,
                code_adaptive: Some(208),
                ..l313.clone()
            };
            match minor {
                12 => l312,
                13 => l313,
                14 => l314,
                _ => Layout {
                    runtime_autotss: None,
                    runtime_interpreters_head: 936,
                    interp_threads_head: 7336,
                    tstate_thread_id: 176,
                    ..l314
                },
            }
        }
        _ => return None,
    };
    Some(Layout {
        version: (3, minor),
        ..layout
    })
}
