//! V8 heap objects read from a live process: what a frame's function and
//! its shared function info say (name, script, line), and the code a
//! function runs (its kind, its instructions), as the namer and the
//! checks of a walk need them.
//!
//! Everything comes from another process's heap, which the collector may
//! have moved or freed since a walk saw it: every object's type is
//! checked through its map before a field of it is read, every length is
//! bounded, every nesting of strings limited, and anything that is not
//! what V8 writes gives `None` rather than a guess. Tagged words are
//! full 64-bit words ([`Layout::from_symbols`] refuses the rest): a heap
//! object's address has tag 1, a Smi holds its value in the upper half.

use std::ops::Range;

use super::layout::{FunctionCode, Layout, ScopeInfoLayout};
use super::units::Units;
#[cfg(test)]
pub(super) use super::units::{count_lines, scan_byte_lines, scan_lines};
pub use super::units::{LineSource, LineTable};
use crate::runtime::memory::Memory;

/// What a function without a name is called (as in V8's stack traces).
pub const ANONYMOUS: &str = "<anonymous>";

/// The most of a name or path read, in UTF-16 code units: a longer one
/// is cut there and ends in `…`.
pub const MAX_NAME: usize = 1024;

/// The most of a script's source scanned for its lines, in code units:
/// positions past it have no line.
pub const MAX_SOURCE: usize = 8 << 20;

/// The longest string taken for one (V8's `String::kMaxLength` is just
/// under 2^29): past it a length is garbage.
const MAX_STRING_LENGTH: usize = 1 << 29;

/// Strings nested in one (cons, thin and sliced strings' parts) at most.
const MAX_DEPTH: u32 = 64;

/// Parts of one string read at most.
const MAX_PARTS: u32 = 4096;

/// Line ends read of a script at most.
const MAX_LINES: usize = 1 << 22;

/// Context locals of a scope at most (V8 allows fewer than 2^16).
pub(super) const MAX_LOCALS: i64 = 1 << 16;

/// The value of a Smi; `None` for a heap object's address.
pub fn smi(word: u64) -> Option<i64> {
    (word & 1 == 0).then_some(word as i64 >> 32)
}

/// Whether `word` is a heap object's (tagged) address.
fn is_object(word: u64) -> bool {
    word & 3 == 1
}

/// The most bytes of a string read at once: a source is read and counted
/// a piece at a time into one buffer, which the allocator reuses, rather
/// than into megabytes of fresh pages each time.
const READ_CHUNK: usize = 64 << 10;

/// The words of a feedback vector searched for code: its header and the
/// slots of a function with some 120 feedback sites.
pub const FEEDBACK_WORDS: usize = 256;

/// The smallest page a process maps.
const PAGE: u64 = 4096;

/// The words after a `CodeWrapper`'s map searched for its `Code`.
const WRAPPER_WORDS: u64 = 3;

/// One process's V8 heap, read with its layout.
pub struct Heap<'a> {
    layout: &'a Layout,
    mem: &'a dyn Memory,
}

impl<'a> Heap<'a> {
    pub fn new(layout: &'a Layout, mem: &'a dyn Memory) -> Self {
        Heap { layout, mem }
    }

    pub(super) fn layout(&self) -> &'a Layout {
        self.layout
    }

    pub(super) fn mem(&self) -> &'a dyn Memory {
        self.mem
    }

    /// The field at `offset` of heap object `obj` (a tagged address).
    pub(super) fn field(&self, obj: u64, offset: u64) -> Option<u64> {
        if !is_object(obj) {
            return None;
        }
        self.mem.read_u64((obj - 1).checked_add(offset)?).ok()
    }

    fn field_u32(&self, obj: u64, offset: u16) -> Option<u32> {
        if !is_object(obj) {
            return None;
        }
        self.mem
            .read_u32((obj - 1).checked_add(u64::from(offset))?)
            .ok()
    }

    pub(super) fn word(&self, obj: u64, offset: u16) -> Option<u64> {
        self.field(obj, u64::from(offset))
    }

    /// A Smi field's value.
    pub(super) fn smi_field(&self, obj: u64, offset: u16) -> Option<i64> {
        smi(self.word(obj, offset)?)
    }

    /// The instance type of heap object `obj` (its map's).
    pub fn instance_type(&self, obj: u64) -> Option<u16> {
        let map = self.word(obj, self.layout.heap_object_map)?;
        if !is_object(map) {
            return None;
        }
        let mut b = [0u8; 2];
        let at = (map - 1).checked_add(u64::from(self.layout.map_instance_type))?;
        self.mem.read(at, &mut b).ok()?;
        Some(u16::from_ne_bytes(b))
    }

    /// Whether `obj` is a heap object of instance type `ty`.
    pub(super) fn is(&self, obj: u64, ty: u16) -> bool {
        self.instance_type(obj) == Some(ty)
    }

    /// Whether `obj` is a `JSFunction` (a constructor's kind included).
    pub fn is_js_function(&self, obj: u64) -> bool {
        self.instance_type(obj)
            .is_some_and(|t| self.layout.types.js_function.contains(&t))
    }

    /// Function `function`'s shared function info.
    pub fn shared(&self, function: u64) -> Option<u64> {
        if !self.is_js_function(function) {
            return None;
        }
        let sfi = self.word(function, self.layout.function_shared)?;
        self.is(sfi, self.layout.types.shared_function_info)
            .then_some(sfi)
    }

    /// Function `function`'s code: its `code` field (V8 11, 12), or with
    /// leaptiering the entry of its handle in the dispatch table at
    /// `dispatch_table` (the process's; `None` gives `None` then).
    pub fn code(&self, function: u64, dispatch_table: Option<u64>) -> Option<u64> {
        if !self.is_js_function(function) {
            return None;
        }
        let code = match self.layout.function_code {
            FunctionCode::Pointer(offset) => self.word(function, offset)?,
            FunctionCode::DispatchHandle { offset } => {
                let handle = self.field_u32(function, offset)?;
                let entry = u64::from(handle >> FunctionCode::ENTRY_SHIFT)
                    .checked_mul(FunctionCode::ENTRY_SIZE)?
                    .checked_add(dispatch_table?)?;
                let word = self
                    .mem
                    .read_u64(entry.checked_add(FunctionCode::CODE_WORD)?)
                    .ok()?;
                (word >> FunctionCode::CODE_SHIFT) | 1
            }
        };
        self.is(code, self.layout.types.code).then_some(code)
    }

    /// Code `code`'s kind (`CodeKind`: interpreted, baseline, ...).
    pub fn code_kind(&self, code: u64) -> Option<u32> {
        if !self.is(code, self.layout.types.code) {
            return None;
        }
        let c = &self.layout.code;
        let flags = self.field_u32(code, c.flags)?;
        Some(flags.checked_shr(c.kind_shift)? & c.kind_mask)
    }

    /// The addresses of code `code`'s instructions.
    pub fn instructions(&self, code: u64) -> Option<Range<u64>> {
        if !self.is(code, self.layout.types.code) {
            return None;
        }
        let c = &self.layout.code;
        let start = self.word(code, c.instruction_start)?;
        let size = self.field_u32(code, c.instruction_size)?;
        Some(start..start.checked_add(u64::from(size))?)
    }

    /// The code optimized for function `function` that holds `pc`, as its
    /// feedback vector keeps it: code compiled on stack replacement (a
    /// loop's, entered mid-run) is no function's code, so a frame running
    /// it is found here. `None` where no code the vector keeps holds `pc`.
    /// The vector's first [`FEEDBACK_WORDS`] are searched (its length is
    /// no constant V8 names: words past it are other objects'): each weak
    /// or strong reference to a `Code`, or to a `CodeWrapper` whose first
    /// words hold one, is taken only if its instructions hold `pc`, as
    /// only the code running there does.
    pub fn feedback_code(&self, function: u64, pc: u64) -> Option<u64> {
        let f = self.layout.feedback?;
        if !self.is_js_function(function) {
            return None;
        }
        let cell = self.word(function, f.function_cell)?;
        let vector = self.word(cell, f.cell_value)?;
        if !self.is(vector, f.vector_type) {
            return None;
        }
        let code_type = self.layout.types.code;
        let holds = |code: u64| {
            self.instructions(code)
                .is_some_and(|range| range.contains(&pc))
        };
        // The whole block, or (the next page not mapped) to its page's end.
        let start = vector - 1;
        let mut buf = vec![0u8; FEEDBACK_WORDS * 8];
        if self.mem.read(start, &mut buf).is_err() {
            let to_page_end = (PAGE - start % PAGE) as usize;
            buf.truncate(to_page_end.min(buf.len()));
            self.mem.read(start, &mut buf).ok()?;
        }
        buf.chunks_exact(8)
            .skip(1)
            .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or_default()))
            // A weak reference is tagged 3: as a strong one, 1.
            .filter(|&w| w & 1 == 1)
            .map(|w| w & !2)
            .find_map(|obj| {
                let ty = self.instance_type(obj)?;
                if ty == code_type {
                    return holds(obj).then_some(obj);
                }
                if Some(ty) != f.code_wrapper_type {
                    return None;
                }
                (1..=WRAPPER_WORDS)
                    .filter_map(|i| self.field(obj, i * 8))
                    .find(|&code| self.is(code, code_type) && holds(code))
            })
    }

    /// The string `obj`, at most [`MAX_NAME`] code units of it (a longer
    /// one ends in `…`). `None` unless it is a string whose every part
    /// could be read.
    pub fn read_string(&self, obj: u64) -> Option<String> {
        let len = self.string_length(obj)?.1;
        let units = self.units(obj, MAX_NAME)?;
        let mut s = String::from_utf16_lossy(&units);
        if len > units.len() {
            s.push('…');
        }
        Some(s)
    }

    /// Shared function info `sfi`'s function name: its own name, else
    /// the name V8 inferred from where it is defined (`obj.method`),
    /// else [`ANONYMOUS`]. `None` unless `sfi` is a shared function info
    /// whose name could be read.
    pub fn function_name(&self, sfi: u64) -> Option<String> {
        let l = self.layout;
        if !self.is(sfi, l.types.shared_function_info) {
            return None;
        }
        let value = self.word(sfi, l.sfi_name_or_scope_info)?;
        let name = match smi(value) {
            // `kNoSharedNameSentinel`.
            Some(0) => String::new(),
            Some(_) => return None,
            None if self.instance_type(value)? == l.types.scope_info => {
                self.scope_info_name(value, l.scope_info?)?
            }
            // A function not compiled yet: its name.
            None => self.read_string(value)?,
        };
        Some(if name.is_empty() {
            ANONYMOUS.to_string()
        } else {
            name
        })
    }

    /// The name a function's `ScopeInfo` `si` holds: the function
    /// variable's name if not empty, else the inferred name; empty if
    /// neither is.
    fn scope_info_name(&self, si: u64, sl: ScopeInfoLayout) -> Option<String> {
        let slots = u64::from(self.layout.heap_object_map) + 8;
        let slot = |i: u64| self.field(si, slots.checked_add(i.checked_mul(8)?)?);
        let locals = smi(slot(u64::from(sl.ncontextlocals))?)?;
        if !(0..MAX_LOCALS).contains(&locals) {
            return None;
        }
        let locals = locals as u64;
        let names = if locals < ScopeInfoLayout::MAX_INLINED_NAMES {
            locals
        } else {
            1
        };
        let after = u64::from(sl.first_vars) + names + locals;
        for i in after..after + ScopeInfoLayout::NAME_SLOTS {
            let w = slot(i)?;
            if smi(w).is_some() || !self.is_string(w) {
                continue;
            }
            let name = self.read_string(w)?;
            if !name.is_empty() {
                return Some(name);
            }
        }
        Some(String::new())
    }

    /// Shared function info `sfi`'s script.
    pub fn script(&self, sfi: u64) -> Option<u64> {
        let l = self.layout;
        if !self.is(sfi, l.types.shared_function_info) {
            return None;
        }
        let script = self.word(sfi, l.sfi_script)?;
        self.is(script, l.types.script).then_some(script)
    }

    /// The name of shared function info `sfi`'s script: a path (CommonJS),
    /// a `file://` URL (ES modules), `node:internal/...`. `None` for a
    /// script without one (`eval`, `new Function`).
    pub fn script_name(&self, sfi: u64) -> Option<String> {
        let script = self.script(sfi)?;
        self.read_string(self.word(script, self.layout.script_name)?)
    }

    /// The 1-based line of source position `position` in script
    /// `script`.
    pub fn line_of(&self, script: u64, position: u32) -> Option<u32> {
        self.line_table(script)?.line(position)
    }

    /// Where script `script`'s lines end: its `line_ends` where V8 filled
    /// them in (a FixedArray of Smis), else counted in its source (its
    /// first [`MAX_SOURCE`] code units).
    pub fn line_table(&self, script: u64) -> Option<LineTable> {
        let l = self.layout;
        if !self.is(script, l.types.script) {
            return None;
        }
        let ends = self.word(script, l.script_line_ends)?;
        if self.is(ends, l.types.fixed_array) {
            return self.line_ends(ends);
        }
        let source = self.word(script, l.script_source)?;
        let len = self.string_length(source)?.1;
        let mut u = Units::new(MAX_SOURCE, true);
        self.append(source, 0, usize::MAX, &mut u, 0)?;
        let whole = u.taken == len;
        Some(u.lines?.finish(whole))
    }

    /// The line ends in FixedArray `ends`: Smis, ascending.
    fn line_ends(&self, ends: u64) -> Option<LineTable> {
        let l = self.layout;
        let n = usize::try_from(self.smi_field(ends, l.fixed_array_length)?).ok()?;
        if n == 0 || n > MAX_LINES {
            return None;
        }
        let mut bytes = vec![0u8; n * 8];
        let at = (ends - 1).checked_add(u64::from(l.fixed_array_data))?;
        self.mem.read(at, &mut bytes).ok()?;
        let mut out = Vec::with_capacity(n);
        for w in bytes.chunks_exact(8) {
            let end = smi(u64::from_ne_bytes(w.try_into().ok()?))?;
            let end = u32::try_from(end).ok()?;
            if out.last().is_some_and(|&last| end < last) {
                return None;
            }
            out.push(end);
        }
        let covers = *out.last()?;
        Some(LineTable {
            ends: out,
            covers,
            from: LineSource::LineEnds,
        })
    }

    /// Whether `obj` is a string.
    fn is_string(&self, obj: u64) -> bool {
        self.instance_type(obj)
            .is_some_and(|t| t & self.layout.strings.not_string_mask == 0)
    }

    /// String `obj`'s instance type and length.
    fn string_length(&self, obj: u64) -> Option<(u16, usize)> {
        let ty = self.instance_type(obj)?;
        if ty & self.layout.strings.not_string_mask != 0 {
            return None;
        }
        let len = self.field_u32(obj, self.layout.strings.length)? as i32;
        let len = usize::try_from(len).ok()?;
        (len <= MAX_STRING_LENGTH).then_some((ty, len))
    }

    /// String `obj`'s first `limit` code units at most.
    fn units(&self, obj: u64, limit: usize) -> Option<Vec<u16>> {
        let mut u = Units::new(limit, false);
        self.append(obj, 0, usize::MAX, &mut u, 0)?;
        Some(u.out)
    }

    /// Appends string `obj`'s code units from `skip` on, `max` of them at
    /// most (and no more than `u` takes).
    fn append(&self, obj: u64, skip: usize, max: usize, u: &mut Units, depth: u32) -> Option<()> {
        u.parts += 1;
        if depth > MAX_DEPTH || u.parts > MAX_PARTS {
            return None;
        }
        let s = &self.layout.strings;
        let (ty, len) = self.string_length(obj)?;
        let n = len
            .saturating_sub(skip)
            .min(max)
            .min(u.limit.saturating_sub(u.taken));
        if n == 0 {
            return Some(());
        }
        let one_byte = ty & s.encoding_mask == s.one_byte_tag;
        let representation = ty & s.representation_mask;
        if representation == s.seq_tag {
            let chars = if one_byte {
                s.seq_one_byte_chars
            } else {
                s.seq_two_byte_chars
            };
            let at = (obj - 1).checked_add(u64::from(chars))?;
            self.read_units(at, skip, n, one_byte, u)
        } else if representation == s.cons_tag {
            let first = self.word(obj, s.cons_first)?;
            let second = self.word(obj, s.cons_second)?;
            let first_len = self.string_length(first)?.1;
            if first_len > len {
                return None;
            }
            let before = u.taken;
            self.append(first, skip, n, u, depth + 1)?;
            let taken = u.taken - before;
            self.append(
                second,
                skip.saturating_sub(first_len),
                n - taken,
                u,
                depth + 1,
            )
        } else if representation == s.thin_tag {
            self.append(self.word(obj, s.thin_actual)?, skip, n, u, depth + 1)
        } else if representation == s.sliced_tag {
            let offset = usize::try_from(self.smi_field(obj, s.sliced_offset)?).ok()?;
            let parent = self.word(obj, s.sliced_parent)?;
            self.append(parent, offset.checked_add(skip)?, n, u, depth + 1)
        } else if representation == s.external_tag {
            let ext = s.external?;
            if ty & ext.uncached_mask != 0 {
                return None;
            }
            let data = self.word(obj, ext.data)?;
            if data == 0 {
                return None;
            }
            self.read_units(data, skip, n, one_byte, u)
        } else {
            None
        }
    }

    /// Appends `n` code units of characters at `at` (one byte each, or
    /// two), from the `skip`th on.
    fn read_units(
        &self,
        at: u64,
        skip: usize,
        n: usize,
        one_byte: bool,
        u: &mut Units,
    ) -> Option<()> {
        let width = if one_byte { 1 } else { 2 };
        let mut start = at.checked_add(u64::try_from(skip.checked_mul(width)?).ok()?)?;
        let mut left = n.checked_mul(width)?;
        let mut buf = vec![0u8; left.min(READ_CHUNK)];
        while left > 0 {
            let bytes = &mut buf[..left.min(READ_CHUNK)];
            self.mem.read(start, bytes).ok()?;
            u.extend(bytes, one_byte);
            left -= bytes.len();
            start = start.checked_add(bytes.len() as u64)?;
        }
        Some(())
    }
}

#[cfg(test)]
#[path = "heap_tests.rs"]
mod tests;
