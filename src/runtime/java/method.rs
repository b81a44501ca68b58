//! Java methods read from a live JVM: what a `Method*` (an interpreted
//! frame's, or one a compiled frame's scopes name) says of its class,
//! name, parameters and source file, and its line table, which turns a
//! bytecode index into a source line.
//!
//! HotSpot keeps these in metaspace: a `Method` points at its
//! `ConstMethod` (bytecodes, then the compressed line table), which points
//! at the class's `ConstantPool` (its `Symbol*` entries name the method
//! and its descriptor; its holder `Klass` names the class). The JVM may
//! unload a class and reuse its memory while flare reads it, so every
//! length is bounded, every index checked, and anything that does not
//! look like what HotSpot writes gives `None` rather than a guess.

use super::layout::{Layout, SourceFileAt};
use crate::runtime::memory::Memory;

/// The longest line table decoded, in bytes (a real one takes a few bytes
/// a line).
const MAX_LINE_TABLE: usize = 1 << 16;

/// Bytes a [`Stream`] reads at a time.
const CHUNK: usize = 128;

/// Reads never cross a page boundary: the end of a table may be the end
/// of a mapping.
const PAGE: u64 = 4096;

/// What a `Method` says of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodInfo {
    /// The `ConstMethod*` it was read through (an interpreted frame's
    /// cookie).
    pub const_method: u64,
    /// The class, as Java writes it: `com.foo.Handler`, `Outer$Inner`; a
    /// hidden class's address is masked (`Foo$$Lambda$14/<hidden>`).
    pub class: String,
    pub name: String,
    /// The JVM descriptor: `(I[Ljava/lang/String;)J`.
    pub signature: String,
    /// The class's `SourceFile` attribute (`Service.java`), if it has one.
    pub source_file: Option<String>,
    /// Bytes of bytecode: indexes past it have no line.
    code_size: u16,
    /// (bytecode index, line) pairs of the line table, in its order.
    lines: Vec<(i32, i32)>,
}

impl crate::runtime::tracker::Weight for MethodInfo {
    fn weight(&self) -> usize {
        let strings = self.class.len() + self.name.len() + self.signature.len();
        strings
            + self.source_file.as_ref().map_or(0, String::len)
            + self.lines.len() * std::mem::size_of::<(i32, i32)>()
            + std::mem::size_of::<Self>()
    }
}

impl MethodInfo {
    /// How the method is shown: `com.foo.Handler.renderPage(int)`, its
    /// class, name and parameter types as Java writes them (the return
    /// type dropped: overloads differ in their parameters only). A
    /// descriptor that does not parse is shown as it is.
    pub fn display_name(&self) -> String {
        let params = parameters(&self.signature).unwrap_or_else(|| self.signature.clone());
        format!("{}.{}{params}", self.class, self.name)
    }

    /// The source line of bytecode index `bci`, as HotSpot computes it
    /// (`Method::line_number_from_bci`): the line of an entry at `bci`,
    /// else of the last entry with the highest index below it. -1 (a
    /// compiled frame at the method's entry) counts as 0. `None` for an
    /// index past the code or when no entry covers it.
    pub fn line(&self, bci: i32) -> Option<u32> {
        let bci = if bci == -1 { 0 } else { bci };
        if bci < 0 || bci >= i32::from(self.code_size) {
            return None;
        }
        let mut best = (0, None);
        for &(at, line) in &self.lines {
            if at == bci {
                return u32::try_from(line).ok();
            }
            if at < bci && at >= best.0 {
                best = (at, Some(line));
            }
        }
        u32::try_from(best.1?).ok()
    }
}

/// Reads the method at `method` of a JVM with `layout`. `None` when it, or
/// what it points to, cannot be read or is not what HotSpot writes.
pub fn read_method(mem: &dyn Memory, layout: &Layout, method: u64) -> Option<MethodInfo> {
    if method == 0 {
        return None;
    }
    let const_method = mem
        .read_u64(method.checked_add(u64::from(layout.method_const))?)
        .ok()?;
    read_const_method(mem, layout, const_method)
}

/// Reads a method through its `ConstMethod` (which is all that describes
/// it: name, descriptor, class, lines).
pub fn read_const_method(mem: &dyn Memory, layout: &Layout, cm: u64) -> Option<MethodInfo> {
    if cm == 0 {
        return None;
    }
    let mut head = vec![0u8; usize::from(layout.const_size)];
    mem.read(cm, &mut head).ok()?;
    let pool = word(&head, layout.const_constants)?;
    let flags = half(&head, layout.const_flags)?;
    let code_size = half(&head, layout.const_code_size)?;
    let name = pool_symbol(mem, layout, pool, half(&head, layout.const_name_index)?)?;
    let signature = pool_symbol(
        mem,
        layout,
        pool,
        half(&head, layout.const_signature_index)?,
    )?;
    let holder = mem
        .read_u64(pool.checked_add(u64::from(layout.pool_holder))?)
        .ok()?;
    let klass_name = mem
        .read_u64(holder.checked_add(u64::from(layout.klass_name))?)
        .ok()?;
    let class = class_name(&read_symbol(mem, layout, klass_name)?);
    // The line table follows the bytecodes, which follow the ConstMethod.
    // One that cannot be read leaves the method without lines.
    let has_lines = flags & layout.has_line_table != 0;
    let lines = if has_lines {
        cm.checked_add(u64::from(layout.const_size) + u64::from(code_size))
            .and_then(|at| line_table(mem, at, layout.unsigned5_excess))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    // HotSpot takes the source file from the class (JDK 11) or its
    // constant pool (17 on); a method's own is the class's, except for
    // methods the JVM makes (method handle intrinsics), whose index is not
    // one: read only for methods with lines (which natives lose, as they
    // have no line).
    let source_file = if has_lines {
        let at = match layout.source_file {
            SourceFileAt::Pool(off) => pool.checked_add(u64::from(off))?,
            SourceFileAt::Klass(off) => holder.checked_add(u64::from(off))?,
        };
        let mut index = [0u8; 2];
        mem.read(at, &mut index).ok()?;
        // Index 0 is no entry: the class has no SourceFile attribute.
        match u16::from_ne_bytes(index) {
            0 => None,
            i => pool_symbol(mem, layout, pool, i),
        }
    } else {
        None
    };
    Some(MethodInfo {
        const_method: cm,
        class,
        name,
        signature,
        source_file,
        code_size,
        lines,
    })
}

/// The `Symbol*` entry `index` of the constant pool at `pool`, read.
/// Entries follow the `ConstantPool`, a word each.
fn pool_symbol(mem: &dyn Memory, layout: &Layout, pool: u64, index: u16) -> Option<String> {
    if pool == 0 || index == 0 {
        return None;
    }
    let at = pool
        .checked_add(u64::from(layout.pool_size))?
        .checked_add(u64::from(index) * 8)?;
    read_symbol(mem, layout, mem.read_u64(at).ok()?)
}

/// The `Symbol` at `addr`: a u16 length (which bounds it to 64 KiB), then
/// modified UTF-8.
pub fn read_symbol(mem: &dyn Memory, layout: &Layout, addr: u64) -> Option<String> {
    if addr == 0 {
        return None;
    }
    let mut length = [0u8; 2];
    mem.read(
        addr.checked_add(u64::from(layout.symbol_length))?,
        &mut length,
    )
    .ok()?;
    let mut body = vec![0u8; usize::from(u16::from_ne_bytes(length))];
    mem.read(addr.checked_add(u64::from(layout.symbol_body))?, &mut body)
        .ok()?;
    Some(modified_utf8(&body))
}

/// Decodes the JVM's modified UTF-8 (NUL as two bytes, characters past
/// the BMP as two 3-byte surrogates); anything malformed becomes U+FFFD.
fn modified_utf8(bytes: &[u8]) -> String {
    let mut units: Vec<u16> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let cont = |b: Option<&u8>| {
        b.filter(|&&b| b & 0xc0 == 0x80)
            .map(|&b| u16::from(b & 0x3f))
    };
    while let Some(&b) = bytes.get(i) {
        let b16 = u16::from(b);
        let (unit, len) = match b {
            0x01..=0x7f => (Some(b16), 1),
            0xc0..=0xdf => match cont(bytes.get(i + 1)) {
                Some(c) => (Some((b16 & 0x1f) << 6 | c), 2),
                None => (None, 1),
            },
            0xe0..=0xef => match (cont(bytes.get(i + 1)), cont(bytes.get(i + 2))) {
                (Some(c1), Some(c2)) => (Some((b16 & 0x0f) << 12 | c1 << 6 | c2), 3),
                _ => (None, 1),
            },
            _ => (None, 1),
        };
        units.push(unit.unwrap_or(0xfffd));
        i += len;
    }
    String::from_utf16_lossy(&units)
}

/// A class's internal name as Java writes it: `/` becomes `.`, and a
/// hidden class's `+0x…` suffix (its address, new each run) becomes
/// `/<hidden>` (jstack shows `/0x…`), so that runs compare.
pub fn class_name(internal: &str) -> String {
    let (name, hidden) = match internal.rsplit_once('+') {
        Some((name, address))
            if address.len() > 2
                && address.starts_with("0x")
                && address[2..].bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            (name, true)
        }
        _ => (internal, false),
    };
    let mut out = name.replace('/', ".");
    if hidden {
        out.push_str("/<hidden>");
    }
    out
}

/// The parameter list of a method descriptor as Java writes it:
/// `(I[Ljava/lang/String;)J` gives `(int, java.lang.String[])`. `None`
/// for a descriptor that does not parse.
pub fn parameters(descriptor: &str) -> Option<String> {
    let (params, _) = descriptor.strip_prefix('(')?.split_once(')')?;
    let mut out: Vec<String> = Vec::new();
    let mut rest = params;
    while !rest.is_empty() {
        let dims = rest.len() - rest.trim_start_matches('[').len();
        // The JVM allows 255 dimensions.
        if dims > 255 {
            return None;
        }
        rest = &rest[dims..];
        let mut ty = match rest.as_bytes().first()? {
            b'L' => {
                let (class, after) = rest[1..].split_once(';')?;
                rest = after;
                class.replace('/', ".")
            }
            &b => {
                // Checked first: a byte that is no type may start a
                // character of more.
                let ty = primitive(b)?;
                rest = &rest[1..];
                ty.to_string()
            }
        };
        ty.push_str(&"[]".repeat(dims));
        out.push(ty);
    }
    Some(format!("({})", out.join(", ")))
}

fn primitive(b: u8) -> Option<&'static str> {
    Some(match b {
        b'B' => "byte",
        b'C' => "char",
        b'D' => "double",
        b'F' => "float",
        b'I' => "int",
        b'J' => "long",
        b'S' => "short",
        b'Z' => "boolean",
        _ => return None,
    })
}

/// HotSpot's `CompressedLineNumberReadStream` from `at`: a byte each of
/// `bci delta << 3 | line delta` (deltas of at most 31 and 7), or 0xFF
/// and both deltas as signed UNSIGNED5 numbers; 0 ends it. `None` for a
/// table that does not end within [`MAX_LINE_TABLE`] bytes or cannot be
/// read.
fn line_table(mem: &dyn Memory, at: u64, excess: u8) -> Option<Vec<(i32, i32)>> {
    let mut s = Stream::new(mem, at, MAX_LINE_TABLE);
    let (mut bci, mut line) = (0i32, 0i32);
    let mut out = Vec::new();
    loop {
        match s.byte()? {
            0 => return Some(out),
            0xff => {
                bci = bci.wrapping_add(s.signed(excess)?);
                line = line.wrapping_add(s.signed(excess)?);
            }
            b => {
                bci = bci.wrapping_add(i32::from(b >> 3));
                line = line.wrapping_add(i32::from(b & 7));
            }
        }
        out.push((bci, line));
    }
}

/// Bytes of another process read in order from an address, a chunk at a
/// time and at most `limit` in all: HotSpot's compressed streams (line
/// tables, scopes), whose length is only known once read.
pub(crate) struct Stream<'m> {
    mem: &'m dyn Memory,
    /// Where the next chunk starts.
    next: u64,
    chunk: [u8; CHUNK],
    len: usize,
    pos: usize,
    /// Bytes that may still be read.
    left: usize,
}

/// UNSIGNED5: a byte below 192 ends a number, and each holds 6 more bits
/// of it than the one before; five bytes at most (`compressedStream.hpp`
/// before JDK 19, `unsigned5.hpp` from 19, whose excess byte makes its
/// `L` 191 in values less the excess: the same bytes end a number).
const UNSIGNED5_END: u8 = 192;
const UNSIGNED5_LG_H: u32 = 6;
const UNSIGNED5_MAX: u32 = 5;

impl<'m> Stream<'m> {
    pub(crate) fn new(mem: &'m dyn Memory, at: u64, limit: usize) -> Self {
        Stream {
            mem,
            next: at,
            chunk: [0; CHUNK],
            len: 0,
            pos: 0,
            left: limit,
        }
    }

    pub(crate) fn byte(&mut self) -> Option<u8> {
        if self.pos == self.len {
            let to_page = (PAGE - self.next % PAGE) as usize;
            let n = CHUNK.min(to_page).min(self.left);
            if n == 0 {
                return None;
            }
            self.mem.read(self.next, &mut self.chunk[..n]).ok()?;
            self.next = self.next.checked_add(n as u64)?;
            self.left -= n;
            self.len = n;
            self.pos = 0;
        }
        let b = self.chunk[self.pos];
        self.pos += 1;
        Some(b)
    }

    /// An UNSIGNED5 number (`read_int`), each byte less `excess` (1 from
    /// JDK 19, whose streams hold no zero byte: one there is garbage).
    pub(crate) fn unsigned(&mut self, excess: u8) -> Option<u32> {
        let mut sum = 0u32;
        for i in 0..UNSIGNED5_MAX {
            let byte = self.byte()?;
            let b = u32::from(byte.checked_sub(excess)?);
            sum = sum.wrapping_add(b << (UNSIGNED5_LG_H * i));
            if byte < UNSIGNED5_END {
                return Some(sum);
            }
        }
        Some(sum)
    }

    /// A signed number (`read_signed_int`): zig-zag over [`Self::unsigned`].
    pub(crate) fn signed(&mut self, excess: u8) -> Option<i32> {
        let v = self.unsigned(excess)?;
        Some((v >> 1) as i32 ^ -((v & 1) as i32))
    }
}

/// The 8 bytes at `at` of `bytes`, as a native word.
pub(crate) fn word(bytes: &[u8], at: u16) -> Option<u64> {
    let at = usize::from(at);
    Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// The 4 bytes at `at` of `bytes`, as a native int.
pub(crate) fn int(bytes: &[u8], at: u16) -> Option<i32> {
    let at = usize::from(at);
    Some(i32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// The 2 bytes at `at` of `bytes`, as a native u16.
pub(crate) fn half(bytes: &[u8], at: u16) -> Option<u16> {
    let at = usize::from(at);
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}
