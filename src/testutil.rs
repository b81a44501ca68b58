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

/// The official Node.js `major` (20, 22, 24, 26) built for the Debian
/// architecture `arch` (amd64, arm64): the newest one in the runtime cache
/// (FLARE_RUNTIME_CACHE, default /var/cache/flare-runtimes: directories
/// `nodeN-VERSION-ARCH` with a `.complete` mark), else what
/// `scripts/runtimes node N ARCH` fetches. `None` where it cannot be had,
/// said on stderr; that fails the test under FLARE_REQUIRE_BPF=1.
pub(crate) fn node(major: u8, arch: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("FLARE_RUNTIME_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/flare-runtimes"));
    let prefix = format!("node{major}-");
    let suffix = format!("-{arch}");
    // The release's numbers, for the newest first.
    let release = |name: &str| -> Option<Vec<u32>> {
        let version = name.strip_prefix(&prefix)?.strip_suffix(&suffix)?;
        version.split('.').map(|n| n.parse().ok()).collect()
    };
    let cached = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let dir = e.path();
            let exe = dir.join("bin/node");
            (dir.join(".complete").is_file() && exe.is_file()).then(|| (release(&name), exe))
        })
        .filter(|(r, _)| r.is_some())
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, exe)| exe);
    if cached.is_some() {
        return cached;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/runtimes");
    let out = Command::new(script)
        .args(["node", &major.to_string(), arch])
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
            "Node.js {major} {arch} (scripts/runtimes node {major} {arch}) is required: {why}"
        );
        eprintln!("skipped: no Node.js {major} {arch}: {why}");
    }
    found
}
