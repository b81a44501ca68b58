//! Functions without a symbol are told apart: a frame in a stripped
//! local function is named `object+0xSTART` in flare's own formats (the
//! start from the object's `.eh_frame`), so two such functions are two
//! frames, while bcc's text keeps bcc's `[unknown]` unless
//! `--unknown=offset` asks for the names.
//!
//! The workload (`twolocal.c`) calls, through a library stripped by the
//! test, touch() A times via local_a() and 2·B times via local_b(); the
//! functions' starts are read from the library before it is stripped.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::bpf::{require_bpf, serial};
use common::stackcount::{text_counts, Tracer, Workload};

const A: u64 = 300;
const B: u64 = 200;

/// The library (stripped) and program, built once, and the starts of
/// local_a and local_b (virtual addresses, from the unstripped symbols).
fn build() -> (PathBuf, PathBuf, u64, u64) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("twolocal");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/twolocal.c");
    let lib = dir.join("libtwolocal.so");
    let exe = dir.join("twolocal");
    let run = common::bpf::run_tool;
    run(Command::new("gcc")
        .args([
            "-shared",
            "-fPIC",
            "-O1",
            "-fno-omit-frame-pointer",
            "-DLIB",
            "-o",
        ])
        .arg(&lib)
        .arg(&src));
    let syms = run(Command::new("nm").arg(&lib));
    let start = |name: &str| {
        syms.lines()
            .find(|l| l.ends_with(&format!(" t {name}")))
            .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
            .unwrap_or_else(|| panic!("{name} in:\n{syms}"))
    };
    let (a, b) = (start("local_a"), start("local_b"));
    run(Command::new("strip").arg("--strip-all").arg(&lib));
    let left = run(Command::new("nm")
        .arg("-a")
        .arg(&lib)
        .stderr(std::process::Stdio::null()));
    assert!(!left.contains("local_"), "{left}");
    run(Command::new("gcc")
        .args(["-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-L{}", dir.display()))
        .arg("-ltwolocal")
        .arg(format!("-Wl,-rpath,{}", dir.display())));
    (lib, exe, a, b)
}

fn start(exe: &Path) -> Workload {
    Workload::start_path(exe, &[&A.to_string(), &B.to_string()])
}

#[test]
fn stripped_functions_are_named_by_their_start() {
    if !require_bpf() {
        return;
    }
    let _guard = serial();
    let (lib, exe, a, b) = build();
    let pattern = format!("{}:touch", lib.display());
    let label = |start: u64| format!("libtwolocal.so+0x{start:x}");

    // bcc's text: both functions are [unknown], the counts all there.
    let mut w = start(&exe);
    let pid = w.pid().to_string();
    let t = Tracer::start(&["-U", "-p", &pid, &pattern]);
    w.go();
    let out = t.finish();
    assert!(
        out.contains("[unknown]") && !out.contains("libtwolocal.so+"),
        "{out}"
    );
    assert_eq!(text_counts(&out).values().sum::<u64>(), A + 2 * B, "{out}");

    // --unknown=offset in the text, and flare's own formats: one frame
    // per function, at its start.
    let mut w = start(&exe);
    let pid = w.pid().to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("p.json");
    let svg = dir.path().join("p.svg");
    let (json_s, svg_s) = (json.display().to_string(), svg.display().to_string());
    let t = Tracer::start(&[
        "-U",
        "--unknown=offset",
        "-f",
        "-o",
        &json_s,
        "-o",
        &svg_s,
        "-p",
        &pid,
        &pattern,
    ]);
    w.go();
    let out = t.finish();
    let through = |name: &str| -> u64 {
        out.lines()
            .filter(|l| l.split(';').any(|f| f == name))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum()
    };
    assert_eq!(through(&label(a)), A, "{out}");
    assert_eq!(through(&label(b)), 2 * B, "{out}");
    for file in [&json, &svg] {
        let text = std::fs::read_to_string(file).expect("output file");
        for start in [a, b] {
            assert!(
                text.contains(&label(start)),
                "{} lacks {}",
                file.display(),
                label(start)
            );
        }
    }
}
