//! What an interpreter's own machine code says where its symbols do not.
//!
//! Distributions strip `.symtab` from their `python3.N` executables, and
//! two facts flare needs then live only in the code:
//! - **Where the eval loop's body is.** gcc splits
//!   `_PyEval_EvalFrameDefault` of 3.14 and 3.15 (Debian's builds): the
//!   exported symbol keeps a 1 KiB entry and exit, and the loop itself,
//!   84 KiB, moves to an unnamed `.text.unlikely` part that only the
//!   entry's jumps reach. Every native frame of the loop lies there, so
//!   without it no Python frame is put in place. [`outlined_part`] finds
//!   it: the call-frame information's function (FDE) that most of the
//!   entry's jumps out of the function land in.
//! - **Where 3.15 keeps a thread's state.** 3.15 dropped `autoTSSkey`:
//!   `PyGILState_GetThisThreadState` returns a thread-local variable,
//!   whose offset from the thread pointer is in its code
//!   ([`thread_local_offset`]).
//!
//! Both read bytes of the file only, bounded; what they find is checked
//! against the live process before it is used (the thread-state slot
//! must hold every thread's state).

use std::ops::Range;

use crate::unwind::elf::Machine;

/// Jumps into one outside function that make it the eval loop's part.
const MIN_JUMPS: usize = 3;

/// The targets of the direct jumps (conditional or not, never calls) in
/// `code`, the bytes of a function at virtual address `at`, that leave
/// `at..at + code.len()`.
///
/// x86-64 instructions are not decoded one after another (their lengths
/// would need a full decoder): every offset is read as a near `jmp rel32`
/// or `jcc rel32`, so a few targets come from bytes inside other
/// instructions; they land in random places, and [`outlined_part`]
/// needs many jumps into one function. arm64's are read exactly.
pub fn jumps_out(machine: Machine, code: &[u8], at: u64) -> Vec<u64> {
    let end = at.saturating_add(code.len() as u64);
    let mut out = Vec::new();
    let mut add = |target: u64| {
        if !(at..end).contains(&target) {
            out.push(target);
        }
    };
    match machine {
        Machine::X86_64 => {
            let rel32 = |i: usize| -> Option<i64> {
                let b = code.get(i..i + 4)?;
                Some(i64::from(i32::from_le_bytes(b.try_into().ok()?)))
            };
            for i in 0..code.len() {
                let (len, rel) = match (code[i], code.get(i + 1)) {
                    (0xe9, _) => (5, rel32(i + 1)),
                    (0x0f, Some(0x80..=0x8f)) => (6, rel32(i + 2)),
                    _ => continue,
                };
                if let Some(rel) = rel {
                    add(at.wrapping_add(i as u64 + len).wrapping_add_signed(rel));
                }
            }
        }
        Machine::Aarch64 => {
            for (i, w) in code.chunks_exact(4).enumerate() {
                let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                let pc = at.wrapping_add(4 * i as u64);
                // Sign-extended word offset of `bits` bits at bit `shift`.
                let imm = |bits: u32, shift: u32| -> i64 {
                    let v = (w >> shift) & ((1 << bits) - 1);
                    (i64::from(v) << (64 - bits)) >> (64 - bits) << 2
                };
                let b_cond = w >> 24 == 0b0101_0100 && w & 0x10 == 0;
                let cbz = (w >> 25) & 0x3f == 0b011010; // and cbnz
                let rel = if w >> 26 == 0b000101 {
                    imm(26, 0) // b
                } else if b_cond || cbz {
                    imm(19, 5)
                } else if (w >> 25) & 0x3f == 0b011011 {
                    imm(14, 5) // tbz, tbnz
                } else {
                    continue;
                };
                add(pc.wrapping_add_signed(rel));
            }
        }
    }
    out
}

/// The function among `functions` (sorted by start, as
/// [`crate::unwind::table::eh_frame_ranges`] gives them) that most of
/// `targets` land in, if at least [`MIN_JUMPS`] do and it is not the
/// function `from` itself.
pub fn outlined_part(
    functions: &[Range<u64>],
    targets: &[u64],
    from: &Range<u64>,
) -> Option<Range<u64>> {
    let mut hits: Vec<(usize, usize)> = Vec::new();
    for &t in targets {
        let i = functions.partition_point(|f| f.start <= t);
        let Some(i) = i.checked_sub(1) else {
            continue;
        };
        if !functions[i].contains(&t) || functions[i].start == from.start {
            continue;
        }
        match hits.iter_mut().find(|(f, _)| *f == i) {
            Some((_, n)) => *n += 1,
            None => hits.push((i, 1)),
        }
    }
    let (i, n) = hits.into_iter().max_by_key(|&(_, n)| n)?;
    (n >= MIN_JUMPS).then(|| functions[i].clone())
}

/// How `PyGILState_GetThisThreadState` reads its thread-local variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadLocal {
    /// At this offset from the thread pointer (the executable's own
    /// variable: x86-64 `mov %fs:OFF,%rax`, arm64 `mrs tpidr_el0` and
    /// adds).
    Offset(i64),
    /// At the offset the word at this virtual address of the object (a
    /// GOT entry the loader fills) holds: a library's variable.
    Got(u64),
}

/// Where the thread-local variable that `code` (the bytes of a function
/// at virtual address `at` that returns it) reads lies, for the forms
/// compilers emit for `return var;` with `var` a `__thread` pointer.
pub fn thread_local_offset(machine: Machine, code: &[u8], at: u64) -> Option<ThreadLocal> {
    match machine {
        Machine::X86_64 => {
            const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
            let (code, at) = match code.strip_prefix(&ENDBR64) {
                Some(rest) => (rest, at + 4),
                None => (code, at),
            };
            let rel32 = |b: &[u8]| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            // mov %fs:OFF,%rax
            if let Some(rest) = code.strip_prefix(&[0x64, 0x48, 0x8b, 0x04, 0x25]) {
                return Some(ThreadLocal::Offset(rel32(rest.get(..4)?)));
            }
            // mov OFF(%rip),%rax; mov %fs:(%rax),%rax
            if let Some(rest) = code.strip_prefix(&[0x48, 0x8b, 0x05]) {
                let got = (at + 7).wrapping_add_signed(rel32(rest.get(..4)?));
                return (rest.get(4..8)? == [0x64, 0x48, 0x8b, 0x00])
                    .then_some(ThreadLocal::Got(got));
            }
            None
        }
        Machine::Aarch64 => {
            let words: Vec<u32> = code
                .chunks_exact(4)
                .take(8)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect();
            // mrs xN, tpidr_el0
            let (first, rest) = words.split_first()?;
            if first & !0x1f != 0xd53b_d040 {
                return None;
            }
            let mut reg = first & 0x1f;
            let mut offset: i64 = 0;
            for &w in rest {
                let (rd, rn) = (w & 0x1f, (w >> 5) & 0x1f);
                if w & 0xff80_0000 == 0x9100_0000 && rn == reg {
                    // add xd, xn, #imm{, lsl #12}
                    let imm = i64::from((w >> 10) & 0xfff);
                    offset += if w & (1 << 22) != 0 { imm << 12 } else { imm };
                    reg = rd;
                } else if w & 0xffc0_0000 == 0xf940_0000 && rn == reg {
                    // ldr xt, [xn, #imm]: the variable itself.
                    return Some(ThreadLocal::Offset(
                        offset + (i64::from((w >> 10) & 0xfff) << 3),
                    ));
                } else {
                    return None;
                }
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_jumps_out_of_a_function_are_found() {
        // jne +0x100 (out), jmp -0x20 (out), je +2 (in), nop, call (no).
        let mut code = vec![0x0f, 0x85];
        code.extend(0x100i32.to_le_bytes());
        code.push(0xe9);
        code.extend((-0x20i32).to_le_bytes());
        code.extend([0x0f, 0x84]);
        code.extend(2i32.to_le_bytes());
        code.push(0x90);
        code.push(0xe8);
        code.extend(0x1000i32.to_le_bytes());
        let at = 0x1000;
        let got = jumps_out(Machine::X86_64, &code, at);
        assert_eq!(got, vec![at + 6 + 0x100, at + 11 - 0x20]);
    }

    #[test]
    fn arm64_branches_out_of_a_function_are_found() {
        let words: [u32; 5] = [
            0x1400_0040,               // b +0x100
            0x54ff_ffe0,               // b.eq -4
            0xb400_0000 | (0x10 << 5), // cbz x0, +0x40
            0x9400_0100,               // bl: a call, not a jump
            0xd65f_03c0,               // ret
        ];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let at = 0x4000;
        let got = jumps_out(Machine::Aarch64, &code, at);
        // b.eq -4 from 0x4004 lands at 0x4000, inside: left out.
        assert_eq!(got, vec![0x4100, 0x4008 + 0x40]);
    }

    #[test]
    fn the_part_most_jumps_land_in_is_the_outlined_one() {
        let functions = [0x100..0x200, 0x200..0x300, 0x1000..0x5000];
        let from = 0x200..0x300;
        let targets = [0x1004, 0x2000, 0x150, 0x3000, 0x4ff0, 0x9999];
        assert_eq!(
            outlined_part(&functions, &targets, &from),
            Some(0x1000..0x5000)
        );
        // Two jumps are not enough; jumps within `from` do not count.
        assert_eq!(outlined_part(&functions, &targets[..3], &from), None);
        assert_eq!(
            outlined_part(&functions, &[0x210, 0x220, 0x230], &from),
            None
        );
    }

    #[test]
    fn thread_locals_are_read_from_the_code_that_returns_them() {
        // Debian sid's python3.15 (3.15.2): endbr64; mov %fs:-0x28,%rax; ret.
        let exe = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x64, 0x48, 0x8b, 0x04, 0x25, 0xd8, 0xff, 0xff, 0xff, 0xc3,
        ];
        assert_eq!(
            thread_local_offset(Machine::X86_64, &exe, 0x42fa7d),
            Some(ThreadLocal::Offset(-0x28))
        );
        // A library's: mov 0x1000(%rip),%rax; mov %fs:(%rax),%rax; ret.
        let lib = [
            0x48, 0x8b, 0x05, 0x00, 0x10, 0x00, 0x00, 0x64, 0x48, 0x8b, 0x00, 0xc3,
        ];
        assert_eq!(
            thread_local_offset(Machine::X86_64, &lib, 0x2000),
            Some(ThreadLocal::Got(0x2000 + 7 + 0x1000))
        );
        // 3.14's reads autoTSSkey instead: cmpl $0x0,X(%rip).
        let older = [0x83, 0x3d, 0x3b, 0x49, 0x77, 0x00, 0x00];
        assert_eq!(thread_local_offset(Machine::X86_64, &older, 0), None);
        // arm64: mrs x0, tpidr_el0; add x0, x0, #0, lsl #12;
        // add x0, x0, #0x10; ldr x0, [x0, #0x28]; ret.
        let words: [u32; 5] = [
            0xd53b_d040,
            0x9140_0000,
            0x9100_4000,
            0xf940_1400,
            0xd65f_03c0,
        ];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(
            thread_local_offset(Machine::Aarch64, &code, 0),
            Some(ThreadLocal::Offset(0x10 + 0x28))
        );
    }
}
