//! PLT stubs of programs the compilers here build, checked against the
//! `NAME@plt` labels objdump gives them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::symbolize::elf::Layout;

/// Calls three libc functions through the PLT (`-fno-builtin`).
const PROGRAM: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
volatile long sink;
int main(int argc, char **argv) {
    sink = labs(argc) + strlen(argv[0]) + getpid();
    return 0;
}
"#;

fn build(cc: &str, flags: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let flags: Vec<&str> = ["-O2", "-fno-builtin"]
        .iter()
        .chain(flags)
        .copied()
        .collect();
    crate::testutil::cc_build(cc, "plt", PROGRAM, &flags)
}

/// objdump's `NAME@plt` labels: (address, name).
fn objdump_labels(objdump: &str, exe: &Path) -> Vec<(u64, String)> {
    let out = Command::new(objdump)
        .arg("-d")
        .arg(exe)
        .output()
        .unwrap_or_else(|e| panic!("running {objdump}: {e}"));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (addr, rest) = l.split_once(" <")?;
            let name = rest.strip_suffix(">:")?;
            name.ends_with("@plt")
                .then(|| Some((u64::from_str_radix(addr, 16).ok()?, name.to_string())))?
        })
        .collect()
}

/// Every label objdump gives a stub names flare's stub at that address,
/// which covers at least the stub's first 8 bytes (`.plt.got`'s size;
/// other stubs have 16); what comes before the first is `[plt]`.
fn check(objdump: &str, exe: &Path) {
    let file = File::open(exe).unwrap();
    let layout = Layout::read(&file).expect("an ELF file");
    let stubs = layout.plt_stubs(&file);
    let plt_stub = |at: u64| {
        assert!(layout.in_plt(at), "{at:#x} is not in the PLT");
        find(&stubs, at)
    };
    let labels = objdump_labels(objdump, exe);
    for want in ["labs@plt", "strlen@plt", "getpid@plt"] {
        assert!(
            labels.iter().any(|(_, n)| n == want),
            "{want} not among objdump's labels {labels:?}"
        );
    }
    for (addr, name) in &labels {
        for at in [*addr, addr + 7] {
            let stub = plt_stub(at).unwrap_or_else(|| panic!("no stub at {at:#x}"));
            assert_eq!(&*stub.name, name, "at {at:#x}");
        }
    }
    let first = labels.iter().map(|(a, _)| *a).min().unwrap();
    assert_eq!(plt_stub(first - 1).map(|s| &*s.name), Some(PLT));
}

#[test]
fn x86_64_stubs_are_named_as_objdump_names_them() {
    let (_dir, exe) = build("gcc", &[]);
    check("objdump", &exe);
}

#[test]
fn x86_64_ibt_second_plt_stubs_are_named() {
    // -z ibtplt: the stubs called are in .plt.sec, lazy binding's in .plt.
    let (_dir, exe) = build("gcc", &["-fcf-protection=full", "-Wl,-z,ibtplt"]);
    let file = File::open(&exe).unwrap();
    let stubs = Layout::read(&file).unwrap().plt_stubs(&file);
    assert!(stubs.len() > 4, "no .plt.sec stubs found: {stubs:?}");
    check("objdump", &exe);
}

#[test]
fn arm64_stubs_are_named_as_objdump_names_them() {
    let (_dir, exe) = build("aarch64-linux-gnu-gcc", &[]);
    check("aarch64-linux-gnu-objdump", &exe);
}

#[test]
fn a_layout_that_does_not_add_up_names_no_stub() {
    let section = |name: &[u8], addr, offset, size, link| SectionHeader {
        name: name.to_vec(),
        addr,
        offset,
        size,
        link,
        ..Default::default()
    };
    // Two relocations for labs and strlen; dynsym 2 entries after the
    // null one; dynstr "\0labs\0strlen\0".
    let mut rela = vec![0u8; 48];
    rela[8..16].copy_from_slice(&((1u64 << 32) | 7).to_le_bytes());
    rela[32..40].copy_from_slice(&((2u64 << 32) | 7).to_le_bytes());
    let mut sym = vec![0u8; 72];
    sym[24..28].copy_from_slice(&1u32.to_le_bytes());
    sym[48..52].copy_from_slice(&6u32.to_le_bytes());
    let strs = b"\0labs\0strlen\0".to_vec();
    let file = |at: u64, len: usize| -> Option<Vec<u8>> {
        let data = match at {
            0x100 => &rela,
            0x200 => &sym,
            0x300 => &strs,
            _ => return None,
        };
        data.get(..len).map(<[u8]>::to_vec)
    };
    let sections = |plt_size| {
        vec![
            section(b"", 0, 0, 0, 0),
            section(b".rela.plt", 0, 0x100, 48, 2),
            section(b".dynsym", 0, 0x200, 72, 3),
            section(b".dynstr", 0, 0x300, 13, 0),
            section(b".plt", 0x1000, 0x1000, plt_size, 0),
        ]
    };
    // arm64: 32 + 2 x 16 bytes adds up.
    let s = stubs(EM_AARCH64, &sections(64), file);
    let named: Vec<(u64, &str)> = s.iter().map(|t| (t.range.start, &*t.name)).collect();
    assert_eq!(
        named,
        vec![(0x1000, PLT), (0x1020, "labs@plt"), (0x1030, "strlen@plt")]
    );
    // 32 + 40 bytes does not divide into two stubs: only [plt].
    let s = stubs(EM_AARCH64, &sections(72), file);
    assert!(s.iter().all(|t| &*t.name == PLT), "{s:?}");
    // x86-64: a .plt too small for its relocations names none.
    let s = stubs(EM_X86_64, &sections(32), file);
    assert!(s.iter().all(|t| &*t.name == PLT), "{s:?}");
    // A symbol table that ends early, a link past the sections: no names,
    // no panic.
    let mut bad = sections(64);
    bad[1].link = 99;
    assert!(stubs(EM_AARCH64, &bad, file)
        .iter()
        .all(|t| &*t.name == PLT));
    let mut short = sections(64);
    short[2].size = 30;
    let s = stubs(EM_AARCH64, &short, |at, len| file(at, len.min(30)));
    assert!(s.iter().all(|t| &*t.name == PLT || &*t.name == "labs@plt"));
}

/// 100,000 relocations whose symbols all name one 16 MB string without
/// an end: each name is looked for within a name's longest, so this ends
/// at once (looking through the whole string each time took hours).
#[test]
fn relocations_naming_one_huge_string_stay_linear() {
    let mut strs = vec![0u8];
    strs.extend(std::iter::repeat_n(b'x', 16 << 20));
    let mut syms = vec![0u8; SYM_SIZE * 2];
    syms[SYM_SIZE..SYM_SIZE + 4].copy_from_slice(&1u32.to_le_bytes());
    let mut relocs = Vec::with_capacity(RELA_SIZE * 100_000);
    for i in 0..100_000u64 {
        relocs.extend(i.to_le_bytes());
        relocs.extend((1u64 << 32).to_le_bytes());
        relocs.extend(0u64.to_le_bytes());
    }
    let names = relocation_names(&relocs, &syms, &strs);
    assert_eq!(names.len(), 100_000);
    assert!(names.iter().all(|(_, n)| &**n == PLT));
    // A name that ends is found.
    strs[1000] = 0;
    let names = relocation_names(&relocs[..RELA_SIZE], &syms, &strs[..2000]);
    assert_eq!(&*names[0].1, format!("{}@plt", "x".repeat(999)));
}
