//! The functions TurboFan and Maglev inlined into a frame's code, so a
//! sample in an inlined leaf is charged to that leaf and not to the
//! function it was inlined into (with default flags TurboFan inlines
//! small callees everywhere).
//!
//! An optimized `Code` keeps a source position table (the bytecode's
//! format, [`super::source`]) whose positions carry, above the script
//! offset, an inlining id plus one (bits 31..46, 0: the code's own
//! function), and deoptimization data (a fixed array) whose
//! `InliningPositions` (16-byte entries: the call's position in its
//! caller, the inlined function's index, padding) give each inlining id
//! its callee and call site, and whose literal array's first
//! `InlinedFunctionCount` elements are those callees' shared function
//! infos. The indices are `v8dbg_*` constants; where `Code` keeps the
//! two tables and which array types they are is not on V8 12 on, so all
//! of it is taken only for the V8s (major, minor) it was checked on in a
//! live process, cited in [`InliningLayout::read`]; elsewhere compiled
//! frames are named by their function alone.

use super::constants::Reader;
use super::heap::{smi, Heap};
use super::source::{decode_raw, script_offset, TableFormat, MAX_TABLE};
use crate::runtime::tracker::Weight;

/// Inlining levels followed at most (V8 inlines far fewer).
pub const MAX_DEPTH: usize = 64;

/// Inlined functions read of one code at most (V8's budget inlines a
/// few dozen).
const MAX_FUNCTIONS: i64 = 1 << 12;

/// Inlining positions read of one code at most (an inlining id is 16
/// bits).
const MAX_INLININGS: usize = 1 << 16;

/// Bytes of an `InliningPosition`: a `SourcePosition` (8), the inlined
/// function's index (an `int`), padding.
const INLINING_POSITION: usize = 16;

/// Where a V8 keeps optimized code's positions and inlined functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InliningLayout {
    /// `Code`'s source position table, and its instance type.
    pub positions: u16,
    pub positions_type: u16,
    pub format: TableFormat,
    /// `Code`'s deoptimization data, and its instance type.
    pub deopt_data: u16,
    pub deopt_data_type: u16,
    /// Indices in the deoptimization data: a Smi, the literal array, the
    /// inlining positions, the code's own shared function info.
    pub inlined_count: u32,
    pub literals: u32,
    pub inlining_positions: u32,
    pub shared: u32,
    /// The instance types of the literal array and of the inlining
    /// positions.
    pub literals_type: u16,
    pub inlining_positions_type: u16,
    /// A `SharedFunctionInfoWrapper`'s type and field, where the
    /// deoptimization data holds the code's own function wrapped (V8 13
    /// on).
    pub wrapper: Option<(u16, u16)>,
    /// The optimized code kinds (`CodeKind::MAGLEV`, `TURBOFAN[_JS]`).
    pub kind_maglev: u32,
    pub kind_turbofan: u32,
}

impl InliningLayout {
    pub(super) fn read(r: &Reader) -> Option<InliningLayout> {
        let v = r.v;
        let ty = |name: &str| r.s.value(name).and_then(|t| u16::try_from(t).ok());
        let index = |name: &str| r.index(name).ok();
        let byte_array = ty("type_ByteArray__BYTE_ARRAY_TYPE");
        let trusted_bytes = ty("type_TrustedByteArray__TRUSTED_BYTE_ARRAY_TYPE");
        let weak = ty("type_WeakFixedArray__WEAK_FIXED_ARRAY_TYPE");
        let trusted_weak = ty("type_TrustedWeakFixedArray__TRUSTED_WEAK_FIXED_ARRAY_TYPE");
        // Each checked in a live process (Node 20.20.2, 22.23.5, 24.22.3,
        // 26.12.1) on a TurboFan `Code` (and a Maglev one on 24 and 26)
        // of a function with a callee inlined: the words of the `Code`
        // at these offsets are arrays of these types, the table decodes
        // to the positions `--print-opt-code` lists, and the arrays at
        // the v8dbg indices hold the inlined function printed, the
        // code's own and the call's position (inlining_tests.rs checks
        // them so). V8 11.3 names both fields (16, 24).
        let (positions, deopt_data, positions_type, deopt_data_type, format) = if v.is(11, 3) {
            (
                r.field("class_Code__source_position_table__").ok()?,
                r.field("class_Code__deoptimization_data__").ok()?,
                byte_array?,
                ty("type_FixedArray__FIXED_ARRAY_TYPE")?,
                TableFormat::Signed,
            )
        } else if v.is(12, 4) {
            let deopt = ty("type_TrustedFixedArray__TRUSTED_FIXED_ARRAY_TYPE")?;
            (16, 8, trusted_bytes?, deopt, TableFormat::Signed)
        } else if v.is(13, 6) || v.is(14, 6) {
            let deopt = ty("type_ProtectedFixedArray__PROTECTED_FIXED_ARRAY_TYPE")?;
            let format = if v.is(13, 6) {
                TableFormat::Signed
            } else {
                TableFormat::Flags
            };
            (16, 8, trusted_bytes?, deopt, format)
        } else {
            return None;
        };
        // V8 11.3 and 12.4: a (weak) literal array and a plain byte array
        // of inlining positions; 13.6 and 14.6: their trusted kinds, and
        // the code's function wrapped.
        let (literals_type, inlining_positions_type, shared, wrapper) = if v.major < 13 {
            let shared = index("DeoptimizationDataSharedFunctionInfoIndex")?;
            (weak?, byte_array?, shared, None)
        } else {
            let shared = index("DeoptimizationDataWrappedSharedFunctionInfoIndex")?;
            let wrapper = (
                ty("type_SharedFunctionInfoWrapper__SHARED_FUNCTION_INFO_WRAPPER_TYPE")?,
                r.field("class_SharedFunctionInfoWrapper__shared_info__")
                    .ok()?,
            );
            (trusted_weak?, trusted_bytes?, shared, Some(wrapper))
        };
        // No constant names them: the kinds after BASELINE, as V8's
        // CodeKind lists them (MAGLEV, then TURBOFAN); the flags of the
        // codes `%DebugPrint` called MAGLEV and TURBOFAN held them on
        // those V8s (11.3: 13; 12.4: 12; 13.6: 11, 12; 14.6: 12, 13).
        let baseline = u32::try_from(r.s.value("CodeKindBaseline")?).ok()?;
        Some(InliningLayout {
            positions,
            positions_type,
            format,
            deopt_data,
            deopt_data_type,
            inlined_count: index("DeoptimizationDataInlinedFunctionCountIndex")?,
            literals: index("DeoptimizationDataLiteralArrayIndex")?,
            inlining_positions: index("DeoptimizationDataInliningPositionsIndex")?,
            shared,
            literals_type,
            inlining_positions_type,
            wrapper,
            kind_maglev: baseline.checked_add(1)?,
            kind_turbofan: baseline.checked_add(2)?,
        })
    }
}

/// One function of the chain at a pc: `None` for the code's own
/// function, and the script offset it is at in its own script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    pub function: Option<u64>,
    pub script: Option<u32>,
}

/// What an optimized code says of where its instructions lie in the
/// source and which functions it inlined.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inlined {
    /// The code's own shared function info.
    pub shared: u64,
    /// (pc offset, `SourcePosition`), ascending.
    pub positions: Vec<(u32, u64)>,
    /// By inlining id: the call's position (in its caller) and the
    /// inlined function's index in [`Inlined::functions`].
    pub inlinings: Vec<(u64, u32)>,
    /// The inlined functions' shared function infos (0: not one).
    pub functions: Vec<u64>,
}

impl Weight for Inlined {
    fn weight(&self) -> usize {
        self.positions.len() * std::mem::size_of::<(u32, u64)>()
            + self.inlinings.len() * std::mem::size_of::<(u64, u32)>()
            + self.functions.len() * 8
            + std::mem::size_of::<Self>()
    }
}

/// The inlining id a `SourcePosition` holds; `None` for the code's own
/// function.
fn inlining_id(position: u64) -> Option<usize> {
    usize::try_from((position >> 31) & 0xffff)
        .ok()?
        .checked_sub(1)
}

impl Inlined {
    /// The functions at pc offset `offset` (from the code's first
    /// instruction; for a return address, of the call), outermost first:
    /// the code's own, then each inlined into the one before. `None`
    /// before the first position, or where the tables do not make a
    /// chain of at most [`MAX_DEPTH`] functions.
    pub fn at(&self, offset: u32) -> Option<Vec<Site>> {
        let i = self.positions.partition_point(|&(o, _)| o <= offset);
        let mut position = self.positions.get(i.checked_sub(1)?)?.1;
        let mut out = Vec::new();
        for _ in 0..MAX_DEPTH {
            let script = script_offset(position);
            let Some(id) = inlining_id(position) else {
                out.push(Site {
                    function: None,
                    script,
                });
                out.reverse();
                return Some(out);
            };
            let &(caller, index) = self.inlinings.get(id)?;
            let function = *self.functions.get(usize::try_from(index).ok()?)?;
            if function == 0 {
                return None;
            }
            out.push(Site {
                function: Some(function),
                script,
            });
            position = caller;
        }
        None
    }
}

impl Heap<'_> {
    /// What optimized code `code` (TurboFan's, Maglev's) says of its
    /// positions and inlined functions; `None` for any other code, or
    /// where the V8 was not checked.
    pub fn inlined(&self, code: u64) -> Option<Inlined> {
        let il = self.layout().source.inlining?;
        let kind = self.code_kind(code)?;
        if kind != il.kind_maglev && kind != il.kind_turbofan {
            return None;
        }
        let table = self.word(code, il.positions)?;
        let positions = decode_raw(
            &self.byte_array(table, il.positions_type, MAX_TABLE)?,
            il.format,
        )?;
        let data = self.word(code, il.deopt_data)?;
        if !self.is(data, il.deopt_data_type) {
            return None;
        }
        let shared = self.deopt_shared(data, &il)?;
        let count = smi(self.element(data, il.inlined_count)?)?;
        if !(0..MAX_FUNCTIONS).contains(&count) {
            return None;
        }
        let literals = self.element(data, il.literals)?;
        if !self.is(literals, il.literals_type) {
            return None;
        }
        let functions = self
            .elements(literals, count as usize)?
            .into_iter()
            .map(|w| self.literal_function(w, &il))
            .collect();
        let at = self.element(data, il.inlining_positions)?;
        let max = MAX_INLININGS * INLINING_POSITION;
        let bytes = self.byte_array(at, il.inlining_positions_type, max)?;
        let inlinings = bytes
            .chunks_exact(INLINING_POSITION)
            .map(|e| {
                let position = u64::from_ne_bytes(e[..8].try_into().ok()?);
                let index = u32::from_ne_bytes(e[8..12].try_into().ok()?);
                Some((position, index))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Inlined {
            shared,
            positions,
            inlinings,
            functions,
        })
    }

    /// Element `i` of fixed array `array` (any kind: a Smi length, then
    /// tagged words), if it has one.
    fn element(&self, array: u64, i: u32) -> Option<u64> {
        let l = self.layout();
        let len = self.smi_field(array, l.fixed_array_length)?;
        if i64::from(i) >= len {
            return None;
        }
        let at = u64::from(l.fixed_array_data).checked_add(u64::from(i) * 8)?;
        self.field(array, at)
    }

    /// The first `n` elements of fixed array `array`, if it has them.
    fn elements(&self, array: u64, n: usize) -> Option<Vec<u64>> {
        let l = self.layout();
        let len = self.smi_field(array, l.fixed_array_length)?;
        if i64::try_from(n).ok()? > len {
            return None;
        }
        let mut bytes = vec![0u8; n.checked_mul(8)?];
        let at = (array - 1).checked_add(u64::from(l.fixed_array_data))?;
        self.mem().read(at, &mut bytes).ok()?;
        bytes
            .chunks_exact(8)
            .map(|w| Some(u64::from_ne_bytes(w.try_into().ok()?)))
            .collect()
    }

    /// The code's own shared function info, of deoptimization data `data`.
    fn deopt_shared(&self, data: u64, il: &InliningLayout) -> Option<u64> {
        let mut sfi = self.element(data, il.shared)?;
        if let Some((wrapper, field)) = il.wrapper {
            if !self.is(sfi, wrapper) {
                return None;
            }
            sfi = self.word(sfi, field)?;
        }
        self.is(sfi, self.layout().types.shared_function_info)
            .then_some(sfi)
    }

    /// The shared function info a literal array's word `w` refers to
    /// (weakly: tagged 3; or through a wrapper), else 0.
    fn literal_function(&self, w: u64, il: &InliningLayout) -> u64 {
        let mut sfi = if w & 3 == 3 { w & !2 } else { w };
        if let Some((wrapper, field)) = il.wrapper {
            if self.is(sfi, wrapper) {
                sfi = self.word(sfi, field).unwrap_or(0);
            }
        }
        if self.is(sfi, self.layout().types.shared_function_info) {
            sfi
        } else {
            0
        }
    }
}

#[cfg(test)]
#[path = "inlining_tests.rs"]
mod tests;
