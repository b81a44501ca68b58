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
