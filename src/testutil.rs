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
    let version = format!("3.{minor}");
    runtime(&["python", &version], &format!("CPython {version}"))
}

/// The official Node.js `major` (20, 22, 24, 26) built for the Debian
/// architecture `arch` (amd64, arm64), as `scripts/runtimes` keeps it in
/// its cache (fetched the first time from the npm registry). `None` where
/// it cannot be had, said on stderr; that fails the test under
/// FLARE_REQUIRE_BPF=1.
pub(crate) fn node(major: u8, arch: &str) -> Option<PathBuf> {
    let version = major.to_string();
    runtime(
        &["node", &version, arch],
        &format!("Node.js {major} {arch}"),
    )
}

/// What `scripts/runtimes ARGS` prints (the cached runtime's path, at no
/// cost once fetched), else `None`, said: `name` is required under
/// FLARE_REQUIRE_BPF=1.
fn runtime(args: &[&str], name: &str) -> Option<PathBuf> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/runtimes");
    let out = Command::new(script).args(args).output();
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
        let args = args.join(" ");
        assert!(
            std::env::var("FLARE_REQUIRE_BPF").as_deref() != Ok("1"),
            "{name} (scripts/runtimes {args}) is required: {why}"
        );
        eprintln!("skipped: no {name}: {why}");
    }
    found
}
