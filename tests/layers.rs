//! The layers' rule, checked on the source (issue 20): BPF code stands on
//! the system facts and the model's vocabulary only, never on the layers
//! above it (collecting, symbolizing, unwinding, mapping tracking), and the
//! system module on nothing of flare's but its errors. A `use` that breaks
//! the rule fails here, naming the file and line.

use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)
        .expect("reading the source tree")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// Lines of code (not comments) under `dir` that name `crate::X` for an X
/// in `forbidden`, as "file:line: text".
fn offenders(dir: &str, forbidden: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join(dir);
    let files = if dir.is_dir() {
        rust_files(&dir)
    } else {
        vec![dir.with_extension("rs")]
    };
    assert!(!files.is_empty(), "no sources under {}", dir.display());
    let mut found = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("reading a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            let uses = |m: &str| {
                code.contains(&format!("crate::{m}::"))
                    || code.contains(&format!("crate::{m};"))
                    || code.contains(&format!("crate::{{{m}"))
                    || code.contains(&format!("super::super::{m}"))
            };
            if forbidden.iter().any(|m| uses(m)) {
                let rel = file.strip_prefix(root).unwrap_or(&file);
                found.push(format!("{}:{}: {}", rel.display(), n + 1, code));
            }
        }
    }
    found
}

#[test]
fn bpf_does_not_reach_up_the_layers() {
    let found = offenders(
        "src/bpf",
        &[
            "symbolize",
            "collect",
            "unwind",
            "procmaps",
            "tools",
            "pipeline",
        ],
    );
    assert!(
        found.is_empty(),
        "src/bpf imports from above it:\n{}",
        found.join("\n")
    );
}

#[test]
fn system_stands_on_nothing_of_flares() {
    let found = offenders(
        "src/system",
        &[
            "bpf",
            "collect",
            "symbolize",
            "unwind",
            "procmaps",
            "tools",
            "pipeline",
            "profile",
            "output",
            "sinks",
            "live",
            "export",
            "agent",
        ],
    );
    assert!(
        found.is_empty(),
        "src/system.rs imports flare's layers:\n{}",
        found.join("\n")
    );
}

/// The collector contract is the vocabulary the unwinder and the runtimes
/// speak (issue 40): it names neither, so that they stand on it without
/// an import circle.
#[test]
fn collect_names_neither_unwinder_nor_runtimes() {
    let found = offenders("src/collect", &["unwind", "runtime"]);
    assert!(
        found.is_empty(),
        "src/collect imports the unwinder or a runtime:\n{}",
        found.join("\n")
    );
}

/// The unwinder knows no runtime: it tells them of processes through its
/// `Watcher`, and they name their frames through `collect::RuntimeFinds`.
#[test]
fn the_unwinder_knows_no_runtime() {
    let found = offenders("src/unwind", &["runtime"]);
    assert!(
        found.is_empty(),
        "src/unwind imports a runtime:\n{}",
        found.join("\n")
    );
}

/// A runtime's folder stands on what runtimes share (`src/runtime/*.rs`),
/// never on another runtime's folder.
#[test]
fn runtimes_do_not_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtime");
    let folders: Vec<String> = fs::read_dir(&root)
        .expect("reading src/runtime")
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(folders.len() >= 2, "runtime folders: {folders:?}");
    let mut found = Vec::new();
    for a in &folders {
        let others: Vec<String> = folders
            .iter()
            .filter(|b| *b != a)
            .map(|b| format!("runtime::{b}"))
            .collect();
        let others: Vec<&str> = others.iter().map(String::as_str).collect();
        found.extend(offenders(&format!("src/runtime/{a}"), &others));
        // Relative paths to a sibling, too.
        for file in rust_files(&root.join(a)) {
            let text = fs::read_to_string(&file).expect("reading a source file");
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                let sibling = folders.iter().filter(|b| *b != a).any(|b| {
                    code.contains(&format!("super::{b}::"))
                        || code.contains(&format!("super::super::{b}"))
                });
                if !code.starts_with("//") && sibling {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, code));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a runtime imports another:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_violation() {
    // The same scan over a layer that does import from above it.
    assert!(!offenders("src/tools", &["collect"]).is_empty());
    assert!(!offenders("src/tools", &["runtime"]).is_empty());
}

/// Library code hands lines for the user to `flare::notes`; only the
/// binary (main.rs, run/, cli/) writes to stderr, and the unit tests'
/// own files (`tests.rs`, `*_tests.rs`, `testutil.rs`).
#[test]
fn only_the_binary_writes_to_stderr() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let binary = ["main.rs", "run", "cli"];
    let mut found = Vec::new();
    for file in rust_files(&root) {
        let rel = file.strip_prefix(&root).unwrap_or(&file).to_path_buf();
        let first = rel
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned());
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if first.is_some_and(|f| binary.contains(&f.as_str()))
            || name == "tests.rs"
            || name.ends_with("_tests.rs")
            || name == "testutil.rs"
        {
            continue;
        }
        let text = fs::read_to_string(&file).expect("reading a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if !code.starts_with("//")
                && (code.contains("eprintln!")
                    || code.contains("eprint!")
                    || code.contains("io::stderr()"))
            {
                found.push(format!("src/{}:{}: {}", rel.display(), n + 1, code));
            }
        }
    }
    assert!(
        found.is_empty(),
        "library code writing to stderr (use flare::notes::note):\n{}",
        found.join("\n")
    );
}
