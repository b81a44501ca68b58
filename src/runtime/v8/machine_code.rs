//! Where leaptiering's dispatch table is, as V8's own machine code says:
//! no `v8dbg_*` constant names it, and it moved between versions.
//!
//! - V8 13 (Node 24): `ExternalReference::js_dispatch_table_address()`
//!   loads `IsolateGroup::default_isolate_group_` and returns the word at
//!   an offset in the group (x86-64 `mov group(%rip),%rax; mov
//!   OFF(%rax),%rax`; arm64 `adrp; ldr; ldr [x, #OFF]`).
//! - V8 14 (Node 26): `js_dispatch_table_address(Isolate*)` returns the
//!   word at an offset in the isolate (`mov OFF(%rdi),%rax`; `ldr x0, [x0,
//!   #OFF]`): each isolate has a table, and the isolate is the group's
//!   first (`main_isolate_`), which `IsolateGroup::AddIsolate` stores
//!   when the group has none (`if (!main_isolate_) main_isolate_ =
//!   isolate;`): the field it compares with zero and then stores to.
//!
//! [`table_read`] decodes the first, following values symbolically
//! through the few instruction forms compilers emit for those one-line
//! functions (anything else ends the decoding: `None`, never a guess);
//! [`first_isolate_field`] finds the second. Both read bytes of the file
//! only, bounded by the functions' symbol sizes; what they give is checked
//! against the live process before it is used.

use crate::elf::{EM_AARCH64, EM_X86_64};

/// The bytes of a function decoded at most.
pub const MAX_CODE: u64 = 4096;

/// How `js_dispatch_table_address` reads the table's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableRead {
    /// The word at this offset in the isolate group
    /// (`*default_isolate_group_`).
    Group { offset: u32 },
    /// The word at this offset in the isolate its argument is.
    Isolate { offset: u32 },
}

/// What a register holds, as far as the decoding follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Value {
    /// An address of the file (its virtual address).
    Address(u64),
    /// The isolate group: the value of the group variable.
    Group,
    /// The function's first argument (the isolate).
    Argument,
}

/// A load of a 64-bit word, as decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum From {
    /// `[rip + disp]`: this virtual address.
    Pc(u64),
    /// `[register + disp]`.
    Base(u8, i64),
}

/// Follows a load of `from` into a register: what it then holds, or the
/// table read when the load is it.
fn load(regs: &[Option<Value>; 32], from: From, group: u64) -> Result<Option<Value>, TableRead> {
    let (base, disp) = match from {
        From::Pc(address) => return Ok((address == group).then_some(Value::Group)),
        From::Base(r, d) => (regs[usize::from(r) & 31], d),
    };
    let offset = u32::try_from(disp).ok();
    match (base, offset) {
        (Some(Value::Address(a)), _) if a.checked_add_signed(disp) == Some(group) => {
            Ok(Some(Value::Group))
        }
        (Some(Value::Group), Some(offset)) => Err(TableRead::Group { offset }),
        (Some(Value::Argument), Some(offset)) => Err(TableRead::Isolate { offset }),
        _ => Ok(None),
    }
}

/// How `code`, the bytes of `js_dispatch_table_address` at virtual
/// address `at` in a file of machine `machine` whose group variable is at
/// `group`, reads the table.
pub fn table_read(machine: u16, code: &[u8], at: u64, group: u64) -> Option<TableRead> {
    let mut regs = [None; 32];
    match machine {
        EM_X86_64 => {
            regs[7] = Some(Value::Argument); // %rdi
            let mut i = skip_x86_prologue(code);
            while let Some((dst, from, len)) = x86_load(code.get(i..)?, at + i as u64) {
                match load(&regs, from, group) {
                    Err(found) => return Some(found),
                    Ok(None) => return None,
                    Ok(value) => regs[usize::from(dst)] = value,
                }
                i += len;
            }
            None
        }
        EM_AARCH64 => {
            regs[0] = Some(Value::Argument);
            for (i, w) in words(code).enumerate().take(16) {
                let pc = at + 4 * i as u64;
                let rd = (w & 31) as usize;
                let rn = ((w >> 5) & 31) as u8;
                if is_arm_prologue(w) {
                    continue;
                } else if w & 0x9f00_0000 == 0x9000_0000 {
                    // adrp xd, page
                    let imm = (((w >> 5) & 0x7_ffff) << 2 | (w >> 29) & 3) as i64;
                    let imm = (imm << 43 >> 43) << 12;
                    regs[rd] = Some(Value::Address((pc & !0xfff).wrapping_add_signed(imm)));
                } else if w & 0xff80_0000 == 0x9100_0000 {
                    // add xd, xn, #imm{, lsl #12}
                    let imm =
                        u64::from((w >> 10) & 0xfff) << if w & (1 << 22) != 0 { 12 } else { 0 };
                    regs[rd] = match regs[usize::from(rn)] {
                        Some(Value::Address(a)) => Some(Value::Address(a.wrapping_add(imm))),
                        _ => return None,
                    };
                } else if w & 0xffc0_0000 == 0xf940_0000 {
                    // ldr xt, [xn, #imm]
                    let from = From::Base(rn, i64::from((w >> 10) & 0xfff) * 8);
                    match load(&regs, from, group) {
                        Err(found) => return Some(found),
                        Ok(None) => return None,
                        Ok(value) => regs[rd] = value,
                    }
                } else {
                    return None;
                }
            }
            None
        }
        _ => None,
    }
}

/// The field of `this` that `code`, the bytes of
/// `IsolateGroup::AddIsolate`, compares with zero and stores a register
/// to: the first such in the code (`main_isolate_`), as an offset.
///
/// x86-64 instructions are matched at every byte offset (their lengths
/// would need a full decoder): `cmpq $0, OFF(%base)` or `mov OFF(%base),
/// %r; test %r,%r`, and `mov %r, OFF(%base)` with the same base and
/// offset (a byte sequence that merely looks like both is all the more
/// unlikely). arm64's are read exactly: `ldr xt, [xn, #OFF]` then `cbz`
/// or `cbnz xt`, and `str xs, [xn, #OFF]`.
pub fn first_isolate_field(machine: u16, code: &[u8]) -> Option<u32> {
    let (tests, stores) = match machine {
        EM_X86_64 => x86_tests_and_stores(code),
        EM_AARCH64 => arm_tests_and_stores(code),
        _ => return None,
    };
    tests
        .into_iter()
        .find(|t| stores.contains(t))
        .and_then(|(_, offset)| u32::try_from(offset).ok())
        .filter(|&o| o > 0)
}

/// The little-endian 32-bit words of `code`.
fn words(code: &[u8]) -> impl Iterator<Item = u32> + '_ {
    code.chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

/// `bti`/`pac*` hints, `stp x29, x30, [sp, #-N]!`, `mov x29, sp`.
fn is_arm_prologue(w: u32) -> bool {
    w & 0xffff_f01f == 0xd503_201f || w & 0xffc0_7fff == 0xa980_7bfd || w == 0x9100_03fd
}

/// Where `code` starts past an `endbr64` and a frame set-up.
fn skip_x86_prologue(code: &[u8]) -> usize {
    let mut i = 0;
    for head in [&[0xf3, 0x0f, 0x1e, 0xfa][..], &[0x55], &[0x48, 0x89, 0xe5]] {
        if code.get(i..).is_some_and(|c| c.starts_with(head)) {
            i += head.len();
        }
    }
    i
}

/// A `REX.W` prefix: its R and B bits.
fn rex_w(b: u8) -> Option<(u8, u8)> {
    (b & 0xf8 == 0x48).then_some(((b >> 2) & 1, b & 1))
}

/// A ModRM memory operand with a base register and a 32-bit
/// displacement (`mod` 2, no SIB): (reg field, base, displacement).
fn modrm_disp32(rex: (u8, u8), modrm: u8, disp: &[u8]) -> Option<(u8, u8, i64)> {
    if modrm >> 6 != 2 || modrm & 7 == 4 {
        return None;
    }
    let d = i32::from_le_bytes(disp.get(..4)?.try_into().ok()?);
    Some((
        (modrm >> 3) & 7 | rex.0 << 3,
        modrm & 7 | rex.1 << 3,
        i64::from(d),
    ))
}

/// `mov m64, r64` at the start of `code` (at address `at`): destination,
/// source and length.
fn x86_load(code: &[u8], at: u64) -> Option<(u8, From, usize)> {
    let (r, b) = rex_w(*code.first()?)?;
    if *code.get(1)? != 0x8b {
        return None;
    }
    let modrm = *code.get(2)?;
    let (md, reg, rm) = (modrm >> 6, (modrm >> 3) & 7 | r << 3, modrm & 7);
    let i32_at = |i: usize| -> Option<i64> {
        Some(i64::from(i32::from_le_bytes(
            code.get(i..i + 4)?.try_into().ok()?,
        )))
    };
    if md == 0 && rm == 5 {
        let disp = i32_at(3)?;
        return Some((reg, From::Pc((at + 7).wrapping_add_signed(disp)), 7));
    }
    // A SIB byte with no index (base only, as %rsp and %r12 need).
    let (base, head) = if rm == 4 {
        let sib = *code.get(3)?;
        if (sib >> 3) & 7 != 4 || (md == 0 && sib & 7 == 5) {
            return None;
        }
        (sib & 7 | b << 3, 4)
    } else {
        (rm | b << 3, 3)
    };
    let (disp, len) = match md {
        0 => (0, head),
        1 => (i64::from(*code.get(head)? as i8), head + 1),
        2 => (i32_at(head)?, head + 4),
        _ => return None,
    };
    Some((reg, From::Base(base, disp), len))
}

/// (base, offset) pairs x86-64 `code` tests for zero, in order, and
/// those it stores a register to.
type Fields = (Vec<(u8, i64)>, Vec<(u8, i64)>);

fn x86_tests_and_stores(code: &[u8]) -> Fields {
    let (mut tests, mut stores) = (Vec::new(), Vec::new());
    for i in 0..code.len() {
        let Some(rex) = rex_w(code[i]) else { continue };
        let (Some(&op), Some(&modrm)) = (code.get(i + 1), code.get(i + 2)) else {
            continue;
        };
        let Some((reg, base, disp)) = code.get(i + 3..).and_then(|d| modrm_disp32(rex, modrm, d))
        else {
            continue;
        };
        match op {
            // cmpq $0, disp(%base)
            0x83 if reg & 7 == 7 && code.get(i + 7) == Some(&0) => tests.push((base, disp)),
            // mov disp(%base), %r; test %r, %r
            0x8b => {
                let next = code.get(i + 7..i + 10);
                if let Some(&[p, 0x85, m]) = next {
                    let same = rex_w(p).is_some_and(|(r2, b2)| {
                        m >> 6 == 3 && (m >> 3) & 7 | r2 << 3 == reg && m & 7 | b2 << 3 == reg
                    });
                    if same {
                        tests.push((base, disp));
                    }
                }
            }
            // mov %r, disp(%base)
            0x89 => stores.push((base, disp)),
            _ => {}
        }
    }
    (tests, stores)
}

fn arm_tests_and_stores(code: &[u8]) -> Fields {
    let ws: Vec<u32> = words(code).collect();
    let (mut tests, mut stores) = (Vec::new(), Vec::new());
    for (i, &w) in ws.iter().enumerate() {
        let (rt, rn) = (w & 31, ((w >> 5) & 31) as u8);
        let offset = i64::from((w >> 10) & 0xfff) * 8;
        if w & 0xffc0_0000 == 0xf940_0000 {
            // ldr xt, [xn, #OFF], then cbz/cbnz xt (64-bit).
            let tested = ws
                .get(i + 1)
                .is_some_and(|&n| n & 0xfe00_0000 == 0xb400_0000 && n & 31 == rt);
            if tested {
                tests.push((rn, offset));
            }
        } else if w & 0xffc0_0000 == 0xf900_0000 {
            stores.push((rn, offset));
        }
    }
    (tests, stores)
}

#[cfg(test)]
#[path = "machine_code_tests.rs"]
mod tests;
