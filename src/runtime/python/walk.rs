//! Python frames read from user space, for collectors without BPF
//! (perf-event mode): the same walk as bpf/python.h, done with
//! `process_vm_readv` on a thread's frames right after its sample
//! arrives, and put in place of the eval-loop frames of the sample's
//! native stack.
//!
//! A thread is found by its thread id: each thread state names its
//! thread's `pthread_t` (glibc's `struct pthread`, which holds the kernel's
//! thread id at an offset learnt from the live threads). The frames are
//! read after the sample was taken, not at its moment, so [`splice`] puts
//! them in only where the native stack ran as many eval calls as the
//! frames read have (one per frame up to 3.10, one per entry frame from
//! 3.11), and leaves out the native frames the innermost Python frame
//! called: a thread that moved on keeps its native frames for that
//! sample, and a C function is never shown under a Python function that
//! ran after it.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::detect::{thread_states, Thread};
use super::{FrameModel, Process};
use crate::collect::{RawFrame, Runtime, RuntimeFrame};
use crate::runtime::memory::Memory;

/// Where glibc 2.36 (and the versions around it) keeps `struct pthread`'s
/// `tid`, as its `_thread_db_pthread_tid` tells libthread_db: tried before
/// the others. On arm64 the struct holds no `tcbhead_t`, only the 192
/// bytes of padding that stand in for it, so `tid` comes earlier.
const GLIBC_TID: u64 = if cfg!(target_arch = "aarch64") {
    0xd0
} else {
    0x2d0
};
/// Where else it is looked for.
const TID_SCAN: Range<u64> = 0x40..0x800;
/// The low bits of a 3.14+ frame's code object that tag it; clear in the
/// pointers of every version (objects are 8-aligned).
const TAG_BITS: u64 = 3;
/// Python frames read per thread at most (a cycle in a torn chain ends).
const MAX_FRAMES: usize = 1024;

/// The frames of one eval call, innermost first.
pub type EvalCall = Vec<RuntimeFrame>;

/// Reads the Python frames of one CPython process's threads.
pub struct Threads {
    pub process: Arc<Process>,
    /// `struct pthread`'s `tid`.
    tid_offset: u64,
    /// Thread id → (thread state, `pthread_t`), as last walked.
    known: HashMap<u32, Thread>,
}

impl Threads {
    /// Learns where `process`'s threads keep their thread ids: `None`
    /// when no offset gives every thread state's thread a distinct id of
    /// `tids` (the process's threads) and its main thread the process id.
    pub fn new(process: Arc<Process>, pid: u32, tids: &[u32], mem: &dyn Memory) -> Option<Self> {
        let threads: Vec<Thread> = thread_states(&process.layout, process.runtime, mem)
            .ok()??
            .into_iter()
            .filter(|t| t.id != 0)
            .collect();
        let fits = |off: u64| -> bool {
            let mut seen: Vec<u32> = Vec::new();
            for t in &threads {
                match mem.read_u32(t.id.wrapping_add(off)) {
                    Ok(tid) if tids.contains(&tid) && !seen.contains(&tid) => seen.push(tid),
                    _ => return false,
                }
            }
            seen.contains(&pid)
        };
        let tid_offset = std::iter::once(GLIBC_TID)
            .chain(TID_SCAN.step_by(4))
            .find(|&off| fits(off))?;
        let mut t = Threads {
            process,
            tid_offset,
            known: HashMap::new(),
        };
        t.index(threads, mem);
        Some(t)
    }

    /// Walks the thread states again.
    fn rewalk(&mut self, mem: &dyn Memory) {
        let threads = thread_states(&self.process.layout, self.process.runtime, mem)
            .ok()
            .flatten()
            .unwrap_or_default();
        self.index(threads, mem);
    }

    /// Knows `threads` (and no others) by their thread ids.
    fn index(&mut self, threads: Vec<Thread>, mem: &dyn Memory) {
        self.known.clear();
        for t in threads.into_iter().filter(|t| t.id != 0) {
            if let Ok(tid) = mem.read_u32(t.id.wrapping_add(self.tid_offset)) {
                self.known.insert(tid, t);
            }
        }
    }

    /// The thread state of thread `tid`, if it runs Python.
    fn tstate(&mut self, tid: u32, mem: &dyn Memory) -> Option<u64> {
        let field = u64::from(self.process.layout.tstate_thread_id);
        let still = |t: &Thread| {
            mem.read_u64(t.tstate.wrapping_add(field))
                .is_ok_and(|id| id == t.id)
                && mem
                    .read_u32(t.id.wrapping_add(self.tid_offset))
                    .is_ok_and(|v| v == tid)
        };
        if let Some(t) = self.known.get(&tid) {
            if still(t) {
                return Some(t.tstate);
            }
        }
        self.rewalk(mem);
        self.known.get(&tid).map(|t| t.tstate)
    }

    /// The eval calls thread `tid` runs now, innermost first; `None` when
    /// it runs no Python or its frames cannot be read.
    pub fn eval_calls(&mut self, tid: u32, mem: &dyn Memory) -> Option<Vec<EvalCall>> {
        let tstate = self.tstate(tid, mem)?;
        eval_calls(&self.process, tstate, mem)
    }
}

/// The eval calls of thread state `tstate`, innermost first, each with
/// its frames: bpf/python.h's walk (`py_start`, `py_step`) in user space.
pub fn eval_calls(p: &Process, tstate: u64, mem: &dyn Memory) -> Option<Vec<EvalCall>> {
    let l = &p.layout;
    let at = |base: u64, off: u16| base.wrapping_add(u64::from(off));
    let mut frame = mem.read_u64(at(tstate, l.tstate_frame)).ok()?;
    if let (Some(current), true) = (l.cframe_current, frame != 0) {
        frame = mem.read_u64(at(frame, current)).ok()?;
    }
    let mut calls: Vec<EvalCall> = Vec::new();
    let mut call: EvalCall = Vec::new();
    let mut walked = 0;
    // The last frame read began an eval call (or a frame object: ≤ 3.10
    // frames do not say).
    let mut began = true;
    while frame != 0 && walked < MAX_FRAMES {
        walked += 1;
        let f = frame;
        let (Ok(next), Ok(code)) = (
            mem.read_u64(at(f, l.frame_previous)),
            mem.read_u64(at(f, l.frame_code)),
        ) else {
            return None;
        };
        // 3.14+ tags the code object (a `_PyStackRef`) in its low bits.
        let code = code & !TAG_BITS;
        frame = next;
        let (instr, last) = match l.model {
            FrameModel::Object => {
                let lasti = mem.read_u32(at(f, l.frame_instr)).unwrap_or(u32::MAX);
                (u64::from(lasti), true)
            }
            FrameModel::Entry | FrameModel::Owner => {
                let mut mark = [0u8];
                let (Ok(()), Ok(instr)) = (
                    mem.read(at(f, l.frame_entry), &mut mark),
                    mem.read_u64(at(f, l.frame_instr)),
                ) else {
                    return None;
                };
                if l.model == FrameModel::Owner && mark[0] >= l.owner_cstack {
                    // The shim an eval call starts with (or 3.14+'s other
                    // frames of the interpreter's own): its frames end.
                    calls.push(std::mem::take(&mut call));
                    began = true;
                    continue;
                }
                (
                    instr.wrapping_sub(code),
                    l.model == FrameModel::Entry && mark[0] != 0,
                )
            }
        };
        if let Some(cookie) = cookie(p, code, mem) {
            call.push(RuntimeFrame {
                runtime: Runtime::Python,
                ids: [code, instr],
                cookie,
            });
        }
        began = last;
        if last {
            calls.push(std::mem::take(&mut call));
        }
    }
    // A chain that does not end (read while the thread changed it, or
    // deeper than a stack holds), or ends in a frame that did not begin
    // an eval call (a generator's frame whose link to its caller was
    // cleared as it yielded, mid-read), is not the thread's stack.
    if frame != 0 || !began {
        return None;
    }
    if !call.is_empty() {
        calls.push(call);
    }
    Some(calls)
}

/// The cookie of code object `code` (as BPF's `py_cookie`), `None` when
/// it is not a code object.
fn cookie(p: &Process, code: u64, mem: &dyn Memory) -> Option<u64> {
    let l = &p.layout;
    let at = |off: u16| code.wrapping_add(u64::from(off));
    if mem.read_u64(code.wrapping_add(8)).ok()? != p.code_type {
        return None;
    }
    Some(super::cookie(
        mem.read_u32(at(l.code_argcount)).ok()?,
        mem.read_u32(at(l.code_flags)).ok()?,
        mem.read_u32(at(l.code_firstlineno)).ok()?,
    ))
}

/// The native stack `native` (leaf first) with the Python frames of
/// `calls` in place of its eval-loop frames (`eval`: the loop's ranges),
/// the first eval frame met from the leaf taking the innermost call. An
/// eval call without frames stays a native frame. Unless `keep_leaf`, the
/// native frames below the innermost Python frame are left out: frames
/// read after the sample may belong to a function the thread moved on to,
/// and a C function sampled in one Python function must not be shown
/// under the next. `None` when the stack and the calls disagree on how
/// many eval calls there are.
pub fn splice(
    native: &[u64],
    eval: &[Range<u64>; 2],
    calls: &[EvalCall],
    keep_leaf: bool,
) -> Option<Vec<RawFrame>> {
    if native.iter().filter(|&&pc| in_eval(eval, pc)).count() != calls.len() {
        return None;
    }
    let mut calls = calls.iter();
    let mut out = Vec::with_capacity(native.len());
    let mut python = false;
    for &pc in native {
        match in_eval(eval, pc).then(|| calls.next()).flatten() {
            Some(call) if !call.is_empty() => {
                if !keep_leaf && !python {
                    out.clear();
                }
                python = true;
                out.extend(call.iter().map(|f| RawFrame::Runtime(Box::new(*f))));
            }
            _ => out.push(RawFrame::Addr(pc)),
        }
    }
    Some(out)
}

/// For a sample whose native stack and `calls` disagree ([`splice`]:
/// the thread entered or left an eval call between the sample and the
/// read): the Python frames of all `calls`, as read (as py-spy shows a
/// stack), over the sample's native root, the native frames outside its
/// outermost eval-loop frame. The native frames between eval calls are
/// left out: which belong where is not known. `None` when the sample ran
/// no eval loop or no call has frames.
pub fn over_root(
    native: &[u64],
    eval: &[Range<u64>; 2],
    calls: &[EvalCall],
) -> Option<Vec<RawFrame>> {
    let outermost = native.iter().rposition(|&pc| in_eval(eval, pc))?;
    let python: Vec<RawFrame> = calls
        .iter()
        .flatten()
        .map(|f| RawFrame::Runtime(Box::new(*f)))
        .collect();
    if python.is_empty() {
        return None;
    }
    let root = native[outermost + 1..].iter().map(|&pc| RawFrame::Addr(pc));
    Some(python.into_iter().chain(root).collect())
}

/// Whether `pc` is in the eval loop (`eval`: its ranges).
fn in_eval(eval: &[Range<u64>; 2], pc: u64) -> bool {
    eval.iter().any(|r| r.contains(&pc))
}

#[cfg(test)]
#[path = "walk_tests.rs"]
mod tests;
