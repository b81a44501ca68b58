//! Reading flare's pprof files back with `go tool pprof -top` (Debian
//! golang-go, installed by scripts/deps.sh), as people will.

use std::path::Path;
use std::process::Command;

/// What `go tool pprof -top` printed.
pub struct Top {
    /// The whole output, for failure messages.
    pub text: String,
    /// The table's rows split on whitespace: flat, flat%, sum%, cum, cum%,
    /// then the function name.
    pub rows: Vec<Vec<String>>,
}

/// Runs `go tool pprof -top` on `file`, failing the test if it cannot.
pub fn top(file: &Path) -> Top {
    let home = tempfile::tempdir().expect("a home for go");
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-symbolize=none"])
        .arg(file)
        .env("HOME", home.path())
        .output()
        .expect("running go tool pprof (scripts/deps.sh installs golang-go)");
    assert!(
        out.status.success(),
        "go tool pprof failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    Top { text, rows }
}
