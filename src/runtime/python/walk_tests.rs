//! The user-space walk over synthetic interpreter memory laid out with
//! each frame model's real offsets (3.9: frame objects; 3.11: entry
//! frames; 3.12: shim frames; 3.13: no `_PyCFrame`), the thread found by
//! its kernel thread id, and [`splice`] against native stacks.

use std::ops::Range;
use std::sync::Arc;

use super::{eval_calls, over_root, splice, EvalCall, Threads};
use crate::collect::{RawFrame, Runtime, RuntimeFrame};
use crate::runtime::memory::Buffer;
use crate::runtime::python::layout::{for_version, Layout};
use crate::runtime::python::{cookie, FrameModel, Process};

const BASE: u64 = 0x10_0000;
const RUNTIME: u64 = BASE;
const INTERP: u64 = BASE + 0x4000;
const TSTATE: u64 = BASE + 0x8000;
const CFRAME: u64 = BASE + 0x9000;
const PTHREAD: u64 = BASE + 0xa000;
const FRAMES: u64 = BASE + 0xc000;
const CODES: u64 = BASE + 0x10000;
const CODE_TYPE: u64 = 0xc0de;
const PID: u32 = 4242;

/// Memory under construction.
struct Mem {
    layout: Layout,
    bytes: Vec<u8>,
}

impl Mem {
    fn new(minor: u8) -> Mem {
        Mem {
            layout: for_version(minor).expect("a known version"),
            bytes: vec![0; 0x14000],
        }
    }

    fn put(&mut self, addr: u64, v: &[u8]) {
        let at = (addr - BASE) as usize;
        self.bytes[at..at + v.len()].copy_from_slice(v);
    }

    fn u64(&mut self, addr: u64, off: u16, v: u64) {
        self.put(addr + u64::from(off), &v.to_ne_bytes());
    }

    fn u32(&mut self, addr: u64, off: u16, v: u32) {
        self.put(addr + u64::from(off), &v.to_ne_bytes());
    }

    /// Code object `i` (first line 10 * (i + 1)).
    fn code(&mut self, i: u64) -> u64 {
        let code = CODES + i * 0x200;
        let l = self.layout.clone();
        self.u64(code, 8, CODE_TYPE);
        self.u32(code, l.code_argcount, 1);
        self.u32(code, l.code_flags, 3);
        self.u32(code, l.code_firstlineno, 10 * (i as u32 + 1));
        code
    }

    /// The thread state (one thread, the main one, pthread at PTHREAD
    /// holding its tid at `tid_at`) whose current frame is `current`.
    fn thread(&mut self, current: u64, tid_at: u16) {
        let l = self.layout.clone();
        self.u64(RUNTIME, l.runtime_interpreters_head, INTERP);
        self.u64(INTERP, l.interp_threads_head, TSTATE);
        self.u64(TSTATE, l.tstate_thread_id, PTHREAD);
        self.u32(PTHREAD, tid_at, PID);
        match l.cframe_current {
            Some(off) => {
                self.u64(TSTATE, l.tstate_frame, CFRAME);
                self.u64(CFRAME, off, current);
            }
            None => self.u64(TSTATE, l.tstate_frame, current),
        }
    }

    /// Frame `i` running code `code` at instruction `instr`, called by
    /// `previous`, with entry mark `mark`.
    fn frame(&mut self, i: u64, code: u64, instr: u64, previous: u64, mark: u8) -> u64 {
        let f = FRAMES + i * 0x100;
        let l = self.layout.clone();
        self.u64(f, l.frame_previous, previous);
        self.u64(f, l.frame_code, code);
        match l.model {
            FrameModel::Object => self.u32(f, l.frame_instr, instr as u32),
            _ => self.u64(f, l.frame_instr, code + instr),
        }
        if l.model != FrameModel::Object {
            self.put(f + u64::from(l.frame_entry), &[mark]);
        }
        f
    }

    fn process(&self) -> Process {
        Process {
            layout: Arc::new(self.layout.clone()),
            runtime: RUNTIME,
            code_type: CODE_TYPE,
            eval: [0x1000..0x2000, 0x3000..0x3100],
            tstate_slot: 0,
        }
    }

    fn buffer(&self) -> Buffer {
        Buffer {
            base: BASE,
            bytes: self.bytes.clone(),
        }
    }
}

fn py(code: u64, instr: u64, firstline: u32) -> RuntimeFrame {
    RuntimeFrame {
        runtime: Runtime::Python,
        ids: [code, instr],
        cookie: cookie(1, 3, firstline),
    }
}

#[test]
fn frame_objects_are_an_eval_call_each() {
    let mut m = Mem::new(9);
    let (c0, c1, c2) = (m.code(0), m.code(1), m.code(2));
    let f2 = m.frame(2, c2, 4, 0, 0);
    let f1 = m.frame(1, c1, 6, f2, 0);
    let f0 = m.frame(0, c0, 8, f1, 0);
    m.thread(f0, 0x2d0);
    let calls = eval_calls(&m.process(), TSTATE, &m.buffer()).expect("frames");
    assert_eq!(
        calls,
        vec![
            vec![py(c0, 8, 10)],
            vec![py(c1, 6, 20)],
            vec![py(c2, 4, 30)]
        ]
    );
}

#[test]
fn entry_frames_end_each_eval_call() {
    // 3.11: f0 f1 | f2 f3, the entry frames f1 and f3.
    let mut m = Mem::new(11);
    let c: Vec<u64> = (0..4).map(|i| m.code(i)).collect();
    let f3 = m.frame(3, c[3], 2, 0, 1);
    let f2 = m.frame(2, c[2], 4, f3, 0);
    let f1 = m.frame(1, c[1], 6, f2, 1);
    let f0 = m.frame(0, c[0], 8, f1, 0);
    m.thread(f0, 0x2d0);
    let calls = eval_calls(&m.process(), TSTATE, &m.buffer()).expect("frames");
    assert_eq!(
        calls,
        vec![
            vec![py(c[0], 8, 10), py(c[1], 6, 20)],
            vec![py(c[2], 4, 30), py(c[3], 2, 40)]
        ]
    );
}

#[test]
fn shim_frames_start_each_eval_call_and_are_left_out() {
    for minor in [12, 13] {
        let mut m = Mem::new(minor);
        let shim = m.layout.owner_cstack;
        let c: Vec<u64> = (0..3).map(|i| m.code(i)).collect();
        let s1 = m.frame(5, c[0], 0, 0, shim);
        let f2 = m.frame(2, c[2], 4, s1, 0);
        let s0 = m.frame(4, c[0], 0, f2, shim);
        let f1 = m.frame(1, c[1], 6, s0, 0);
        // f0's code is no code object: left out, its call goes on.
        let f0 = m.frame(0, CODES + 0x1000, 8, f1, 0);
        m.thread(f0, 0x2d0);
        let calls = eval_calls(&m.process(), TSTATE, &m.buffer()).expect("frames");
        assert_eq!(
            calls,
            vec![vec![py(c[1], 6, 20)], vec![py(c[2], 4, 30)]],
            "3.{minor}"
        );
    }
}

#[test]
fn a_chain_that_ends_outside_an_eval_call_s_start_is_no_stack() {
    // 3.12+: the outermost frame is an eval call's shim; 3.11: it is
    // marked as an eval call's entry. A chain that ends before (a
    // generator's frame unlinked as it yielded, read mid-way) is torn.
    for minor in [11, 12, 13] {
        let mut m = Mem::new(minor);
        let c0 = m.code(0);
        let f0 = m.frame(0, c0, 8, 0, 0);
        m.thread(f0, 0x2d0);
        assert_eq!(
            eval_calls(&m.process(), TSTATE, &m.buffer()),
            None,
            "3.{minor}"
        );
    }
    // A chain that does not end within the frames a stack holds.
    let mut m = Mem::new(12);
    let c0 = m.code(0);
    let f0 = m.frame(0, c0, 8, FRAMES, 0);
    m.thread(f0, 0x2d0);
    assert_eq!(
        eval_calls(&m.process(), TSTATE, &m.buffer()),
        None,
        "a loop"
    );
}

#[test]
fn threads_are_found_by_their_kernel_thread_id() {
    // x86-64 glibc's, a later glibc's, arm64 glibc's.
    for tid_at in [0x2d0u16, 0x2e8, 0xd0] {
        let mut m = Mem::new(12);
        let c0 = m.code(0);
        let shim = m.layout.owner_cstack;
        let s0 = m.frame(1, c0, 0, 0, shim);
        let f0 = m.frame(0, c0, 8, s0, 0);
        m.thread(f0, tid_at);
        let mem = m.buffer();
        let mut t = Threads::new(Arc::new(m.process()), PID, &[PID, PID + 1], &mem)
            .expect("the tid offset learnt");
        assert_eq!(
            t.eval_calls(PID, &mem),
            Some(vec![vec![py(c0, 8, 10)]]),
            "tid at {tid_at:#x}"
        );
        assert_eq!(t.eval_calls(PID + 1, &mem), None, "a thread without Python");
    }
    // No offset holds the process id: not told apart.
    let mut m = Mem::new(12);
    m.thread(0, 0x2d0);
    m.u32(PTHREAD, 0x2d0, 7);
    assert!(Threads::new(Arc::new(m.process()), PID, &[PID], &m.buffer()).is_none());
}

const EVAL: [Range<u64>; 2] = [0x1000..0x2000, 0x3000..0x3100];

fn frames(f: &[RawFrame]) -> Vec<String> {
    f.iter()
        .map(|f| match f {
            RawFrame::Addr(a) => format!("{a:#x}"),
            RawFrame::Runtime(r) => format!("py{:#x}", r.ids[0]),
            RawFrame::Label(l) => l.to_string(),
        })
        .collect()
}

#[test]
fn splice_puts_each_eval_call_s_frames_in_place() {
    let calls: Vec<EvalCall> = vec![
        vec![py(0xa, 0, 1), py(0xb, 0, 1)],
        vec![],
        vec![py(0xc, 0, 1)],
    ];
    // leaf 0x9000 (a C function), eval, 0x9100, eval (.cold), 0x9200, eval, root.
    let native = [0x9000, 0x1010, 0x9100, 0x3010, 0x9200, 0x1020, 0x9300];
    let kept = splice(&native, &EVAL, &calls, true).expect("agree");
    assert_eq!(
        frames(&kept),
        ["0x9000", "py0xa", "py0xb", "0x9100", "0x3010", "0x9200", "py0xc", "0x9300"]
    );
    // Read after the sample: no native frame under the innermost Python.
    let cut = splice(&native, &EVAL, &calls, false).expect("agree");
    assert_eq!(
        frames(&cut),
        ["py0xa", "py0xb", "0x9100", "0x3010", "0x9200", "py0xc", "0x9300"]
    );
    // The thread moved to another eval call: no splice.
    assert!(splice(&native, &EVAL, &calls[..2], false).is_none());
    assert!(splice(&native[..5], &EVAL, &calls, false).is_none());
}

#[test]
fn over_root_puts_every_call_s_frames_on_the_native_root() {
    let calls: Vec<EvalCall> = vec![
        vec![py(0xa, 0, 1), py(0xb, 0, 1)],
        vec![],
        vec![py(0xc, 0, 1)],
    ];
    // Two eval frames where the read found three calls: the native
    // frames between them are left out, the root outside the outermost
    // eval frame kept.
    let native = [0x9000, 0x1010, 0x9100, 0x1020, 0x9300, 0x9400];
    assert!(splice(&native, &EVAL, &calls, false).is_none());
    let over = over_root(&native, &EVAL, &calls).expect("frames");
    assert_eq!(
        frames(&over),
        ["py0xa", "py0xb", "py0xc", "0x9300", "0x9400"]
    );
    // No eval loop in the sample, or no frames read: nothing.
    assert!(over_root(&[0x9000, 0x9300], &EVAL, &calls).is_none());
    assert!(over_root(&native, &EVAL, &[vec![], vec![]]).is_none());
}
