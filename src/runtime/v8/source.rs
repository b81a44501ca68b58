//! Where in its script a function starts and a bytecode lies: the
//! positions a frame's line comes from.
//!
//! No `v8dbg_*` constant says where V8 keeps them, so they are read only
//! on the V8s (major, minor) each place was checked on in a live process,
//! cited where it is set; elsewhere a frame has no line.
//! - A compiled function's `ScopeInfo` holds its start and end (the
//!   scope's: the `(` of its parameters): two fixed slots from V8 12.8.44,
//!   before that after its locals and the optional slots its flags
//!   announce.
//! - A `BytecodeArray` has a source position table: (bytecode offset,
//!   source position) pairs as deltas, each a base-128 number (7 bits a
//!   byte, least significant first), the positions zigzag-coded; the
//!   offsets carry whether the position is a statement's, in their sign up
//!   to V8 13.6 and in their two low bits (with `is_breakable`) on V8 14.
//!   A position is V8's `SourcePosition`: bit 0 external (not
//!   JavaScript's), then the script offset plus one (30 bits), then (in
//!   optimized code, [`super::inlining`]) the inlining id plus one (16
//!   bits).

use super::constants::Reader;
use super::heap::{smi, Heap, MAX_LOCALS};
use super::inlining::InliningLayout;
use super::layout::ScopeInfoLayout;
use crate::runtime::tracker::Weight;

/// Where a function's `ScopeInfo` keeps its start position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeStart {
    /// In this slot, the end in the next (V8 12.8.44 on).
    Fixed(u64),
    /// After the locals' names and infos, then a class scope's saved
    /// variable, the function variable (name and slot) and the inferred
    /// name, each there when the flags (slot 0, a Smi) say so.
    AfterLocals {
        /// The bit saying there is a saved class variable.
        saved_class_variable: u32,
        /// The shift of the 2-bit function variable allocation (0: none).
        function_variable: u32,
        /// The bit saying there is an inferred name.
        inferred_name: u32,
    },
}

/// How a source position table codes whether an entry is a statement's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFormat {
    /// The offset delta's sign (negative: `-delta - 1`, an expression's),
    /// zigzag-coded.
    Signed,
    /// The offset delta shifted left by 2 over `is_breakable` and
    /// `is_statement`, not zigzag-coded.
    Flags,
}

/// Where a `BytecodeArray`'s source position table is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BytecodeTable {
    /// The field holding it (undefined until V8 collected positions).
    pub field: u16,
    /// Its instance type: `ByteArray`, then `TrustedByteArray`.
    pub table_type: u16,
    pub format: TableFormat,
}

impl BytecodeTable {
    /// The table's first byte: after its map and length (a Smi).
    pub const DATA: u64 = 16;
}

/// Where a V8 keeps source positions; `None` where not checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceLayout {
    pub scope_start: Option<ScopeStart>,
    pub bytecode_table: Option<BytecodeTable>,
    /// Where optimized code keeps its positions and what it inlined.
    pub inlining: Option<InliningLayout>,
}

impl SourceLayout {
    pub(super) fn read(r: &Reader) -> SourceLayout {
        let v = r.v;
        let type_of = |name: &str| r.s.value(name).and_then(|t| u16::try_from(t).ok());
        // Checked in a live Node 20.20.2 (V8 11.3) and 22.23.5 (V8 12.4):
        // the flags of declared, inferred, named-expression, arrow,
        // method, class and generator functions' ScopeInfos give the
        // slots before the start, which is the `(` of their parameters
        // (ScopeFlags: has_saved_class_variable bit 10,
        // function_variable bits 12-13, has_inferred_function_name bit
        // 14). Node 24.22.3 (13.6) and 26.12.1 (14.6): slots 3 and 4, as
        // scopeinfo_idx_first_vars moving from 3 to 5 says.
        let scope_start = if v.is(11, 3) || v.is(12, 4) {
            Some(ScopeStart::AfterLocals {
                saved_class_variable: 10,
                function_variable: 12,
                inferred_name: 14,
            })
        } else if v.is(13, 6) || v.is(14, 6) {
            Some(ScopeStart::Fixed(3))
        } else {
            None
        };
        // The field holding the table is the one whose word is the table
        // `--print-bytecode` prints (32 on V8 11.3, 24 on 12.4, 13.6 and
        // 14.6), and its bytes decode to the positions printed for each
        // bytecode, in a live Node 20.20.2, 22.23.5, 24.22.3 and 26.12.1
        // (namer_tests.rs checks them so).
        let trusted = type_of("type_TrustedByteArray__TRUSTED_BYTE_ARRAY_TYPE");
        let plain = type_of("type_ByteArray__BYTE_ARRAY_TYPE");
        let table = |field, table_type: Option<u16>, format| {
            table_type.map(|table_type| BytecodeTable {
                field,
                table_type,
                format,
            })
        };
        let bytecode_table = if v.is(11, 3) {
            table(32, plain, TableFormat::Signed)
        } else if v.is(12, 4) || v.is(13, 6) {
            table(24, trusted, TableFormat::Signed)
        } else if v.is(14, 6) {
            table(24, trusted, TableFormat::Flags)
        } else {
            None
        };
        SourceLayout {
            scope_start,
            bytecode_table,
            inlining: InliningLayout::read(r),
        }
    }
}

/// A bytecode array's positions: (bytecode offset, script offset) of the
/// JavaScript entries past the function's entry, ascending.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Positions {
    entries: Vec<(u32, u32)>,
}

impl Positions {
    /// The script offset of bytecode offset `offset`: the last entry's at
    /// or before it (V8's `AbstractCode::SourcePosition`).
    pub fn at(&self, offset: u32) -> Option<u32> {
        let i = self.entries.partition_point(|&(o, _)| o <= offset);
        Some(self.entries.get(i.checked_sub(1)?)?.1)
    }

    pub fn entries(&self) -> &[(u32, u32)] {
        &self.entries
    }
}

impl Weight for Positions {
    fn weight(&self) -> usize {
        self.entries.len() * std::mem::size_of::<(u32, u32)>() + std::mem::size_of::<Self>()
    }
}

/// The longest table read (V8's are a few bytes per statement).
pub(super) const MAX_TABLE: usize = 1 << 20;

/// Base-128 digits of one number at most.
const MAX_DIGITS: u32 = 10;

/// The base-128 number at `bytes[*i..]`.
fn number(bytes: &[u8], i: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for digit in 0..MAX_DIGITS {
        let b = *bytes.get(*i)?;
        *i += 1;
        value |= u64::from(b & 0x7f).checked_shl(7 * digit)?;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn zigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// The positions a source position table's `bytes` hold; `None` if they
/// are not one.
pub fn decode(bytes: &[u8], format: TableFormat) -> Option<Positions> {
    let entries = decode_raw(bytes, format)?
        .into_iter()
        .filter_map(|(offset, position)| Some((offset, script_offset(position)?)))
        .collect();
    Some(Positions { entries })
}

/// The entries of a source position table's `bytes` past the function's
/// entry: (code offset, the whole `SourcePosition`, which in optimized
/// code also holds an inlining id), ascending; `None` if they are not a
/// table.
pub fn decode_raw(bytes: &[u8], format: TableFormat) -> Option<Vec<(u32, u64)>> {
    let (mut offset, mut position) = (-1i64, 0i64);
    let mut entries = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let delta = match format {
            TableFormat::Signed => match zigzag(number(bytes, &mut i)?) {
                d if d >= 0 => d,
                d => -(d + 1),
            },
            TableFormat::Flags => i64::try_from(number(bytes, &mut i)? >> 2).ok()?,
        };
        offset = offset.checked_add(delta)?;
        position = position.checked_add(zigzag(number(bytes, &mut i)?))?;
        if position < 0 || offset > i64::from(u32::MAX) {
            return None;
        }
        // The function's entry (offset -1).
        if offset >= 0 {
            entries.push((offset as u32, position as u64));
        }
    }
    Some(entries)
}

/// The script offset a `SourcePosition` holds; `None` for an external
/// one (not JavaScript's) or none.
pub fn script_offset(position: u64) -> Option<u32> {
    if position & 1 == 1 {
        return None;
    }
    u32::try_from((position >> 1) & 0x3fff_ffff)
        .ok()?
        .checked_sub(1)
}

impl Heap<'_> {
    /// Where function `sfi` starts in its script (the `(` of its
    /// parameters), from its `ScopeInfo`; `None` for a function not
    /// compiled, or where the V8 was not checked.
    pub fn start_position(&self, sfi: u64) -> Option<u32> {
        let l = self.layout();
        if !self.is(sfi, l.types.shared_function_info) {
            return None;
        }
        let si = self.word(sfi, l.sfi_name_or_scope_info)?;
        if !self.is(si, l.types.scope_info) {
            return None;
        }
        let slots = u64::from(l.heap_object_map) + 8;
        let slot = |i: u64| smi(self.field(si, slots.checked_add(i.checked_mul(8)?)?)?);
        let at = match l.source.scope_start? {
            ScopeStart::Fixed(at) => at,
            ScopeStart::AfterLocals {
                saved_class_variable,
                function_variable,
                inferred_name,
            } => {
                let sl: ScopeInfoLayout = l.scope_info?;
                let flags = slot(0)?;
                let bit = |b: u32| (flags >> b) & 1 != 0;
                let locals = slot(u64::from(sl.ncontextlocals))?;
                if !(0..MAX_LOCALS).contains(&locals) {
                    return None;
                }
                let locals = locals as u64;
                let names = if locals < ScopeInfoLayout::MAX_INLINED_NAMES {
                    locals
                } else {
                    1
                };
                u64::from(sl.first_vars)
                    + names
                    + locals
                    + u64::from(bit(saved_class_variable))
                    + 2 * u64::from((flags >> function_variable) & 3 != 0)
                    + u64::from(bit(inferred_name))
            }
        };
        let (start, end) = (slot(at)?, slot(at + 1)?);
        if !(0..=end).contains(&start) {
            return None;
        }
        u32::try_from(start).ok()
    }

    /// The positions of bytecode array `ba`; `None` where V8 has not
    /// collected them (or not where flare looked).
    pub fn bytecode_positions(&self, ba: u64) -> Option<Positions> {
        let l = self.layout();
        let t = l.source.bytecode_table?;
        if !self.is(ba, l.types.bytecode_array) {
            return None;
        }
        let table = self.word(ba, t.field)?;
        decode(&self.byte_array(table, t.table_type, MAX_TABLE)?, t.format)
    }

    /// The bytes of byte array `obj` (a `ByteArray` or `TrustedByteArray`:
    /// a Smi length, then the bytes), if it is of instance type `ty` and
    /// holds `max` bytes at most.
    pub(super) fn byte_array(&self, obj: u64, ty: u16, max: usize) -> Option<Vec<u8>> {
        if !self.is(obj, ty) {
            return None;
        }
        let len = usize::try_from(self.smi_field(obj, self.layout().fixed_array_length)?).ok()?;
        if len > max {
            return None;
        }
        let mut bytes = vec![0u8; len];
        self.mem()
            .read((obj - 1).checked_add(BytecodeTable::DATA)?, &mut bytes)
            .ok()?;
        Some(bytes)
    }

    /// The table word of bytecode array `ba` (what a cache of its
    /// positions is kept under: it changes once V8 collects them).
    pub fn bytecode_table_word(&self, ba: u64) -> Option<u64> {
        let t = self.layout().source.bytecode_table?;
        self.word(ba, t.field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of `function foo(a) { let x = a + 1; x = x * 2; return
    /// x; }` (at 0 in its script) as Node 20, 22 and 24 hold it, and as
    /// 26 does: `--print-bytecode` lists 28 S> @0, 30 E> @2, 43 S> @6, 59
    /// S> @10 (after the entry's 12).
    const SIGNED: [u8; 10] = [0x01, 0x34, 0x02, 0x40, 0x05, 0x08, 0x08, 0x34, 0x08, 0x40];
    const FLAGS: [u8; 10] = [0x02, 0x34, 0x07, 0x40, 0x0a, 0x08, 0x13, 0x34, 0x13, 0x40];

    #[test]
    fn both_table_formats_decode_to_the_printed_positions() {
        let want = [(0, 28), (2, 30), (6, 43), (10, 59)];
        for (bytes, format) in [(SIGNED, TableFormat::Signed), (FLAGS, TableFormat::Flags)] {
            let p = decode(&bytes, format).expect("a table");
            assert_eq!(p.entries(), &want, "{format:?}");
            assert_eq!(p.at(0), Some(28));
            assert_eq!(p.at(5), Some(30), "the last entry at or before");
            assert_eq!(p.at(100), Some(59));
        }
        // Read with the other's format, neither gives those positions.
        assert_ne!(
            decode(&FLAGS, TableFormat::Signed).unwrap().entries(),
            &want
        );
        assert_ne!(
            decode(&SIGNED, TableFormat::Flags).unwrap().entries(),
            &want
        );
    }

    #[test]
    fn garbage_tables_give_none_or_nothing() {
        // A number cut short, and one too long.
        assert_eq!(decode(&[0x02, 0x80], TableFormat::Signed), None);
        assert_eq!(decode(&[0xff; 12], TableFormat::Flags), None);
        // A position below 0.
        assert_eq!(decode(&[0x02, 0x03], TableFormat::Signed), None);
        // Only the entry, an external position: no entries.
        let p = decode(&[0x01, 0x34, 0x02, 0x02], TableFormat::Signed).unwrap();
        assert_eq!(p.entries(), &[]);
        assert_eq!(p.at(0), None);
        assert_eq!(Positions::default().at(3), None);
    }
}
