//! The CPython interpreters the tests run: pyenv's builds, where present.

use std::path::PathBuf;

/// pyenv's CPython 3.`minor` (its newest patch release), if installed.
pub fn pyenv(minor: u32) -> Option<PathBuf> {
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root/.pyenv"));
    let prefix = format!("3.{minor}.");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path().join(format!("bin/python3.{minor}")))
        .filter(|p| p.exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// [`pyenv`]'s CPython 3.`minor` for a test that needs it: missing, it
/// fails the test under FLARE_REQUIRE_BPF=1 and skips it (said on
/// stderr) otherwise.
pub fn pyenv_required(minor: u32) -> Option<PathBuf> {
    let python = pyenv(minor);
    if python.is_none() {
        assert!(
            std::env::var_os("FLARE_REQUIRE_BPF").is_none(),
            "pyenv's CPython 3.{minor} is required (FLARE_REQUIRE_BPF=1) but not installed"
        );
        eprintln!("skipping: pyenv's CPython 3.{minor} is not installed");
    }
    python
}

/// CPython 3.`minor` from Debian sid (3.14, 3.15: no pyenv build of them
/// can be had here), as `scripts/runtimes` keeps it in its cache (fetched
/// the first time from the package registry). Missing, it fails the test
/// under FLARE_REQUIRE_BPF=1 and skips it (said on stderr) otherwise.
pub fn sid_required(minor: u32) -> Option<PathBuf> {
    if let Some(found) = sid_cached(minor) {
        return Some(found);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/runtimes");
    let out = std::process::Command::new(script)
        .args(["python", &format!("3.{minor}")])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            return Some(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
        }
        Ok(o) => {
            let why = String::from_utf8_lossy(&o.stderr).into_owned();
            assert!(
                std::env::var_os("FLARE_REQUIRE_BPF").is_none(),
                "CPython 3.{minor} is required (FLARE_REQUIRE_BPF=1): scripts/runtimes says {why}"
            );
            eprintln!("skipping: no CPython 3.{minor}: {why}");
        }
        Err(e) => {
            assert!(
                std::env::var_os("FLARE_REQUIRE_BPF").is_none(),
                "CPython 3.{minor} is required (FLARE_REQUIRE_BPF=1): {script}: {e}"
            );
            eprintln!("skipping: no CPython 3.{minor}: {e}");
        }
    }
    None
}

/// Debian sid's CPython 3.`minor` for this machine's architecture as
/// `scripts/runtimes` leaves it in its cache (`python3.X-VERSION-ARCH`,
/// complete): found without the script, as in scripts/vmtest's guests,
/// whose root holds a copy at the same path.
fn sid_cached(minor: u32) -> Option<PathBuf> {
    let cache = std::env::var_os("FLARE_RUNTIME_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/flare-runtimes"));
    let arch = if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        "amd64"
    };
    let prefix = format!("python3.{minor}-");
    let suffix = format!("-{arch}");
    let mut found: Vec<PathBuf> = std::fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(&prefix) && name.ends_with(&suffix)
        })
        .map(|e| e.path())
        .filter(|d| d.join(".complete").exists())
        .map(|d| d.join(format!("usr/bin/python3.{minor}")))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop()
}
