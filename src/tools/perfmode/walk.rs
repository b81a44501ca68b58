//! The user-space twin of the BPF unwinder (`unwind_step` in
//! bpf/unwind.h): the same rows ([`crate::unwind::table`]), evaluated over
//! the copy of the user stack a perf sample carries instead of live
//! memory. It exists because without BPF nothing can walk a stack inside
//! the kernel but its frame-pointer walk; the kernel copies the registers
//! and the top of the stack, and flare walks them here, with the semantics
//! BPF has — rows where an object has them, the frame pointer where it has
//! none (`--unwind auto`; `dwarf` ends the stack there), the PLT and
//! signal-frame rows — so that both modes give the same stacks. Both
//! architectures' rules are here (x86-64's return address at CFA - 8;
//! arm64's in x30 or where its row says, with pointer-authentication bits
//! stripped), chosen by [`Start::machine`], so that each is tested on any
//! host.

use crate::unwind::elf::Machine;
use crate::unwind::table::{
    Row, CFA_END, CFA_PLT, CFA_RBP, CFA_RSP, CFA_SIGNAL, RA_AFTER_FP, RA_LR, RA_SAVED, RBP_SAVED,
    RBP_UNKNOWN,
};
use crate::unwind::Mode;

/// The user registers the walk starts from (the Java step's own).
pub use crate::runtime::perf::Regs;

/// The bytes of the user stack the kernel copied at the sample, from the
/// sampled `sp` up.
#[derive(Clone, Debug)]
pub struct StackCopy<'a> {
    sp: u64,
    data: &'a [u8],
    /// A read asked for a word above the copy's end.
    overran: std::cell::Cell<bool>,
}

impl<'a> StackCopy<'a> {
    pub fn new(sp: u64, data: &'a [u8]) -> Self {
        StackCopy {
            sp,
            data,
            overran: Default::default(),
        }
    }

    /// The word at `addr`, if the copy holds it (a read outside it ends
    /// the walk, as a failed `bpf_probe_read_user` does).
    pub fn read(&self, addr: u64) -> Option<u64> {
        let at = usize::try_from(addr.checked_sub(self.sp)?).ok()?;
        let bytes = self.data.get(at..at.checked_add(8)?);
        self.overran.set(self.overran.get() | bytes.is_none());
        Some(u64::from_ne_bytes(bytes?.try_into().ok()?))
    }
}

/// A walked stack: return addresses, leaf first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Walk {
    pub pcs: Vec<u64>,
    /// The walk reached the outermost frame (a row said so).
    pub complete: bool,
    /// The walk stopped at its frame limit with frames left.
    pub cut: bool,
    /// The walk ended on a read above the end of the stack copy: the
    /// stack goes on past what the sample copied.
    pub overran: bool,
}

/// Where a walk starts: the sampled registers, on which machine.
#[derive(Clone, Copy, Debug)]
pub struct Start {
    pub machine: Machine,
    pub regs: Regs,
    /// arm64's link register (x30) at the sample; 0 on x86-64.
    pub lr: u64,
}

/// The state carried from one step to the next.
struct State {
    machine: Machine,
    regs: Regs,
    /// arm64's x30 while it still holds a return address (the sampled
    /// frame, or one a signal interrupted); 0 once the walk left it.
    lr: u64,
    /// `pc` is a return address (every frame but the first): its row is
    /// looked up at `pc - 1`, inside the call.
    return_address: bool,
}

impl State {
    /// A return address as the machine stores it, made an address.
    fn strip(&self, ra: u64) -> u64 {
        self.machine.strip_return_address(ra)
    }
}

/// Walks an x86-64 stack from `regs` over `stack`, at most `max` frames
/// (a runtime frame is one, whatever its words).
/// `row` gives the row covering an address (`None`: no mapping, no table,
/// or no information there). `mode` is `auto` or `dwarf` (with `fp` no
/// rows are asked for: the frame pointer alone).
#[cfg(test)]
pub fn walk(
    mode: Mode,
    regs: Regs,
    stack: &StackCopy<'_>,
    max: usize,
    row: impl FnMut(u64) -> Option<Row>,
) -> Walk {
    let start = Start {
        machine: Machine::X86_64,
        regs,
        lr: 0,
    };
    walk_with(mode, start, stack, max, row, |_, _| None)
}

/// [`walk`], with `runtime` offered each frame first: a runtime's step
/// through it (given the registers and whether the pc is a return
/// address) that gives the words of a runtime frame (header first, as BPF
/// records them in [`Walk::pcs`]) and the caller's registers, or `None`
/// for a native frame.
pub fn walk_with(
    mode: Mode,
    start: Start,
    stack: &StackCopy<'_>,
    max: usize,
    mut row: impl FnMut(u64) -> Option<Row>,
    mut runtime: impl FnMut(Regs, bool) -> Option<([u64; 4], Regs)>,
) -> Walk {
    let mut out = Walk::default();
    let mut s = State {
        machine: start.machine,
        regs: start.regs,
        lr: start.lr,
        return_address: false,
    };
    let mut frames = 0;
    while s.regs.pc != 0 {
        if frames == max {
            out.cut = true;
            break;
        }
        frames += 1;
        let pc = s.regs.pc;
        if let Some((words, caller)) = runtime(s.regs, s.return_address) {
            out.pcs.extend(words);
            s.regs = caller;
            s.lr = 0;
            s.return_address = true;
            continue;
        }
        out.pcs.push(pc);
        let lookup = if s.return_address { pc - 1 } else { pc };
        let r = match mode {
            Mode::Fp => None,
            _ => row(lookup),
        };
        let more = match r {
            Some(r) => match r.cfa() {
                CFA_END => {
                    out.complete = true;
                    false
                }
                CFA_SIGNAL => signal_step(&mut s, stack),
                CFA_RSP | CFA_RBP if s.machine == Machine::Aarch64 => {
                    arm64_row_step(&mut s, stack, &r)
                }
                CFA_RSP | CFA_RBP | CFA_PLT if s.machine == Machine::X86_64 => {
                    row_step(&mut s, stack, &r)
                }
                _ => fp_step(mode, &mut s, stack),
            },
            None => fp_step(mode, &mut s, stack),
        };
        if !more {
            out.overran = stack.overran.get();
            break;
        }
    }
    out
}

/// One step by the frame pointer: false to end the walk.
fn fp_step(mode: Mode, s: &mut State, stack: &StackCopy<'_>) -> bool {
    let bp = s.regs.bp;
    if mode == Mode::Dwarf || bp == 0 || bp < s.regs.sp {
        return false;
    }
    let (Some(next_bp), Some(ra)) = (stack.read(bp), stack.read(bp.wrapping_add(8))) else {
        return false;
    };
    s.regs = Regs {
        pc: s.strip(ra),
        sp: bp.wrapping_add(16),
        bp: next_bp,
    };
    s.lr = 0;
    s.return_address = true;
    true
}

/// One step by a row whose CFA is rsp-, rbp- or PLT-based.
fn row_step(s: &mut State, stack: &StackCopy<'_>, r: &Row) -> bool {
    let Regs { pc, sp, bp } = s.regs;
    let off = u64::from(r.cfa_off);
    let cfa = match r.cfa() {
        CFA_RSP => sp.wrapping_add(off),
        CFA_RBP => bp.wrapping_add(off),
        _ => sp + 8 + if (pc & 15) >= off { 8 } else { 0 },
    };
    // The caller's frame is above this one.
    if cfa <= sp {
        return false;
    }
    let Some(ra) = stack.read(cfa - 8) else {
        return false;
    };
    let bp = match r.rbp() {
        // A slot below sp was popped already (an epilogue: compilers say
        // where rbp was saved until the function returns, not that the
        // pop restored it): rbp holds the caller's value. The copy starts
        // at sp; BPF reads the popped slot, which holds the same.
        RBP_SAVED => match cfa.wrapping_add_signed(i64::from(r.rbp_off) * 8) {
            slot if slot < sp => bp,
            slot => match stack.read(slot) {
                Some(v) => v,
                None => return false,
            },
        },
        RBP_UNKNOWN => 0,
        _ => bp,
    };
    s.regs = Regs {
        pc: ra,
        sp: cfa,
        bp,
    };
    s.return_address = true;
    true
}

/// One arm64 step by a row whose CFA is sp- or x29-based; the return
/// address is still in x30 (a leaf, a prologue) or saved in the frame.
fn arm64_row_step(s: &mut State, stack: &StackCopy<'_>, r: &Row) -> bool {
    let Regs { pc, sp, bp } = s.regs;
    let off = u64::from(r.cfa_off);
    let cfa = match r.cfa() {
        CFA_RSP => sp.wrapping_add(off),
        _ => bp.wrapping_add(off),
    };
    // A leaf may have no frame: its CFA is sp.
    if cfa < sp {
        return false;
    }
    let slot = |words: i64| cfa.wrapping_add_signed(words * 8);
    let ra = match r.ra() {
        RA_LR if s.lr != 0 => s.lr,
        RA_AFTER_FP => match stack.read(slot(i64::from(r.rbp_off) + 1)) {
            Some(v) => v,
            None => return false,
        },
        RA_SAVED => match stack.read(slot(i64::from(r.rbp_off))) {
            Some(v) => v,
            None => return false,
        },
        _ => return false,
    };
    let ra = s.strip(ra);
    // A frame whose return address is in x30 and that moves no sp would
    // step to itself.
    if cfa == sp && ra == pc {
        return false;
    }
    let bp = match r.rbp() {
        RBP_SAVED => match stack.read(slot(i64::from(r.rbp_off))) {
            Some(v) => v,
            None => return false,
        },
        RBP_UNKNOWN => 0,
        _ => bp,
    };
    s.regs = Regs {
        pc: ra,
        sp: cfa,
        bp,
    };
    s.lr = 0;
    s.return_address = true;
    true
}

/// Offsets in the `ucontext` a signal trampoline finds at rsp: its
/// mcontext (x86-64 sigcontext) holds the interrupted rbp, rsp and rip.
const UC_MCONTEXT: u64 = 40;
const MC_RBP: u64 = UC_MCONTEXT + 10 * 8;
const MC_RSP: u64 = UC_MCONTEXT + 15 * 8;
const MC_RIP: u64 = UC_MCONTEXT + 16 * 8;

/// arm64: sp points at the kernel's `rt_sigframe`: a siginfo (128
/// bytes), then the ucontext, whose mcontext (at 176) is a sigcontext:
/// fault_address, then x0..x30, sp, pc.
const ARM64_REGS: u64 = 128 + 176 + 8;

/// One step out of a signal handler, to the interrupted code.
fn signal_step(s: &mut State, stack: &StackCopy<'_>) -> bool {
    let sp = s.regs.sp;
    let (bp_at, sp_at, pc_at) = match s.machine {
        Machine::X86_64 => (MC_RBP, MC_RSP, MC_RIP),
        Machine::Aarch64 => (
            ARM64_REGS + 29 * 8,
            ARM64_REGS + 31 * 8,
            ARM64_REGS + 32 * 8,
        ),
    };
    let (Some(bp), Some(nsp), Some(pc)) = (
        stack.read(sp + bp_at),
        stack.read(sp + sp_at),
        stack.read(sp + pc_at),
    ) else {
        return false;
    };
    s.lr = match s.machine {
        Machine::Aarch64 => stack
            .read(sp + ARM64_REGS + 30 * 8)
            .map_or(0, |lr| s.strip(lr)),
        Machine::X86_64 => 0,
    };
    s.regs = Regs { pc, sp: nsp, bp };
    // The interrupted pc is no return address: its own row counts.
    s.return_address = false;
    true
}

#[cfg(test)]
#[path = "walk_tests.rs"]
mod tests;
