//! The user-space Java step on a fake JVM: a code heap with its segment
//! map, code blobs laid out at JDK 17's and 25's offsets, and a thread's
//! stack, stepped as bpf/java.h steps them.

use std::sync::Arc;

use super::*;
use crate::runtime::java::namer::tests::{layout, Jdk};
use crate::runtime::java::{Heap, Layout};
use crate::runtime::memory::Buffer;
use crate::unwind::elf::Machine;

const BASE: u64 = 0x10_0000;
/// The code heap: 256 segments of 64 bytes.
const HEAP: u64 = BASE + 0x1000;
const SEGMENTS: u64 = 256;
const SEGMAP: u64 = BASE;
const NAMES: u64 = BASE + 0x5000;
const METHOD: u64 = BASE + 0x5800;
const CONST_METHOD: u64 = BASE + 0x5900;
const STACK: u64 = 0x7000_0000;

struct Jvm {
    l: Layout,
    mem: Buffer,
    stack: Vec<u64>,
}

impl Jvm {
    fn new(jdk: Jdk) -> Self {
        let mut j = Jvm {
            l: layout(jdk),
            mem: Buffer {
                base: BASE,
                bytes: vec![0; 0x6000],
            },
            stack: vec![0; 64],
        };
        // No block anywhere yet.
        j.put(SEGMAP, &[0xff; SEGMENTS as usize]);
        for (i, name) in ["nmethod", "Interpreter", "StubRoutines (1)"]
            .iter()
            .enumerate()
        {
            let mut b = name.as_bytes().to_vec();
            b.push(0);
            j.put(NAMES + i as u64 * 32, &b);
        }
        j
    }

    fn put(&mut self, at: u64, bytes: &[u8]) {
        let at = (at - BASE) as usize;
        self.mem.bytes[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn put_int(&mut self, at: u64, off: u16, v: i32) {
        self.put(at + u64::from(off), &v.to_ne_bytes());
    }

    fn put_word(&mut self, at: u64, off: u16, v: u64) {
        self.put(at + u64::from(off), &v.to_ne_bytes());
    }

    /// A blob named `name` (0 nmethod, 1 interpreter, 2 stub) over
    /// segments `first..first + n`, code from 0x100 into it; its start.
    fn blob(&mut self, name: u64, first: u64, n: u64, frame_words: i32, complete: i32) -> u64 {
        let map: Vec<u8> = (0..n).map(|i| i.min(254) as u8).collect();
        self.put(SEGMAP + first, &map);
        let l = self.l.clone();
        let start = HEAP + first * 64 + u64::from(l.heap_block);
        self.put_word(start, l.blob_name, NAMES + name * 32);
        self.put_int(
            start,
            l.blob_size,
            (n * 64) as i32 - i32::from(l.heap_block),
        );
        if l.blob_offsets {
            self.put_int(start, l.blob_code_begin, 0x100);
        } else {
            self.put_word(start, l.blob_code_begin, start + 0x100);
        }
        self.put_int(start, l.blob_frame_size, frame_words);
        // JDK 25's is an int16_t followed by other members.
        self.put(
            start + u64::from(l.blob_frame_complete),
            &(complete as i16).to_ne_bytes(),
        );
        self.put_int(start, l.nm_compile_id, 77);
        start
    }

    fn process(&self) -> Process {
        Process {
            layout: Arc::new(self.l.clone()),
            heaps: vec![Heap {
                range: HEAP..HEAP + SEGMENTS * 64,
                segmap: SEGMAP,
                log2_segment: 6,
            }],
            cache: HEAP..HEAP + SEGMENTS * 64,
        }
    }

    /// An x86-64 step (`bcp` the leaf's r13).
    fn step(&self, regs: Regs, return_address: bool, bcp: u64) -> Option<Stepped> {
        let leaf = Leaf {
            bcp,
            ..Leaf::default()
        };
        self.step_on(Machine::X86_64, regs, return_address, leaf)
    }

    fn step_on(
        &self,
        machine: Machine,
        regs: Regs,
        return_address: bool,
        leaf: Leaf,
    ) -> Option<Stepped> {
        let stack = |a: u64| {
            let i = usize::try_from(a.checked_sub(STACK)? / 8).ok()?;
            (a % 8 == 0).then(|| self.stack.get(i).copied())?
        };
        Walker::for_machine(machine).step(
            &self.process(),
            &self.mem,
            &stack,
            regs,
            return_address,
            leaf,
        )
    }

    /// arm64 instructions at `at`.
    fn put_code(&mut self, at: u64, code: &[u32]) {
        let bytes: Vec<u8> = code.iter().flat_map(|i| i.to_le_bytes()).collect();
        self.put(at, &bytes);
    }
}

fn decoded(s: &Stepped) -> FrameId {
    FrameId::decode(s.ids).expect("a Java frame")
}

#[test]
fn a_compiled_frame_steps_by_its_frame_size_to_a_return_address_in_the_cache() {
    for jdk in [Jdk::J8, Jdk::J17, Jdk::J25] {
        let mut j = Jvm::new(jdk);
        // An nmethod of 8 segments (the pc in its sixth), 4-word frames.
        let nm = j.blob(0, 10, 8, 4, 0x20);
        let interp = j.blob(1, 20, 8, 0, 0);
        let pc = nm + 0x100 + 0x60;
        // Its frame: 4 words from sp; return address and saved rbp on top.
        j.stack[3] = interp + 0x140;
        j.stack[2] = STACK + 0x100;
        let regs = Regs {
            pc,
            sp: STACK,
            bp: 0x1234,
        };
        let s = j.step(regs, true, 0).expect("stepped");
        let f = decoded(&s);
        assert_eq!(
            (f.kind, f.pointer, f.offset, f.return_address),
            (Kind::Compiled, nm, 0x60, true),
            "{jdk:?}"
        );
        assert_eq!(s.cookie, 77);
        assert_eq!(
            s.caller,
            Regs {
                pc: interp + 0x140,
                sp: STACK + 32,
                bp: STACK + 0x100
            }
        );
        // A return address two words above the frame (JIT code pushed
        // more than its frame size says) is found; one past the slots
        // searched is not.
        j.stack[3] = 0;
        j.stack[5] = interp + 0x140;
        let s = j.step(regs, true, 0).expect("stepped");
        assert_eq!(s.caller.sp, STACK + 48);
        j.stack[5] = 0;
        j.stack[9] = interp + 0x140;
        assert_eq!(j.step(regs, true, 0), None);
        // A leaf in its prologue: the frame is not built, the return
        // address is at sp.
        j.stack[0] = interp + 0x150;
        let s = j
            .step(
                Regs {
                    pc: nm + 0x108,
                    ..regs
                },
                false,
                0,
            )
            .expect("prologue");
        assert_eq!(
            (s.caller.pc, s.caller.sp, s.caller.bp),
            (interp + 0x150, STACK + 8, 0x1234)
        );
    }
}

#[test]
fn an_interpreted_frame_gives_its_method_and_bytecode_index() {
    for jdk in [Jdk::J8, Jdk::J17, Jdk::J25] {
        let mut j = Jvm::new(jdk);
        let interp = j.blob(1, 0, 8, 0, 0);
        let l = j.l.clone();
        j.put_word(METHOD, l.method_const, CONST_METHOD);
        j.put(
            CONST_METHOD + u64::from(l.const_code_size),
            &100u16.to_ne_bytes(),
        );
        let code = CONST_METHOD + u64::from(l.const_size);
        // A frame with its pointer 16 words up the stack.
        let bp = STACK + 16 * 8;
        let slot = |i: i8| (16 + i64::from(i)) as usize;
        j.stack[slot(l.interp_method)] = METHOD;
        j.stack[slot(l.interp_sender_sp)] = STACK + 40 * 8;
        j.stack[slot(l.interp_bcp)] = code + 9;
        j.stack[slot(0)] = STACK + 38 * 8;
        j.stack[slot(1)] = interp + 0x180;
        let regs = Regs {
            pc: interp + 0x120,
            sp: STACK,
            bp,
        };
        // A caller: the bytecode pointer saved in the frame.
        let s = j.step(regs, true, code + 4).expect("stepped");
        let f = decoded(&s);
        assert_eq!(
            (f.kind, f.pointer, f.offset),
            (Kind::Interpreted, METHOD, 9),
            "{jdk:?}"
        );
        assert_eq!(s.cookie, CONST_METHOD);
        assert_eq!(
            s.caller,
            Regs {
                pc: interp + 0x180,
                sp: STACK + 40 * 8,
                bp: STACK + 38 * 8
            }
        );
        // The leaf: r13's.
        let s = j.step(regs, false, code + 4).expect("stepped");
        assert_eq!(decoded(&s).offset, 4);
        // A bytecode pointer outside the method's code: no index.
        let s = j.step(regs, false, code + 100).expect("stepped");
        assert_eq!(decoded(&s).offset, NO_BCI);
    }
}

#[test]
fn stubs_step_by_frame_size_or_rbp_and_pcs_in_no_blob_are_native() {
    let mut j = Jvm::new(Jdk::J17);
    let stub = j.blob(2, 30, 8, 0, -1);
    // The call stub keeps rbp as a frame pointer.
    j.stack[8] = STACK + 0x200;
    j.stack[9] = 0x40_1234;
    let regs = Regs {
        pc: stub + 0x110,
        sp: STACK,
        bp: STACK + 64,
    };
    let s = j.step(regs, true, 0).expect("stepped");
    let f = decoded(&s);
    assert_eq!((f.kind, f.pointer, f.offset), (Kind::Stub, stub, 0x10));
    assert_eq!(s.cookie, u64::from(u32::from_le_bytes(*b"Stub")));
    assert_eq!(
        s.caller,
        Regs {
            pc: 0x40_1234,
            sp: STACK + 80,
            bp: STACK + 0x200
        }
    );
    // Segments no block holds, a pc outside the cache, a free segment.
    let outside = [HEAP + 50 * 64, HEAP - 8, HEAP + SEGMENTS * 64 + 8];
    for pc in outside {
        assert_eq!(j.step(Regs { pc, ..regs }, true, 0), None, "{pc:#x}");
    }
    // A map that points before the heap's start is not followed.
    j.put(SEGMAP + 60, &[61]);
    assert_eq!(
        j.step(
            Regs {
                pc: HEAP + 60 * 64 + 8,
                ..regs
            },
            true,
            0
        ),
        None
    );
}

#[test]
fn blobs_are_kept_and_one_replacing_another_is_read_anew() {
    let mut j = Jvm::new(Jdk::J17);
    let nm = j.blob(0, 10, 8, 2, -1);
    let p = j.process();
    let mut w = Walker::new();
    let stack = |_: u64| Some(HEAP + 100 * 64);
    let regs = Regs {
        pc: nm + 0x110,
        sp: STACK,
        bp: STACK + 64,
    };
    let none = Leaf::default();
    let first = w
        .step(&p, &j.mem, &stack, regs, true, none)
        .expect("stepped");
    assert_eq!(decoded(&first).kind, Kind::Compiled);
    // Freed and taken by a stub starting in the same segment: the walker
    // still has the nmethod (for up to BLOB_TTL)...
    j.blob(2, 10, 8, 0, -1);
    let again = w
        .step(&p, &j.mem, &stack, regs, true, none)
        .expect("stepped");
    assert_eq!(again, first);
    // ... and a new walker reads the stub.
    let fresh = Walker::new()
        .step(&p, &j.mem, &stack, regs, true, none)
        .expect("stepped");
    assert_eq!(decoded(&fresh).kind, Kind::Stub);
}

#[test]
fn an_arm64_leaf_takes_its_return_address_from_x30_outside_its_built_frame() {
    const NOP: u32 = 0xd503_201f;
    const BODY: u32 = 0xf940_07e0;
    let mut j = Jvm::new(Jdk::J17);
    // An nmethod with 4-word frames, complete 0x10 into its code: nop,
    // sub sp, sp, #32, stp x29, x30, [sp, #16]; its epilogue at 0x40:
    // ldp x29, x30, [sp, #16], add sp, sp, #32, ret.
    let nm = j.blob(0, 10, 8, 4, 0x10);
    let interp = j.blob(1, 20, 8, 0, 0);
    let code = nm + 0x100;
    j.put_code(code, &[NOP, 0xd100_83ff, 0xa901_7bfd, BODY]);
    j.put_code(code + 0x40, &[0xa941_7bfd, 0x9100_83ff, 0xd65f_03c0]);
    // The built frame's record, with a pointer-authentication code on
    // the return address.
    j.stack[3] = (interp + 0x140) | 0x002a_0000_0000_0000;
    j.stack[2] = STACK + 0x100;
    let lr = interp + 0x160;
    let leaf = Leaf {
        lr,
        ..Leaf::default()
    };
    let at = |pc: u64| Regs {
        pc,
        sp: STACK,
        bp: 0x1234,
    };
    let caller = |pc: u64| {
        let s = j
            .step_on(Machine::Aarch64, at(pc), false, leaf)
            .expect("stepped");
        assert_eq!(decoded(&s).kind, Kind::Compiled);
        (s.caller.pc, s.caller.sp, s.caller.bp)
    };
    // Before the sub: no frame; at the stp: its space, not its record.
    assert_eq!(caller(code), (lr, STACK, 0x1234));
    assert_eq!(caller(code + 4), (lr, STACK, 0x1234));
    assert_eq!(caller(code + 8), (lr, STACK + 32, 0x1234));
    // Built: the record, the code stripped.
    let built = (interp + 0x140, STACK + 32, STACK + 0x100);
    assert_eq!(caller(code + 0x10), built);
    assert_eq!(caller(code + 0x40), built);
    // At the add: the space; at the ret: nothing.
    assert_eq!(caller(code + 0x44), (lr, STACK + 32, 0x1234));
    assert_eq!(caller(code + 0x48), (lr, STACK, 0x1234));
    // x30 is the leaf's only: a caller's frame is read from the stack.
    let s = j
        .step_on(Machine::Aarch64, at(code + 0x48), true, leaf)
        .expect("stepped");
    assert_eq!((s.caller.pc, s.caller.sp), (interp + 0x140, STACK + 32));
    // Without x30, a leaf outside its frame has no caller.
    let none = Leaf::default();
    assert_eq!(j.step_on(Machine::Aarch64, at(code), false, none), None);
    // The same code on x86-64 would be taken by its bytes' x86 meaning:
    // in the prologue, the return address at sp.
    j.stack[0] = interp + 0x150;
    let s = j.step(at(code + 4), false, 0).expect("stepped");
    assert_eq!((s.caller.pc, s.caller.sp), (interp + 0x150, STACK + 8));
}

#[test]
fn an_arm64_stub_leaf_before_its_frame_returns_to_x30() {
    let mut j = Jvm::new(Jdk::J17);
    let stub = j.blob(2, 30, 8, 4, 0x20);
    let leaf = Leaf {
        lr: 0x40_5678,
        ..Leaf::default()
    };
    let regs = Regs {
        pc: stub + 0x108,
        sp: STACK,
        bp: STACK + 64,
    };
    let s = j
        .step_on(Machine::Aarch64, regs, false, leaf)
        .expect("stepped");
    assert_eq!(
        s.caller,
        Regs {
            pc: 0x40_5678,
            sp: STACK,
            bp: STACK + 64
        }
    );
}

#[test]
fn an_arm64_frameless_stub_leaf_returns_to_x30_and_one_with_a_record_by_it() {
    let mut j = Jvm::new(Jdk::J17);
    // A stub without a frame size (as StubRoutines' copy routines).
    let stub = j.blob(2, 30, 8, 0, -1);
    let lr = 0x40_5678;
    let leaf = Leaf {
        lr,
        ..Leaf::default()
    };
    // x29 is the caller's: its record holds the caller's return address.
    j.stack[8] = STACK + 0x200;
    j.stack[9] = 0x40_9999;
    let regs = Regs {
        pc: stub + 0x110,
        sp: STACK,
        bp: STACK + 64,
    };
    let s = j
        .step_on(Machine::Aarch64, regs, false, leaf)
        .expect("stepped");
    assert_eq!(
        (s.caller.pc, s.caller.sp, s.caller.bp),
        (lr, STACK, STACK + 64)
    );
    // The stub saved its record (enter()): x30 is in it, and x29 leads on.
    j.stack[9] = lr;
    let s = j
        .step_on(Machine::Aarch64, regs, false, leaf)
        .expect("stepped");
    assert_eq!(
        (s.caller.pc, s.caller.sp, s.caller.bp),
        (lr, STACK + 80, STACK + 0x200)
    );
}
