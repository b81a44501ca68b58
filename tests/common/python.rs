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
    let name = format!("python3.{minor}");
    super::runtimes::required(
        ("python", &format!("3.{minor}")),
        &format!("CPython 3.{minor}"),
        &name,
        &|_| format!("usr/bin/{name}"),
    )
}
