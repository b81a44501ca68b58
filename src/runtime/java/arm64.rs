//! Where a leaf compiled Java frame's caller is on arm64, told from the
//! code around its pc: the rules bpf/java.h's `java_arm64_leaf` follows,
//! here for the user-space step ([`super::walk`]) and for tests.
//!
//! HotSpot's arm64 nmethods build their frame with `sub sp, sp, #size;
//! stp x29, x30, [sp, #size-16]` (large frames and native wrappers: `stp
//! x29, x30, [sp, #-16]!`, then the sub) and take it down with `ldp x29,
//! x30, [sp, #size-16]; add sp, sp, #size` (or the add, then `ldp x29,
//! x30, [sp], #16`), before a return poll and `ret`. Until the stp, and
//! from the ldp on, the return address is in x30, not in the frame; a
//! sample there has to take it from the register, and the caller's sp
//! from how much of the frame stands.

use super::walk::LeafFrame;

/// Instructions read before the pc (bpf/java.h JAVA_A64_BEFORE).
pub const BEFORE: usize = 8;
/// Instructions read in all, from `BEFORE` before the pc (JAVA_A64_WORDS).
pub const WORDS: usize = 48;

fn stp_fp_lr_offset(i: u32) -> bool {
    i & 0xffc0_7fff == 0xa900_7bfd
}

fn stp_fp_lr_pre(i: u32) -> bool {
    i & 0xffc0_7fff == 0xa980_7bfd
}

fn ldp_fp_lr_offset(i: u32) -> bool {
    i & 0xffc0_7fff == 0xa940_7bfd
}

fn ldp_fp_lr_post(i: u32) -> bool {
    i & 0xffc0_7fff == 0xa8c0_7bfd
}

/// `sub sp, sp, #imm` or `sub sp, sp, xN`.
fn sub_sp(i: u32) -> bool {
    i & 0xff80_03ff == 0xd100_03ff || i & 0xffe0_ffff == 0xcb20_63ff
}

/// `add sp, sp, #imm` or `add sp, sp, xN`.
fn add_sp(i: u32) -> bool {
    i & 0xff80_03ff == 0x9100_03ff || i & 0xffe0_ffff == 0x8b20_63ff
}

/// ret, retaa, retab; b, bl; br, blr: control leaves the straight line.
fn leaves(i: u32) -> bool {
    matches!(i, 0xd65f_03c0 | 0xd65f_0bff | 0xd65f_0fff)
        || i & 0x7c00_0000 == 0x1400_0000
        || i & 0xffdf_fc1f == 0xd61f_0000
}

/// Where the caller of a leaf stopped at `pc` is: `code` holds the
/// instructions from [`BEFORE`] before the pc on (as many as could be
/// read), `prologue` says the pc is before the frame's completion at
/// `complete_at`.
pub fn leaf_frame(code: &[u32], pc: u64, complete_at: u64, prologue: bool) -> LeafFrame {
    if code.len() <= BEFORE {
        return LeafFrame::Built;
    }
    if prologue {
        // What the prologue has still to do, from the pc on.
        let mut sub = false;
        for (k, &insn) in code[BEFORE..].iter().enumerate() {
            if pc + k as u64 * 4 >= complete_at {
                break;
            }
            if stp_fp_lr_offset(insn) {
                return if sub {
                    LeafFrame::LrAtSp
                } else {
                    LeafFrame::LrAbove
                };
            }
            if stp_fp_lr_pre(insn) {
                return LeafFrame::LrAtSp;
            }
            sub |= sub_sp(insn);
        }
        // A sub still to come after a pre-indexed stp.
        return if sub {
            LeafFrame::RecordAtSp
        } else {
            LeafFrame::Built
        };
    }
    if add_sp(code[BEFORE]) && ldp_fp_lr_offset(code[BEFORE - 1]) {
        return LeafFrame::LrAbove;
    }
    if ldp_fp_lr_post(code[BEFORE]) {
        return LeafFrame::RecordAtSp;
    }
    // What the epilogue has done, back from the pc to a branch.
    for i in (1..BEFORE).rev() {
        let insn = code[i];
        if leaves(insn) {
            break;
        }
        if ldp_fp_lr_post(insn) || (add_sp(insn) && ldp_fp_lr_offset(code[i - 1])) {
            return LeafFrame::LrAtSp;
        }
    }
    LeafFrame::Built
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOP: u32 = 0xd503_201f;
    /// sub sp, sp, #0x30
    const SUB: u32 = 0xd100_c3ff;
    /// stp x29, x30, [sp, #0x20]
    const STP: u32 = 0xa902_7bfd;
    /// stp x29, x30, [sp, #-16]!
    const STP_PRE: u32 = 0xa9bf_7bfd;
    /// mov x29, sp
    const MOV_FP: u32 = 0x9100_03fd;
    /// ldp x29, x30, [sp, #0x20]
    const LDP: u32 = 0xa942_7bfd;
    /// add sp, sp, #0x30
    const ADD: u32 = 0x9100_c3ff;
    /// ldp x29, x30, [sp], #16
    const LDP_POST: u32 = 0xa8c1_7bfd;
    /// mov sp, x29
    const MOV_SP: u32 = 0x9100_03bf;
    /// ldr x8, [x28, #0x28]; cmp sp, x8; b.hi .+0x40
    const POLL: [u32; 3] = [0xf940_1788, 0xeb28_63ff, 0x5400_0208];
    const RET: u32 = 0xd65f_03c0;
    /// bl .+0x100
    const BL: u32 = 0x9400_0040;
    /// ldr x0, [sp, #8]: body code
    const BODY: u32 = 0xf940_07e0;

    /// `code` with the pc at index `at` of it, as read: BEFORE words
    /// before the pc (padded with body code), the rest after.
    fn at(code: &[u32], at: usize) -> Vec<u32> {
        let mut out = vec![BODY; BEFORE.saturating_sub(at)];
        out.extend_from_slice(&code[at.saturating_sub(BEFORE)..]);
        out
    }

    /// The state at each instruction of a prologue, its frame complete at
    /// its end.
    fn prologue(code: &[u32]) -> Vec<LeafFrame> {
        let complete = code.len() as u64 * 4;
        (0..code.len())
            .map(|i| leaf_frame(&at(code, i), i as u64 * 4, complete, true))
            .collect()
    }

    #[test]
    fn a_small_frame_prologue_keeps_the_return_address_in_x30_until_the_stp() {
        use LeafFrame::*;
        // C2's: a nop to patch, a stack bang, the frame, an entry barrier.
        let code = [NOP, 0xd140_0bf0, 0xf900_021f, SUB, STP, BODY, BODY];
        assert_eq!(
            prologue(&code),
            [LrAtSp, LrAtSp, LrAtSp, LrAtSp, LrAbove, Built, Built]
        );
    }

    #[test]
    fn a_pre_indexed_prologue_has_its_record_at_sp_until_the_sub() {
        use LeafFrame::*;
        // A native wrapper's: enter(), then the rest of the frame.
        let code = [NOP, STP_PRE, MOV_FP, SUB, BODY];
        assert_eq!(
            prologue(&code),
            [LrAtSp, LrAtSp, RecordAtSp, RecordAtSp, Built]
        );
    }

    #[test]
    fn a_prologue_read_ends_at_the_frames_completion() {
        // The stp lies past the completion: not this prologue's.
        let code = [NOP, BODY, STP];
        assert_eq!(leaf_frame(&at(&code, 0), 0, 8, true), LeafFrame::Built);
        // Nothing read past the pc: the frame is taken as built.
        assert_eq!(leaf_frame(&[BODY; BEFORE], 0, 8, true), LeafFrame::Built);
    }

    #[test]
    fn an_epilogue_has_the_return_address_in_x30_from_the_ldp() {
        use LeafFrame::*;
        let mut code = vec![BODY, BL, BODY, LDP, ADD];
        code.extend_from_slice(&POLL);
        code.extend_from_slice(&[RET, BODY, BODY]);
        let states: Vec<LeafFrame> = (0..code.len())
            .map(|i| leaf_frame(&at(&code, i), i as u64 * 4, 0, false))
            .collect();
        // At the ldp the frame still stands; at the add only its space;
        // from the poll to the ret, nothing; past the ret, another block.
        assert_eq!(
            states,
            [Built, Built, Built, Built, LrAbove, LrAtSp, LrAtSp, LrAtSp, LrAtSp, Built, Built]
        );
    }

    #[test]
    fn a_leave_epilogue_has_its_record_at_sp_before_the_ldp() {
        use LeafFrame::*;
        let code = [BODY, MOV_SP, LDP_POST, RET, BODY];
        let states: Vec<LeafFrame> = (0..code.len())
            .map(|i| leaf_frame(&at(&code, i), i as u64 * 4, 0, false))
            .collect();
        assert_eq!(states, [Built, Built, RecordAtSp, LrAtSp, Built]);
    }

    #[test]
    fn the_bpf_walker_has_the_same_encodings() {
        // bpf/java.h spells the masks out; they must be these.
        let h = include_str!("../../../bpf/java.h");
        for s in [
            "0xffc07fff) == 0xa9007bfd",
            "0xffc07fff) == 0xa9807bfd",
            "0xffc07fff) == 0xa9407bfd",
            "0xffc07fff) == 0xa8c07bfd",
            "0xff8003ff) == 0xd10003ff || ((i) & 0xffe0ffff) == 0xcb2063ff",
            "0xff8003ff) == 0x910003ff || ((i) & 0xffe0ffff) == 0x8b2063ff",
            "#define JAVA_A64_BEFORE\t\t8",
            "#define JAVA_A64_WORDS\t\t48",
        ] {
            assert!(h.contains(s), "bpf/java.h lacks {s}");
        }
    }
}
