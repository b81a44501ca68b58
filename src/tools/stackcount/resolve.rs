//! Turning a pattern into the concrete things to attach: the binary a
//! library name stands for, the user functions, kernel functions,
//! tracepoints or USDT probes whose names match.

use std::collections::HashSet;
use std::fs;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::Command;

use blazesym::inspect::source::{Elf, Source};
use blazesym::inspect::Inspector;
use blazesym::SymType;

use super::kallsyms::VmlinuxBtf;
use super::pattern::Pattern;
use super::usdt::{self, UsdtProbe};
use crate::bpf::tracefs;
use crate::error::{Error, Result};

/// A user function to attach a uprobe to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserFunction {
    pub name: String,
    /// Offset of its first instruction in the file, what uprobes take.
    pub offset: u64,
}

/// Finds the binary for a pattern's `lib`: a path; the binary of `-p PID`
/// when `lib` is empty; a library the process has mapped; a library as the
/// dynamic loader would find it (`c` or `libc` or `libc.so.6`); or a
/// program on `PATH`.
pub fn binary(lib: &str, pid: Option<u32>) -> Result<PathBuf> {
    let not_found = || {
        Error::Unsupported(format!(
            "cannot find library or binary '{lib}' (give a path, a library name such as 'c' for libc, or a program on PATH)"
        ))
    };
    if lib.is_empty() {
        let pid = pid.ok_or_else(|| {
            Error::Unsupported(
                "no library or binary given: write lib:name, or give -p PID to use that process's binary".into(),
            )
        })?;
        return fs::read_link(format!("/proc/{pid}/exe")).map_err(|_| Error::NoSuchProcess(pid));
    }
    if lib.contains('/') {
        let path = Path::new(lib);
        return if path.is_file() {
            Ok(path.canonicalize().unwrap_or_else(|_| path.to_path_buf()))
        } else {
            Err(not_found())
        };
    }
    let soname = library_prefix(lib);
    if let Some(pid) = pid {
        let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if let Some(p) = mapped_library(&maps, &soname, lib) {
            return Ok(p);
        }
    }
    if let Some(p) = ldconfig_lookup(&soname) {
        return Ok(p);
    }
    if let Some(p) = default_dirs_lookup(DEFAULT_DIRS, &soname) {
        return Ok(p);
    }
    which(lib).ok_or_else(not_found)
}

/// Where the dynamic loader looks when its cache does not list a library
/// (or there is no cache, as in a minimal container or initramfs).
const DEFAULT_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// The first ELF file in `dirs` whose name starts with `soname` (a
/// development symlink such as `libc.so` may be a linker script: skipped).
fn default_dirs_lookup(dirs: &[&str], soname: &str) -> Option<PathBuf> {
    for dir in dirs {
        let Ok(entries) = fs::read_dir(dir) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with(soname))
            .collect();
        names.sort();
        for n in names {
            let path = Path::new(dir).join(&n);
            let mut magic = [0u8; 4];
            let is_elf = fs::File::open(&path)
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
                .is_ok_and(|()| &magic == b"\x7fELF");
            if is_elf {
                return Some(path);
            }
        }
    }
    None
}

/// The soname prefix a library name stands for: `c` -> `libc.so`.
pub fn library_prefix(lib: &str) -> String {
    if lib.starts_with("lib") && lib.contains(".so") {
        lib.to_string()
    } else if lib.starts_with("lib") {
        format!("{lib}.so")
    } else {
        format!("lib{lib}.so")
    }
}

/// A file mapped by a process (from its `maps` text) that is the library
/// (its name starts with `soname`) or the binary named `lib`.
pub fn mapped_library(maps: &str, soname: &str, lib: &str) -> Option<PathBuf> {
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.starts_with('/'))
        .find(|p| {
            let file = p.rsplit('/').next().unwrap_or(p);
            file.starts_with(soname) || file == lib
        })
        .map(PathBuf::from)
}

/// The path `ldconfig -p` gives for the first library whose name starts
/// with `soname`, preferring this machine's architecture.
fn ldconfig_lookup(soname: &str) -> Option<PathBuf> {
    let out = Command::new("ldconfig")
        .arg("-p")
        .output()
        .or_else(|_| Command::new("/sbin/ldconfig").arg("-p").output())
        .ok()?;
    parse_ldconfig(&String::from_utf8_lossy(&out.stdout), soname)
}

/// Parses `ldconfig -p` output (`\tlibc.so.6 (libc6,x86-64) => /path`).
pub fn parse_ldconfig(text: &str, soname: &str) -> Option<PathBuf> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => Some("x86-64"),
        "aarch64" => Some("AArch64"),
        _ => None,
    };
    let mut first = None;
    for line in text.lines() {
        let Some((lhs, path)) = line.trim().split_once(" => ") else {
            continue;
        };
        let name = lhs.split_whitespace().next().unwrap_or("");
        if !name.starts_with(soname) {
            continue;
        }
        if arch.is_none_or(|a| lhs.contains(a)) {
            return Some(PathBuf::from(path));
        }
        first.get_or_insert_with(|| PathBuf::from(path));
    }
    first
}

/// A program on `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The functions of `path` whose names match, one per code address: aliases
/// of one function (`malloc`, `__libc_malloc`) are attached once, so that
/// every call is counted exactly once.
pub fn user_functions(path: &Path, pattern: &Pattern) -> Result<Vec<UserFunction>> {
    let inspector = Inspector::new();
    let mut elf = Elf::new(path);
    elf.debug_syms = false;
    let src = Source::Elf(elf);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    inspector
        .for_each(&src, |sym| {
            if sym.sym_type == SymType::Function && sym.addr != 0 && pattern.matches(&sym.name) {
                if let Some(offset) = sym.file_offset {
                    if seen.insert(offset) {
                        out.push(UserFunction {
                            name: sym.name.to_string(),
                            offset,
                        });
                    }
                }
            }
            ControlFlow::Continue(())
        })
        .map_err(|e| {
            Error::Unsupported(format!(
                "cannot read the symbols of {}: {e}",
                path.display()
            ))
        })?;
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The USDT probes of `path` whose names match.
pub fn usdt_probes(path: &Path, pattern: &Pattern) -> Result<Vec<UsdtProbe>> {
    Ok(usdt::probes(path)?
        .into_iter()
        .filter(|p| pattern.matches(&p.name))
        .collect())
}

/// The tracepoints (`category:event`) that match.
pub fn tracepoints(pattern: &Pattern) -> Result<Vec<String>> {
    Ok(tracefs::tracepoints()?
        .into_iter()
        .filter(|t| pattern.matches(t))
        .collect())
}

/// The kernel functions that match, as bcc finds them (see
/// [`kallsyms`](super::kallsyms)); without a readable kallsyms, the
/// functions tracefs lists.
pub fn kernel_functions(pattern: &Pattern) -> Result<Vec<String>> {
    let traceable: HashSet<String> = tracefs::filter_functions()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let blacklist = kprobe_blacklist();
    match fs::read_to_string("/proc/kallsyms") {
        Ok(text) => {
            // Without ftrace's list, the names BTF has (what fentry takes).
            let btf = traceable.is_empty().then(VmlinuxBtf::load).flatten();
            let known = |f: &str| match &btf {
                Some(btf) => btf.has_function(f),
                None => traceable.contains(f),
            };
            Ok(super::kallsyms::functions(&text, known, &blacklist, |f| {
                pattern.matches(f)
            }))
        }
        Err(source) if traceable.is_empty() => Err(Error::Io {
            what: "reading /proc/kallsyms".into(),
            source,
        }),
        Err(_) => {
            let mut names: Vec<String> = traceable
                .into_iter()
                .filter(|f| pattern.matches(f) && !blacklist.contains(f))
                .collect();
            names.sort();
            Ok(names)
        }
    }
}

/// Functions the kernel refuses to probe.
fn kprobe_blacklist() -> HashSet<String> {
    fs::read_to_string("/sys/kernel/debug/kprobes/blacklist")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_names_become_soname_prefixes() {
        assert_eq!(library_prefix("c"), "libc.so");
        assert_eq!(library_prefix("libpthread"), "libpthread.so");
        assert_eq!(library_prefix("libc.so.6"), "libc.so.6");
    }

    #[test]
    fn without_a_loader_cache_the_default_directories_are_searched() {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        fs::write(
            d.join("libfoo.so"),
            "/* GNU ld script */ INPUT(libfoo.so.1)",
        )
        .expect("script");
        fs::write(d.join("libfoo.so.1"), b"\x7fELF rest").expect("library");
        fs::write(d.join("libfoobar.so.2"), b"\x7fELF rest").expect("other library");
        let dirs = ["/nonexistent", d.to_str().expect("utf-8 path")];
        assert_eq!(
            default_dirs_lookup(&dirs, "libfoo.so"),
            Some(d.join("libfoo.so.1"))
        );
        assert_eq!(default_dirs_lookup(&dirs, "libbaz.so"), None);
    }

    #[test]
    fn ldconfig_output_prefers_this_architecture() {
        let text = "3 libs found in cache `/etc/ld.so.cache'\n\
            \tlibc.so.6 (libc6) => /usr/lib32/libc.so.6\n\
            \tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n\
            \tlibcap.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcap.so.2\n";
        let got = parse_ldconfig(text, "libc.so").unwrap();
        if std::env::consts::ARCH == "x86_64" {
            assert_eq!(got, PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"));
        }
        assert_eq!(
            parse_ldconfig(text, "libcap.so"),
            Some(PathBuf::from("/lib/x86_64-linux-gnu/libcap.so.2"))
        );
        assert_eq!(parse_ldconfig(text, "libz.so"), None);
    }

    #[test]
    fn mapped_libraries_are_found_by_name() {
        let maps = "55d0-55d1 r-xp 00000000 08:01 12 /usr/bin/bash\n\
            7f00-7f01 r-xp 00000000 08:01 13 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
            7ff0-7ff1 rw-p 00000000 00:00 0 [stack]\n";
        assert_eq!(
            mapped_library(maps, "libc.so", "c"),
            Some(PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6"))
        );
        assert_eq!(
            mapped_library(maps, "libbash.so", "bash"),
            Some(PathBuf::from("/usr/bin/bash"))
        );
        assert_eq!(mapped_library(maps, "libz.so", "z"), None);
    }
}
