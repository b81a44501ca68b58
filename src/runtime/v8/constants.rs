//! One V8's `v8dbg_*` constants read into the parts of a
//! [`Layout`](super::layout::Layout): each constant it lacks is an error
//! naming it and the version, or a fallback for the V8s (major, minor) it
//! was checked on in a live process, cited where it is used.
//! The constants are `int`s of the binary's data: offsets are checked to
//! be small and non-negative, frame slots word-aligned, instance and
//! frame types 16-bit; a value out of range is refused, never truncated.

use super::layout::{
    CodeLayout, External, FeedbackLayout, FrameTypes, FunctionCode, Strings, Types, Version,
};
use super::symbols::Symbols;

/// The V8s (major, minor) flare's fallbacks were checked on: Node 20's,
/// 22's, 24's and 26's.
pub(super) const CHECKED: [(u32, u32); 4] = [(11, 3), (12, 4), (13, 6), (14, 6)];

/// Fields and constants read of one V8's symbols, each missing one an
/// error naming it and the version.
pub(super) struct Reader<'a> {
    pub(super) s: &'a Symbols,
    pub(super) v: Version,
}

/// The largest field offset taken (V8's objects flare reads are a few
/// words long).
const MAX_OFFSET: i64 = 1024;

impl Reader<'_> {
    fn missing(&self, what: &str) -> String {
        format!("{}: no v8dbg_{what}", self.v)
    }

    fn value(&self, name: &str) -> Result<i64, String> {
        self.s.value(name).ok_or_else(|| self.missing(name))
    }

    /// The one value of the constants named `prefix*`, if any.
    fn prefixed(&self, prefix: &str) -> Result<Option<i64>, String> {
        self.s
            .by_prefix(prefix)
            .map_err(|e| format!("{}: {e}", self.v))
    }

    /// A field's offset (its type suffix left open).
    pub(super) fn field(&self, prefix: &str) -> Result<u16, String> {
        let v = self
            .prefixed(prefix)?
            .ok_or_else(|| self.missing(&format!("{prefix}*")))?;
        self.offset(prefix, v)
    }

    fn offset(&self, name: &str, v: i64) -> Result<u16, String> {
        if (0..MAX_OFFSET).contains(&v) {
            Ok(v as u16)
        } else {
            Err(format!(
                "{}: v8dbg_{name} = {v}, not a field offset",
                self.v
            ))
        }
    }

    /// A frame slot (bytes from the frame pointer, a word's multiple).
    pub(super) fn slot(&self, name: &str) -> Result<i32, String> {
        let v = self.value(name)?;
        if (-MAX_OFFSET..MAX_OFFSET).contains(&v) && v % 8 == 0 {
            Ok(v as i32)
        } else {
            Err(format!("{}: v8dbg_{name} = {v}, not a frame slot", self.v))
        }
    }

    /// A small non-negative constant (an index, a tag, a mask, a kind).
    fn small(&self, name: &str) -> Result<u32, String> {
        let v = self.value(name)?;
        u16::try_from(v)
            .map(u32::from)
            .map_err(|_| format!("{}: v8dbg_{name} = {v}, out of range", self.v))
    }

    pub(super) fn index(&self, name: &str) -> Result<u32, String> {
        let v = self.small(name)?;
        if v < 64 {
            Ok(v)
        } else {
            Err(format!("{}: v8dbg_{name} = {v}, out of range", self.v))
        }
    }

    fn type_id(&self, name: &str) -> Result<u16, String> {
        self.small(name).map(|v| v as u16)
    }

    /// Refuses any tagging but full 64-bit tagged words: heap objects
    /// tagged 1 (mask 3), Smis 0 (mask 1) with their value in the upper
    /// half.
    pub(super) fn tagging(&self) -> Result<(), String> {
        let v = self.v;
        if self.s.value("SmiShiftSize") == Some(0) || self.s.value("TaggedSize") == Some(4) {
            return Err(format!(
                "{v}: pointer compression (a build with 32-bit tagged values) is not supported"
            ));
        }
        for (name, want) in [
            ("HeapObjectTag", 1),
            ("HeapObjectTagMask", 3),
            ("SmiTag", 0),
            ("SmiTagMask", 1),
            ("SmiShiftSize", 31),
        ] {
            let got = self.value(name)?;
            if got != want {
                return Err(format!(
                    "{v}: v8dbg_{name} = {got} (not {want}): a tagging scheme flare does not read"
                ));
            }
        }
        Ok(())
    }

    pub(super) fn frame_types(&self) -> Result<FrameTypes, String> {
        let t = |name: &str| self.small(&format!("frametype_{name}"));
        let turbofan = match self.s.value("frametype_TurbofanJSFrame") {
            Some(_) => t("TurbofanJSFrame")?,
            None => t("TurbofanFrame").map_err(|_| {
                self.missing("frametype_TurbofanJSFrame or frametype_TurbofanFrame")
            })?,
        };
        let names = self
            .s
            .each_with_prefix("frametype_")
            .filter_map(|(name, v)| Some((u32::try_from(v).ok()?, name.to_string())))
            .collect();
        Ok(FrameTypes {
            entry: t("EntryFrame")?,
            construct_entry: t("ConstructEntryFrame")?,
            exit: t("ExitFrame")?,
            builtin_exit: t("BuiltinExitFrame")?,
            interpreted: t("InterpretedFrame")?,
            baseline: t("BaselineFrame")?,
            maglev: t("MaglevFrame")?,
            turbofan,
            stub: t("StubFrame")?,
            names,
        })
    }

    pub(super) fn types(&self) -> Result<Types, String> {
        let function = self.type_id("type_JSFunction__JS_FUNCTION_TYPE")?;
        let first = self.s.value("FirstJSFunctionType");
        let last = self.s.value("LastJSFunctionType");
        let js_function = match (first, last) {
            (Some(_), Some(_)) => {
                self.type_id("FirstJSFunctionType")?..=self.type_id("LastJSFunctionType")?
            }
            // Node 20.20.2 (V8 11.3.244.8): no First/LastJSFunctionType;
            // the maps of a function and of the 15 constructor kinds
            // (class, Array, Promise, RegExp, the 11 typed arrays') read
            // in a live process span JS_FUNCTION_TYPE (2066) to
            // JS_CLASS_CONSTRUCTOR_TYPE (2081): 15 past it (OpenTelemetry's
            // fallback, 14 past it, leaves class constructors out).
            _ if self.v.is(11, 3) => function..=function.saturating_add(15),
            _ => return Err(self.missing("FirstJSFunctionType / LastJSFunctionType")),
        };
        if !js_function.contains(&function) {
            return Err(format!(
                "{}: JS_FUNCTION_TYPE {function} is outside {js_function:?}",
                self.v
            ));
        }
        Ok(Types {
            js_function,
            shared_function_info: self
                .type_id("type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE")?,
            code: self.type_id("type_Code__CODE_TYPE")?,
            bytecode_array: self.type_id("type_BytecodeArray__BYTECODE_ARRAY_TYPE")?,
            script: self.type_id("type_Script__SCRIPT_TYPE")?,
            scope_info: self.type_id("type_ScopeInfo__SCOPE_INFO_TYPE")?,
            fixed_array: self.type_id("type_FixedArray__FIXED_ARRAY_TYPE")?,
        })
    }

    /// A function's feedback vector's fields, where the binary names them
    /// all (Node 20-26 do).
    pub(super) fn feedback(&self) -> Option<FeedbackLayout> {
        Some(FeedbackLayout {
            function_cell: self.field("class_JSFunction__raw_feedback_cell__").ok()?,
            cell_value: self.field("class_FeedbackCell__value__").ok()?,
            vector_type: self
                .type_id("type_FeedbackVector__FEEDBACK_VECTOR_TYPE")
                .ok()?,
            code_wrapper_type: self.type_id("type_CodeWrapper__CODE_WRAPPER_TYPE").ok(),
        })
    }

    pub(super) fn strings(&self) -> Result<Strings, String> {
        // `IsNotStringMask` is an `int` (-128): the instance type is 16 bits.
        let not_string = self.value("IsNotStringMask")?;
        let not_string_mask = (not_string as u64 & 0xffff) as u16;
        if not_string_mask == 0 {
            return Err(format!("{}: v8dbg_IsNotStringMask = 0", self.v));
        }
        let tag = |name: &str| self.small(name).map(|v| v as u16);
        let resource = self.field("class_ExternalString__resource__")?;
        let external = self.external(resource)?;
        Ok(Strings {
            not_string_mask,
            representation_mask: tag("StringRepresentationMask")?,
            seq_tag: tag("SeqStringTag")?,
            cons_tag: tag("ConsStringTag")?,
            external_tag: tag("ExternalStringTag")?,
            sliced_tag: tag("SlicedStringTag")?,
            thin_tag: tag("ThinStringTag")?,
            encoding_mask: tag("StringEncodingMask")?,
            one_byte_tag: tag("OneByteStringTag")?,
            length: self.field("class_String__length__")?,
            seq_one_byte_chars: self.field("class_SeqOneByteString__chars__")?,
            seq_two_byte_chars: self.field("class_SeqTwoByteString__chars__")?,
            cons_first: self.field("class_ConsString__first__")?,
            cons_second: self.field("class_ConsString__second__")?,
            thin_actual: self.field("class_ThinString__actual__")?,
            sliced_parent: self.field("class_SlicedString__parent__")?,
            sliced_offset: self.field("class_SlicedString__offset__")?,
            external,
        })
    }

    /// An external string's characters: no constant names
    /// `resource_data`. It follows `resource` (string.tq: both
    /// `ExternalPointer`s, 8 bytes without the sandbox): read through it,
    /// the external one-byte source of `node:path` gave its text in a
    /// live Node 20.20.2, 22.23.5, 24.22.3 and 26.12.1. The uncached bit
    /// is the difference of the uncached and cached external types where
    /// both are named (22 on: 16); Node 20's V8 names no uncached type:
    /// bit 4 there (V8 11.3's `kUncachedExternalStringMask`, a bit no
    /// string type named in its constants has set).
    fn external(&self, resource: u16) -> Result<Option<External>, String> {
        if !CHECKED.iter().any(|&(a, b)| self.v.is(a, b)) {
            return Ok(None);
        }
        let cached = self
            .s
            .value("type_ExternalOneByteString__EXTERNAL_ONE_BYTE_STRING_TYPE");
        let uncached = self
            .s
            .value("type_UncachedExternalString__UNCACHED_EXTERNAL_ONE_BYTE_STRING_TYPE");
        let uncached_mask = match (cached, uncached) {
            (Some(c), Some(u)) if (c ^ u).count_ones() == 1 && (0..=0xffff).contains(&(c ^ u)) => {
                (c ^ u) as u16
            }
            (_, None) if self.v.is(11, 3) => 1 << 4,
            _ => {
                return Err(
                    self.missing("type_UncachedExternalString__* (one bit from the cached type)")
                )
            }
        };
        Ok(Some(External {
            data: resource + 8,
            uncached_mask,
        }))
    }

    pub(super) fn function_code(&self) -> Result<FunctionCode, String> {
        if let Some(v) = self.prefixed("class_JSFunction__code__")? {
            return Ok(FunctionCode::Pointer(
                self.offset("class_JSFunction__code__", v)?,
            ));
        }
        if self.v.is(11, 3) {
            // Node 20.20.2 (V8 11.3.244.8): no JSFunction__code constant;
            // the word at +48 is the Code `%DebugPrint` shows (a TurboFan
            // function's and the InterpreterEntryTrampoline), read in a
            // live process; live_tests.rs reads every function's so.
            return Ok(FunctionCode::Pointer(48));
        }
        if self.v.is(13, 6) || self.v.is(14, 6) {
            // Node 24.22.3 (V8 13.6.233.17) and 26.12.1 (V8 14.6.202.34):
            // leaptiering, no constant for the handle; the u32 at +24 is
            // the `dispatch_handle` `%DebugPrint` shows (its upper half
            // 0), read in a live process each.
            return Ok(FunctionCode::DispatchHandle { offset: 24 });
        }
        Err(self.missing("class_JSFunction__code__*"))
    }

    pub(super) fn sfi_script(&self) -> Result<u16, String> {
        // 22 on: `script` and `raw_script` (the same field); 20:
        // `script_or_debug_info`.
        for prefix in [
            "class_SharedFunctionInfo__script__",
            "class_SharedFunctionInfo__raw_script__",
            "class_SharedFunctionInfo__script_or_debug_info__",
        ] {
            if let Some(v) = self.prefixed(prefix)? {
                return self.offset(prefix, v);
            }
        }
        Err(self.missing("class_SharedFunctionInfo__script__* (or script_or_debug_info)"))
    }

    pub(super) fn code(&self) -> Result<CodeLayout, String> {
        let start = self.prefixed("class_Code__instruction_start__")?;
        let size = self.prefixed("class_Code__instruction_size__")?;
        let flags = self.prefixed("class_Code__flags__")?;
        let (instruction_start, instruction_size, flags) = match (start, size, flags) {
            (Some(a), Some(b), Some(c)) => (
                self.offset("class_Code__instruction_start__", a)?,
                self.offset("class_Code__instruction_size__", b)?,
                self.offset("class_Code__flags__", c)?,
            ),
            // Node 20.20.2 (V8 11.3.244.8): no Code constants for these.
            // Read in a live process, of a TurboFan function's Code and
            // of the InterpreterEntryTrampoline's: +40 the first
            // instruction (in the JIT mapping; in the embedded blob), the
            // u32 at +48 the flags (kind 13 TURBOFAN; 2 BUILTIN), the u32
            // at +56 the size (176; 876). OpenTelemetry derives the same
            // for V8 < 11.4.59; live_tests.rs checks kinds and ranges so.
            (None, None, None) if self.v.is(11, 3) => (40, 56, 48),
            _ => {
                return Err(
                    self.missing("class_Code__{instruction_start,instruction_size,flags}__*")
                )
            }
        };
        Ok(CodeLayout {
            instruction_start,
            instruction_size,
            flags,
            kind_mask: self.small("CodeKindFieldMask")?,
            kind_shift: self.small("CodeKindFieldShift")?,
            kind_interpreted: self.small("CodeKindInterpretedFunction")?,
            kind_baseline: self.small("CodeKindBaseline")?,
        })
    }

    pub(super) fn bytecode_array_length(&self) -> Result<u16, String> {
        if let Some(v) = self.prefixed("class_BytecodeArray__length__")? {
            return self.offset("class_BytecodeArray__length__", v);
        }
        // V8 11: a BytecodeArray is a FixedArrayBase, whose length it has.
        if self
            .s
            .value("parent_BytecodeArray__FixedArrayBase")
            .is_some()
        {
            return self.field("class_FixedArrayBase__length__");
        }
        Err(self
            .missing("class_BytecodeArray__length__* (or parent_BytecodeArray__FixedArrayBase)"))
    }
}
