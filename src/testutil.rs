//! Helpers for the unit tests that build small programs with the
//! compilers here (gcc, and aarch64-linux-gnu-gcc for arm64 objects).

use std::path::PathBuf;
use std::process::Command;

/// Builds the C source `src` with `cc` and `flags` into `name` in a new
/// temporary directory (kept while the returned guard lives).
pub(crate) fn cc_build(
    cc: &str,
    name: &str,
    src: &str,
    flags: &[&str],
) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = dir.path().join(format!("{name}.c"));
    std::fs::write(&c, src).expect("writing C source");
    let exe = dir.path().join(name);
    let status = Command::new(cc)
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .status()
        .unwrap_or_else(|e| panic!("running {cc} (scripts/deps.sh --test installs it): {e}"));
    assert!(status.success(), "{cc} failed");
    (dir, exe)
}
