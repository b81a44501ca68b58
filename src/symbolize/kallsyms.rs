//! The kernel's symbols, read once per boot.
//!
//! Reading `/proc/kallsyms` costs 40-100 ms of system time (the kernel
//! formats 120,000 lines on every read), and every run that shows kernel
//! frames paid it, on the way from Ctrl-C to output when the warm-up had
//! no idle CPU to run on. The core kernel's text and the loaded modules
//! do not change while the machine runs (modules only when they are
//! loaded or unloaded), so a copy of their symbols is kept in
//! `/run/flare` (a tmpfs: gone at reboot) under a name that holds the
//! boot and the module list, and blazesym parses that plain file instead.
//!
//! Code that comes and goes — BPF programs, ftrace and BPF trampolines,
//! kprobe slots — lies outside the core text and every module, and such
//! addresses are still named from `/proc/kallsyms` as read now. The copy
//! is made only where kallsyms shows real addresses (root), and is
//! readable by root only, as `/proc/kallsyms`'s addresses are.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Write};
use std::ops::Range;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the per-boot copies live.
const DIR: &str = "/run/flare";

/// The first line of a copy: the core kernel's text ranges (its text, and
/// its init text, freed after boot but still on the idle tasks' stacks).
/// blazesym skips it (its first field is not an address).
const HEADER: &str = "#flare-kallsyms";

/// A copy of the kernel's symbols for this boot, and what it covers.
#[derive(Debug)]
pub(crate) struct Copy {
    pub(crate) path: PathBuf,
    /// The core text ranges first, then each module's memory.
    pub(crate) covers: Vec<Range<u64>>,
}

impl Copy {
    /// True when `addr` is named by the copy.
    pub(crate) fn covers(&self, addr: u64) -> bool {
        self.covers.iter().any(|r| r.contains(&addr))
    }

    /// The copy for this boot and module list, made now if there is none;
    /// `None` where kallsyms hides addresses or the copy cannot be kept
    /// (then everything is read from `/proc/kallsyms`, as before).
    pub(crate) fn for_this_boot() -> Option<Copy> {
        Self::in_dir(Path::new(DIR), Path::new("/proc"))
    }

    /// [`Copy::for_this_boot`] with the copies in `dir` and the kernel's
    /// files under `proc` (tests).
    fn in_dir(dir: &Path, proc: &Path) -> Option<Copy> {
        let modules_text = fs::read_to_string(proc.join("modules")).unwrap_or_default();
        let modules = module_ranges(&modules_text)?;
        let boot = fs::read_to_string(proc.join("sys/kernel/random/boot_id")).ok()?;
        let mut h = DefaultHasher::new();
        boot.trim().hash(&mut h);
        modules_text.hash(&mut h);
        let name = format!("kallsyms-3-{:016x}", h.finish());
        let path = dir.join(&name);
        let mut covers = match read_header(&path) {
            Some(core) => core,
            None => write_copy(dir, &name, &proc.join("kallsyms"))?,
        };
        covers.extend(modules);
        Some(Copy { path, covers })
    }
}

/// True for the module tag of code that comes and goes: `[bpf]`,
/// `[__builtin__ftrace]`, `[__builtin__kprobes]`.
fn is_transient(tag: &str) -> bool {
    tag.starts_with("[bpf]") || tag.starts_with("[__builtin")
}

/// The functions that come and go (BPF programs, trampolines), as the
/// kallsyms at `path` lists them now, sorted by address. They are few:
/// kept apart so that the whole of kallsyms is not held a second time
/// beside the copy (4 MiB, which a run without end would carry on).
pub(crate) fn transient(path: &Path) -> Vec<(u64, Arc<str>)> {
    let Ok(text) = fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut syms: Vec<(u64, Arc<str>)> = text
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (addr, _, name) = (f.next()?, f.next()?, f.next()?);
            if !f.next().is_some_and(is_transient) {
                return None;
            }
            Some((u64::from_str_radix(addr, 16).ok()?, name.into()))
        })
        .collect();
    syms.sort_by_key(|s| s.0);
    syms
}

/// Transient functions by start address, sorted ([`transient`]).
pub(crate) type Transient = Arc<[(u64, Arc<str>)]>;

/// The ids of the BPF programs loaded now, in order, or `None` when they
/// cannot be listed (without CAP_SYS_ADMIN). Listing them is some system
/// calls; reading /proc/kallsyms expands every kernel symbol (about
/// 20 ms of CPU here), so [`transient`]'s list is read again only when
/// this set changed: BPF programs and their trampolines are what comes
/// and goes in a kernel stack.
pub(crate) fn bpf_programs() -> Option<Vec<u32>> {
    let mut ids = Vec::new();
    let mut id = 0u32;
    loop {
        let mut next = 0u32;
        // SAFETY: `next` is a valid u32 the call writes the next id into;
        // the call reads no other memory of ours.
        let r = unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_next_id(id, &mut next) };
        if r != 0 {
            // ENOENT: the last one was listed; anything else: not allowed.
            let done = std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT);
            return done.then_some(ids);
        }
        ids.push(next);
        id = next;
    }
}

/// The transient function holding `addr`: the last one starting at or
/// before it (kallsyms gives no sizes), its start and name.
pub(crate) fn find(syms: &[(u64, Arc<str>)], addr: u64) -> Option<&(u64, Arc<str>)> {
    let i = syms.partition_point(|s| s.0 <= addr);
    syms[..i].last()
}

/// Each module's memory (`name size refs deps state address`), or `None`
/// when the addresses are hidden (all zero) from this user.
fn module_ranges(text: &str) -> Option<Vec<Range<u64>>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(size), Some(addr)) = (f.get(1), f.get(5)) else {
            continue;
        };
        let (Ok(size), Ok(addr)) = (
            size.parse::<u64>(),
            u64::from_str_radix(addr.trim_start_matches("0x"), 16),
        ) else {
            continue;
        };
        if addr == 0 {
            return None;
        }
        out.push(addr..addr.saturating_add(size));
    }
    Some(out)
}

/// The core text ranges in the header of the copy at `path`, when the
/// copy exists and is this user's own (root's: others see no addresses).
fn read_header(path: &Path) -> Option<Vec<Range<u64>>> {
    let file = fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    // SAFETY: geteuid has no preconditions.
    if meta.uid() != unsafe { libc::geteuid() } || meta.mode() & 0o077 != 0 {
        return None;
    }
    let mut line = String::new();
    BufReader::new(file).read_line(&mut line).ok()?;
    parse_header(&line)
}

fn parse_header(line: &str) -> Option<Vec<Range<u64>>> {
    let mut f = line.split_whitespace();
    if f.next()? != HEADER {
        return None;
    }
    let mut out = Vec::new();
    while let (Some(start), Some(end)) = (f.next(), f.next()) {
        let start = u64::from_str_radix(start, 16).ok()?;
        let end = u64::from_str_radix(end, 16).ok()?;
        if start >= end {
            return None;
        }
        out.push(start..end);
    }
    (!out.is_empty()).then_some(out)
}

/// The header line for core text ranges `core`.
fn header(core: &[Range<u64>]) -> String {
    let mut line = HEADER.to_string();
    for r in core {
        line.push_str(&format!(" {:x} {:x}", r.start, r.end));
    }
    line
}

/// The symbols worth keeping from kallsyms' text, and the core text
/// ranges (text, and init text where kallsyms shows it): functions (stack addresses are code) of the core kernel and the
/// modules, not the transient ones, and not the `__pfx_` padding before
/// each function (half the lines on 6.x kernels; no code runs there).
/// Fewer lines parse faster: 10 ms instead of 20 here, where kallsyms has
/// no data symbols; Debian's kernels have as many again.
fn filter(text: &str) -> Option<(String, Vec<Range<u64>>)> {
    let (mut stext, mut etext, mut sinit, mut einit) = (None, None, None, None);
    let mut kept = String::with_capacity(text.len() / 2);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if !matches!(kind, "t" | "T" | "w" | "W") || name.starts_with("__pfx_") {
            continue;
        }
        if f.next().is_some_and(is_transient) {
            continue;
        }
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        match name {
            "_stext" => stext = Some(addr),
            "_etext" => etext = Some(addr),
            "_sinittext" => sinit = Some(addr),
            "_einittext" => einit = Some(addr),
            _ => {}
        }
        kept.push_str(line);
        kept.push('\n');
    }
    let core = stext?..etext?;
    if core.start == 0 || core.start >= core.end {
        return None;
    }
    let mut ranges = vec![core];
    if let (Some(s), Some(e)) = (sinit, einit) {
        if s < e {
            ranges.push(s..e);
        }
    }
    Some((kept, ranges))
}

/// Writes the copy `name` into `dir` from the kallsyms at `kallsyms`
/// (atomically: a reader sees the whole copy or none). Returns the core
/// text ranges.
fn write_copy(dir: &Path, name: &str, kallsyms: &Path) -> Option<Vec<Range<u64>>> {
    let text = fs::read_to_string(kallsyms).ok()?;
    let (kept, core) = filter(&text)?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .ok()?;
    // Copies for other module lists of this boot, and of earlier boots
    // where /run outlives them, are of no more use.
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("kallsyms-") {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .ok()?;
    let written =
        writeln!(file, "{}", header(&core)).and_then(|()| file.write_all(kept.as_bytes()));
    if written.is_err() || fs::rename(&tmp, dir.join(name)).is_err() {
        let _ = fs::remove_file(&tmp);
        return None;
    }
    Some(core)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff810000f0 t __pfx_entry_SYSCALL_64
ffffffff81000100 T entry_SYSCALL_64
ffffffff81000200 t do_work
ffffffff81800000 D some_data
ffffffff82000000 T _etext
ffffffff83000000 T _sinittext
ffffffff83000100 T start_kernel
ffffffff83100000 T _einittext
ffffffffc0001000 t ext4_read\t[ext4]
ffffffffc0100000 t bpf_prog_0123456789abcdef_f\t[bpf]
ffffffffc0200000 t ftrace_trampoline\t[__builtin__ftrace]
";

    fn fake_proc(modules: &str) -> tempfile::TempDir {
        let proc = tempfile::tempdir().expect("temp dir");
        fs::create_dir_all(proc.path().join("sys/kernel/random")).expect("mkdir");
        fs::write(proc.path().join("sys/kernel/random/boot_id"), "b0\n").expect("boot_id");
        fs::write(proc.path().join("modules"), modules).expect("modules");
        fs::write(proc.path().join("kallsyms"), KALLSYMS).expect("kallsyms");
        proc
    }

    const MODULES: &str = "ext4 65536 1 - Live 0xffffffffc0000000\n";

    #[test]
    fn the_copy_keeps_lasting_code_and_covers_only_it() {
        let proc = fake_proc(MODULES);
        let dir = tempfile::tempdir().expect("temp dir");
        let copy = Copy::in_dir(dir.path(), proc.path()).expect("a copy");
        let text = fs::read_to_string(&copy.path).expect("copy");
        assert!(text.starts_with(
            "#flare-kallsyms ffffffff81000000 ffffffff82000000 ffffffff83000000 ffffffff83100000\n"
        ));
        assert!(text.contains("do_work") && text.contains("ext4_read"));
        // Init text (freed after boot, still on the idle tasks' stacks).
        assert!(text.contains("start_kernel"));
        assert!(copy.covers(0xffff_ffff_8300_0180));
        assert!(!text.contains("bpf_prog") && !text.contains("ftrace_trampoline"));
        assert!(!text.contains("__pfx_") && !text.contains("some_data"));
        assert!(copy.covers(0xffff_ffff_8100_0210));
        assert!(copy.covers(0xffff_ffff_c000_1010));
        assert!(!copy.covers(0xffff_ffff_c010_0010), "BPF is read fresh");
        assert_eq!(
            fs::metadata(&copy.path).expect("meta").mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn the_copy_is_reused_and_replaced_when_modules_change() {
        let proc = fake_proc(MODULES);
        let dir = tempfile::tempdir().expect("temp dir");
        let first = Copy::in_dir(dir.path(), proc.path()).expect("a copy");
        // Reused: a kallsyms that changed is not read again.
        fs::write(proc.path().join("kallsyms"), "garbage\n").expect("kallsyms");
        let again = Copy::in_dir(dir.path(), proc.path()).expect("the copy");
        assert_eq!(first.path, again.path);
        // A module loaded: a new copy, the old one removed.
        fs::write(proc.path().join("kallsyms"), KALLSYMS).expect("kallsyms");
        let more = format!("{MODULES}xfs 4096 0 - Live 0xffffffffc0300000\n");
        fs::write(proc.path().join("modules"), more).expect("modules");
        let other = Copy::in_dir(dir.path(), proc.path()).expect("a new copy");
        assert_ne!(first.path, other.path);
        assert!(!first.path.exists());
        assert!(other.covers(0xffff_ffff_c030_0010));
    }

    #[test]
    fn transient_functions_are_read_apart() {
        let proc = fake_proc(MODULES);
        let syms = transient(&proc.path().join("kallsyms"));
        let names: Vec<&str> = syms.iter().map(|s| &*s.1).collect();
        assert_eq!(names, ["bpf_prog_0123456789abcdef_f", "ftrace_trampoline"]);
        assert_eq!(
            find(&syms, 0xffff_ffff_c010_0040).map(|s| (s.0, &*s.1)),
            Some((0xffff_ffff_c010_0000, "bpf_prog_0123456789abcdef_f"))
        );
        assert_eq!(find(&syms, 0xffff_ffff_c000_0000), None);
    }

    #[test]
    fn hidden_addresses_make_no_copy() {
        let proc = fake_proc("ext4 65536 1 - Live 0x0000000000000000\n");
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(Copy::in_dir(dir.path(), proc.path()).is_none());
        let hidden: String = KALLSYMS
            .lines()
            .map(|l| format!("0000000000000000{}\n", &l[16..]))
            .collect();
        fs::write(proc.path().join("modules"), "").expect("modules");
        fs::write(proc.path().join("kallsyms"), hidden).expect("kallsyms");
        assert!(Copy::in_dir(dir.path(), proc.path()).is_none());
    }
}
