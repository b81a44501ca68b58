//! Where a V8 keeps what flare reads, from its `v8dbg_*` constants
//! ([`Symbols`]): the tagging scheme, a JavaScript frame's slots, the
//! frame-type markers, the instance types and the fields of the objects a
//! walk and a namer go through (function, shared function info, code,
//! bytecode, script, strings, scope info).
//!
//! The constants are incomplete on every version, and where a field is
//! kept changes from one to the next (Node 20's V8 lost its `Code`
//! fields; from Node 24 a function holds a dispatch handle, not its
//! code). A missing constant is taken from a fallback only for the V8s
//! (major, minor) it was checked on in a live process, each cited where it
//! is used; for any other V8 the layout is refused, naming the constant.
//! Node pins a V8 minor for a whole major line (20: 11.3, 22: 12.4, 24:
//! 13.6, 26: 14.6), so a (major, minor) gate covers the line.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;

use super::constants::{Reader, CHECKED};
use super::source::SourceLayout;
use super::symbols::Symbols;

/// V8's version, as `Version::{major_,minor_,build_,patch_}` hold it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub build: u32,
    pub patch: u32,
}

impl Version {
    /// Whether this is V8 `major`.`minor` (any build).
    pub fn is(self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) == (major, minor)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Version {
            major,
            minor,
            build,
            patch,
        } = self;
        write!(f, "V8 {major}.{minor}.{build}.{patch}")
    }
}

/// Slots of a JavaScript frame, in bytes from its frame pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameSlots {
    /// The context, or in a typed frame its marker (`type << 1`, a Smi).
    pub context: i32,
    /// The `JSFunction`.
    pub function: i32,
    /// An interpreted or baseline frame's `BytecodeArray`.
    pub bytecode_array: i32,
    /// An interpreted frame's bytecode offset (a Smi, from the array's
    /// tagged address).
    pub bytecode_offset: i32,
}

/// Frame-type markers (`StackFrame::Type`): renumbered by Node 26, and
/// the optimized frame renamed (`TurbofanFrame`, then `TurbofanJSFrame`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameTypes {
    /// JavaScript entered from C++.
    pub entry: u32,
    pub construct_entry: u32,
    /// C++ entered from JavaScript.
    pub exit: u32,
    pub builtin_exit: u32,
    pub interpreted: u32,
    pub baseline: u32,
    pub maglev: u32,
    /// TurboFan's JavaScript frame.
    pub turbofan: u32,
    pub stub: u32,
    /// Every frame type the binary names (without `frametype_`), by
    /// marker.
    pub names: BTreeMap<u32, String>,
}

/// Instance types (`Map.instance_type`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Types {
    /// `JS_FUNCTION_TYPE` and the constructors' kinds after it.
    pub js_function: RangeInclusive<u16>,
    pub shared_function_info: u16,
    pub code: u16,
    pub bytecode_array: u16,
    pub script: u16,
    pub scope_info: u16,
    pub fixed_array: u16,
}

/// How a string's instance type reads, and its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strings {
    /// Set in every instance type that is not a string's.
    pub not_string_mask: u16,
    pub representation_mask: u16,
    pub seq_tag: u16,
    pub cons_tag: u16,
    pub external_tag: u16,
    pub sliced_tag: u16,
    pub thin_tag: u16,
    pub encoding_mask: u16,
    pub one_byte_tag: u16,
    /// `String.length` (an `int32_t`).
    pub length: u16,
    pub seq_one_byte_chars: u16,
    pub seq_two_byte_chars: u16,
    pub cons_first: u16,
    pub cons_second: u16,
    pub thin_actual: u16,
    pub sliced_parent: u16,
    /// A Smi.
    pub sliced_offset: u16,
    /// An external string's cached pointer to its characters, and the
    /// instance-type bit saying a string has none; `None` where neither
    /// was checked.
    pub external: Option<External>,
}

/// Where an external string's characters are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct External {
    /// `resource_data`: the characters' address.
    pub data: u16,
    /// Set in an uncached external string's type: no `resource_data`.
    pub uncached_mask: u16,
}

/// How a `JSFunction` leads to its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FunctionCode {
    /// `JSFunction.code`: a tagged `Code` pointer at this offset.
    Pointer(u16),
    /// Leaptiering (V8 13 on): a `u32` dispatch handle at `offset`; the
    /// function's `Code` is in the process's JS dispatch table, at entry
    /// `(handle >> ENTRY_SHIFT) * ENTRY_SIZE`, word `CODE_WORD`, shifted
    /// right by `CODE_SHIFT` (the untagged address; the low bits hold
    /// the parameter count). Where the table is differs per version and
    /// process (not here).
    DispatchHandle { offset: u16 },
}

impl FunctionCode {
    // Node 24.22.3 (V8 13.6) and 26.12.1 (V8 14.6): checked in a live
    // process each (/work/notes/v8-facts.md, "Dispatch table"): entry
    // `(handle >> 8) * 16`, word +8 = untagged Code << 16 | parameters;
    // live_tests.rs reads every function's Code so on both.
    pub const ENTRY_SHIFT: u32 = 8;
    pub const ENTRY_SIZE: u64 = 16;
    pub const CODE_WORD: u64 = 8;
    pub const CODE_SHIFT: u32 = 16;
}

/// A `Code` object's fields and kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeLayout {
    /// An address (V8 11.1.204 on), not an offset.
    pub instruction_start: u16,
    /// An `int`.
    pub instruction_size: u16,
    /// A `uint32_t`; the kind is `(flags >> kind_shift) & kind_mask`.
    pub flags: u16,
    pub kind_mask: u32,
    pub kind_shift: u32,
    pub kind_interpreted: u32,
    pub kind_baseline: u32,
}

/// Where a `ScopeInfo` keeps a compiled function's name: its slots (one
/// tagged word each after the map, `scope-info.tq`) hold the counts, the
/// context locals' names (a hash table past
/// [`ScopeInfoLayout::MAX_INLINED_NAMES`] of them) and infos, then the
/// function's name and slot and the inferred name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScopeInfoLayout {
    /// The slot of the context local count (a Smi).
    pub ncontextlocals: u32,
    /// The first context local's name.
    pub first_vars: u32,
}

impl ScopeInfoLayout {
    /// V8's `kScopeInfoMaxInlinedLocalNamesSize` (src/common/globals.h):
    /// from this many context locals on, their names are one hash table
    /// slot.
    pub const MAX_INLINED_NAMES: u64 = 75;
    /// Slots after the locals that may hold the names: a class scope's
    /// saved variable (a Smi), the function variable's name (a String or
    /// Smi 0) and slot (a Smi), the inferred name (a String or
    /// undefined).
    pub const NAME_SLOTS: u64 = 4;
}

/// Offsets (bytes) and values flare reads a V8 with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub version: Version,
    pub frame: FrameSlots,
    pub frame_types: FrameTypes,
    pub types: Types,
    pub strings: Strings,
    pub heap_object_map: u16,
    /// A `uint16_t`.
    pub map_instance_type: u16,
    pub function_shared: u16,
    pub function_code: FunctionCode,
    /// A String (the name of a function not compiled yet) or a ScopeInfo.
    pub sfi_name_or_scope_info: u16,
    /// A Script (or, on V8 11, a DebugInfo while debugged).
    pub sfi_script: u16,
    pub script_source: u16,
    pub script_name: u16,
    /// A FixedArray of Smis once V8 needed line numbers, else undefined
    /// (V8 11) or Smi 0.
    pub script_line_ends: u16,
    /// A Smi.
    pub fixed_array_length: u16,
    pub fixed_array_data: u16,
    pub code: CodeLayout,
    /// The first bytecode.
    pub bytecode_array_data: u16,
    /// A Smi: the bytecodes' length.
    pub bytecode_array_length: u16,
    /// `None` where the name slots were not checked.
    pub scope_info: Option<ScopeInfoLayout>,
    /// Where functions start and bytecodes lie in their scripts.
    pub source: SourceLayout,
    /// Where a function's feedback vector is; `None` where a constant
    /// lacks.
    pub feedback: Option<FeedbackLayout>,
}

/// A function's feedback: `JSFunction.raw_feedback_cell`, a
/// `FeedbackCell` whose `value` is its `FeedbackVector` once the function
/// ran enough. The vector keeps weak references to the code optimized for
/// it, the code compiled on stack replacement among them (by its loop's
/// slot), to the `Code` itself or (V8 12 on) its `CodeWrapper`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedbackLayout {
    pub function_cell: u16,
    pub cell_value: u16,
    pub vector_type: u16,
    /// `CODE_WRAPPER_TYPE` (V8 12 on).
    pub code_wrapper_type: Option<u16>,
}

impl Layout {
    /// The layout of the V8 whose constants are `s`, or why it is not
    /// read.
    pub fn from_symbols(s: &Symbols) -> Result<Layout, String> {
        let Some([major, minor, build, patch]) = s.version else {
            return Err("no v8::internal::Version::{major_,minor_,build_,patch_}".into());
        };
        let v = Version {
            major,
            minor,
            build,
            patch,
        };
        let r = Reader { s, v };
        r.tagging()?;
        let checked = CHECKED.iter().any(|&(a, b)| v.is(a, b));
        Ok(Layout {
            version: v,
            frame: FrameSlots {
                context: r.slot("off_fp_context")?,
                function: r.slot("off_fp_function")?,
                bytecode_array: r.slot("off_fp_bytecode_array")?,
                bytecode_offset: r.slot("off_fp_bytecode_offset")?,
            },
            frame_types: r.frame_types()?,
            types: r.types()?,
            strings: r.strings()?,
            heap_object_map: r.field("class_HeapObject__map__")?,
            map_instance_type: r.field("class_Map__instance_type__")?,
            function_shared: r.field("class_JSFunction__shared__")?,
            function_code: r.function_code()?,
            sfi_name_or_scope_info: r.field("class_SharedFunctionInfo__name_or_scope_info__")?,
            sfi_script: r.sfi_script()?,
            script_source: r.field("class_Script__source__")?,
            script_name: r.field("class_Script__name__")?,
            script_line_ends: r.field("class_Script__line_ends__")?,
            fixed_array_length: r.field("class_FixedArrayBase__length__")?,
            fixed_array_data: r.field("class_FixedArray__data__")?,
            code: r.code()?,
            bytecode_array_data: r.field("class_BytecodeArray__data__")?,
            bytecode_array_length: r.bytecode_array_length()?,
            // The name slots' order (scope-info.tq), checked in a live
            // Node 20.20.2, 22.23.5, 24.22.3 and 26.12.1 each (by hand,
            // then by live_tests.rs): declared, anonymous, inferred,
            // method and arrow functions' ScopeInfos, one with 80 context
            // locals (a hash table of their names).
            scope_info: if checked {
                Some(ScopeInfoLayout {
                    ncontextlocals: r.index("scopeinfo_idx_ncontextlocals")?,
                    first_vars: r.index("scopeinfo_idx_first_vars")?,
                })
            } else {
                None
            },
            source: SourceLayout::read(&r),
            feedback: r.feedback(),
        })
    }

    /// The name of frame-type marker `marker` (`InterpretedFrame`).
    pub fn frame_type_name(&self, marker: u32) -> Option<&str> {
        self.frame_types.names.get(&marker).map(String::as_str)
    }
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
