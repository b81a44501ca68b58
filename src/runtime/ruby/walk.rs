//! Ruby frames read from user space, for collectors without BPF
//! (perf-event mode): bpf/ruby.h's walk (`rb_begin`, `rb_frame`, the
//! steps of unwind.h that call them) done with `process_vm_readv` on a
//! thread's control frames right after its sample arrives, giving the
//! same frames (ids, cookie) the namer names.
//!
//! A thread's execution context is found as BPF finds it, from the
//! thread pointer and the process's [`Tls`](super::Tls): a perf sample
//! carries no thread pointer, so it comes from glibc's own list of its
//! threads ([`crate::runtime::glibc_threads`]), by the sample's thread id.
//! The frames are read after the sample was taken, not at its moment, so
//! [`splice`] puts them in as BPF would only where the native stack and
//! the frames read agree (every activation of the interpreter's loop has
//! frames, and every frame read has its activation), and leaves out the
//! native frames the innermost Ruby frame called: a C function sampled in
//! one Ruby method must not be shown under the next one. Where they
//! disagree (the thread entered or left an activation in between: Ruby
//! 3.1's `Integer#times` enters one for each call of its block),
//! [`over_root`] puts the frames read over the sample's native root.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Process;
use crate::collect::{RawFrame, Runtime, RuntimeFrame};
use crate::runtime::glibc_threads;
use crate::runtime::memory::Memory;

/// Frame and environment flags (vm_core.h; bpf/ruby.h's RB_*).
const MAGIC_MASK: u64 = 0x7fff_0001;
const MAGIC_CFUNC: u64 = 0x5555_0001;
const FLAG_FINISH: u64 = 0x20;
const FLAG_CFRAME: u64 = 0x80;
const ENV_LOCAL: u64 = 0x2;
const T_MASK: u64 = 0x1f;
const T_IMEMO: u64 = 0x1a;
const IMEMO_MENT: u64 = 6;
const IMEMO_SVAR: u64 = 2;
/// Environments followed to a block's method entry.
const MAX_ENVS: usize = 4;
/// The instruction index when it does not fit the frame's 16 bits.
const NO_POS: u64 = 0xffff;
const ADDR_MASK: u64 = (1 << 48) - 1;
/// `rb_iseq_t.body` and `body->iseq_encoded` (bpf/ruby.h reads these).
const ISEQ_BODY: u64 = 16;
const BODY_ENCODED: u64 = 8;
const _: () = assert!(
    BODY_ENCODED == 8,
    "at_sample reads the code as the body's second word"
);
/// `body->iseq_size` (unsigned int, in words of code), in the body's
/// first word: its high half.
const BODY_SIZE: u64 = 4;
/// `rb_method_definition_t *` in a C function's method entry.
const CME_DEF: u64 = 16;
/// Control frames read per thread at most (a cycle-free stack deeper
/// than this is cut: its outer frames are not the sample's).
pub const MAX_FRAMES: usize = 2048;
/// glibc's thread lists walked again at most this often (a thread not in
/// them yet, or a thread pointer gone stale).
const REWALK_GAP: Duration = Duration::from_millis(20);

/// A thread's control frames: the current one, and the outermost one
/// put in (above the stack's dummy frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stack {
    pub cfp: u64,
    pub last: u64,
}

/// One control frame as `rb_frame` reads it, or a read that failed (the
/// frames end there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    Frame {
        /// What it shows (`None`: nothing to show).
        frame: Option<RuntimeFrame>,
        /// Flagged FINISH: its activation's first frame.
        finish: bool,
        /// Frames follow it.
        more: bool,
    },
    Error,
}

/// Whether `addr` holds an imemo of type `kind` (`rb_is_imemo`).
fn is_imemo(mem: &dyn Memory, addr: u64, kind: u64) -> bool {
    if addr == 0 || addr & 7 != 0 {
        return false;
    }
    mem.read_u64(addr)
        .is_ok_and(|f| f & T_MASK == T_IMEMO && (f >> 12) & 0xf == kind)
}

/// Three words at `addr`.
fn words3(mem: &dyn Memory, addr: u64) -> Option<[u64; 3]> {
    let mut w = [0u64; 3];
    read_words(mem, addr, &mut w)?;
    Some(w)
}

/// Five words at `addr`.
fn words5(mem: &dyn Memory, addr: u64) -> Option<[u64; 5]> {
    let mut w = [0u64; 5];
    read_words(mem, addr, &mut w)?;
    Some(w)
}

/// The words at `addr`, in one read.
fn read_words(mem: &dyn Memory, addr: u64, out: &mut [u64]) -> Option<()> {
    let mut b = [0u8; 40];
    let b = b.get_mut(..out.len() * 8)?;
    mem.read(addr, b).ok()?;
    for (w, c) in out.iter_mut().zip(b.chunks_exact(8)) {
        *w = u64::from_ne_bytes(c.try_into().ok()?);
    }
    Some(())
}

/// The execution context the pointer at `at` points at, as `rb_try_ec`
/// and `rb_begin` check it: its stack's frames, or `None`.
pub fn try_ec(mem: &dyn Memory, at: u64, cfp_size: u16) -> Option<Stack> {
    let size = u64::from(cfp_size);
    let ec = mem.read_u64(at).ok()?;
    if ec == 0 || ec & 7 != 0 {
        return None;
    }
    // vm_stack, vm_stack_size (words), cfp.
    let [stack, words, cfp] = words3(mem, ec)?;
    if stack == 0 || words == 0 || words >= 1 << 24 {
        return None;
    }
    let end = stack.wrapping_add(words * 8);
    if cfp <= stack || cfp >= end || (end - cfp) % size != 0 {
        return None;
    }
    Some(Stack { cfp, last: end })
}

/// Where the execution context pointer of the thread whose thread
/// pointer is `tp` lies, and its frames: the first of `p`'s candidate
/// slots that checks out (`rb_begin`).
pub fn begin(p: &Process, tp: u64, mem: &dyn Memory) -> Option<(u64, Stack)> {
    let size = p.layout.cfp_size;
    if !(32..=128).contains(&size) || tp == 0 {
        return None;
    }
    let mut base = tp;
    if p.tls.modid != 0 {
        let dtv = mem.read_u64(tp.wrapping_add(8)).ok().filter(|&d| d != 0)?;
        let at = dtv.wrapping_add(16 * (p.tls.modid & 0xffff));
        base = mem.read_u64(at).ok().filter(|&b| b != 0)?;
    }
    let (at, stack) = p
        .tls
        .slots
        .iter()
        .take(super::MAX_SLOTS)
        .map(|&slot| base.wrapping_add_signed(slot))
        .find_map(|at| Some((at, try_ec(mem, at, size)?)))?;
    Some((at, bottom(stack, size)?))
}

/// `stack` less the stack's dummy frame (the last put in is the one
/// above it), or `None` when it holds no frame.
fn bottom(stack: Stack, cfp_size: u16) -> Option<Stack> {
    let two = 2 * u64::from(cfp_size);
    if stack.last < two || stack.cfp > stack.last - two {
        return None;
    }
    Some(Stack {
        cfp: stack.cfp,
        last: stack.last - two,
    })
}

/// The control frames of `stack`, innermost first, as `rb_frame` reads
/// each: at most [`MAX_FRAMES`], an [`Item::Error`] last when a read
/// failed or the stack was cut.
pub fn frames(p: &Process, stack: Stack, mem: &dyn Memory) -> Vec<Item> {
    let size = u64::from(p.layout.cfp_size);
    let mut out = Vec::new();
    let mut cfp = stack.cfp;
    while cfp != 0 && cfp <= stack.last {
        if out.len() == MAX_FRAMES {
            out.push(Item::Error);
            break;
        }
        // pc, sp, iseq, self, ep; then ep[-2], ep[-1], ep[0].
        let read = words5(mem, cfp)
            .filter(|f| f[4] != 0)
            .and_then(|f| Some((f[0], f[2], words3(mem, f[4].wrapping_sub(16))?)));
        let Some((pc, iseq, env)) = read else {
            out.push(Item::Error);
            break;
        };
        let next = cfp.wrapping_add(size);
        let more = next <= stack.last;
        out.push(Item::Frame {
            frame: frame(mem, pc, iseq, env),
            finish: env[2] & FLAG_FINISH != 0,
            more,
        });
        if !more {
            break;
        }
        cfp = next;
    }
    out
}

/// What a control frame (pc `pc`, sequence `iseq`, environment `env`)
/// shows: a Ruby frame (sequence, method entry and instruction, cookie:
/// the code), a C function's (0, method entry, cookie: the definition),
/// or nothing.
fn frame(mem: &dyn Memory, pc: u64, iseq: u64, env: [u64; 3]) -> Option<RuntimeFrame> {
    let flags = env[2];
    let (mut a, mut b, mut cookie) = (0, 0, 0);
    if flags & FLAG_CFRAME == 0 && pc != 0 {
        let body = mem.read_u64(iseq.wrapping_add(ISEQ_BODY)).unwrap_or(0);
        if body != 0 {
            cookie = mem.read_u64(body.wrapping_add(BODY_ENCODED)).unwrap_or(0);
        }
        if cookie != 0 {
            let mut pos = if pc >= cookie {
                (pc - cookie) / 8
            } else {
                NO_POS
            };
            if pos != 0 && pos != NO_POS {
                pos -= 1;
            }
            pos = pos.min(NO_POS);
            a = iseq;
            b = (method_entry(mem, env) & ADDR_MASK) | (pos << 48);
        }
    } else if flags & MAGIC_MASK == MAGIC_CFUNC && is_imemo(mem, env[0], IMEMO_MENT) {
        cookie = mem.read_u64(env[0].wrapping_add(CME_DEF)).unwrap_or(0);
        if cookie != 0 {
            b = env[0] & ADDR_MASK;
        }
    }
    (cookie != 0 && (a != 0 || b != 0)).then_some(RuntimeFrame {
        runtime: Runtime::Ruby,
        ids: [a, b],
        cookie,
    })
}

/// The method entry of the frame whose environment is `env`, as
/// `rb_method_entry` finds it: up the environments to the method's.
fn method_entry(mem: &dyn Memory, mut env: [u64; 3]) -> u64 {
    for _ in 0..MAX_ENVS {
        if env[2] & ENV_LOCAL != 0 {
            break;
        }
        if is_imemo(mem, env[0], IMEMO_MENT) {
            return env[0];
        }
        let ep = env[1] & !3;
        match (ep != 0)
            .then(|| words3(mem, ep.wrapping_sub(16)))
            .flatten()
        {
            Some(e) => env = e,
            None => return 0,
        }
    }
    if env[2] & ENV_LOCAL == 0 {
        return 0;
    }
    let me = env[0];
    if is_imemo(mem, me, IMEMO_MENT) {
        return me;
    }
    // A special variable holder keeps the entry beside the variables.
    if is_imemo(mem, me, IMEMO_SVAR) {
        if let Ok(m) = mem.read_u64(me.wrapping_add(8)) {
            if is_imemo(mem, m, IMEMO_MENT) {
                return m;
            }
        }
    }
    0
}

/// What `rb_frame` answers.
enum Found {
    None,
    Frame(RuntimeFrame),
    Last(RuntimeFrame),
    Skip,
}

/// Where [`Cursor::take`] stops.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    /// After the first frame that ends an activation (the interpreter
    /// loop's: its frames end there).
    Last,
    /// When no frames are left (JIT code, which has no frame to step by).
    End,
}

/// The frames read, taken as the BPF walk takes them.
struct Cursor<'a> {
    items: &'a [Item],
    at: usize,
}

impl Cursor<'_> {
    /// `rb_frames_left`.
    fn left(&self) -> bool {
        self.at < self.items.len()
    }

    /// `rb_frame`.
    fn next(&mut self) -> Found {
        let Some(&item) = self.items.get(self.at) else {
            return Found::None;
        };
        let Item::Frame {
            frame,
            finish,
            more,
        } = item
        else {
            self.at = self.items.len();
            return Found::None;
        };
        self.at += 1;
        let ends = finish || !more;
        match (frame, ends) {
            (Some(f), true) => Found::Last(f),
            (Some(f), false) => Found::Frame(f),
            (None, true) => Found::None,
            (None, false) => Found::Skip,
        }
    }

    /// Takes frames, giving each with something to show to `put`, up to
    /// the first that ends an activation ([`Until::Last`]) or every one
    /// left ([`Until::End`]); whether any was given.
    fn take(&mut self, until: Until, mut put: impl FnMut(RuntimeFrame)) -> bool {
        let mut taken = false;
        loop {
            let (f, last) = match self.next() {
                Found::Frame(f) => (f, false),
                Found::Last(f) => (f, true),
                Found::Skip => continue,
                Found::None => return taken,
            };
            put(f);
            taken = true;
            if last && until == Until::Last {
                return taken;
            }
        }
    }

    /// Whether frames with something to show are left.
    fn shows_more(&self) -> bool {
        self.items[self.at.min(self.items.len())..]
            .iter()
            .any(|i| matches!(i, Item::Frame { frame: Some(_), .. }))
    }
}

/// What the registers of a sample taken in the interpreter's loop say of
/// the control frames read after it ([`at_sample`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtSample {
    /// The frames the sample ran: from the loop's frame register on.
    From(Stack),
    /// The frame the sample ran has returned since: the frames read are
    /// another moment's.
    Gone,
    /// The registers hold no control frame of the stack (a build that
    /// does not keep the loop's frame in its register): nothing known.
    Unknown,
}

/// Most bytes of control frames between a frame and the stack's last:
/// past it a register is not one of the stack's frames.
const MAX_FRAMES_BYTES: u64 = MAX_FRAMES as u64 * 64;

/// The frames a sample ran, from its registers: `cfp` and `pc`, where
/// CRuby's loop (`vm_exec_core`) keeps its control frame and its
/// instruction pointer (`reg_cfp`, `reg_pc`: r15 and r14 on x86-64, x20
/// and x19 on arm64), against `stack`, the thread's frames read after
/// the sample. Between the sample and the read the thread ran on: the
/// frames it pushed since are dropped, and a frame it returned from (or
/// whose slot holds another method's frame now) makes the read another
/// moment's. Only for a sample whose leaf is in the loop: elsewhere the
/// registers may hold anything.
pub fn at_sample(p: &Process, stack: Stack, pc: u64, cfp: u64, mem: &dyn Memory) -> AtSample {
    let size = u64::from(p.layout.cfp_size);
    let of_stack = size > 0
        && cfp <= stack.last
        && stack.last - cfp < MAX_FRAMES_BYTES
        && (stack.last - cfp) % size == 0;
    if !of_stack {
        return AtSample::Unknown;
    }
    // Returned from: the frames above it may be other calls' now (a
    // frame read there once was another method's, pushed in its slot).
    if cfp < stack.cfp {
        return AtSample::Gone;
    }
    // The frame at `cfp` now runs the code `pc` is in.
    let runs = words5(mem, cfp).is_some_and(|f| {
        let iseq = f[2];
        let Ok(body) = mem.read_u64(iseq.wrapping_add(ISEQ_BODY)) else {
            return false;
        };
        // The body's first two words: type and size, the code.
        let mut w = [0u64; 2];
        if body == 0 || read_words(mem, body, &mut w).is_none() {
            return false;
        }
        let (words, code) = (w[0] >> (BODY_SIZE * 8), w[1]);
        code != 0 && pc >= code && pc - code < words * 8
    });
    if runs {
        AtSample::From(Stack { cfp, ..stack })
    } else {
        AtSample::Gone
    }
}

/// The code a native stack is matched against: the interpreter's loop,
/// its caller, and which code has no unwind table (JIT code).
pub struct Code<'a> {
    pub exec: Range<u64>,
    pub caller: Range<u64>,
    pub jit: &'a dyn Fn(u64) -> bool,
}

/// The native stack `native` (leaf first) with the frames `items` read
/// put in as bpf/unwind.h's walk puts them: each activation of the loop
/// replaced by its frames (kept native when it has none), the loop's
/// caller met without the loop above it taking the activation it enters,
/// the first JIT pc taking every frame left and ending the stack. The
/// native frames below the innermost Ruby frame are left out. `None`
/// when the stack and the frames disagree: an activation met with no
/// frames left, or frames left over.
pub fn splice(native: &[u64], code: &Code<'_>, items: &[Item]) -> Option<Vec<RawFrame>> {
    let mut cur = Cursor { items, at: 0 };
    let mut out: Vec<RawFrame> = Vec::with_capacity(native.len() + items.len());
    let mut ruby = false;
    let mut after_exec = false;
    let push = |out: &mut Vec<RawFrame>, ruby: &mut bool, f: RuntimeFrame| {
        if !*ruby {
            out.clear();
        }
        *ruby = true;
        out.push(RawFrame::Runtime(Box::new(f)));
    };
    for (i, &pc) in native.iter().enumerate() {
        let lookup = if i == 0 { pc } else { pc.wrapping_sub(1) };
        if code.exec.contains(&lookup) {
            if !cur.left() {
                return None;
            }
            after_exec = true;
            if !cur.take(Until::Last, |f| push(&mut out, &mut ruby, f)) {
                out.push(RawFrame::Addr(pc));
            }
        } else if (code.jit)(lookup) && cur.left() {
            // JIT code: no frame to step by; every frame left goes in.
            cur.take(Until::End, |f| push(&mut out, &mut ruby, f));
            break;
        } else {
            if !after_exec && code.caller.contains(&lookup) {
                // Entering an activation: its first frame is pushed.
                let at = cur.at;
                match cur.next() {
                    Found::Last(f) => push(&mut out, &mut ruby, f),
                    _ => cur.at = at,
                }
            }
            after_exec = false;
            out.push(RawFrame::Addr(pc));
        }
    }
    (!cur.shows_more()).then_some(out)
}

/// For a sample whose native stack and the frames read disagree
/// ([`splice`]): every frame read, over the sample's native root (the
/// frames outside its outermost activation of the loop or its caller; none
/// past a JIT pc, where BPF's walk ends). `None` when the sample ran no
/// Ruby or no frame shows anything.
pub fn over_root(native: &[u64], code: &Code<'_>, items: &[Item]) -> Option<Vec<RawFrame>> {
    let lookup = |i: usize, pc: u64| if i == 0 { pc } else { pc.wrapping_sub(1) };
    let end = native
        .iter()
        .enumerate()
        .position(|(i, &pc)| (code.jit)(lookup(i, pc)))
        .map_or(native.len(), |jit| jit + 1);
    let native = &native[..end];
    let outermost = native.iter().enumerate().rposition(|(i, &pc)| {
        let l = lookup(i, pc);
        code.exec.contains(&l) || code.caller.contains(&l) || (code.jit)(l)
    })?;
    let ruby: Vec<RawFrame> = items
        .iter()
        .filter_map(|i| match i {
            Item::Frame { frame: Some(f), .. } => Some(RawFrame::Runtime(Box::new(*f))),
            _ => None,
        })
        .collect();
    if ruby.is_empty() {
        return None;
    }
    let root = native[outermost + 1..].iter().map(|&pc| RawFrame::Addr(pc));
    Some(ruby.into_iter().chain(root).collect())
}

/// Reads the Ruby frames of one process's threads.
pub struct Threads {
    pub process: Arc<Process>,
    glibc: glibc_threads::Threads,
    /// Thread id → thread pointer, as glibc's lists said.
    pointers: HashMap<u32, u64>,
    walked: Option<Instant>,
    /// Thread id → its thread pointer and where its execution context
    /// pointer lies (the slot that checked out).
    slots: HashMap<u32, (u64, u64)>,
}

impl Threads {
    pub fn new(process: Arc<Process>, glibc: glibc_threads::Threads) -> Self {
        Threads {
            process,
            glibc,
            pointers: HashMap::new(),
            walked: None,
            slots: HashMap::new(),
        }
    }

    /// The control frames thread `tid` runs now, `None` when it runs no
    /// Ruby (or its thread cannot be found).
    pub fn stack(&mut self, tid: u32, mem: &dyn Memory) -> Option<Stack> {
        let size = self.process.layout.cfp_size;
        let tp = self.thread_pointer(tid, mem)?;
        if let Some(&(_, at)) = self.slots.get(&tid).filter(|(t, _)| *t == tp) {
            if let Some(s) = try_ec(mem, at, size).and_then(|s| bottom(s, size)) {
                return Some(s);
            }
        }
        let (at, stack) = begin(&self.process, tp, mem)?;
        self.slots.insert(tid, (tp, at));
        Some(stack)
    }

    /// Thread `tid`'s thread pointer, checked still to be its own.
    fn thread_pointer(&mut self, tid: u32, mem: &dyn Memory) -> Option<u64> {
        let valid = |tp: &u64| self.glibc.is_thread(*tp, tid, mem);
        if let Some(tp) = self.pointers.get(&tid).copied().filter(valid) {
            return Some(tp);
        }
        if self.walked.is_some_and(|at| at.elapsed() < REWALK_GAP) {
            return None;
        }
        self.walked = Some(Instant::now());
        self.pointers = self.glibc.thread_pointers(mem);
        self.slots.retain(|t, _| self.pointers.contains_key(t));
        self.pointers.get(&tid).copied()
    }
}

#[cfg(test)]
#[path = "walk_tests.rs"]
mod tests;
