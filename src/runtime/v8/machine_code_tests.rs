//! The decoders on the instructions the official Node 24 and 26 builds
//! hold (x86-64 and arm64, as objdump shows them), on variants compilers
//! may emit, and on the binaries themselves where they are here.

use super::*;
use crate::elf::{Elf, FileSource};

/// `default_isolate_group_` of Node 24.22.3 x86-64, and its
/// `js_dispatch_table_address()`: `mov 0x5e50661(%rip),%rax; mov
/// 0x3270(%rax),%rax; lea -0x1(%rax),%rdx`.
const GROUP_X64: u64 = 0x6bb_e928;
const TABLE_X64: (u64, &[u8]) = (
    0xd6_e2c0,
    &[
        0x48, 0x8b, 0x05, 0x61, 0x06, 0xe5, 0x05, 0x48, 0x8b, 0x80, 0x70, 0x32, 0x00, 0x00, 0x48,
        0x8d, 0x50, 0xff,
    ],
);

/// Node 24.22.0 arm64: `adrp x0, 0x669a000; ldr x0, [x0, #3360]; ldr x0,
/// [x0, #12912]; sub x1, x0, #1`.
const GROUP_ARM: u64 = 0x669_ad20;
const TABLE_ARM: (u64, [u32; 4]) = (
    0xce_8d10,
    [0xd002_cd80, 0xf946_9000, 0xf959_3800, 0xd100_0401],
);

fn le(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn the_group_read_of_node24_is_decoded() {
    let (at, code) = TABLE_X64;
    assert_eq!(
        table_read(EM_X86_64, code, at, GROUP_X64),
        Some(TableRead::Group { offset: 0x3270 })
    );
    // Another variable than the group's: not the table.
    assert_eq!(table_read(EM_X86_64, code, at, GROUP_X64 + 8), None);
    // With endbr64 and a frame set up first, moved by 8 bytes.
    let mut framed = vec![0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5];
    framed.extend_from_slice(code);
    assert_eq!(
        table_read(EM_X86_64, &framed, at - 8, GROUP_X64),
        Some(TableRead::Group { offset: 0x3270 })
    );
    let (at, code) = TABLE_ARM;
    assert_eq!(
        table_read(EM_AARCH64, &le(&code), at, GROUP_ARM),
        Some(TableRead::Group { offset: 0x3270 })
    );
    // adrp, add, ldr [x, #0] reach the group too; bti first.
    let split = [
        0xd503_245f, // bti c
        0xd002_cd80, // adrp x0, 0x669a000
        0x9134_8000, // add x0, x0, #0xd20
        0xf940_0000, // ldr x0, [x0]
        0xf959_3800, // ldr x0, [x0, #12912]
    ];
    assert_eq!(
        table_read(EM_AARCH64, &le(&split), at - 4, GROUP_ARM),
        Some(TableRead::Group { offset: 0x3270 })
    );
}

#[test]
fn the_isolate_read_of_node26_is_decoded() {
    // x86-64: mov 0x268(%rdi),%rax; lea -0x1(%rax),%rcx.
    let code = [
        0x48, 0x8b, 0x87, 0x68, 0x02, 0x00, 0x00, 0x48, 0x8d, 0x48, 0xff,
    ];
    assert_eq!(
        table_read(EM_X86_64, &code, 0xd7_83e0, GROUP_X64),
        Some(TableRead::Isolate { offset: 0x268 })
    );
    // Another register than the argument's: not followed.
    let rsi = [0x48, 0x8b, 0x86, 0x68, 0x02, 0x00, 0x00];
    assert_eq!(table_read(EM_X86_64, &rsi, 0, GROUP_X64), None);
    // arm64: ldr x0, [x0, #616]; sub x8, x0, #1.
    let code = le(&[0xf941_3400, 0xd100_0408]);
    assert_eq!(
        table_read(EM_AARCH64, &code, 0xd4_8388, GROUP_ARM),
        Some(TableRead::Isolate { offset: 0x268 })
    );
    // Something else first: nothing.
    assert_eq!(table_read(EM_AARCH64, &le(&[0xd100_0408]), 0, 0), None);
    assert_eq!(table_read(EM_X86_64, &[0x90, 0xc3], 0, 0), None);
    assert_eq!(table_read(EM_X86_64, &[], 0, 0), None);
}

#[test]
fn the_first_isolate_field_is_the_one_tested_then_stored() {
    // Node 26 x86-64 (clang): mov %rdi,%r14; cmpq $0x0,0x31c8(%r14); je;
    // mov 0x31a0(%r14),%rdi; ...; mov %rax,0x31c8(%r14); then the shared
    // space isolate's cmpq/mov at 0x3198 (later in the code).
    let mut code = vec![0x49, 0x89, 0xfe];
    code.extend([0x49, 0x83, 0xbe, 0xc8, 0x31, 0x00, 0x00, 0x00, 0x74, 0x17]);
    code.extend([0x49, 0x8b, 0xbe, 0xa0, 0x31, 0x00, 0x00]);
    code.extend([0x49, 0x83, 0xbe, 0x98, 0x31, 0x00, 0x00, 0x00]);
    code.extend([0x49, 0x89, 0x86, 0x98, 0x31, 0x00, 0x00]);
    code.extend([0x49, 0x89, 0x86, 0xc8, 0x31, 0x00, 0x00]);
    assert_eq!(first_isolate_field(EM_X86_64, &code), Some(0x31c8));
    // A test never followed by a store of its field is no candidate.
    let tested_only = &code[..code.len() - 7];
    assert_eq!(first_isolate_field(EM_X86_64, tested_only), Some(0x3198));
    // gcc's form: mov 0x31c8(%rbx),%rax; test %rax,%rax; ...; mov
    // %rbp,0x31c8(%rbx).
    let gcc = [
        0x48, 0x8b, 0x83, 0xc8, 0x31, 0x00, 0x00, 0x48, 0x85, 0xc0, 0x48, 0x89, 0xab, 0xc8, 0x31,
        0x00, 0x00,
    ];
    assert_eq!(first_isolate_field(EM_X86_64, &gcc), Some(0x31c8));
    // Node 26 arm64: ldr x8, [x19, #12744]; cbz x8; ...; str x8, [x19,
    // #12744]; ldr x9, [x19, #12696]; cbz x9.
    let arm = le(&[
        0xaa00_03f3,
        0xf958_e668,
        0xb400_01a8,
        0xf958_d260,
        0xf918_e668,
        0xf958_ce69,
        0xb400_00a9,
    ]);
    assert_eq!(first_isolate_field(EM_AARCH64, &arm), Some(0x31c8));
    assert_eq!(first_isolate_field(EM_AARCH64, &le(&[0xf958_e668])), None);
}

/// Reads the decoded functions of the official binaries here: what
/// machine_code's tests take from objdump, and (the live check is
/// detect's) what the Node 26 x86-64 process was found to hold.
#[test]
fn node_binaries_give_their_table_reads() {
    let cases = [
        (24, "amd64", TableRead::Group { offset: 0x3270 }, None),
        (24, "arm64", TableRead::Group { offset: 0x3270 }, None),
        (
            26,
            "amd64",
            TableRead::Isolate { offset: 0x268 },
            Some(0x31c8),
        ),
        (
            26,
            "arm64",
            TableRead::Isolate { offset: 0x268 },
            Some(0x31c8),
        ),
    ];
    for (major, arch, read, first) in cases {
        let Some(path) = crate::testutil::node(major, arch) else {
            continue;
        };
        let file = std::fs::File::open(&path).unwrap();
        let s = super::super::symbols::Symbols::read(&file).unwrap();
        let elf = Elf::parse(FileSource::new(&file).unwrap()).unwrap();
        let bytes = |v: super::super::symbols::Variable| {
            elf.bytes_at_vaddr(v.addr, v.size.min(MAX_CODE), MAX_CODE)
                .unwrap()
                .into_owned()
        };
        let (f, takes_isolate) = s.dispatch_table_address.expect("the function");
        assert_eq!(takes_isolate, major >= 26, "{major} {arch}");
        let group = s.isolate_group.expect("the group").addr;
        assert_eq!(
            table_read(s.machine, &bytes(f), f.addr, group),
            Some(read),
            "{major} {arch}"
        );
        if let Some(first) = first {
            let add = s.add_isolate.expect("AddIsolate");
            assert_eq!(
                first_isolate_field(s.machine, &bytes(add)),
                Some(first),
                "{major} {arch}"
            );
        }
    }
}
