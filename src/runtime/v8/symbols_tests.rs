//! The symbols of the official node binaries of the runtime cache (and
//! the system's /usr/bin/node), against what /work/notes/v8-facts.md
//! measured of them; and files that are not node binaries.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::*;
use crate::elf::{Elf, FileSource};

/// The node binaries here: (what it is, its path); those that cannot be
/// had are left out (said on stderr, or failing under
/// FLARE_REQUIRE_BPF=1).
pub(crate) fn binaries() -> Vec<(&'static str, PathBuf)> {
    let mut out = Vec::new();
    for (name, major, arch) in [
        ("20 amd64", 20, "amd64"),
        ("22 amd64", 22, "amd64"),
        ("24 amd64", 24, "amd64"),
        ("26 amd64", 26, "amd64"),
        ("22 arm64", 22, "arm64"),
    ] {
        if let Some(p) = crate::testutil::node(major, arch) {
            out.push((name, p));
        }
    }
    let system = Path::new("/usr/bin/node");
    if system.is_file() {
        out.push(("/usr/bin/node", system.to_path_buf()));
    } else {
        eprintln!("skipped: no /usr/bin/node");
    }
    out
}

pub(crate) fn read(path: &Path) -> Symbols {
    let file = File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Symbols::read(&file).unwrap_or_else(|| panic!("{}: no symbols read", path.display()))
}

/// The V8 version and `v8dbg_*` count of each (v8-facts.md's table).
fn expected(name: &str, version: [u32; 4]) -> Option<([u32; 4], usize)> {
    Some(match name {
        "20 amd64" => ([11, 3, 244, 8], 531),
        "22 amd64" | "22 arm64" => ([12, 4, 254, 21], 457),
        "24 amd64" => ([13, 6, 233, 17], 480),
        "26 amd64" => ([14, 6, 202, 34], 477),
        // Node 20.20.2 from NodeSource here; elsewhere whatever it is.
        _ if version == [11, 3, 244, 8] => ([11, 3, 244, 8], 531),
        _ => return None,
    })
}

#[test]
fn node_binaries_give_their_version_and_constants() {
    for (name, path) in binaries() {
        let s = read(&path);
        let got = s.version.expect("Version::*_");
        let Some((version, count)) = expected(name, got) else {
            eprintln!("skipped: {name} is V8 {got:?}, not one measured");
            continue;
        };
        assert_eq!(got, version, "{name}");
        assert_eq!(s.dbg.len(), count, "{name}: v8dbg_* constants");
        let machine = if name.ends_with("arm64") {
            crate::elf::EM_AARCH64
        } else {
            crate::elf::EM_X86_64
        };
        assert_eq!(s.machine, machine, "{name}");
        // Ints and longs, signed: the frame slots are below the frame
        // pointer, and `IsNotStringMask` is -128.
        assert_eq!(s.value("off_fp_function"), Some(-16), "{name}");
        assert_eq!(s.value("IsNotStringMask"), Some(-128), "{name}");
        assert_eq!(s.value("SmiShiftSize"), Some(31), "{name}");
        assert_eq!(s.value("no_such_constant"), None);
        // The field's type suffix changes, the prefix finds it.
        let name_offset = if version[0] >= 13 { 24 } else { 16 };
        assert_eq!(
            s.by_prefix("class_SharedFunctionInfo__name_or_scope_info__"),
            Ok(Some(name_offset)),
            "{name}"
        );
        // `context__Context` and `context__Tagged_Context_` (22 on) agree.
        let context = if version[0] == 11 { 32 } else { 40 };
        assert_eq!(
            s.by_prefix("class_JSFunction__context__"),
            Ok(Some(context))
        );
        // Leaptiering's isolate group from V8 13 (in .symtab only).
        assert_eq!(s.isolate_group.is_some(), version[0] >= 13, "{name}");
        if let Some(g) = s.isolate_group {
            assert_eq!(g.size, 8, "{name}: a pointer");
        }
        check_variables(name, &path, &s);
    }
}

/// The embedded blob and the bytecode sizes lie where the file has them:
/// the blob in an executable segment, its size a few MiB; the sizes a
/// `uint8_t[3][N]` of small numbers.
fn check_variables(name: &str, path: &Path, s: &Symbols) {
    let file = File::open(path).unwrap();
    let elf = Elf::parse(FileSource::new(&file).unwrap()).unwrap();
    let blob = s.blob_code.expect("v8_Default_embedded_blob_code_");
    assert!(
        (1 << 20..16 << 20).contains(&blob.size),
        "{name}: blob of {} bytes",
        blob.size
    );
    let segment = elf
        .loads()
        .find(|seg| (seg.vaddr..seg.vaddr + seg.filesz).contains(&blob.addr))
        .expect("the blob's segment");
    assert!(segment.executable(), "{name}");
    assert!(
        blob.addr + blob.size <= segment.vaddr + segment.filesz,
        "{name}"
    );
    assert_eq!(s.blob_code_size.map(|v| v.size), Some(4));
    let sizes = s.bytecode_sizes.expect("Bytecodes::kBytecodeSizes");
    assert_eq!(sizes.size % 3, 0, "{name}");
    assert!(
        (100 * 3..256 * 3).contains(&sizes.size),
        "{name}: {}",
        sizes.size
    );
    let bytes = elf.bytes_at_vaddr(sizes.addr, sizes.size, 1024).unwrap();
    assert!(bytes.iter().all(|&b| (1..32).contains(&b)), "{name}");
    // The interpreter's code (`nm -n` of Node 20.20.2 to 26.12.1): its
    // trampolines to `InterpreterOnStackReplacement`, then
    // `InterpreterOnStackReplacement_ToBaseline` on its own a few
    // builtins later, then the bytecode handlers, last in the blob.
    let end = blob.addr + blob.size;
    match s.interpreter.as_slice() {
        [trampolines, to_baseline, handlers] => {
            assert!(blob.addr < trampolines.start, "{name}");
            assert!(
                (0x800..0x2000).contains(&(trampolines.end - trampolines.start)),
                "{name}: trampolines {trampolines:x?}"
            );
            assert!(trampolines.end < to_baseline.start, "{name}");
            assert!(to_baseline.end - to_baseline.start < 0x400, "{name}");
            assert_eq!(handlers.end, end, "{name}");
            assert!(
                (200 << 10..2 << 20).contains(&(handlers.end - handlers.start)),
                "{name}: handlers {handlers:x?}"
            );
        }
        other => panic!("{name}: the interpreter's code at {other:x?}"),
    }
}

#[test]
fn the_interpreters_code_is_each_run_of_its_labels() {
    use Builtin::*;
    let blob = Some(Variable {
        addr: 0x1000,
        size: 0x1000,
    });
    let labels = vec![
        (0x1800, Handler),
        (0x1000, Other),
        (0x1100, Interpreter),
        (0x1140, Interpreter),
        (0x1200, Other),
        (0x1300, Interpreter),
        (0x1340, Other),
        (0x1700, FirstHandler),
        (0x1780, Handler),
        // Both tables name it: once.
        (0x1780, Handler),
    ];
    assert_eq!(
        interpreter_code(labels.clone(), blob),
        vec![0x1100..0x1200, 0x1300..0x1340, 0x1700..0x2000]
    );
    // A builtin after the handlers ends them; one outside the blob is not
    // counted.
    let mut more = labels.clone();
    more.push((0x1900, Other));
    more.push((0x3000, Interpreter));
    assert_eq!(
        interpreter_code(more, blob),
        vec![0x1100..0x1200, 0x1300..0x1340, 0x1700..0x1900]
    );
    // No blob, or more runs than v8_proc holds: none.
    assert_eq!(interpreter_code(labels.clone(), None), vec![]);
    let many: Vec<(u64, Builtin)> = (0..10)
        .map(|i| {
            (
                0x1000 + i * 0x10,
                if i % 2 == 0 { Interpreter } else { Other },
            )
        })
        .collect();
    assert_eq!(interpreter_code(many, blob), vec![]);
    // A blob without the labels: none.
    assert_eq!(interpreter_code(vec![(0x1000, Other)], blob), vec![]);
}

#[test]
fn a_file_without_v8_has_no_version() {
    // A binary of this machine, with a .dynsym but no V8.
    let s = read(Path::new("/bin/true"));
    assert!(s.dbg.is_empty());
    assert_eq!(s.version, None);
    assert!(super::super::layout::Layout::from_symbols(&s)
        .unwrap_err()
        .contains("Version"));
    // Not an ELF file.
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("node");
    std::fs::write(&text, "#!/bin/sh\nexec node \"$@\"\n").unwrap();
    assert_eq!(Symbols::read(&File::open(&text).unwrap()), None);
}

#[test]
fn prefixes_that_disagree_are_an_error() {
    let mut s = Symbols::default();
    s.dbg.insert("class_A__f__Object".into(), 8);
    s.dbg.insert("class_A__f__Tagged_Object_".into(), 8);
    assert_eq!(s.by_prefix("class_A__f__"), Ok(Some(8)));
    assert_eq!(s.by_prefix("class_A__g__"), Ok(None));
    s.dbg.insert("class_A__f__Smi".into(), 16);
    let e = s.by_prefix("class_A__f__").unwrap_err();
    assert!(e.contains("class_A__f__Smi = 16"), "{e}");
}
