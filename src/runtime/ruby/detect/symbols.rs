//! Finding `ruby_global_symbols` (the table naming method ids, which C
//! functions' frames need) in a live process: no build exports it, so
//! libruby's `.data` is scanned, a page at a time and bounded, for an
//! `rb_symbols_t` whose table names the id `idEach` "each", read as the
//! namer reads ids ([`id_name`]).

use super::MAX_CANDIDATES;
use crate::runtime::memory::Memory;
use crate::runtime::ruby::namer::id_name;
use crate::runtime::ruby::Layout;

const T_ARRAY: u64 = 7;
const T_HASH: u64 = 8;

/// Whether the 32 bytes `b` look like a `rb_symbols_t`: `{u32 last_id,
/// u32 0, st_table *str_sym, VALUE ids, VALUE dsymbol_fstr_hash}`.
fn looks_like(layout: &Layout, b: &[u8]) -> bool {
    let l = crate::elf::Layout::HOST;
    let (Some(last), Some(pad), Some(str_sym), Some(ids), Some(dsym)) = (
        l.u32(b, 0),
        l.u32(b, 4),
        l.u64(b, 8),
        l.u64(b, 16),
        l.u64(b, 24),
    ) else {
        return false;
    };
    let pointer = |p: u64| p != 0 && p & 7 == 0;
    u64::from(last) > layout.last_op_id
        && pad == 0
        && pointer(str_sym)
        && pointer(ids)
        && pointer(dsym)
}

/// The checks of [`is_global_symbols`] past its looks, for the 32 bytes
/// `b` at `at`: its `ids` is an Array, its `dsymbol_fstr_hash` a Hash,
/// and `idEach` is named "each".
fn checks(mem: &dyn Memory, layout: &Layout, at: u64, b: &[u8]) -> bool {
    let l = crate::elf::Layout::HOST;
    let (Some(ids), Some(dsym)) = (l.u64(b, 16), l.u64(b, 24)) else {
        return false;
    };
    let is = |v: u64, t: u64| mem.read_u64(v).is_ok_and(|f| f & 0x1f == t);
    is(ids, T_ARRAY)
        && is(dsym, T_HASH)
        && id_name(mem, layout, at, layout.each_id).as_deref() == Some("each")
}

/// Whether `at` holds `ruby_global_symbols` of a Ruby laid out as
/// `layout`.
pub(super) fn is_global_symbols(mem: &dyn Memory, layout: &Layout, at: u64) -> bool {
    let mut b = [0u8; 32];
    mem.read(at, &mut b).is_ok() && looks_like(layout, &b) && checks(mem, layout, at, &b)
}

/// `ruby_global_symbols` in the `size` bytes of memory from `start`
/// (`.data` of libruby in the process), read a page at a time.
pub(super) fn find_global_symbols(
    mem: &dyn Memory,
    start: u64,
    size: u64,
    layout: &Layout,
) -> Option<u64> {
    const PAGE: u64 = 4096;
    let mut bytes = vec![0u8; usize::try_from(size).ok()?];
    let mut done = 0u64;
    while done < size {
        let at = start.wrapping_add(done);
        let n = (PAGE - at % PAGE).min(size - done);
        let chunk = &mut bytes[done as usize..(done + n) as usize];
        if mem.read(at, chunk).is_err() {
            chunk.fill(0);
        }
        done += n;
    }
    let first = (8 - start % 8) % 8;
    (first..size.saturating_sub(31))
        .step_by(8)
        .map(|o| (o, &bytes[o as usize..o as usize + 32]))
        .filter(|(_, b)| looks_like(layout, b))
        .take(MAX_CANDIDATES)
        .find(|(o, b)| checks(mem, layout, start.wrapping_add(*o), b))
        .map(|(o, _)| start.wrapping_add(o))
}
