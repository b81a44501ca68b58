//! The user-space Ruby walk over synthetic interpreter memory laid out as
//! bpf/ruby.h reads it (the execution context through the thread's DTV,
//! control frames and their environments), and [`splice`] against native
//! stacks: activations, the loop's caller entering one, JIT code, and the
//! stacks that disagree with the frames read.

use std::sync::Arc;

use super::*;
use crate::runtime::memory::Buffer;
use crate::runtime::ruby::{Layout, Tls};

const BASE: u64 = 0x10_0000;
const TP: u64 = BASE + 0x100;
const DTV: u64 = BASE + 0x400;
const BLOCK: u64 = BASE + 0x800;
const EC: u64 = BASE + 0x900;
const VM_STACK: u64 = BASE + 0x1000;
/// Words of the VM stack.
const STACK_WORDS: u64 = 0x200;
const ENVS: u64 = BASE + 0x3000;
const ISEQS: u64 = BASE + 0x4000;
const MES: u64 = BASE + 0x5000;
const EXEC: Range<u64> = 0x40_0000..0x40_1000;
const CALLER: Range<u64> = 0x40_2000..0x40_2100;
const MODID: u64 = 3;

fn process() -> Process {
    Process {
        layout: Arc::new(Layout::for_version("3.3.8").expect("3.3's layout")),
        version: "3.3.8".into(),
        exec: EXEC,
        exec_caller: CALLER,
        // The first candidate holds no execution context.
        tls: Tls {
            modid: MODID,
            slots: vec![0x10, 0x28],
        },
        global_symbols: None,
        object_class: None,
    }
}

/// Memory under construction.
struct Mem(Vec<u8>);

impl Mem {
    fn new() -> Mem {
        Mem(vec![0; 0x8000])
    }
    fn put(&mut self, addr: u64, v: u64) {
        let at = (addr - BASE) as usize;
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    }
    fn done(self) -> Buffer {
        Buffer {
            base: BASE,
            bytes: self.0,
        }
    }
}

/// What a synthetic control frame is.
#[derive(Clone, Copy)]
enum Kind {
    /// A method's frame (sequence `i`, at instruction `pos`).
    Method(u64, u64),
    /// A block of method `i` (its environment's parent is frame `parent`'s).
    Block(u64, usize),
    /// A C function's (method entry `i`).
    C(u64),
}

/// Each sequence's size, in words of code.
const CODE_WORDS: u64 = 8;

fn iseq(i: u64) -> u64 {
    ISEQS + i * 0x100
}
fn code(i: u64) -> u64 {
    iseq(i) + 0x80
}
fn me(i: u64) -> u64 {
    MES + i * 0x40
}
fn def(i: u64) -> u64 {
    0xdef0 + i
}

/// A thread whose control frames are `frames` (innermost first, each
/// flagged FINISH or not): its memory and the frames' addresses.
fn thread(frames: &[(Kind, bool)]) -> (Buffer, Vec<u64>) {
    let p = process();
    let size = u64::from(p.layout.cfp_size);
    let mut m = Mem::new();
    m.put(TP + 8, DTV);
    m.put(DTV + 16 * MODID, BLOCK);
    m.put(BLOCK + 0x10, 0);
    m.put(BLOCK + 0x28, EC);
    let end = VM_STACK + STACK_WORDS * 8;
    // The outermost real frame sits above the dummy at end - size.
    let n = frames.len() as u64;
    let first = end - (n + 1) * size;
    m.put(EC, VM_STACK);
    m.put(EC + 8, STACK_WORDS);
    m.put(EC + 16, first);
    let cfps: Vec<u64> = (0..n).map(|k| first + k * size).collect();
    let ep = |k: usize| ENVS + k as u64 * 0x40 + 16;
    for (k, &(kind, finish)) in frames.iter().enumerate() {
        let cfp = cfps[k];
        let finish = if finish { FLAG_FINISH } else { 0 };
        m.put(cfp + 32, ep(k));
        match kind {
            Kind::Method(i, pos) => {
                m.put(iseq(i) + ISEQ_BODY, iseq(i) + 0x40);
                m.put(iseq(i) + 0x40, CODE_WORDS << 32);
                m.put(iseq(i) + 0x40 + BODY_ENCODED, code(i));
                m.put(cfp, code(i) + 8 * (pos + 1));
                m.put(cfp + 16, iseq(i));
                m.put(ep(k) - 16, me(i));
                m.put(me(i), T_IMEMO | IMEMO_MENT << 12);
                m.put(ep(k), ENV_LOCAL | finish | 0x1111_0001);
            }
            Kind::Block(i, parent) => {
                m.put(iseq(i) + ISEQ_BODY, iseq(i) + 0x40);
                m.put(iseq(i) + 0x40, CODE_WORDS << 32);
                m.put(iseq(i) + 0x40 + BODY_ENCODED, code(i));
                m.put(cfp, code(i) + 8);
                m.put(cfp + 16, iseq(i));
                m.put(ep(k) - 16, 0);
                m.put(ep(k) - 8, ep(parent) | 1);
                m.put(ep(k), finish | 0x2222_0001);
            }
            Kind::C(i) => {
                m.put(ep(k) - 16, me(i));
                m.put(me(i), T_IMEMO | IMEMO_MENT << 12);
                m.put(me(i) + CME_DEF, def(i));
                m.put(ep(k), MAGIC_CFUNC | ENV_LOCAL | finish);
            }
        }
    }
    (m.done(), cfps)
}

fn ruby(a: u64, b: u64, cookie: u64) -> RuntimeFrame {
    RuntimeFrame {
        runtime: Runtime::Ruby,
        ids: [a, b],
        cookie,
    }
}

fn method(i: u64, pos: u64) -> RuntimeFrame {
    ruby(iseq(i), me(i) | pos << 48, code(i))
}

#[test]
fn the_execution_context_is_found_as_bpf_finds_it() {
    let p = process();
    let (mem, cfps) = thread(&[(Kind::Method(1, 0), true), (Kind::Method(2, 0), true)]);
    let (at, stack) = begin(&p, TP, &mem).expect("an execution context");
    assert_eq!(at, BLOCK + 0x28);
    assert_eq!(
        stack,
        Stack {
            cfp: cfps[0],
            last: cfps[1]
        }
    );
    // No DTV, or a thread pointer of nothing: no context.
    assert_eq!(begin(&p, TP + 0x40, &mem), None);
    assert_eq!(begin(&p, 0, &mem), None);
    // arm64's thread-pointer slots.
    let arm = Process {
        tls: Tls {
            modid: 0,
            slots: vec![BLOCK as i64 + 0x28 - TP as i64],
        },
        ..p.clone()
    };
    assert_eq!(begin(&arm, TP, &mem).map(|(a, _)| a), Some(BLOCK + 0x28));
}

#[test]
fn a_context_whose_frame_is_off_its_stack_does_not_check_out() {
    let p = process();
    let (mem, cfps) = thread(&[(Kind::Method(1, 0), true)]);
    let mut bytes = mem.bytes.clone();
    // A frame between two frames' places.
    put(&mut bytes, EC + 16, cfps[0] + 8);
    let off = Buffer {
        base: BASE,
        bytes: bytes.clone(),
    };
    assert_eq!(begin(&p, TP, &off), None);
    // A stack size no stack has.
    put(&mut bytes, EC + 16, cfps[0]);
    put(&mut bytes, EC + 8, 1 << 24);
    let huge = Buffer { base: BASE, bytes };
    assert_eq!(begin(&p, TP, &huge), None);
}

#[test]
fn frames_read_as_rb_frame_reads_them() {
    let p = process();
    // block in 3 (in C function 5, called by method 3), method 3 at
    // instruction 7, then method 4 (the outermost, FINISH).
    let (mem, _) = thread(&[
        (Kind::Block(3, 2), true),
        (Kind::C(5), false),
        (Kind::Method(3, 7), false),
        (Kind::Method(4, 0), true),
    ]);
    let (_, stack) = begin(&p, TP, &mem).expect("an execution context");
    let items = frames(&p, stack, &mem);
    let item = |frame, finish, more| Item::Frame {
        frame: Some(frame),
        finish,
        more,
    };
    assert_eq!(
        items,
        vec![
            // The block's method entry is its method's, found up its
            // environments; its pc is its first instruction.
            item(ruby(iseq(3), me(3), code(3)), true, true),
            item(ruby(0, me(5), def(5)), false, true),
            item(method(3, 7), false, true),
            item(method(4, 0), true, false),
        ]
    );
}

#[test]
fn a_sample_in_the_loop_tells_which_frame_ran() {
    let p = process();
    let (mem, cfps) = thread(&[(Kind::Method(3, 7), false), (Kind::Method(4, 0), true)]);
    let (_, now) = begin(&p, TP, &mem).expect("an execution context");
    assert_eq!(now.cfp, cfps[0]);
    // The sample ran method 4: method 3 was called since, and goes.
    assert_eq!(
        at_sample(&p, now, code(4) + 16, cfps[1], &mem),
        AtSample::From(Stack {
            cfp: cfps[1],
            ..now
        })
    );
    // It ran method 3, still running.
    assert_eq!(
        at_sample(&p, now, code(3) + 8 * 7, cfps[0], &mem),
        AtSample::From(now)
    );
    // Its frame's slot holds another method's now: another moment.
    assert_eq!(
        at_sample(&p, now, code(4) + 16, cfps[0], &mem),
        AtSample::Gone
    );
    // Past the code of the frame's sequence.
    assert_eq!(
        at_sample(&p, now, code(3) + 8 * CODE_WORDS, cfps[0], &mem),
        AtSample::Gone
    );
    // The thread returned from the frame the sample ran.
    let shallower = Stack {
        cfp: cfps[1],
        ..now
    };
    assert_eq!(
        at_sample(&p, shallower, code(3), cfps[0], &mem),
        AtSample::Gone
    );
    // Registers that hold no frame of the stack say nothing.
    for cfp in [0, cfps[0] + 8, now.last + 0x40, u64::MAX] {
        assert_eq!(
            at_sample(&p, now, code(3), cfp, &mem),
            AtSample::Unknown,
            "{cfp:#x}"
        );
    }
}

#[test]
fn a_failed_read_ends_the_frames() {
    let p = process();
    let (mem, cfps) = thread(&[(Kind::Method(1, 0), true), (Kind::Method(2, 0), true)]);
    let mut bytes = mem.bytes.clone();
    // The outer frame's environment pointer out of memory.
    put(&mut bytes, cfps[1] + 32, 0x7000_0000);
    let mem = Buffer { base: BASE, bytes };
    let (_, stack) = begin(&p, TP, &mem).expect("an execution context");
    let items = frames(&p, stack, &mem);
    assert_eq!(items.len(), 2);
    assert_eq!(items[1], Item::Error);
}

/// Writes `v` at `addr` of memory `bytes` (from BASE).
fn put(bytes: &mut [u8], addr: u64, v: u64) {
    let at = (addr - BASE) as usize;
    bytes[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn frame(f: RuntimeFrame, finish: bool, more: bool) -> Item {
    Item::Frame {
        frame: Some(f),
        finish,
        more,
    }
}

fn rt(f: RuntimeFrame) -> RawFrame {
    RawFrame::Runtime(Box::new(f))
}

const LEAF: u64 = 0x50_0000;
const MAIN: u64 = 0x50_1000;
const JIT: u64 = 0x90_0000;

fn code_of(jit: &dyn Fn(u64) -> bool) -> Code<'_> {
    Code {
        exec: EXEC,
        caller: CALLER,
        jit,
    }
}

fn no_jit(_: u64) -> bool {
    false
}

#[test]
fn each_activation_takes_its_frames_and_the_leaf_goes() {
    // Two activations: [m1] (FINISH) and [c5, m2, m3] (FINISH last).
    let items = [
        frame(method(1, 0), true, true),
        frame(ruby(0, me(5), def(5)), false, true),
        frame(method(2, 0), false, true),
        frame(method(3, 0), true, false),
    ];
    let native = [
        LEAF,
        EXEC.start + 0x10,
        LEAF + 0x10,
        EXEC.start + 0x20,
        MAIN,
    ];
    let code = code_of(&no_jit);
    let out = splice(&native, &code, &items).expect("agreeing");
    assert_eq!(
        out,
        vec![
            rt(method(1, 0)),
            // The native frames between activations stay.
            RawFrame::Addr(LEAF + 0x10),
            rt(ruby(0, me(5), def(5))),
            rt(method(2, 0)),
            rt(method(3, 0)),
            RawFrame::Addr(MAIN),
        ]
    );
    // One activation more than the frames have, or fewer: disagreeing.
    let three = [EXEC.start, EXEC.start + 1, EXEC.start + 2, MAIN];
    assert_eq!(splice(&three, &code, &items), None);
    let one = [EXEC.start, MAIN];
    assert_eq!(splice(&one, &code, &items), None);
    // ... and then every frame over the root.
    let over = over_root(&three, &code, &items).expect("frames");
    assert_eq!(over.len(), 5);
    assert_eq!(over[4], RawFrame::Addr(MAIN));
    assert_eq!(over_root(&[LEAF, MAIN], &code, &items), None);
}

#[test]
fn an_activation_without_frames_to_show_stays_native() {
    let items = [
        frame(method(1, 0), true, true),
        Item::Frame {
            frame: None,
            finish: true,
            more: true,
        },
        frame(method(3, 0), true, false),
    ];
    let native = [EXEC.start, EXEC.start + 8, EXEC.start + 16, MAIN];
    let out = splice(&native, &code_of(&no_jit), &items).expect("agreeing");
    assert_eq!(
        out,
        vec![
            rt(method(1, 0)),
            RawFrame::Addr(EXEC.start + 8),
            rt(method(3, 0)),
            RawFrame::Addr(MAIN)
        ]
    );
}

#[test]
fn the_loops_caller_entering_takes_its_first_frame() {
    let items = [
        frame(method(1, 0), true, true),
        frame(method(2, 0), true, false),
    ];
    // rb_vm_exec with no loop above it: entering m1's activation.
    let native = [LEAF, CALLER.start + 4, EXEC.start + 8, MAIN];
    let out = splice(&native, &code_of(&no_jit), &items).expect("agreeing");
    assert_eq!(
        out,
        vec![
            rt(method(1, 0)),
            RawFrame::Addr(CALLER.start + 4),
            rt(method(2, 0)),
            RawFrame::Addr(MAIN)
        ]
    );
    // Right after the loop, the caller is the loop's own: nothing taken.
    let native = [EXEC.start, CALLER.start + 4, EXEC.start + 8, MAIN];
    let out = splice(&native, &code_of(&no_jit), &items).expect("agreeing");
    assert_eq!(out[1], RawFrame::Addr(CALLER.start + 4));
}

#[test]
fn jit_code_takes_every_frame_left_and_ends_the_stack() {
    let items = [
        frame(method(1, 0), true, true),
        frame(method(2, 0), true, true),
        frame(method(3, 0), false, false),
    ];
    let jit = |pc: u64| pc >= JIT;
    // A C function called from JIT code, then what a frame-pointer step
    // past the JIT frame made of the stack.
    let native = [LEAF, JIT + 0x40, MAIN, 0x1234];
    let out = splice(&native, &code_of(&jit), &items).expect("agreeing");
    assert_eq!(
        out,
        vec![rt(method(1, 0)), rt(method(2, 0)), rt(method(3, 0))]
    );
    // Over the root: nothing past the JIT pc.
    let over = over_root(&native, &code_of(&jit), &items).expect("frames");
    assert_eq!(over.len(), 3);
}

/// Debian's Ruby 3.1 running `outer -> inner -> loop { }`: its main
/// thread found through glibc's thread list, its frames read as the
/// perf-event collector reads them, and named by the namer BPF's frames
/// go to.
#[test]
fn a_live_ruby_threads_frames_are_read_and_named() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use crate::collect::Namer;
    use crate::runtime::memory::ProcessMemory;
    use crate::runtime::ruby::detect::Detector;
    use crate::runtime::tracker::Found;

    let exe = std::path::Path::new("/usr/bin/ruby3.1");
    if !exe.exists() || cfg!(not(target_arch = "x86_64")) {
        assert!(
            std::env::var("FLARE_REQUIRE_BPF").as_deref() != Ok("1")
                || cfg!(not(target_arch = "x86_64")),
            "/usr/bin/ruby3.1 is required"
        );
        eprintln!("skipped: no /usr/bin/ruby3.1");
        return;
    }
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let child = Killed(
        Command::new(exe)
            .args(["-e", "def inner = loop { 1 + 1 }\ndef outer = inner\nouter"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("ruby3.1 runs"),
    );
    let pid = child.0.id();
    let mem = ProcessMemory { pid };
    // Past its start-up: `ruby_global_symbols`, which names C functions,
    // is found once it names `each`.
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let mut detector = Detector::new();
    let process = loop {
        let maps = crate::unwind::procs::exec_mappings(pid).expect("its mappings");
        match detector.detect(pid, &maps, &mem) {
            Found::Yes(p) => break Arc::new(p),
            _ if started.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!("{other:?}"),
        }
    };
    let maps = crate::unwind::procs::exec_mappings(pid).expect("its mappings");
    let glibc = glibc_threads::Finder::default()
        .find(pid, &maps)
        .expect("glibc's thread tables");
    let mut threads = Threads::new(process.clone(), glibc);
    // Its frames, once the script is in its loop.
    let registry = crate::runtime::ruby::Registry::default();
    if let Ok(mut r) = registry.lock() {
        r.insert(pid, process.clone());
    }
    let mut namer = crate::runtime::ruby::namer::RubyNamer::new(registry);
    let names = loop {
        let names: Vec<String> = threads
            .stack(pid, &mem)
            .map(|s| frames(&process, s, &mem))
            .unwrap_or_default()
            .iter()
            .filter_map(|i| match i {
                Item::Frame { frame: Some(f), .. } => namer.name(pid, f),
                _ => None,
            })
            .flatten()
            .map(|f| f.name.to_string())
            .collect();
        let has = |n: &str| names.iter().position(|x| x.contains(n));
        match (has("inner"), has("outer")) {
            (Some(i), Some(o)) if i < o => break names,
            _ if started.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(100));
            }
            _ => panic!("no inner under outer: {names:?}"),
        }
    };
    assert!(names.iter().any(|n| n.contains("loop")), "{names:?}");
    // Another thread id of the process is not the main thread's: none.
    assert_eq!(threads.stack(u32::MAX >> 2, &mem), None);
}
