use super::*;

const LE64: Layout = Layout {
    is64: true,
    little: true,
};

fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend((name.len() as u32).to_le_bytes());
    v.extend((desc.len() as u32).to_le_bytes());
    v.extend(kind.to_le_bytes());
    v.extend(name);
    v.resize(v.len().div_ceil(4) * 4, 0);
    v.extend(desc);
    v.resize(v.len().div_ceil(4) * 4, 0);
    v
}

#[test]
fn a_build_id_is_a_gnu_note_not_a_systemtap_one() {
    let mut notes = note(b"stapsdt\0", 3, b"probe descriptor bytes");
    notes.extend(note(b"GNU\0", 1, &[0, 0, 0, 0]));
    assert_eq!(build_id_in_notes(LE64, &notes), None);
    notes.extend(note(b"GNU\0", 3, &[0xab, 0xcd, 0xef]));
    assert_eq!(
        build_id_in_notes(LE64, &notes),
        Some(vec![0xab, 0xcd, 0xef])
    );
    let owners: Vec<&[u8]> = Notes::new(LE64, &notes).map(|n| n.owner).collect();
    assert_eq!(owners, [&b"stapsdt"[..], b"GNU", b"GNU"]);
}

#[test]
fn notes_that_lie_about_their_sizes_end_the_walk() {
    let mut notes = note(b"GNU\0", 3, &[1, 2, 3, 4]);
    notes[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(Notes::new(LE64, &notes).count(), 0);
    assert_eq!(Notes::new(LE64, &notes[..7]).count(), 0);
}

#[test]
fn a_file_and_its_bytes_read_alike() {
    let exe = std::env::current_exe().expect("own executable");
    let bytes = std::fs::read(&exe).expect("reading it");
    let file = File::open(&exe).expect("opening it");
    let in_memory = Elf::parse(&bytes[..]).expect("an ELF file");
    let read = Elf::parse(FileSource::new(&file).expect("size")).expect("an ELF file");
    assert_eq!(in_memory.machine, EM_HOST);
    assert_eq!(in_memory.segments, read.segments);
    assert_eq!(in_memory.sections, read.sections);
    assert!(in_memory.loads().any(Segment::executable));
    assert!(in_memory.section(b".text").is_some());
    assert!(in_memory.build_id().is_some());
    assert_eq!(in_memory.build_id(), read.build_id());
    let (syms, strs) = read
        .symbol_table(SHT_SYMTAB, 1 << 30)
        .expect("a symbol table");
    let mut found = false;
    each_symbol(read.layout, &syms, &strs, |s| {
        found |= s.defined && s.name == b"main" && s.size > 0;
    });
    assert!(found, "the test program's main");
}

#[test]
fn build_ids_match_readelf() {
    let libc = if cfg!(target_arch = "aarch64") {
        "/usr/lib/aarch64-linux-gnu/libc.so.6"
    } else {
        "/usr/lib/x86_64-linux-gnu/libc.so.6"
    };
    let Ok(out) = std::process::Command::new("readelf")
        .args(["-n", libc])
        .output()
    else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(expected) = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
    else {
        return;
    };
    let file = File::open(libc).expect("libc");
    let elf = Elf::parse(FileSource::new(&file).expect("size")).expect("an ELF file");
    let hex: String = elf
        .build_id()
        .expect("a build id")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(hex, expected);
}

/// An ELF header of class `is64`, with these program and section header
/// fields.
fn header(phoff: u64, phnum: u16, shoff: u64, shnum: u16, shstrndx: u16) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2;
    h[5] = 1;
    h[16..18].copy_from_slice(&3u16.to_le_bytes());
    h[18..20].copy_from_slice(&EM_HOST.to_le_bytes());
    h[32..40].copy_from_slice(&phoff.to_le_bytes());
    h[40..48].copy_from_slice(&shoff.to_le_bytes());
    h[54..56].copy_from_slice(&56u16.to_le_bytes());
    h[56..58].copy_from_slice(&phnum.to_le_bytes());
    h[58..60].copy_from_slice(&64u16.to_le_bytes());
    h[60..62].copy_from_slice(&shnum.to_le_bytes());
    h[62..64].copy_from_slice(&shstrndx.to_le_bytes());
    h
}

#[test]
fn headers_that_lie_give_no_headers_not_a_panic() {
    // Counts past the file, offsets at the end of the address space.
    for h in [
        header(64, u16::MAX, 64, u16::MAX, 7),
        header(u64::MAX - 8, 3, u64::MAX - 8, 3, 0),
        header(0, 0, 0, 0, u16::MAX),
    ] {
        let elf = Elf::parse(&h[..]).expect("the ELF header itself is whole");
        assert!(elf.segments.is_empty() && elf.sections.is_empty());
        assert_eq!(elf.build_id(), None);
        assert_eq!(elf.u64_at_vaddr(0), None);
    }
    assert!(Elf::parse(&header(0, 0, 0, 0, 0)[..40]).is_none());
    assert!(Elf::parse(&b"\x7fELF\x03\x01"[..]).is_none());
}

#[test]
fn a_section_too_large_is_not_read() {
    // One section, a symbol table claiming 2^40 bytes.
    let mut f = header(0, 0, 64, 2, 0);
    let mut sh = vec![0u8; 128];
    sh[64 + 4..64 + 8].copy_from_slice(&SHT_SYMTAB.to_le_bytes());
    sh[64 + 24..64 + 32].copy_from_slice(&0u64.to_le_bytes());
    sh[64 + 32..64 + 40].copy_from_slice(&(1u64 << 40).to_le_bytes());
    f.extend(sh);
    let elf = Elf::parse(&f[..]).expect("an ELF file");
    assert_eq!(elf.sections.len(), 2);
    assert!(elf.symbol_table(SHT_SYMTAB, 64 << 20).is_none());
}

#[test]
fn names_end_within_the_bound() {
    let mut strings = b"\0short\0".to_vec();
    strings.extend(vec![b'x'; MAX_NAME + 10]);
    strings.push(0);
    assert_eq!(name_at(&strings, 1), b"short");
    assert_eq!(name_at(&strings, 7), b"");
    assert_eq!(name_at(&strings, u32::MAX), b"");
}

#[test]
fn symbols_of_both_classes() {
    let strs = b"\0main\0imported\0";
    let mut s64 = vec![0u8; 48];
    s64[0..4].copy_from_slice(&1u32.to_le_bytes());
    s64[6..8].copy_from_slice(&12u16.to_le_bytes());
    s64[8..16].copy_from_slice(&0x1000u64.to_le_bytes());
    s64[16..24].copy_from_slice(&32u64.to_le_bytes());
    s64[24..28].copy_from_slice(&6u32.to_le_bytes());
    let mut seen = Vec::new();
    each_symbol(LE64, &s64, strs, |s| {
        seen.push((s.name.to_vec(), s.defined, s.value, s.size))
    });
    assert_eq!(
        seen,
        [
            (b"main".to_vec(), true, 0x1000, 32),
            (b"imported".to_vec(), false, 0, 0)
        ]
    );
    let be32 = Layout {
        is64: false,
        little: false,
    };
    let mut s32 = vec![0u8; 16];
    s32[0..4].copy_from_slice(&1u32.to_be_bytes());
    s32[4..8].copy_from_slice(&0x8000u32.to_be_bytes());
    s32[8..12].copy_from_slice(&8u32.to_be_bytes());
    s32[14..16].copy_from_slice(&1u16.to_be_bytes());
    let mut seen = Vec::new();
    each_symbol(be32, &s32, strs, |s| {
        seen.push((s.name.to_vec(), s.value, s.size))
    });
    assert_eq!(seen, [(b"main".to_vec(), 0x8000, 8)]);
}
