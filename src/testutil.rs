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

/// CPython 3.`minor` from Debian sid (3.14, 3.15: no pyenv build of them
/// can be had here), as `scripts/runtimes` keeps it in its cache (fetched
/// the first time from the package registry). `None` where it cannot be
/// had, said on stderr; that fails the test under FLARE_REQUIRE_BPF=1.
pub(crate) fn sid_python(minor: u8) -> Option<PathBuf> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/runtimes");
    let out = Command::new(script)
        .args(["python", &format!("3.{minor}")])
        .output();
    let found = match &out {
        Ok(o) if o.status.success() => {
            Some(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        }
        _ => None,
    };
    if found.is_none() {
        let why = match out {
            Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
            Err(e) => e.to_string(),
        };
        assert!(
            std::env::var("FLARE_REQUIRE_BPF").as_deref() != Ok("1"),
            "CPython 3.{minor} (scripts/runtimes python 3.{minor}) is required: {why}"
        );
        eprintln!("skipped: no CPython 3.{minor}: {why}");
    }
    found
}
