//! Runtimes Debian 12 does not ship, as `scripts/runtimes` fetches them
//! from Debian's other suites into its cache (outside the clone): found
//! there, as in scripts/vmtest's guests, whose root holds copies at the
//! same paths, or fetched the first time.

use std::path::PathBuf;
use std::process::Command;

/// The executable of `scripts/runtimes KIND VERSION` (`name` says what it
/// is): in the cache, a directory `PREFIX-VERSION-ARCH` holding `exe(arch)`
/// (`prefix` e.g. `python3.14`, `java11`), complete; else what the script
/// prints. Missing, it fails the test under FLARE_REQUIRE_BPF=1 and skips
/// it (said on stderr) otherwise.
pub fn required(
    (kind, version): (&str, &str),
    name: &str,
    prefix: &str,
    exe: &dyn Fn(&str) -> String,
) -> Option<PathBuf> {
    if let Some(found) = cached(prefix, exe) {
        return Some(found);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/runtimes");
    let why = match Command::new(script).args([kind, version]).output() {
        Ok(o) if o.status.success() => {
            return Some(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
        }
        Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
        Err(e) => format!("{script}: {e}"),
    };
    assert!(
        std::env::var_os("FLARE_REQUIRE_BPF").is_none(),
        "{name} is required (FLARE_REQUIRE_BPF=1): scripts/runtimes says {why}"
    );
    eprintln!("skipping: no {name}: {why}");
    None
}

/// The newest complete `PREFIX-VERSION-ARCH/exe(arch)` in the cache
/// (FLARE_RUNTIME_CACHE, default /var/cache/flare-runtimes) for this
/// machine's architecture.
fn cached(prefix: &str, exe: &dyn Fn(&str) -> String) -> Option<PathBuf> {
    let cache = std::env::var_os("FLARE_RUNTIME_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/flare-runtimes"));
    let arch = if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        "amd64"
    };
    let prefix = format!("{prefix}-");
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
        .map(|d| d.join(exe(arch)))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop()
}

/// The official Node.js `major` (20, 22, 24, 26) as `scripts/runtimes`
/// keeps it (from the npm registry), as [`required`] finds it.
pub fn node(major: u32) -> Option<PathBuf> {
    required(
        ("node", &major.to_string()),
        &format!("Node.js {major}"),
        &format!("node{major}"),
        &|_| "bin/node".to_string(),
    )
}

/// The TypeScript compiler's release the tests profile (npm's
/// typescript package, the last major written in JavaScript before 7's
/// native one).
pub const TYPESCRIPT: &str = "5.9.3";

/// [`TYPESCRIPT`]'s `lib/typescript.js` (its API, for `require`) as
/// `scripts/runtimes typescript` keeps it, as [`required`] finds it.
pub fn typescript() -> Option<PathBuf> {
    required(
        ("typescript", TYPESCRIPT),
        &format!("TypeScript {TYPESCRIPT}"),
        &format!("typescript-{TYPESCRIPT}"),
        &|_| "lib/typescript.js".to_string(),
    )
}

/// CRuby `version` ("3.1", "3.3", "3.4"): Debian 12's own 3.1
/// (`/usr/bin/ruby3.1`, installed by scripts/deps.sh), the others as
/// `scripts/runtimes ruby` keeps them (Debian sid's and experimental's
/// builds, run through a wrapper that points Ruby at its library).
pub fn ruby(version: &str) -> Option<PathBuf> {
    if version == "3.1" {
        let debian = PathBuf::from("/usr/bin/ruby3.1");
        if debian.exists() {
            return Some(debian);
        }
    }
    required(
        ("ruby", version),
        &format!("Ruby {version}"),
        &format!("ruby{version}"),
        &|_| format!("bin/ruby{version}"),
    )
}
