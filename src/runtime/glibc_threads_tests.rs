//! glibc's thread list: descriptors parsed, lists walked over synthetic
//! memory (cycles, cut links), and the live test process's own threads
//! found with their thread pointers.

use super::*;
use crate::runtime::memory::{Buffer, ProcessMemory};

fn desc(bits: u32, count: u32, offset: u32) -> Vec<u8> {
    [bits, count, offset]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .collect()
}

/// glibc 2.36's x86-64 tables, as `objdump -s` shows them.
fn descs(name: &str) -> Option<Vec<u8>> {
    Some(match name {
        "rtld_global__dl_stack_used" => desc(128, 1, 0x10a8),
        "rtld_global__dl_stack_user" => desc(128, 1, 0x10b8),
        "list_t_next" => desc(64, 1, 0),
        "pthread_list" => desc(128, 1, 0x2c0),
        "pthread_tid" => desc(32, 1, 0x2d0),
        "sizeof_pthread" => 0x940u32.to_ne_bytes().to_vec(),
        _ => return None,
    })
}

#[test]
fn descriptors_are_size_count_offset() {
    assert_eq!(
        parse_desc(&desc(32, 1, 0x2d0)),
        Some(Desc {
            bits: 32,
            count: 1,
            offset: 0x2d0
        })
    );
    assert_eq!(parse_desc(&desc(32, 1, 0x2d0)[..11]), None);
    let l = Layout::from_descs(&descs).expect("glibc 2.36's tables");
    assert_eq!(
        l,
        Layout {
            stack_used: 0x10a8,
            stack_user: 0x10b8,
            next: 0,
            list: 0x2c0,
            tid: 0x2d0,
            size: 0x940,
        }
    );
}

#[test]
fn a_missing_or_odd_descriptor_is_said() {
    let without = |name: &str| descs(name).filter(|_| name != "pthread_tid");
    let err = Layout::from_descs(&without).unwrap_err();
    assert!(err.contains("_thread_db_pthread_tid"), "{err}");
    // A tid of 64 bits is not the field flare reads.
    let wide = |name: &str| match name {
        "pthread_tid" => Some(desc(64, 1, 0x2d0)),
        _ => descs(name),
    };
    let err = Layout::from_descs(&wide).unwrap_err();
    assert!(err.contains("64 bits"), "{err}");
}

const BASE: u64 = 0x10_0000;

/// Memory of `words` (address, value) over 64 KiB from BASE.
fn memory(words: &[(u64, u64)]) -> Buffer {
    let mut bytes = vec![0u8; 0x10000];
    for &(at, v) in words {
        let i = (at - BASE) as usize;
        bytes[i..i + 8].copy_from_slice(&v.to_ne_bytes());
    }
    Buffer { base: BASE, bytes }
}

#[test]
fn a_list_is_walked_once_around() {
    let (head, a, b, c) = (BASE, BASE + 0x100, BASE + 0x200, BASE + 0x300);
    // head -> a -> b -> c -> head, `next` at 8.
    let mem = memory(&[(head + 8, a), (a + 8, b), (b + 8, c), (c + 8, head)]);
    assert_eq!(walk_list(&mem, head, 8, 100), vec![a, b, c]);
    assert_eq!(walk_list(&mem, head, 8, 2), vec![a, b]);
    // A cycle that misses the head (c -> a) ends at the repeat.
    let mem = memory(&[(head + 8, a), (a + 8, b), (b + 8, c), (c + 8, a)]);
    assert_eq!(walk_list(&mem, head, 8, 100), vec![a, b, c]);
    // A link out of memory, or a null one, ends it.
    let mem = memory(&[(head + 8, a), (a + 8, 0x7000_0000)]);
    assert_eq!(walk_list(&mem, head, 8, 100), vec![a, 0x7000_0000]);
    let mem = memory(&[(head + 8, a), (a + 8, 0)]);
    assert_eq!(walk_list(&mem, head, 8, 100), vec![a]);
    // An empty list points at itself.
    let mem = memory(&[(head + 8, head)]);
    assert!(walk_list(&mem, head, 8, 100).is_empty());
}

#[test]
fn threads_are_found_by_their_ids_in_both_lists() {
    let layout = Layout {
        stack_used: 0x10,
        stack_user: 0x20,
        next: 0,
        list: 0x40,
        tid: 0x50,
        size: 0x100,
    };
    let rtld = BASE;
    let (pd1, pd2, pd3) = (BASE + 0x1000, BASE + 0x2000, BASE + 0x3000);
    let mut words = vec![
        // stack_used: pd1, pd2 (pd2 exited: tid 0).
        (rtld + 0x10, pd1 + 0x40),
        (pd1 + 0x40, pd2 + 0x40),
        (pd2 + 0x40, rtld + 0x10),
        // stack_user: pd3, the main thread.
        (rtld + 0x20, pd3 + 0x40),
        (pd3 + 0x40, rtld + 0x20),
    ];
    words.push((pd1 + 0x50, 101));
    words.push((pd3 + 0x50, 100));
    let mem = memory(&words);
    for machine in [Machine::X86_64, Machine::Aarch64] {
        let t = Threads {
            layout,
            rtld_global: rtld,
            machine,
        };
        let tps = t.thread_pointers(&mem);
        let tp = |pd: u64| match machine {
            Machine::X86_64 => pd,
            Machine::Aarch64 => pd + 0x100,
        };
        assert_eq!(tps, HashMap::from([(101, tp(pd1)), (100, tp(pd3))]));
        assert!(t.is_thread(tp(pd1), 101, &mem));
        assert!(!t.is_thread(tp(pd1), 100, &mem));
    }
}

/// The test process's own threads, as glibc lists them: each thread's id
/// has its thread pointer, which is the one the thread reads itself.
#[test]
fn the_live_process_threads_have_their_own_thread_pointers() {
    if !cfg!(target_env = "gnu") {
        return;
    }
    let pid = std::process::id();
    let maps = crate::unwind::procs::exec_mappings(pid).expect("own mappings");
    let threads = match Finder::default().find(pid, &maps) {
        Ok(t) => t,
        Err(why) => panic!("glibc's tables: {why}"),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        tx.send((tid, thread_pointer())).expect("sending");
        let _ = done_rx.recv();
    });
    let (tid, tp) = rx.recv().expect("the worker's thread pointer");
    let mem = ProcessMemory { pid };
    let tps = threads.thread_pointers(&mem);
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() } as u32;
    assert_eq!(tps.get(&tid), Some(&tp), "{tps:x?}");
    assert_eq!(tps.get(&me), Some(&thread_pointer()), "{tps:x?}");
    assert!(threads.is_thread(tp, tid, &mem));
    let _ = done_tx.send(());
    worker.join().expect("the worker");
}

/// The calling thread's thread pointer.
fn thread_pointer() -> u64 {
    let tp: u64;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads fs:0, which glibc keeps pointing at the thread's own
    // control block (the x86-64 TLS ABI).
    unsafe {
        std::arch::asm!("mov {}, fs:0", out(reg) tp)
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: reads the thread pointer register, which has no side effect.
    unsafe {
        std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp)
    };
    tp
}
