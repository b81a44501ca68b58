//! The Rust twin of nofp.c, built with rustc -O (no frame pointers, as a
//! release build): the main thread spends SHARE percent of its CPU time
//! in func_a and the rest in func_b, each running the leaf spin(). A full
//! stack is _start;__libc_start_main...;main;...;nofp::run;func_X;spin.
//!
//! usage: nofp SECONDS [SHARE_A]; protocol as nofp.c ("ready", a line,
//! work, "share func_a S", "share func_b S", "tcpu TID S", "cpu S", wait
//! for stdin to close).

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(id: i32, ts: *mut Timespec) -> i32;
    fn gettid() -> i32;
}

fn thread_cpu() -> f64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: ts is a valid timespec; 3 is CLOCK_THREAD_CPUTIME_ID.
    unsafe { clock_gettime(3, &mut ts) };
    ts.sec as f64 + ts.nsec as f64 / 1e9
}

#[inline(never)]
fn spin(n: u64) -> u64 {
    let mut s = 0u64;
    for i in 0..n {
        s = s.wrapping_mul(31).wrapping_add(i ^ (i >> 3));
    }
    s
}

#[inline(never)]
fn func_a(cpu: f64, sink: &mut u64) -> f64 {
    let begin = thread_cpu();
    loop {
        *sink = sink.wrapping_add(spin(2_000_000));
        let now = thread_cpu();
        if now >= begin + cpu {
            return now - begin;
        }
    }
}

#[inline(never)]
fn func_b(cpu: f64, sink: &mut u64) -> f64 {
    let pad = std::hint::black_box([1u8; 512]);
    let begin = thread_cpu();
    loop {
        *sink = sink.wrapping_add(spin(2_000_000) + u64::from(pad[7]));
        let now = thread_cpu();
        if now >= begin + cpu {
            return now - begin;
        }
    }
}

#[inline(never)]
fn run(seconds: f64, share_a: f64) -> (u64, f64, f64) {
    let (mut sink, mut a, mut b) = (0, 0.0, 0.0);
    let stop = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < stop {
        a += func_a(share_a / 1000.0, &mut sink);
        b += func_b((100.0 - share_a) / 1000.0, &mut sink);
    }
    (sink, a, b)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let share_a: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(25.0);
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { gettid() };
    let _ = writeln!(out, "tid {tid} 0\nready");
    let _ = out.flush();
    let mut line = String::new();
    let _ = stdin.lock().read_line(&mut line);
    let cpu0 = thread_cpu();
    let (sink, a, b) = run(seconds, share_a);
    std::hint::black_box(sink);
    let cpu = thread_cpu() - cpu0;
    let _ = writeln!(
        out,
        "share func_a {a:.6}\nshare func_b {b:.6}\ntcpu {tid} {cpu:.6}\ncpu {cpu:.6}"
    );
    let _ = out.flush();
    while stdin.lock().read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        line.clear();
    }
}
