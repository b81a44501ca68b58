//! Tables of real objects: this machine's libc and programs gcc builds
//! here, checked against what their code is known to do.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

fn kinds(t: &Table, cfa: u8) -> usize {
    t.rows.iter().filter(|r| r.cfa() == cfa).count()
}

/// Builds `src` with gcc and `flags` into a temporary directory.
fn build(name: &str, src: &str, flags: &[&str]) -> (tempfile::TempDir, PathBuf) {
    build_with("gcc", name, src, flags)
}

/// [`build`] with the compiler `cc` (a cross compiler for arm64).
fn build_with(cc: &str, name: &str, src: &str, flags: &[&str]) -> (tempfile::TempDir, PathBuf) {
    crate::testutil::cc_build(cc, name, src, flags)
}

/// The address of `sym` in `exe`, from nm.
fn symbol(exe: &Path, sym: &str) -> u64 {
    let out = Command::new("nm").arg(exe).output().expect("running nm");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(sym))
        .unwrap_or_else(|| panic!("{sym} not in nm output"));
    u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap()
}

#[test]
fn libc_rows_are_sorted_and_cover_every_case() {
    let data = std::fs::read(LIBC).expect("reading libc");
    let t = Table::from_elf(&data).expect("libc table");
    assert_eq!(t.bad_fdes, 0);
    assert!(t.rows.len() > 10_000, "{} rows", t.rows.len());
    assert!(t.rows.windows(2).all(|w| w[0].pc < w[1].pc));
    assert!(kinds(&t, CFA_RSP) > kinds(&t, CFA_RBP));
    // clone3 and the thread start mark the return address undefined;
    // __restore_rt is a signal trampoline; the PLT has its expression.
    assert!(kinds(&t, CFA_END) >= 1);
    assert!(kinds(&t, CFA_SIGNAL) >= 1);
    assert!(kinds(&t, CFA_PLT) >= 1);
    // Neighbouring rows never repeat a rule.
    assert!(t.rows.windows(2).all(|w| w[0].kind != w[1].kind
        || w[0].cfa_off != w[1].cfa_off
        || w[0].rbp_off != w[1].rbp_off));
}

const PROGRAM: &str = r#"
#include <stdio.h>
#include <alloca.h>
__attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noinline)) long big(long n) {
    volatile char buf[4096];
    for (long i = 0; i < n && i < 4096; i++) buf[i] = (char)i;
    return buf[n % 4096] + leaf(n);
}
__attribute__((noinline)) long dynamic(long n) {
    char *p = alloca(n);
    for (long i = 0; i < n; i++) p[i] = (char)i;
    return p[n - 1] + big(n);
}
int main(int argc, char **argv) { printf("%ld\n", dynamic(argc + 100)); return 0; }
"#;

#[test]
fn gcc_o2_without_frame_pointers() {
    let (_dir, exe) = build("nofp", PROGRAM, &["-O2", "-fomit-frame-pointer"]);
    let data = std::fs::read(&exe).unwrap();
    let t = Table::from_elf(&data).expect("table");
    // A frameless leaf: the return address is at rsp all through it.
    let leaf = symbol(&exe, "leaf");
    let r = t.lookup(leaf).expect("row at leaf");
    assert_eq!((r.cfa(), r.cfa_off, r.rbp()), (CFA_RSP, 8, RBP_SAME));
    let r = t.lookup(leaf + 1).expect("row inside leaf");
    assert_eq!((r.cfa(), r.cfa_off), (CFA_RSP, 8));
    // A 4 KiB frame: the first instruction still has CFA = rsp + 8, and
    // somewhere inside the CFA is more than 4 KiB above rsp.
    let big = symbol(&exe, "big");
    let r = t.lookup(big).unwrap();
    assert_eq!((r.cfa(), r.cfa_off), (CFA_RSP, 8));
    assert!((big..big + 64).any(|a| t
        .lookup(a)
        .is_some_and(|r| r.cfa() == CFA_RSP && r.cfa_off > 4096)));
    // alloca: gcc sets up rbp and the CFA follows it, rbp saved at CFA-16.
    let dynamic = symbol(&exe, "dynamic");
    assert!(
        (dynamic..dynamic + 64).any(|a| t.lookup(a).is_some_and(|r| r.cfa() == CFA_RBP
            && r.cfa_off == 16
            && r.rbp() == RBP_SAVED
            && r.rbp_off == -2))
    );
    // _start ends the walk.
    let start = symbol(&exe, "_start");
    assert_eq!(t.lookup(start + 4).map(Row::cfa), Some(CFA_END));
}

const ARM64_PROGRAM: &str = r#"
volatile int sink;
__attribute__((noinline)) int leaf(int x) { return x * 3 + sink; }
__attribute__((noinline)) int mid(int x) {
    int a[8];
    for (int i = 0; i < 8; i++) a[i] = leaf(x + i);
    return a[x & 7];
}
__attribute__((noinline)) int framed(int x) { return mid(x) + leaf(x); }
int main(int argc, char **argv) { return framed(argc); }
"#;

/// The rows of an arm64 build of [`ARM64_PROGRAM`] at each function's
/// first instruction and just past its prologue's store.
fn arm64_rows(flags: &[&str]) -> Vec<(&'static str, Row, Row)> {
    let (_dir, exe) = build_with("aarch64-linux-gnu-gcc", "arm64", ARM64_PROGRAM, flags);
    let data = std::fs::read(&exe).unwrap();
    let t = Table::from_elf(&data).expect("arm64 table");
    assert_eq!(t.bad_fdes, 0);
    ["leaf", "mid", "framed"]
        .into_iter()
        .map(|f| {
            let at = symbol(&exe, f);
            (f, *t.lookup(at).unwrap(), *t.lookup(at + 4).unwrap())
        })
        .collect()
}

#[test]
fn arm64_rows_say_where_x30_is() {
    // Without frame pointers: each function enters with its return
    // address in x30 (CFA = sp); mid and framed then store x30 alone at
    // the top of their frames (`str x30, [sp, #-N]!`).
    let rows = arm64_rows(&["-O2", "-fomit-frame-pointer"]);
    for (f, entry, _) in &rows {
        assert_eq!(
            (entry.cfa(), entry.cfa_off, entry.ra(), entry.rbp()),
            (CFA_RSP, 0, RA_LR, RBP_SAME),
            "{f} at entry"
        );
    }
    let (_, _, leaf) = rows[0];
    assert_eq!((leaf.cfa(), leaf.cfa_off, leaf.ra()), (CFA_RSP, 0, RA_LR));
    let (_, _, mid) = rows[1];
    assert_eq!((mid.cfa(), mid.cfa_off), (CFA_RSP, 48));
    assert_eq!((mid.ra(), mid.rbp_off, mid.rbp()), (RA_SAVED, -6, RBP_SAME));
    // With frame pointers: a frame record (x29, then x30) at the bottom.
    let rows = arm64_rows(&["-O2", "-fno-omit-frame-pointer"]);
    let (_, _, mid) = rows[1];
    assert_eq!((mid.cfa(), mid.cfa_off), (CFA_RSP, 48));
    assert_eq!(
        (mid.rbp(), mid.rbp_off, mid.ra()),
        (RBP_SAVED, -6, RA_AFTER_FP)
    );
    let (_, _, framed) = rows[2];
    assert_eq!(
        (framed.rbp(), framed.rbp_off, framed.ra()),
        (RBP_SAVED, -2, RA_AFTER_FP)
    );
}

#[test]
fn arm64_plt_stubs_are_leaves() {
    // _start calls __libc_start_main through the PLT, whose stubs have no
    // call-frame information on arm64: each is a leaf (x30, CFA = sp).
    let (_dir, exe) = build_with("aarch64-linux-gnu-gcc", "arm64", ARM64_PROGRAM, &["-O2"]);
    let data = std::fs::read(&exe).unwrap();
    let elf = Elf::parse(&data).unwrap();
    let plt = elf.plt.first().expect("a .plt section").clone();
    let t = Table::from_parsed(&data, &elf).expect("arm64 table");
    let (start, end) = (plt.addr, plt.addr + plt.file.len() as u64);
    for a in (start..end).step_by(4) {
        let r = t.lookup(a).unwrap_or_else(|| panic!("no row at {a:#x}"));
        assert_eq!(
            (r.cfa(), r.cfa_off, r.ra(), r.rbp()),
            (CFA_RSP, 0, RA_LR, RBP_SAME),
            "at {a:#x} in .plt {start:#x}..{end:#x}"
        );
    }
}

#[test]
fn x86_64_plt_keeps_its_linker_written_rows() {
    // x86-64's linkers describe .plt themselves (CFA_PLT): nothing is
    // laid over them.
    let data = std::fs::read(LIBC).unwrap();
    let elf = Elf::parse(&data).unwrap();
    let plt = elf.plt.first().expect("libc has a .plt").clone();
    let t = Table::from_parsed(&data, &elf).unwrap();
    assert_eq!(t.lookup(plt.addr + 16).map(Row::cfa), Some(CFA_PLT));
}

#[test]
fn an_arm64_object_is_no_x86_64_object() {
    // The loader walks only the host's objects; tables read each file's
    // own machine.
    let (_dir, exe) = build_with("aarch64-linux-gnu-gcc", "arm64", ARM64_PROGRAM, &["-O2"]);
    let data = std::fs::read(&exe).unwrap();
    let elf = Elf::parse(&data).expect("an ELF file");
    assert_eq!(elf.machine, Machine::Aarch64);
    let native = Elf::parse(&std::fs::read(LIBC).unwrap()).unwrap();
    assert_eq!(native.machine, Machine::HOST);
}

#[test]
fn debug_frame_alone_is_read() {
    // -fno-asynchronous-unwind-tables with -g: CFI only in .debug_frame.
    let (_dir, exe) = build(
        "dbgframe",
        PROGRAM,
        &[
            "-O2",
            "-g",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
            "-nostartfiles",
            "-e",
            "main",
        ],
    );
    let data = std::fs::read(&exe).unwrap();
    let elf = Elf::parse(&data).unwrap();
    assert!(elf.debug_frame.is_some());
    let t = Table::from_parsed(
        &data,
        &Elf {
            eh_frame: None,
            ..elf
        },
    )
    .expect("table");
    let leaf = symbol(&exe, "leaf");
    assert_eq!(
        t.lookup(leaf).map(|r| (r.cfa(), r.cfa_off)),
        Some((CFA_RSP, 8))
    );
}

#[test]
fn missing_and_malformed_information_is_an_error_or_partial_never_a_panic() {
    assert_eq!(Table::from_elf(b"not elf"), Err(TableError::NotElf));
    let data = std::fs::read(LIBC).unwrap();
    let elf = Elf::parse(&data).unwrap();
    let bare = Elf {
        eh_frame: None,
        debug_frame: None,
        ..elf.clone()
    };
    assert_eq!(Table::from_parsed(&data, &bare), Err(TableError::NoCfi));
    // Corrupt bytes all through .eh_frame: whatever is read must still be
    // sorted rows.
    let eh = elf.eh_frame.clone().unwrap();
    let mut bad = data.clone();
    let mut x = 0x9e37_79b9u32;
    for i in (eh.file.start..eh.file.end).step_by(97) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        bad[i] = x as u8;
    }
    if let Ok(t) = Table::from_elf(&bad) {
        assert!(t.rows.windows(2).all(|w| w[0].pc < w[1].pc));
        assert!(t.bad_fdes > 0);
    }
}

#[test]
fn a_table_of_leaves_covers_the_code_with_x30_rows() {
    // What arm64's vDSO gets: CFA = sp, the return address in x30, over
    // each executable segment, and no information past it.
    let elf = Elf {
        machine: Machine::Aarch64,
        segments: vec![
            crate::unwind::elf::Segment {
                offset: 0,
                vaddr: 0,
                filesz: 0x1000,
                executable: false,
            },
            crate::unwind::elf::Segment {
                offset: 0x1000,
                vaddr: 0x1000,
                filesz: 0x800,
                executable: true,
            },
        ],
        ..Elf::default()
    };
    let t = Table::leaves(&elf);
    let r = t.lookup(0x1400).expect("a row in the code");
    assert_eq!(
        (r.cfa(), r.cfa_off, r.ra(), r.rbp()),
        (CFA_RSP, 0, RA_LR, RBP_SAME)
    );
    assert_eq!(t.lookup(0x1800).map(Row::cfa), Some(CFA_NONE));
    assert_eq!(t.lookup(0x800), None);
}
