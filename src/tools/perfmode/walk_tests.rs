//! Synthetic stacks and rows for the user-space walk: each test lays out
//! the words a real stack would hold and checks the return addresses.

use super::*;
use crate::unwind::table::{CFA_NONE, RBP_SAME};

/// Where the synthetic stacks start (the sampled sp).
const S: u64 = 0x7fff_0000;

fn row(cfa: u8, cfa_off: u16, rbp: u8, rbp_off: i8) -> Row {
    Row {
        pc: 0,
        cfa_off,
        kind: cfa | rbp << 4,
        rbp_off,
    }
}

/// The code of the tests, by address range:
/// - 0x1000..0x1010: no information; 0x1010..0x1100 `leaf`, frameless
///   (CFA = rsp + 8);
/// - 0x2000..0x2100 `caller`, 16 bytes of locals (CFA = rsp + 24);
/// - 0x3000..0x3100 `main`, an rbp frame (CFA = rbp + 16, rbp saved at
///   CFA - 16);
/// - 0x4000..0x4100 `_start`, the outermost frame;
/// - 0x5000..0x5100 code without a table;
/// - 0x6000..0x6010 a PLT entry (threshold 11);
/// - 0x7000..0x7100 a signal trampoline.
fn rows(addr: u64) -> Option<Row> {
    match addr {
        0x1000..=0x100f => Some(row(CFA_NONE, 0, RBP_SAME, 0)),
        0x1010..=0x10ff => Some(row(CFA_RSP, 8, RBP_SAME, 0)),
        0x2000..=0x20ff => Some(row(CFA_RSP, 24, RBP_SAME, 0)),
        0x3000..=0x30ff => Some(row(CFA_RBP, 16, RBP_SAVED, -2)),
        0x4000..=0x40ff => Some(row(CFA_END, 0, RBP_SAME, 0)),
        0x6000..=0x600f => Some(row(CFA_PLT, 11, RBP_SAME, 0)),
        0x7000..=0x70ff => Some(row(CFA_SIGNAL, 0, RBP_SAME, 0)),
        _ => None,
    }
}

/// A stack image from (offset from S, word) pairs.
fn image(words: &[(u64, u64)], len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    for &(off, w) in words {
        let at = off as usize;
        d[at..at + 8].copy_from_slice(&w.to_ne_bytes());
    }
    d
}

/// leaf -> caller -> main -> _start, rbp pointing at main's frame.
fn full_stack() -> Vec<u8> {
    image(
        &[
            (0, 0x2050),  // leaf's return address, into caller
            (24, 0x3050), // caller's return address, into main
            (48, 0),      // main's saved rbp (the caller's: none)
            (56, 0x4010), // main's return address, into _start
        ],
        128,
    )
}

fn regs(pc: u64, bp: u64) -> Regs {
    Regs { pc, sp: S, bp }
}

#[test]
fn rows_give_every_return_address_to_the_outermost_frame() {
    let data = full_stack();
    let stack = StackCopy::new(S, &data);
    let w = walk(Mode::Auto, regs(0x1010, S + 48), &stack, 64, rows);
    assert_eq!(w.pcs, vec![0x1010, 0x2050, 0x3050, 0x4010]);
    assert!(w.complete);
    assert!(!w.overran);
}

#[test]
fn a_stack_copy_that_ends_ends_the_walk() {
    let data = full_stack();
    // main's return address (S + 56) is past the copy.
    let stack = StackCopy::new(S, &data[..32]);
    let w = walk(Mode::Auto, regs(0x1010, S + 48), &stack, 64, rows);
    assert_eq!(w.pcs, vec![0x1010, 0x2050, 0x3050]);
    assert!(!w.complete);
    assert!(w.overran, "the stack goes on past the copy");
    // And the depth limit.
    let stack = StackCopy::new(S, &data);
    let w = walk(Mode::Auto, regs(0x1010, S + 48), &stack, 2, rows);
    assert_eq!(w.pcs, vec![0x1010, 0x2050]);
    assert!(w.cut, "frames were left at the limit");
    let w = walk(Mode::Auto, regs(0x1010, S + 48), &stack, 4, rows);
    assert!(
        !w.cut && w.complete,
        "a stack of exactly the limit is whole"
    );
}

#[test]
fn code_without_a_table_is_walked_by_its_frame_pointer() {
    // 0x5010 has no table: its frame is [saved rbp, return address] at
    // rbp = S + 16; the caller, main, has rows again.
    let data = image(
        &[
            (16, S + 48), // saved rbp: main's frame
            (24, 0x3050), // return address into main
            (48, 0),
            (56, 0x4010),
        ],
        128,
    );
    let stack = StackCopy::new(S, &data);
    let w = walk(Mode::Auto, regs(0x5010, S + 16), &stack, 64, rows);
    assert_eq!(w.pcs, vec![0x5010, 0x3050, 0x4010]);
    assert!(w.complete);
    // --unwind dwarf: no table ends the stack.
    let w = walk(Mode::Dwarf, regs(0x5010, S + 16), &stack, 64, rows);
    assert_eq!(w.pcs, vec![0x5010]);
    assert!(!w.complete);
    // A frame pointer below the stack pointer is no frame.
    let w = walk(Mode::Auto, regs(0x5010, S - 8), &stack, 64, rows);
    assert_eq!(w.pcs, vec![0x5010]);
}

#[test]
fn frame_pointers_alone_lose_a_frameless_leafs_caller() {
    // --unwind fp never asks for rows: from the frameless leaf, rbp leads
    // to main's frame and `caller` is skipped (what the rows fix).
    let data = full_stack();
    let stack = StackCopy::new(S, &data);
    let w = walk(Mode::Fp, regs(0x1010, S + 48), &stack, 64, |_| {
        panic!("fp asks for no rows")
    });
    assert_eq!(w.pcs, vec![0x1010, 0x4010]);
}

#[test]
fn return_addresses_are_looked_up_inside_the_call() {
    // A return address at the very start of leaf's rows (0x1010) belongs
    // to the call before it, in the gap without information (then the
    // frame pointer, here none: the walk ends). Looked up at 0x1010
    // itself, leaf's row would find one more frame (0x4010).
    let data = image(&[(0, 0x1010), (8, 0x4010)], 64);
    let stack = StackCopy::new(S, &data);
    let w = walk(Mode::Auto, regs(0x2010, 0), &stack, 64, |a| match a {
        0x2000..=0x20ff => Some(row(CFA_RSP, 8, RBP_SAME, 0)),
        _ => rows(a),
    });
    assert_eq!(w.pcs, vec![0x2010, 0x1010]);
}

#[test]
fn plt_entries_use_the_threshold() {
    // Before the entry's push (pc & 15 < 11): the return address at sp.
    let data = image(&[(0, 0x2050), (8, 0x3050), (24, 0x3050)], 128);
    let stack = StackCopy::new(S, &data);
    let w = walk(Mode::Auto, regs(0x6006, 0), &stack, 2, rows);
    assert_eq!(w.pcs, vec![0x6006, 0x2050]);
    // After it: one word more.
    let w = walk(Mode::Auto, regs(0x600c, 0), &stack, 2, rows);
    assert_eq!(w.pcs, vec![0x600c, 0x3050]);
}

#[test]
fn a_signal_frame_resumes_at_the_interrupted_code() {
    // The trampoline's sp points at a ucontext whose mcontext holds the
    // interrupted rbp, rsp and rip; the rip is no return address, so its
    // own row (leaf's first, at 0x1010) counts.
    let interrupted_sp = S + 512;
    let data = image(
        &[
            (MC_RBP, interrupted_sp + 48),
            (MC_RSP, interrupted_sp),
            (MC_RIP, 0x1010),
            (512, 0x2050),
            (512 + 24, 0x3050),
            (512 + 48, 0),
            (512 + 56, 0x4010),
        ],
        1024,
    );
    let stack = StackCopy::new(S, &data);
    let w = walk(Mode::Auto, regs(0x7008, 0), &stack, 64, rows);
    assert_eq!(w.pcs, vec![0x7008, 0x1010, 0x2050, 0x3050, 0x4010]);
    assert!(w.complete);
}

#[test]
fn an_epilogue_past_its_rbp_pop_keeps_rbp() {
    // An epilogue at 0x8000 has popped rbp (restoring main's frame
    // pointer) but not yet its last register: CFA = rsp + 16, and the
    // row still says rbp was saved at CFA - 32, below sp, where the copy
    // does not reach. rbp already holds the caller's value: the walk goes
    // on with it, to main (rbp frame) and _start.
    let data = image(
        &[
            (8, 0x3050),  // the epilogue's return address, into main
            (16, 0),      // main's saved rbp (none)
            (24, 0x4010), // main's return address, into _start
        ],
        64,
    );
    let stack = StackCopy::new(S, &data);
    let w = walk(Mode::Dwarf, regs(0x8000, S + 16), &stack, 64, |a| match a {
        0x8000..=0x80ff => Some(row(CFA_RSP, 16, RBP_SAVED, -4)),
        _ => rows(a),
    });
    assert_eq!(w.pcs, vec![0x8000, 0x3050, 0x4010]);
    assert!(w.complete);
}

/// An arm64 row: CFA rule and offset, x29 rule, x30 rule, and the word
/// offset they share.
fn arm64_row(cfa: u8, cfa_off: u16, fp: u8, ra: u8, off: i8) -> Row {
    Row {
        pc: 0,
        cfa_off,
        kind: cfa | fp << 4 | ra << 6,
        rbp_off: off,
    }
}

/// arm64 code, by address range:
/// - 0x1000..0x1100 `leaf`, frameless: CFA = sp, return address in x30;
/// - 0x2000..0x2100 `caller`, built without frame pointers: 32 bytes of
///   frame, x30 alone at CFA - 8 (`str x30, [sp, #-32]!`);
/// - 0x3000..0x3100 `main`, a frame record at the bottom of 48 bytes
///   (`stp x29, x30, [sp, #-48]!; mov x29, sp`): CFA = x29 + 48, x29 at
///   CFA - 48, x30 after it;
/// - 0x4000..0x4100 `_start`, the outermost frame.
fn arm64_rows(addr: u64) -> Option<Row> {
    match addr {
        0x1000..=0x10ff => Some(arm64_row(CFA_RSP, 0, RBP_SAME, RA_LR, 0)),
        0x2000..=0x20ff => Some(arm64_row(CFA_RSP, 32, RBP_SAME, RA_SAVED, -1)),
        0x3000..=0x30ff => Some(arm64_row(CFA_RBP, 48, RBP_SAVED, RA_AFTER_FP, -6)),
        0x4000..=0x40ff => Some(arm64_row(CFA_END, 0, RBP_SAME, RA_LR, 0)),
        _ => None,
    }
}

/// An arm64 walk with tables (`rows`), without runtime frames.
fn walk_arm64(start: Start, stack: &StackCopy<'_>, rows: impl FnMut(u64) -> Option<Row>) -> Walk {
    walk_with(Mode::Auto, start, stack, 64, rows, |_, _| None)
}

fn arm64(pc: u64, bp: u64, lr: u64) -> Start {
    Start {
        machine: Machine::Aarch64,
        regs: Regs { pc, sp: S, bp },
        lr,
    }
}

/// leaf (no frame) -> caller (32 bytes at S) -> main (48 bytes at S + 32,
/// its frame record at the bottom) -> _start; the return addresses carry
/// pointer-authentication codes in their top bits.
fn arm64_stack() -> Vec<u8> {
    image(
        &[
            (24, 0x002a_0000_0000_3050), // caller's x30, into main (signed)
            (32, 0),                     // main's frame record: x29 (none)
            (40, 0x0055_0000_0000_4010), // and x30, into _start (signed)
        ],
        128,
    )
}

#[test]
fn arm64_rows_find_a_frameless_leafs_caller_in_x30() {
    let data = arm64_stack();
    let stack = StackCopy::new(S, &data);
    let w = walk_arm64(arm64(0x1010, S + 32, 0x2050), &stack, arm64_rows);
    assert_eq!(w.pcs, vec![0x1010, 0x2050, 0x3050, 0x4010]);
    assert!(w.complete);
}

#[test]
fn arm64_x30_holds_no_return_address_past_the_first_frame() {
    // A caller whose row says its return address is still in x30 cannot
    // be: x30 was the leaf's. The walk ends rather than loop or invent.
    let data = arm64_stack();
    let stack = StackCopy::new(S, &data);
    let w = walk_arm64(arm64(0x1010, S + 32, 0x2050), &stack, |a| match a {
        0x2000..=0x20ff => Some(arm64_row(CFA_RSP, 32, RBP_SAME, RA_LR, 0)),
        _ => arm64_rows(a),
    });
    assert_eq!(w.pcs, vec![0x1010, 0x2050]);
    // Nor does a frameless frame whose x30 is its own pc step to itself.
    let w = walk_arm64(arm64(0x1010, 0, 0x1010), &stack, arm64_rows);
    assert_eq!(w.pcs, vec![0x1010]);
}

#[test]
fn arm64_frame_pointers_strip_authentication_codes() {
    // Without rows: x29 -> main's frame record; the leaf's caller (in
    // x30) is lost, as the kernel's own walk loses it.
    let data = arm64_stack();
    let stack = StackCopy::new(S, &data);
    let w = walk_arm64(arm64(0x5010, S + 32, 0x2050), &stack, |_| None);
    assert_eq!(w.pcs, vec![0x5010, 0x4010]);
}

#[test]
fn an_arm64_signal_frame_restores_x30() {
    // The trampoline's sp points at the rt_sigframe; the interrupted
    // frameless leaf finds its caller in the saved x30.
    let interrupted_sp = S + 1024;
    let at = |reg: u64| ARM64_REGS + reg * 8;
    let data = image(
        &[
            (at(29), interrupted_sp + 32),
            (at(30), 0x2050),
            (at(31), interrupted_sp),
            (at(32), 0x1010),
            (1024 + 24, 0x3050),
            (1024 + 32, 0),
            (1024 + 40, 0x4010),
        ],
        2048,
    );
    let stack = StackCopy::new(S, &data);
    let w = walk_arm64(arm64(0x7008, 0, 0), &stack, |a| match a {
        0x7000..=0x70ff => Some(arm64_row(CFA_SIGNAL, 0, RBP_SAME, RA_LR, 0)),
        _ => arm64_rows(a),
    });
    assert_eq!(w.pcs, vec![0x7008, 0x1010, 0x2050, 0x3050, 0x4010]);
    assert!(w.complete);
}

#[test]
fn an_arm64_epilogue_past_its_record_load_steps_by_x30() {
    // A function sampled between `ldp x29, x30, [sp, #32]` and `add sp,
    // sp, #48`: its row keeps the CFA at sp + 48 but says x29 and x30 are
    // restored (the caller's again). The step takes the return address
    // from x30, moves sp past the frame and keeps x29, which points at
    // main's frame record (at S + 48 here).
    let data = image(&[(48, 0), (56, 0x0055_0000_0000_4010)], 128);
    let stack = StackCopy::new(S, &data);
    let w = walk_arm64(
        arm64(0x6010, S + 48, 0x002a_0000_0000_3050),
        &stack,
        |a| match a {
            0x6000..=0x60ff => Some(arm64_row(CFA_RSP, 48, RBP_SAME, RA_LR, 0)),
            _ => arm64_rows(a),
        },
    );
    assert_eq!(w.pcs, vec![0x6010, 0x3050, 0x4010]);
    assert!(w.complete);
}
