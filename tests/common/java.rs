//! Java workloads (tests/workloads/NAME.java) compiled once per test
//! binary, with Debian's JDK (`scripts/deps.sh --test`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// The directory holding `tests/workloads/NAME.java`'s classes, compiled
/// on first use; `None` (said on stderr) without a JDK, unless the tests
/// must run (FLARE_REQUIRE_BPF), when it panics.
pub fn classes(name: &str) -> Option<PathBuf> {
    static BUILT: Mutex<Option<HashMap<String, Option<PathBuf>>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let built = built.get_or_insert_with(HashMap::new);
    if let Some(dir) = built.get(name) {
        return dir.clone();
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("java-{name}"));
    let src =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/workloads/{name}.java"));
    std::fs::create_dir_all(&dir).expect("a directory for the classes");
    let out = match Command::new("javac").arg("-d").arg(&dir).arg(&src).status() {
        Ok(s) if s.success() => Some(dir),
        Ok(s) => panic!("javac failed on {}: {s}", src.display()),
        Err(e) => {
            assert!(
                std::env::var_os("FLARE_REQUIRE_BPF").is_none(),
                "no javac ({e}): scripts/deps.sh --test installs default-jdk-headless"
            );
            eprintln!("skipping: no JDK ({e})");
            None
        }
    };
    built.insert(name.to_string(), out.clone());
    out
}
