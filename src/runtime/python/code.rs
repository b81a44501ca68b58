//! Code objects read from a live process: what a Python frame's code
//! object (the address BPF recorded) says of its function — name, file,
//! first line, the cookie BPF computes — and its line table, which turns
//! the instruction BPF read into a source line.
//!
//! Everything here comes from another process's memory, which may have
//! changed or been freed since BPF read it: every length is bounded, every
//! index checked, and anything that does not look like what CPython
//! writes gives `None` rather than a guess.

use super::layout::Layout;
use crate::runtime::memory::Memory;

/// The most read of a string, in bytes of its characters (a function's
/// name, a file's path): a longer one is read this far and ends in `…`
/// (outputs cut names shorter still: [`crate::profile::MAX_RUNTIME_NAME`]).
const MAX_STRING_BYTES: usize = 4096;

/// The longest string taken for one, in bytes: past it, a length is garbage.
const MAX_STRING_LENGTH: usize = 1 << 20;

/// The longest line table read, in bytes.
const MAX_LINE_TABLE: usize = 1 << 20;

/// `PyObject.ob_type`.
const OB_TYPE: u64 = 8;

/// `PyASCIIObject.length`.
const UNICODE_LENGTH: u64 = 16;

/// What a code object says of its function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeInfo {
    /// `co_qualname` on 3.11+ (`Class.method`, `outer.<locals>.inner`),
    /// `co_name` before.
    pub name: String,
    pub filename: String,
    pub firstlineno: u32,
    /// [`super::cookie`] of the code object's fields, as BPF computes it.
    pub cookie: u64,
    /// `co_lnotab` (3.6–3.9) or `co_linetable` (3.10+).
    line_table: Vec<u8>,
    /// (3, minor): how the line table and the instruction read.
    version: (u8, u8),
    /// 3.11+: where the bytecode starts in the code object.
    adaptive: Option<u16>,
}

impl crate::runtime::tracker::Weight for CodeInfo {
    fn weight(&self) -> usize {
        self.name.len() + self.filename.len() + self.line_table.len() + std::mem::size_of::<Self>()
    }
}

/// Reads the code object at `code` of a process whose interpreter has
/// `layout` and whose `PyCode_Type` lies at `code_type`. `None` when it is
/// not (or no longer) a code object of that type, or anything it points
/// to cannot be read or is not what CPython writes.
pub fn read_code(mem: &dyn Memory, layout: &Layout, code_type: u64, code: u64) -> Option<CodeInfo> {
    if code_type == 0 || code == 0 {
        return None;
    }
    let pointers = [
        layout.code_filename,
        layout.code_name,
        layout.code_linetable,
    ];
    let ints = [
        layout.code_argcount,
        layout.code_flags,
        layout.code_firstlineno,
    ];
    let end = pointers
        .iter()
        .chain(layout.code_qualname.iter())
        .map(|&o| usize::from(o) + 8)
        .chain(ints.iter().map(|&o| usize::from(o) + 4))
        .chain([OB_TYPE as usize + 8])
        .max()
        .unwrap_or(0);
    // One read for the header: the fields all lie in its first bytes.
    let mut head = vec![0u8; end];
    mem.read(code, &mut head).ok()?;
    if word(&head, OB_TYPE as usize)? != code_type {
        return None;
    }
    let int = |o: u16| -> Option<u32> {
        let b = head.get(usize::from(o)..usize::from(o) + 4)?;
        Some(u32::from_ne_bytes(b.try_into().ok()?))
    };
    let argcount = int(layout.code_argcount)?;
    let flags = int(layout.code_flags)?;
    let firstlineno = int(layout.code_firstlineno)?;
    let pointer = |o: u16| word(&head, usize::from(o));
    let name_at = match layout.code_qualname {
        Some(q) => pointer(q)?,
        None => pointer(layout.code_name)?,
    };
    let name = read_string(mem, layout, name_at)?;
    let filename = read_string(mem, layout, pointer(layout.code_filename)?)?;
    let line_table = read_bytes(mem, layout, pointer(layout.code_linetable)?, MAX_LINE_TABLE)?;
    Some(CodeInfo {
        name,
        filename,
        firstlineno,
        cookie: super::cookie(argcount, flags, firstlineno),
        line_table,
        version: layout.version,
        adaptive: layout.code_adaptive,
    })
}

/// The 8 bytes at `at` of `bytes`, as a native word.
fn word(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_ne_bytes(b.try_into().ok()?))
}

/// `PyASCIIObject.state`'s bits, the same from 3.6 to 3.15
/// (`Include/cpython/unicodeobject.h`): interned (bits 0–1), kind (2–4),
/// compact (5), ascii (6), then `ready` (7) up to 3.11 or
/// `statically_allocated` (7) from 3.12, which dropped non-ready strings.
const STATE_KIND_SHIFT: u32 = 2;
const STATE_KIND_MASK: u32 = 0b111;
const STATE_COMPACT: u32 = 1 << 5;
const STATE_ASCII: u32 = 1 << 6;
const STATE_READY: u32 = 1 << 7;

/// Reads the `str` at `addr`, a compact one (as names and file names of
/// code objects are): ASCII, or latin-1, UCS-2 or UCS-4 characters
/// right after the header, its first [`MAX_STRING_BYTES`] (then `…`).
/// `None` for any other form, or beyond [`MAX_STRING_LENGTH`].
fn read_string(mem: &dyn Memory, layout: &Layout, addr: u64) -> Option<String> {
    if addr == 0 {
        return None;
    }
    let state_at = usize::from(layout.unicode_state);
    let mut head = vec![0u8; (state_at + 4).max(UNICODE_LENGTH as usize + 8)];
    mem.read(addr, &mut head).ok()?;
    let length = word(&head, UNICODE_LENGTH as usize)?;
    let state = u32::from_ne_bytes(head.get(state_at..state_at + 4)?.try_into().ok()?);
    if state & STATE_COMPACT == 0 {
        return None;
    }
    if layout.version < (3, 12) && state & STATE_READY == 0 {
        return None;
    }
    let kind = (state >> STATE_KIND_SHIFT) & STATE_KIND_MASK;
    let (header, width) = if state & STATE_ASCII != 0 {
        if kind != 1 {
            return None;
        }
        (layout.unicode_ascii_size, 1)
    } else {
        match kind {
            1 | 2 | 4 => (layout.unicode_compact_size, kind as usize),
            _ => return None,
        }
    };
    // A negative length (garbage) fails the conversion.
    let size = usize::try_from(length).ok()?.checked_mul(width)?;
    if size > MAX_STRING_LENGTH {
        return None;
    }
    let mut data = vec![0u8; size.min(MAX_STRING_BYTES / width * width)];
    mem.read(addr.checked_add(u64::from(header))?, &mut data)
        .ok()?;
    let mut text = decode(&data, state & STATE_ASCII != 0, width)?;
    if data.len() < size {
        text.push('…');
    }
    Some(text)
}

/// A compact string's characters `data`, `width` bytes each.
fn decode(data: &[u8], ascii: bool, width: usize) -> Option<String> {
    match (ascii, width) {
        (true, _) => data
            .is_ascii()
            .then(|| data.iter().map(|&b| char::from(b)).collect()),
        // Latin-1: each byte is the code point.
        (false, 1) => Some(data.iter().map(|&b| char::from(b)).collect()),
        (false, 2) => Some(
            data.chunks_exact(2)
                .map(|c| u32::from(u16::from_ne_bytes([c[0], c[1]])))
                .map(code_point)
                .collect(),
        ),
        (false, _) => Some(
            data.chunks_exact(4)
                .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .map(code_point)
                .collect(),
        ),
    }
}

/// A code point of a `str`, which may be a lone surrogate (Python allows
/// them, Rust does not): those become U+FFFD.
fn code_point(c: u32) -> char {
    char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// Reads the `bytes` object at `addr`: at most `max` bytes, else `None`.
fn read_bytes(mem: &dyn Memory, layout: &Layout, addr: u64, max: usize) -> Option<Vec<u8>> {
    if addr == 0 {
        return None;
    }
    let size = usize::try_from(
        mem.read_u64(addr.checked_add(u64::from(layout.bytes_size))?)
            .ok()?,
    )
    .ok()?;
    if size > max {
        return None;
    }
    let mut data = vec![0u8; size];
    mem.read(addr.checked_add(u64::from(layout.bytes_data))?, &mut data)
        .ok()?;
    Some(data)
}

/// `f_lasti` as BPF hands it over (3.6–3.10): the int read as a u32 and
/// zero-extended (`None` for more: not what BPF writes). Negative when
/// the frame has not run its first instruction yet.
fn lasti(instr: u64) -> Option<i32> {
    u32::try_from(instr).ok().map(|v| v as i32)
}

impl CodeInfo {
    /// The source line of the instruction BPF read for a frame of this
    /// code (`ids[1]`), as CPython computes a frame's line
    /// (`PyCode_Addr2Line`); `None` when the table gives the instruction no
    /// line or does not reach it.
    ///
    /// - 3.6–3.9: `f_lasti`, a byte offset; 3.10: `f_lasti` in 2-byte code
    ///   units. -1 (not started) gives `co_firstlineno`, as CPython's
    ///   `f_lineno` does.
    /// - 3.11+: the instruction pointer less the code object's address;
    ///   the bytecode starts `co_code_adaptive` bytes in. 3.11 and 3.12
    ///   point at the last instruction started, one code unit before the
    ///   start when none has: that counts as the first instruction.
    pub fn line(&self, instr: u64) -> Option<u32> {
        let first = i64::from(self.firstlineno as i32);
        let line = match self.version {
            (3, 6..=9) => match u64::try_from(lasti(instr)?) {
                Ok(offset) => lnotab_line(&self.line_table, first, offset),
                Err(_) => first,
            },
            (3, 10) => match u64::try_from(lasti(instr)?) {
                Ok(units) => pairs_line(&self.line_table, first, units * 2)?,
                Err(_) => first,
            },
            (3, 11..) => {
                let offset = instr.wrapping_sub(u64::from(self.adaptive?)) as i64;
                let offset = match offset {
                    0.. => offset as u64,
                    -2..=-1 => 0,
                    _ => return None,
                };
                locations_line(&self.line_table, first, offset)?
            }
            _ => return None,
        };
        u32::try_from(line).ok()
    }
}

/// 3.6–3.9 `co_lnotab`: (byte offset delta, signed line delta) pairs;
/// the line of `offset` is the first line plus the line deltas of the
/// pairs whose offset is at most `offset` (`Objects/lnotab_notes.txt`).
fn lnotab_line(table: &[u8], first: i64, offset: u64) -> i64 {
    let mut line = first;
    let mut addr = 0u64;
    for pair in table.chunks_exact(2) {
        addr += u64::from(pair[0]);
        if addr > offset {
            break;
        }
        line += i64::from(pair[1] as i8);
    }
    line
}

/// 3.10 `co_linetable`: (byte length, signed line delta) pairs, each the
/// range after the previous one; a delta of -128 means the range has no
/// line (3.10's `Objects/lnotab_notes.txt`, `PyLineTable_NextAddressRange`).
fn pairs_line(table: &[u8], first: i64, offset: u64) -> Option<i64> {
    let mut line = first;
    let mut end = 0u64;
    for pair in table.chunks_exact(2) {
        end += u64::from(pair[0]);
        let delta = pair[1] as i8;
        let range_line = if delta == -128 {
            None
        } else {
            line += i64::from(delta);
            Some(line)
        };
        // Ranges follow each other, so the first that ends past `offset`
        // holds it (empty ones never do).
        if offset < end {
            return range_line;
        }
    }
    None
}

/// 3.11+ location table (`Objects/locations.md`): entries that each start
/// with a byte `1 code:4 length-1:3` (length in 2-byte code units),
/// followed by bytes with the top bit clear. The start line is a delta
/// from the previous entry's: 0 for the short forms (codes 0–9), `code -
/// 10` for the one-line forms (10–12), a signed varint after the first
/// byte for "no column" (13) and the long form (14); 15 has no line.
fn locations_line(table: &[u8], first: i64, offset: u64) -> Option<i64> {
    let mut line = first;
    let mut end = 0u64;
    let mut at = 0;
    if table.first().is_some_and(|&b| b & 0x80 == 0) {
        return None;
    }
    while let Some(&b) = table.get(at) {
        let code = (b >> 3) & 0xf;
        end += (u64::from(b & 7) + 1) * 2;
        line += match code {
            10..=12 => i64::from(code - 10),
            13 | 14 => signed_varint(table.get(at + 1..)?)?,
            _ => 0,
        };
        if offset < end {
            return (code != 15).then_some(line);
        }
        at += 1;
        while table.get(at).is_some_and(|&b| b & 0x80 == 0) {
            at += 1;
        }
    }
    None
}

/// An unsigned varint of the location table: 6-bit chunks, least
/// significant first, bit 6 set on all but the last (`scan_varint`).
fn varint(bytes: &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate() {
        // CPython reads into an unsigned int: more chunks are garbage.
        if i > 5 {
            return None;
        }
        value |= u64::from(b & 63) << (6 * i);
        if b & 64 == 0 {
            return Some(value);
        }
    }
    None
}

/// A signed varint: the unsigned value's low bit is the sign
/// (`scan_signed_varint`).
fn signed_varint(bytes: &[u8]) -> Option<i64> {
    let v = varint(bytes)?;
    let magnitude = (v >> 1) as i64;
    Some(if v & 1 != 0 { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::memory::Buffer;
    use crate::runtime::python::layout;

    /// A code object and its strings laid out in a buffer as `layout`
    /// says, as a live process would hold them.
    struct Fake {
        layout: Layout,
        buf: Buffer,
    }

    const BASE: u64 = 0x10_0000;
    const CODE: u64 = BASE;
    const NAME: u64 = BASE + 0x400;
    const FILE: u64 = BASE + 0x800;
    const TABLE: u64 = BASE + 0xc00;
    const TYPE: u64 = 0x7f00_0000_1000;

    impl Fake {
        fn new(minor: u8) -> Self {
            let layout = layout::for_version(minor).unwrap();
            let mut f = Fake {
                layout,
                buf: Buffer {
                    base: BASE,
                    bytes: vec![0; 0x2000],
                },
            };
            let l = f.layout.clone();
            f.put(CODE + 8, &TYPE.to_ne_bytes());
            f.put(CODE + u64::from(l.code_argcount), &2u32.to_ne_bytes());
            f.put(CODE + u64::from(l.code_flags), &0x13u32.to_ne_bytes());
            f.put(CODE + u64::from(l.code_firstlineno), &10u32.to_ne_bytes());
            f.put(CODE + u64::from(l.code_name), &NAME.to_ne_bytes());
            if let Some(q) = l.code_qualname {
                f.put(CODE + u64::from(q), &NAME.to_ne_bytes());
            }
            f.put(CODE + u64::from(l.code_filename), &FILE.to_ne_bytes());
            f.put(CODE + u64::from(l.code_linetable), &TABLE.to_ne_bytes());
            f.string(NAME, "f", 1);
            f.string(FILE, "a.py", 1);
            f.put(TABLE + u64::from(l.bytes_size), &0u64.to_ne_bytes());
            f
        }

        fn put(&mut self, at: u64, bytes: &[u8]) {
            let at = (at - BASE) as usize;
            self.buf.bytes[at..at + bytes.len()].copy_from_slice(bytes);
        }

        /// A compact string of `kind` (ASCII when all of it is).
        fn string(&mut self, at: u64, s: &str, kind: u32) {
            let ascii = kind == 1 && s.is_ascii();
            let state =
                (kind << 2) | STATE_COMPACT | STATE_READY | if ascii { STATE_ASCII } else { 0 };
            let chars: Vec<u32> = s.chars().map(u32::from).collect();
            self.put(at + 16, &(chars.len() as u64).to_ne_bytes());
            self.put(
                at + u64::from(self.layout.unicode_state),
                &state.to_ne_bytes(),
            );
            let data: Vec<u8> = match kind {
                1 => chars.iter().map(|&c| c as u8).collect(),
                2 => chars
                    .iter()
                    .flat_map(|&c| (c as u16).to_ne_bytes())
                    .collect(),
                _ => chars.iter().flat_map(|&c| c.to_ne_bytes()).collect(),
            };
            let header = if ascii {
                self.layout.unicode_ascii_size
            } else {
                self.layout.unicode_compact_size
            };
            self.put(at + u64::from(header), &data);
        }

        fn read(&self) -> Option<CodeInfo> {
            read_code(&self.buf, &self.layout, TYPE, CODE)
        }
    }

    #[test]
    fn reads_a_code_object_laid_out_by_its_layout() {
        for minor in 6..=15 {
            let f = Fake::new(minor);
            let c = f.read().unwrap();
            assert_eq!((c.name.as_str(), c.filename.as_str()), ("f", "a.py"));
            assert_eq!(c.firstlineno, 10);
            assert_eq!(c.cookie, crate::runtime::python::cookie(2, 0x13, 10));
            assert!(read_code(&f.buf, &f.layout, TYPE + 8, CODE).is_none());
            assert!(read_code(&f.buf, &f.layout, TYPE, CODE + 8).is_none());
            assert!(read_code(&f.buf, &f.layout, TYPE, 0).is_none());
            assert!(read_code(&f.buf, &f.layout, 0, CODE).is_none());
        }
    }

    #[test]
    fn reads_every_compact_kind_and_refuses_other_strings() {
        for minor in [9, 12] {
            let mut f = Fake::new(minor);
            for (s, kind) in [("größe", 1), ("大小", 2), ("𠀀x", 4), ("plain", 1)] {
                f.string(NAME, s, kind);
                assert_eq!(f.read().unwrap().name, s);
            }
            // A lone surrogate, which Python allows, is replaced.
            f.string(NAME, "ab", 2);
            f.put(
                NAME + u64::from(f.layout.unicode_compact_size),
                &0xd800u16.to_ne_bytes(),
            );
            assert_eq!(f.read().unwrap().name, "\u{fffd}b");
            let state_at = NAME + u64::from(f.layout.unicode_state);
            for bad_state in [
                // Not compact, an unknown kind, ASCII of kind 2.
                (1 << 2) | STATE_READY | STATE_ASCII,
                (3 << 2) | STATE_COMPACT | STATE_READY,
                (2 << 2) | STATE_COMPACT | STATE_READY | STATE_ASCII,
            ] {
                f.put(state_at, &bad_state.to_ne_bytes());
                assert!(f.read().is_none(), "{bad_state:#x}");
            }
            f.string(NAME, "ab", 2);
            assert_eq!(f.read().unwrap().name, "ab");
            // Long: its first 4 KiB, marked; too long, negative.
            f.put(NAME + 16, &(MAX_STRING_BYTES as u64 / 2 + 1).to_ne_bytes());
            let name = f.read().unwrap().name;
            assert_eq!(name.chars().count(), MAX_STRING_BYTES / 2 + 1);
            assert!(name.starts_with("ab") && name.ends_with('…'), "{name:?}");
            f.put(NAME + 16, &(MAX_STRING_LENGTH as u64 / 2 + 1).to_ne_bytes());
            assert!(f.read().is_none());
            f.put(NAME + 16, &(-1i64).to_ne_bytes());
            assert!(f.read().is_none());
            // ASCII that is not.
            f.string(NAME, "abc", 1);
            f.put(NAME + u64::from(f.layout.unicode_ascii_size), &[0xe9]);
            assert!(f.read().is_none());
        }
        // Up to 3.11, a string not ready is refused.
        let mut f = Fake::new(11);
        let state_at = NAME + u64::from(f.layout.unicode_state);
        f.put(
            state_at,
            &((1u32 << 2) | STATE_COMPACT | STATE_ASCII).to_ne_bytes(),
        );
        assert!(f.read().is_none());
    }

    #[test]
    fn a_line_table_beyond_its_bound_is_refused() {
        let mut f = Fake::new(10);
        let size_at = TABLE + u64::from(f.layout.bytes_size);
        f.put(size_at, &(MAX_LINE_TABLE as u64 + 1).to_ne_bytes());
        assert!(f.read().is_none());
        f.put(size_at, &u64::MAX.to_ne_bytes());
        assert!(f.read().is_none());
        f.put(size_at, &4u64.to_ne_bytes());
        f.put(TABLE + u64::from(f.layout.bytes_data), &[2, 1, 4, 0x80]);
        let c = f.read().unwrap();
        // 3.10: code units; -1 is not started.
        assert_eq!(
            [0, 1, 2, 3].map(|u| c.line(u)),
            [Some(11), None, None, None]
        );
        assert_eq!(c.line(0xffff_ffff), Some(10));
        assert_eq!(c.line(1 << 32), None);
    }

    #[test]
    fn decodes_each_line_table_format() {
        let info = |version: (u8, u8), table: &[u8]| CodeInfo {
            name: String::new(),
            filename: String::new(),
            firstlineno: 100,
            cookie: 0,
            line_table: table.to_vec(),
            version,
            adaptive: Some(200),
        };
        // 3.8: (0, +1) (6, +1) (255, 0) (45, -5): line 101 from 0, 102
        // from 6, 97 from 306.
        let c = info((3, 8), &[0, 1, 6, 1, 255, 0, 45, 0xfb]);
        let lines: Vec<_> = [0, 5, 6, 305, 306, 1000]
            .iter()
            .map(|&o| c.line(o))
            .collect();
        assert_eq!(lines, [101, 101, 102, 102, 97, 97].map(Some));
        assert_eq!(c.line(0xffff_ffff), Some(100));
        // 3.11: short form (2 units, same line), one-line form +2 (1
        // unit), no location (1 unit), long form +300 (8 units), no
        // column +5 then -3 (1 unit each).
        let long = [
            0x80 | (14 << 3) | 7,
            0x40 | (600 & 63) as u8,
            (600 >> 6) as u8,
            0,
            0,
            0,
        ];
        let mut table = vec![0x80 | 1, 0, 0x80 | (12 << 3), 3, 4, 0x80 | (15 << 3)];
        table.extend(long);
        table.extend([0x80 | (13 << 3), 10, 0x80 | (13 << 3), 7]);
        for minor in [11, 12, 13] {
            let c = info((3, minor), &table);
            let at = |offset: i64| c.line((200 + offset) as u64);
            assert_eq!(
                [-2, 0, 2, 4, 6, 8, 22, 24, 26, 28].map(at),
                [
                    Some(100),
                    Some(100),
                    Some(100),
                    Some(102),
                    None,
                    Some(402),
                    Some(402),
                    Some(407),
                    Some(404),
                    None
                ]
            );
            // Before the start, or a table that starts mid-entry.
            assert_eq!(at(-4), None);
            assert_eq!(info((3, minor), &table[1..]).line(200), None);
        }
    }

    #[test]
    fn garbage_line_tables_give_none_or_a_line_never_a_panic() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for minor in 6..=15 {
            for len in 0..200 {
                let table: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                let c = CodeInfo {
                    name: String::new(),
                    filename: String::new(),
                    firstlineno: next() as u32,
                    cookie: 0,
                    line_table: table,
                    version: (3, minor),
                    adaptive: Some(192),
                };
                for instr in [0, 1, 190, 192, 0xffff_ffff, u64::MAX, next(), next() % 1024] {
                    let _ = c.line(instr);
                }
            }
        }
    }
}
