//! The records of perf-event mode's ring buffers that are not about
//! mappings (those [`crate::procmaps`] parses): samples — pid and tid,
//! time, the kernel's callchain, the user registers and the copy of the
//! user stack — and the `comm` and `fork` records that tell each thread's
//! name. The layout of a sample follows the `sample_type` the events were
//! opened with ([`Layout`]).

use libbpf_rs::libbpf_sys as sys;

use crate::runtime::perf::Leaf;

/// Which optional parts samples carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `PERF_SAMPLE_CALLCHAIN`.
    pub callchain: bool,
    /// `PERF_SAMPLE_REGS_USER` (bp, sp, ip) and `PERF_SAMPLE_STACK_USER`.
    pub user_stack: bool,
}

/// x86-64 perf register numbers (arch/x86/include/uapi/asm/perf_regs.h).
#[cfg(not(target_arch = "aarch64"))]
mod regs {
    const REG_BP: u64 = 6;
    const REG_SP: u64 = 7;
    const REG_IP: u64 = 8;
    /// Where HotSpot's interpreter keeps its bytecode pointer.
    const REG_R13: u64 = 21;
    /// Where CRuby's interpreter loop keeps its instruction pointer and
    /// its control frame (`vm_exec_core`'s `reg_pc`, `reg_cfp`).
    const REG_R14: u64 = 22;
    const REG_R15: u64 = 23;
    /// The user registers asked for; they come in register-number order.
    pub const MASK: u64 =
        1 << REG_BP | 1 << REG_SP | 1 << REG_IP | 1 << REG_R13 | 1 << REG_R14 | 1 << REG_R15;
}

/// arm64 perf register numbers (arch/arm64/include/uapi/asm/perf_regs.h):
/// CRuby's loop's instruction pointer and control frame (x19, x20),
/// HotSpot's bytecode pointer (x22), the frame pointer, the link register,
/// sp and pc.
#[cfg(target_arch = "aarch64")]
mod regs {
    const REG_X19: u64 = 19;
    const REG_X20: u64 = 20;
    const REG_X22: u64 = 22;
    const REG_X29: u64 = 29;
    const REG_LR: u64 = 30;
    const REG_SP: u64 = 31;
    const REG_PC: u64 = 32;
    pub const MASK: u64 = 1 << REG_X19
        | 1 << REG_X20
        | 1 << REG_X22
        | 1 << REG_X29
        | 1 << REG_LR
        | 1 << REG_SP
        | 1 << REG_PC;
}

pub use regs::MASK as REGS_MASK;

/// Callchain entries at or above this are context markers, not addresses.
const CONTEXT_MAX: u64 = (-4095i64) as u64;
const CONTEXT_KERNEL: u64 = (-128i64) as u64;
const CONTEXT_USER: u64 = (-512i64) as u64;

impl Layout {
    /// The `sample_type` for this layout (time and ids always).
    pub fn sample_type(self) -> u64 {
        let mut t = (sys::PERF_SAMPLE_TID | sys::PERF_SAMPLE_TIME) as u64;
        if self.callchain {
            t |= sys::PERF_SAMPLE_CALLCHAIN as u64;
        }
        if self.user_stack {
            t |= (sys::PERF_SAMPLE_REGS_USER | sys::PERF_SAMPLE_STACK_USER) as u64;
        }
        t
    }
}

/// One sample.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sample<'a> {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    /// The kernel's callchain, split: kernel part, user part (leaf first).
    pub kernel: Vec<u64>,
    pub user: Vec<u64>,
    /// ip, sp, bp: `None` when the sample interrupted no user code (a
    /// kernel thread).
    pub regs: Option<(u64, u64, u64)>,
    /// The other registers runtimes read ([`Leaf`]: arm64's link
    /// register, HotSpot's bytecode pointer, CRuby's loop's registers; 0
    /// where the architecture has none or without registers).
    pub leaf: Leaf,
    /// The copied user stack, from sp up (only the bytes the kernel
    /// really copied).
    pub stack: &'a [u8],
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn u32(&mut self) -> Option<u32> {
        let v = u32::from_ne_bytes(self.b.get(self.at..self.at + 4)?.try_into().ok()?);
        self.at += 4;
        Some(v)
    }

    fn u64(&mut self) -> Option<u64> {
        let v = u64::from_ne_bytes(self.b.get(self.at..self.at + 8)?.try_into().ok()?);
        self.at += 8;
        Some(v)
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let v = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(v)
    }
}

/// The type of a whole record (header included).
pub fn kind(rec: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(rec.get(..4)?.try_into().ok()?))
}

/// Parses a `PERF_RECORD_SAMPLE` laid out as `layout` says.
pub fn parse_sample(rec: &[u8], layout: Layout) -> Option<Sample<'_>> {
    if kind(rec)? != sys::PERF_RECORD_SAMPLE {
        return None;
    }
    let mut r = Reader { b: rec, at: 8 };
    let mut s = Sample {
        pid: r.u32()?,
        tid: r.u32()?,
        time: r.u64()?,
        ..Sample::default()
    };
    if layout.callchain {
        let n = usize::try_from(r.u64()?).ok()?;
        let mut into_user = false;
        for _ in 0..n {
            let ip = r.u64()?;
            if ip >= CONTEXT_MAX {
                into_user = match ip {
                    CONTEXT_USER => true,
                    CONTEXT_KERNEL => false,
                    _ => into_user,
                };
                continue;
            }
            match into_user {
                true => s.user.push(ip),
                false => s.kernel.push(ip),
            }
        }
    }
    if layout.user_stack {
        let abi = r.u64()?;
        if abi != 0 {
            // In register-number order: x86-64 bp, sp, ip, r13, r14, r15;
            // arm64 x19, x20, x22, x29, x30, sp, pc.
            if cfg!(target_arch = "aarch64") {
                s.leaf.ruby_pc = r.u64()?;
                s.leaf.ruby_cfp = r.u64()?;
                s.leaf.bcp = r.u64()?;
                let (a, b, c, d) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
                s.regs = Some((d, c, a));
                s.leaf.lr = b;
            } else {
                let (a, b, c, d) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
                s.regs = Some((c, b, a));
                s.leaf.bcp = d;
                s.leaf.ruby_pc = r.u64()?;
                s.leaf.ruby_cfp = r.u64()?;
            }
        }
        let size = usize::try_from(r.u64()?).ok()?;
        let data = r.bytes(size)?;
        if size > 0 {
            let dyn_size = usize::try_from(r.u64()?).ok()?;
            s.stack = &data[..dyn_size.min(size)];
        }
    }
    Some(s)
}

/// A thread's name from a `PERF_RECORD_COMM`: (tid, name).
pub fn parse_comm(rec: &[u8]) -> Option<(u32, String)> {
    if kind(rec)? != sys::PERF_RECORD_COMM {
        return None;
    }
    let mut r = Reader { b: rec, at: 8 };
    let _pid = r.u32()?;
    let tid = r.u32()?;
    // The name, NUL-padded to 8 bytes, then the sample id fields.
    let rest = rec.get(r.at..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    Some((tid, String::from_utf8_lossy(&rest[..end]).into_owned()))
}

/// A new thread or process from a `PERF_RECORD_FORK`: (tid, parent tid).
pub fn parse_fork(rec: &[u8]) -> Option<(u32, u32)> {
    if kind(rec)? != sys::PERF_RECORD_FORK {
        return None;
    }
    let mut r = Reader { b: rec, at: 8 };
    let (_pid, _ppid, tid, ptid) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
    Some((tid, ptid))
}

/// The time at the end of a non-sample record (its `sample_id`), or a
/// sample's own.
pub fn time(rec: &[u8]) -> u64 {
    let at = match kind(rec) {
        Some(sys::PERF_RECORD_SAMPLE) => 16,
        _ => rec.len().saturating_sub(8),
    };
    rec.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_ne_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, body: &[u64]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_ne_bytes());
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&((8 + body.len() * 8) as u16).to_ne_bytes());
        for w in body {
            r.extend_from_slice(&w.to_ne_bytes());
        }
        r
    }

    #[test]
    fn samples_split_their_callchain_and_keep_the_copied_stack() {
        let pid_tid = 7u64 | 8 << 32;
        let layout = Layout {
            callchain: true,
            user_stack: true,
        };
        let rec = record(
            sys::PERF_RECORD_SAMPLE,
            &[
                pid_tid,
                99,
                5,
                CONTEXT_KERNEL,
                0xffff_ffff_8100_0000,
                CONTEXT_USER,
                0x401000,
                0x402000,
                2, // abi
                0x7000_0100,
                0x7000_0000,
                0x401000,
                0x7000_0042, // r13
                0x5000_0014, // r14
                0x5000_0015, // r15
                16,          // size
                0xaa,
                0xbb,
                8, // dyn_size
            ],
        );
        let s = parse_sample(&rec, layout).expect("sample");
        assert_eq!((s.pid, s.tid, s.time), (7, 8, 99));
        assert_eq!(s.kernel, vec![0xffff_ffff_8100_0000]);
        assert_eq!(s.user, vec![0x401000, 0x402000]);
        assert_eq!(s.regs, Some((0x401000, 0x7000_0000, 0x7000_0100)));
        assert_eq!(s.leaf.bcp, 0x7000_0042);
        assert_eq!(
            (s.leaf.ruby_pc, s.leaf.ruby_cfp),
            (0x5000_0014, 0x5000_0015)
        );
        assert_eq!(s.stack, &0xaau64.to_ne_bytes());
        assert_eq!(time(&rec), 99);
        assert_eq!(
            layout.sample_type() & sys::PERF_SAMPLE_STACK_USER as u64,
            1 << 13
        );
    }

    #[test]
    fn comm_and_fork_records() {
        let mut body = vec![5u64 | 6 << 32];
        body.push(u64::from_ne_bytes(*b"app\0\0\0\0\0"));
        body.extend([5u64 | 6 << 32, 42]);
        let rec = record(sys::PERF_RECORD_COMM, &body);
        assert_eq!(parse_comm(&rec), Some((6, "app".into())));
        assert_eq!(time(&rec), 42);
        let fork = record(sys::PERF_RECORD_FORK, &[5 | 5 << 32, 9 | 6 << 32, 1]);
        assert_eq!(parse_fork(&fork), Some((9, 6)));
    }
}
