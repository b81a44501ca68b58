//! What names a Ruby frame, read from a live CRuby: an instruction
//! sequence's labels, path, first line and line table (a succinct index
//! from instruction to line-table entry), a method entry's class and
//! definition, and an ID's name through `ruby_global_symbols`.
//!
//! Everything here comes from another process's memory, which may have
//! changed or been freed since BPF read it: each object's type is checked
//! in its flags before it is read as one, every length is bounded and
//! every index checked, and what does not look like what CRuby writes
//! gives `None` rather than a guess.

use crate::runtime::memory::Memory;
use crate::runtime::ruby::Layout;

/// The most read of a string, in bytes (a label, a path, a class's
/// path): a longer one is read this far and ends in `…` (outputs cut
/// names shorter still: [`crate::profile::MAX_RUNTIME_NAME`]).
pub const MAX_STRING_BYTES: usize = 4096;

/// The longest string taken for one, in bytes: past it, a length is
/// garbage (no label or path is that long).
const MAX_STRING_LENGTH: u64 = 1 << 20;

/// The most bytes read of one sequence's line table: its entries, or its
/// succinct index.
const MAX_LINE_TABLE: u64 = 1 << 20;

/// `RUBY_T_MASK` and the types read (`enum ruby_value_type`).
const T_MASK: u64 = 0x1f;
const T_CLASS: u64 = 0x02;
const T_MODULE: u64 = 0x03;
const T_STRING: u64 = 0x05;
const T_ARRAY: u64 = 0x07;
const T_IMEMO: u64 = 0x1a;
const T_ICLASS: u64 = 0x1c;

/// `enum imemo_type`, at `(flags >> 12) & 0xf` of a `T_IMEMO`.
const IMEMO_SHIFT: u32 = 12;
const IMEMO_MASK: u64 = 0xf;
pub const IMEMO_MENT: u64 = 6;
pub const IMEMO_ISEQ: u64 = 7;

/// `ISEQ_TYPE_METHOD`.
const ISEQ_TYPE_METHOD: u32 = 1;

/// `VM_METHOD_TYPE_ISEQ`, `VM_METHOD_TYPE_CFUNC`.
pub const METHOD_TYPE_ISEQ: u8 = 0;
pub const METHOD_TYPE_CFUNC: u8 = 1;

/// `IMMEDIATE_TABLE_SIZE` of `struct succ_index_table` (iseq.c): the
/// first positions' ranks, 7 bits each, 9 to a word.
const IMMEDIATE: u64 = 54;
/// `sizeof(struct succ_dict_block)`: rank (u32, padded), the small
/// blocks' ranks (u64), 8 words of bits, for 512 positions.
const BLOCK_SIZE: u64 = 80;
const BLOCK_POSITIONS: u64 = 512;

/// What an instruction sequence (`rb_iseq_t`) says of its code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iseq {
    /// `location.label`: `outer`, `block in outer`, `<main>`,
    /// `<class:Foo>`.
    pub label: String,
    /// `location.base_label`: `outer` for both of the first two.
    pub base_label: String,
    /// The path of its file, as Ruby loaded it (`pathobj`, or its first
    /// element).
    pub path: String,
    /// `location.first_lineno`.
    pub first_lineno: u32,
    /// `local_iseq`: the method (or top-level code) a block is in, the
    /// sequence itself when not a block.
    pub local_iseq: u64,
    /// `local_iseq`'s `base_label` when it is a method's
    /// (`rb_iseq_method_name`).
    pub method_name: Option<String>,
    lines: LineTable,
}

impl crate::runtime::tracker::Weight for Iseq {
    fn weight(&self) -> usize {
        self.label.len()
            + self.base_label.len()
            + self.path.len()
            + self.method_name.as_ref().map_or(0, String::len)
            + self.lines.lines.len() * 4
            + self.lines.index.len()
            + std::mem::size_of::<Self>()
    }
}

impl Iseq {
    /// The line of the instruction at `pos` (in words from the start of
    /// the code, less one as Ruby's `calc_pos` takes it), if the table
    /// gives one.
    pub fn line(&self, pos: u32) -> Option<u32> {
        self.lines.line(pos)
    }
}

/// An instruction sequence's line table, as `get_insn_info` reads it
/// (`VM_INSN_INFO_TABLE_IMPL` 2 in every version flare reads).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineTable {
    /// `iseq_size`: positions at or past it have no entry.
    pub size: u32,
    /// `line_no` of each `insns_info` entry.
    pub lines: Vec<i32>,
    /// The `succ_index_table`'s bytes: the immediate part's words, then
    /// the blocks.
    pub index: Vec<u8>,
}

impl LineTable {
    /// The line of the instruction at `pos`: `insns_info.body[i - 1]`
    /// where `i` is the succinct index's rank of `pos`.
    pub fn line(&self, pos: u32) -> Option<u32> {
        let line = match self.lines.len() {
            0 => return None,
            1 => self.lines[0],
            _ => {
                if pos >= self.size {
                    return None;
                }
                let rank = self.rank(u64::from(pos))?;
                *self.lines.get(rank.checked_sub(1)?)?
            }
        };
        u32::try_from(line).ok().filter(|&l| l > 0)
    }

    /// `succ_index_lookup(table, pos)`.
    fn rank(&self, pos: u64) -> Option<usize> {
        let word = |at: u64| -> Option<u64> {
            let at = usize::try_from(at).ok()?;
            let b = self.index.get(at..at.checked_add(8)?)?;
            Some(u64::from_ne_bytes(b.try_into().ok()?))
        };
        if pos < IMMEDIATE {
            let imm = word(pos / 9 * 8)?;
            return Some(((imm >> (7 * (pos % 9))) & 0x7f) as usize);
        }
        let block = IMMEDIATE / 9 * 8 + (pos - IMMEDIATE) / BLOCK_POSITIONS * BLOCK_SIZE;
        let bit = (pos - IMMEDIATE) % BLOCK_POSITIONS;
        let small = bit / 64;
        let rank = word(block)? & 0xffff_ffff;
        let small_rank = match small {
            0 => 0,
            i => (word(block + 8)? >> (9 * (i - 1))) & 0x1ff,
        };
        let bits = word(block + 16 + 8 * small)? << (63 - bit % 64);
        usize::try_from(rank + small_rank + u64::from(bits.count_ones())).ok()
    }
}

/// The flags of the object at `addr`, if it is one (non-zero, aligned,
/// readable).
fn flags(mem: &dyn Memory, addr: u64) -> Option<u64> {
    if addr == 0 || addr % 8 != 0 {
        return None;
    }
    mem.read_u64(addr).ok()
}

/// The word at `off` of the object at `addr`.
fn field(mem: &dyn Memory, addr: u64, off: u16) -> Option<u64> {
    mem.read_u64(addr.checked_add(u64::from(off))?).ok()
}

/// The imemo type of the object at `addr`, if it is a `T_IMEMO`.
pub fn imemo_type(mem: &dyn Memory, addr: u64) -> Option<u64> {
    let f = flags(mem, addr)?;
    (f & T_MASK == T_IMEMO).then_some((f >> IMEMO_SHIFT) & IMEMO_MASK)
}

/// The 8 bytes at `at` of `bytes`, as a native word.
fn word(bytes: &[u8], at: u16) -> Option<u64> {
    let at = usize::from(at);
    let b = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_ne_bytes(b.try_into().ok()?))
}

/// The 4 bytes at `at` of `bytes`, as a native `u32`.
fn word32(bytes: &[u8], at: u16) -> Option<u32> {
    let at = usize::from(at);
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes(b.try_into().ok()?))
}

/// Reads the `String` at `addr`: its first [`MAX_STRING_BYTES`] (then
/// `…`), as UTF-8 (anything else replaced). `None` when it is not a
/// `T_STRING` or its length is garbage.
pub fn read_string(mem: &dyn Memory, layout: &Layout, addr: u64) -> Option<String> {
    let f = flags(mem, addr)?;
    if f & T_MASK != T_STRING {
        return None;
    }
    let (len, at) = if f & layout.rstring_noembed != 0 {
        (
            field(mem, addr, layout.rstring_len)?,
            field(mem, addr, layout.rstring_ptr)?,
        )
    } else {
        let len = match layout.rstring_embed_len {
            Some((shift, mask)) => (f >> shift) & mask,
            None => field(mem, addr, layout.rstring_len)?,
        };
        (len, addr.checked_add(u64::from(layout.rstring_embed))?)
    };
    if len > MAX_STRING_LENGTH {
        return None;
    }
    let mut data = vec![0u8; (len as usize).min(MAX_STRING_BYTES)];
    mem.read(at, &mut data).ok()?;
    Some(decode(&data, data.len() as u64 != len))
}

/// `data` as text, invalid UTF-8 replaced; a `cut` string ends in `…`
/// instead of the character cut in two.
fn decode(data: &[u8], cut: bool) -> String {
    let mut text = String::with_capacity(data.len() + 3);
    let mut chunks = data.utf8_chunks().peekable();
    while let Some(chunk) = chunks.next() {
        text.push_str(chunk.valid());
        let last = chunks.peek().is_none();
        if !(chunk.invalid().is_empty() || last && cut) {
            text.push(char::REPLACEMENT_CHARACTER);
        }
    }
    if cut {
        text.push('…');
    }
    text
}

/// Where the elements of the `Array` at `addr` lie, and how many.
fn read_array(mem: &dyn Memory, layout: &Layout, addr: u64) -> Option<(u64, u64)> {
    let f = flags(mem, addr)?;
    if f & T_MASK != T_ARRAY {
        return None;
    }
    if f & layout.rarray_embed_flag != 0 {
        let len = (f & layout.rarray_embed_len_mask) >> layout.rarray_embed_len_shift;
        return Some((addr.checked_add(u64::from(layout.rarray_embed))?, len));
    }
    let len = field(mem, addr, layout.rarray_len)?;
    let ptr = field(mem, addr, layout.rarray_ptr)?;
    Some((ptr, len))
}

/// Element `index` of the `Array` at `addr`.
fn array_element(mem: &dyn Memory, layout: &Layout, addr: u64, index: u64) -> Option<u64> {
    let (at, len) = read_array(mem, layout, addr)?;
    if index >= len {
        return None;
    }
    mem.read_u64(at.checked_add(index.checked_mul(8)?)?).ok()
}

/// A sequence's path: `pathobj` is the path String, or `[path,
/// realpath]` (`rb_iseq_path`; the real path when the path is unreadable).
fn read_path(mem: &dyn Memory, layout: &Layout, pathobj: u64) -> Option<String> {
    read_string(mem, layout, pathobj).or_else(|| {
        (0..2).find_map(|i| {
            let s = array_element(mem, layout, pathobj, i)?;
            read_string(mem, layout, s)
        })
    })
}

/// The bytes of the body of the sequence at `iseq` that flare reads;
/// `None` unless it is an imemo iseq.
fn read_body(mem: &dyn Memory, layout: &Layout, iseq: u64) -> Option<Vec<u8>> {
    if imemo_type(mem, iseq)? != IMEMO_ISEQ {
        return None;
    }
    let body = field(mem, iseq, layout.iseq_body)?;
    if body == 0 || body % 8 != 0 {
        return None;
    }
    let end = [
        layout.body_iseq_encoded,
        layout.body_pathobj,
        layout.body_base_label,
        layout.body_label,
        layout.body_insns_info,
        layout.body_succ_index_table,
        layout.body_local_iseq,
    ]
    .into_iter()
    .map(|o| usize::from(o) + 8)
    .chain(
        [
            layout.body_type,
            layout.body_iseq_size,
            layout.body_insns_info_size,
        ]
        .map(|o| usize::from(o) + 4),
    )
    .chain([usize::from(layout.body_first_lineno) + 8])
    .max()
    .unwrap_or(0);
    let mut bytes = vec![0u8; end];
    mem.read(body, &mut bytes).ok()?;
    Some(bytes)
}

/// Reads the instruction sequence at `iseq`, if its code is still at
/// `cookie` (`iseq_encoded`, as BPF read it). `None` when it is not (or
/// no longer) that sequence, or its labels or path cannot be read.
pub fn read_iseq(mem: &dyn Memory, layout: &Layout, iseq: u64, cookie: u64) -> Option<Iseq> {
    let body = read_body(mem, layout, iseq)?;
    if word(&body, layout.body_iseq_encoded)? != cookie {
        return None;
    }
    let label = read_string(mem, layout, word(&body, layout.body_label)?)?;
    let base_label = read_string(mem, layout, word(&body, layout.body_base_label)?)?;
    let path = read_path(mem, layout, word(&body, layout.body_pathobj)?)?;
    let first_lineno = if layout.first_lineno_fixnum {
        // A Fixnum: the line, shifted, tagged 1.
        let v = word(&body, layout.body_first_lineno)?;
        if v & 1 == 0 {
            return None;
        }
        (v as i64 >> 1) as i32
    } else {
        word32(&body, layout.body_first_lineno)? as i32
    };
    let local_iseq = word(&body, layout.body_local_iseq)?;
    let method_name = if local_iseq == iseq {
        (word32(&body, layout.body_type)? == ISEQ_TYPE_METHOD).then(|| base_label.clone())
    } else {
        read_body(mem, layout, local_iseq).and_then(|local| {
            if word32(&local, layout.body_type)? != ISEQ_TYPE_METHOD {
                return None;
            }
            read_string(mem, layout, word(&local, layout.body_base_label)?)
        })
    };
    Some(Iseq {
        label,
        base_label,
        path,
        first_lineno: u32::try_from(first_lineno).unwrap_or(0),
        local_iseq,
        method_name,
        lines: read_lines(mem, layout, &body).unwrap_or_default(),
    })
}

/// The line table of a sequence whose body's bytes are `body`; `None`
/// when unreadable or larger than [`MAX_LINE_TABLE`] (its frames then
/// show the first line).
fn read_lines(mem: &dyn Memory, layout: &Layout, body: &[u8]) -> Option<LineTable> {
    let size = word32(body, layout.body_iseq_size)?;
    let entries = u64::from(word32(body, layout.body_insns_info_size)?);
    let at = word(body, layout.body_insns_info)?;
    // Each entry starts at a distinct position of the code.
    if entries == 0 || entries > u64::from(size) {
        return None;
    }
    let entry = u64::from(layout.insn_info_size);
    let line_at = usize::from(layout.insn_info_line_no);
    if line_at + 4 > entry as usize {
        return None;
    }
    let bytes = entries.checked_mul(entry)?;
    if bytes > MAX_LINE_TABLE {
        return None;
    }
    let mut raw = vec![0u8; bytes as usize];
    mem.read(at, &mut raw).ok()?;
    let lines = raw
        .chunks_exact(entry as usize)
        .map(|e| i32::from_ne_bytes([e[line_at], e[line_at + 1], e[line_at + 2], e[line_at + 3]]))
        .collect();
    let mut index = Vec::new();
    if entries > 1 {
        // `succ_index_table_create(iseq_size, …)`'s allocation: the
        // immediate words its positions need, then whole blocks.
        let max = u64::from(size);
        let (imm, blocks) = if max < IMMEDIATE {
            (max.div_ceil(9), 0)
        } else {
            (IMMEDIATE / 9, (max - IMMEDIATE).div_ceil(BLOCK_POSITIONS))
        };
        let len = imm * 8 + blocks * BLOCK_SIZE;
        if len > MAX_LINE_TABLE {
            return None;
        }
        index = vec![0u8; len as usize];
        mem.read(word(body, layout.body_succ_index_table)?, &mut index)
            .ok()?;
    }
    Some(LineTable { size, lines, index })
}

/// What a method entry (`rb_callable_method_entry_t`) says of its method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodEntry {
    /// `def`, BPF's cookie for a C function's frame.
    pub def: u64,
    /// `def->type`: [`METHOD_TYPE_ISEQ`], [`METHOD_TYPE_CFUNC`], …
    pub def_type: u8,
    /// `def->body.iseq.iseqptr` (meaningful for an ISEQ method only).
    pub iseqptr: u64,
    /// `def->original_id`.
    pub original_id: u64,
    /// The path of the class Ruby's profiler names it by, and whether the
    /// method is a singleton's (`Foo.bar`); `None` when unknown (3.1, an
    /// anonymous class, an object's own singleton).
    pub class: Option<(String, bool)>,
}

impl crate::runtime::tracker::Weight for MethodEntry {
    fn weight(&self) -> usize {
        self.class.as_ref().map_or(0, |c| c.0.len()) + std::mem::size_of::<Self>()
    }
}

impl MethodEntry {
    /// `method` qualified as `rb_profile_frame_qualified_method_name`
    /// does: `Foo#bar`, `Foo.bar` for a singleton method, `bar` without
    /// a class.
    pub fn qualify(&self, method: &str) -> String {
        match &self.class {
            Some((path, singleton)) => {
                format!("{path}{}{method}", if *singleton { "." } else { "#" })
            }
            None => method.to_string(),
        }
    }
}

/// Reads the method entry at `cme`: `None` unless it is an imemo ment
/// whose definition can be read. `ivars`: 3.1's hidden instance
/// variables, which name its class ([`class_path`]).
pub fn read_method_entry(
    mem: &dyn Memory,
    layout: &Layout,
    cme: u64,
    ivars: Option<&ClassIvars>,
) -> Option<MethodEntry> {
    if imemo_type(mem, cme)? != IMEMO_MENT {
        return None;
    }
    let def = field(mem, cme, layout.cme_def)?;
    if def == 0 || def % 8 != 0 {
        return None;
    }
    let end = usize::from(layout.def_iseqptr.max(layout.def_original_id)) + 8;
    let mut d = vec![0u8; end.max(usize::from(layout.def_type) + 1)];
    mem.read(def, &mut d).ok()?;
    let defined_class = field(mem, cme, layout.cme_defined_class)?;
    Some(MethodEntry {
        def,
        def_type: d.get(usize::from(layout.def_type))? & layout.def_type_mask,
        iseqptr: word(&d, layout.def_iseqptr)?,
        original_id: word(&d, layout.def_original_id)?,
        class: class_path(mem, layout, defined_class, ivars),
    })
}

/// 3.1's ids of the hidden instance variables that hold a class's path
/// (`__classpath__`) and a singleton class's object (`__attached__`):
/// found in the live process, in `Object`'s own ([`class_ivars`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassIvars {
    pub classpath: u64,
    pub attached: u64,
}

impl crate::runtime::tracker::Weight for ClassIvars {
    fn weight(&self) -> usize {
        std::mem::size_of::<Self>()
    }
}

/// `st_table`'s `entries_start`, `entries_bound` and `entries`, and an
/// entry's size (`hash`, `key`, `record`): include/ruby/st.h, the same
/// in 3.1, 3.3 and 3.4.
const ST_ENTRIES_START: u16 = 32;
const ST_ENTRIES_BOUND: u16 = 40;
const ST_ENTRIES: u16 = 48;
const ST_ENTRY_SIZE: u64 = 24;
/// The hash of a deleted entry (`RESERVED_HASH_VAL`).
const ST_DELETED: u64 = u64::MAX;
/// Most entries of a class's instance-variable table looked through: a
/// class's path is set as it is named, among its first.
const MAX_IVARS: u64 = 256;

/// 3.1: the (id, value) entries of class `klass`'s instance-variable
/// table (its extension's `iv_tbl`), the first [`MAX_IVARS`].
fn class_ivar_entries(mem: &dyn Memory, layout: &Layout, klass: u64) -> Option<Vec<(u64, u64)>> {
    let ext = field(mem, klass, layout.class_ext?)?;
    let table = field(mem, ext, layout.ext_iv_tbl)?;
    if table == 0 || table % 8 != 0 {
        return None;
    }
    let mut t = [0u8; ST_ENTRIES as usize + 8];
    mem.read(table, &mut t).ok()?;
    let start = word(&t, ST_ENTRIES_START)?;
    let bound = word(&t, ST_ENTRIES_BOUND)?;
    if start > bound {
        return None;
    }
    let n = (bound - start).min(MAX_IVARS);
    let mut e = vec![0u8; (n * ST_ENTRY_SIZE) as usize];
    let first = word(&t, ST_ENTRIES)?.checked_add(start.checked_mul(ST_ENTRY_SIZE)?)?;
    mem.read(first, &mut e).ok()?;
    Some(
        e.chunks_exact(ST_ENTRY_SIZE as usize)
            .filter(|c| word(c, 0) != Some(ST_DELETED))
            .filter_map(|c| Some((word(c, 8)?, word(c, 16)?)))
            .collect(),
    )
}

/// 3.1: the value of class `klass`'s instance variable `id`.
fn class_ivar(mem: &dyn Memory, layout: &Layout, klass: u64, id: u64) -> Option<u64> {
    class_ivar_entries(mem, layout, klass)?
        .into_iter()
        .find_map(|(key, value)| (key == id).then_some(value))
}

/// 3.1's [`ClassIvars`], found in `Object` (the class at `object`,
/// `rb_cObject`'s value), as Ruby names it at start-up: the id of its
/// entry holding the String "Object" is `__classpath__`'s, and that of
/// the entry of its singleton class holding Object itself is
/// `__attached__`'s. `None` for a layout that keeps both in the class
/// (3.3+), or where Object does not look so.
pub fn class_ivars(mem: &dyn Memory, layout: &Layout, object: u64) -> Option<ClassIvars> {
    layout.class_ext?;
    if flags(mem, object)? & T_MASK != T_CLASS {
        return None;
    }
    let classpath = class_ivar_entries(mem, layout, object)?
        .into_iter()
        .find(|&(_, v)| read_string(mem, layout, v).as_deref() == Some("Object"))?
        .0;
    let meta = field(mem, object, 8)?;
    let f = flags(mem, meta)?;
    if f & T_MASK != T_CLASS || f & layout.fl_singleton == 0 {
        return None;
    }
    let attached = class_ivar_entries(mem, layout, meta)?
        .into_iter()
        .find(|&(_, v)| v == object)?
        .0;
    (classpath != attached).then_some(ClassIvars {
        classpath,
        attached,
    })
}

/// `rb_profile_frame_classpath` of `klass` (a method entry's
/// `defined_class`) and whether it is a singleton class: a module
/// included in a class (`T_ICLASS`) gives the module, a singleton class
/// the class it is attached to. 3.3+ keep the path and the object in the
/// class; 3.1 in hidden instance variables, whose ids `ivars` gives.
/// `None` where neither is known, or the class has no path (anonymous),
/// or the singleton is an object's rather than a class's.
pub fn class_path(
    mem: &dyn Memory,
    layout: &Layout,
    klass: u64,
    ivars: Option<&ClassIvars>,
) -> Option<(String, bool)> {
    let f = flags(mem, klass)?;
    let (class, singleton) = match f & T_MASK {
        T_ICLASS => (field(mem, klass, 8)?, false),
        T_CLASS if f & layout.fl_singleton != 0 => {
            let attached = match layout.class_attached {
                Some(at) => field(mem, klass, at)?,
                None => class_ivar(mem, layout, klass, ivars?.attached)?,
            };
            (attached, true)
        }
        T_CLASS | T_MODULE => (klass, false),
        _ => return None,
    };
    if !matches!(flags(mem, class)? & T_MASK, T_CLASS | T_MODULE) {
        return None;
    }
    let path = match layout.class_path {
        Some(at) => field(mem, class, at)?,
        None => class_ivar(mem, layout, class, ivars?.classpath)?,
    };
    Some((read_string(mem, layout, path)?, singleton))
}

/// The name of method id `id` (`rb_id2str`) through the process's
/// `ruby_global_symbols` at `symbols`: its `ids` Array holds an Array per
/// 512 serials, of (String, Symbol) pairs.
pub fn id_name(mem: &dyn Memory, layout: &Layout, symbols: u64, id: u64) -> Option<String> {
    let serial = if id > layout.last_op_id { id >> 4 } else { id };
    let last = mem
        .read_u32(symbols.checked_add(u64::from(layout.symbols_last_id))?)
        .ok()?;
    if serial == 0 || serial > u64::from(last) {
        return None;
    }
    let ids = mem
        .read_u64(symbols.checked_add(u64::from(layout.symbols_ids))?)
        .ok()?;
    let page = array_element(mem, layout, ids, serial / 512)?;
    let name = array_element(mem, layout, page, serial % 512 * 2)?;
    read_string(mem, layout, name)
}

/// `rb_profile_frame_full_label`'s rule: the label with its trailing
/// base label replaced by the qualified method name (`block in outer`
/// with `Foo#outer`: `block in Foo#outer`); the label itself without one.
pub fn full_label(label: &str, base_label: &str, qualified: Option<&str>) -> String {
    match qualified {
        Some(q) if q != base_label => match label.strip_suffix(base_label) {
            Some(prefix) => format!("{prefix}{q}"),
            None => label.to_string(),
        },
        _ => label.to_string(),
    }
}

#[cfg(test)]
#[path = "names_tests.rs"]
mod tests;
