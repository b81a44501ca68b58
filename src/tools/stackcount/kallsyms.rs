//! Kernel functions by name, as bcc finds them: every text symbol of
//! `/proc/kallsyms` (aliases such as `__x64_sys_getppid` included, which
//! `available_filter_functions` leaves out), minus what bcc leaves out (init
//! and irq-entry code, `NOKPROBE_SYMBOL`s, perf functions, static-call
//! trampolines, `.cold` parts, the kprobe blacklist). Aliases of one
//! address are attached once, under the name ftrace knows, so that every
//! call is counted exactly once and fentry and multi-kprobes accept it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::CString;

use libbpf_rs::libbpf_sys;

/// One `/proc/kallsyms` line: address, type letter, name.
fn parse_line(line: &str) -> Option<(u64, char, &str)> {
    let mut f = line.split_whitespace();
    let addr = u64::from_str_radix(f.next()?, 16).ok()?;
    let kind = f.next()?.chars().next()?;
    let name = f.next()?;
    Some((addr, kind, name))
}

/// True for names bcc never attaches to, whatever the pattern.
fn never_attached(name: &str) -> bool {
    name.starts_with("_kbl_addr_")
        || name.starts_with("__perf")
        || name.starts_with("perf_")
        || name.starts_with("__SCT__")
        || is_cold(name)
}

/// gcc's split-off cold parts: `foo.cold` and `foo.cold.12`.
fn is_cold(name: &str) -> bool {
    match name.rsplit_once(".cold") {
        Some((_, rest)) => rest.is_empty() || rest.strip_prefix('.').is_some_and(is_digits),
        None => false,
    }
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Which section of vmlinux a symbol lies in, tracked line by line as bcc
/// does (kallsyms lists vmlinux in address order).
#[derive(Default)]
struct Sections {
    init: u8,
    irq: u8,
}

impl Sections {
    /// Feeds one name; true when it (or its section) is to be skipped.
    fn skip(&mut self, name: &str) -> bool {
        match self.init {
            0 if name == "__init_begin" => {
                self.init = 1;
                return true;
            }
            1 => {
                if name == "__init_end" {
                    self.init = 2;
                }
                return true;
            }
            _ => {}
        }
        match self.irq {
            0 if name == "__irqentry_text_start" => {
                self.irq = 1;
                true
            }
            // The end marker can come first when the section is empty.
            0 if name == "__irqentry_text_end" => {
                self.irq = 2;
                true
            }
            1 => {
                if name == "__irqentry_text_end" {
                    self.irq = 2;
                }
                true
            }
            _ => false,
        }
    }
}

/// The names to attach for the text symbols of `kallsyms` that `matches`
/// accepts and `blacklist` does not hold, one per address: the name at
/// that address that `traceable` accepts (one ftrace or BTF knows), else
/// the first one matched. Sorted. Addresses hidden as zero (no root) are
/// not merged.
pub fn functions(
    kallsyms: &str,
    traceable: impl Fn(&str) -> bool,
    blacklist: &HashSet<String>,
    matches: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut sections = Sections::default();
    let mut matched: HashMap<u64, String> = HashMap::new();
    let mut unmerged = BTreeSet::new();
    for (addr, kind, name) in kallsyms.lines().filter_map(parse_line) {
        if sections.skip(name) || !matches!(kind, 't' | 'T' | 'w' | 'W') {
            continue;
        }
        if never_attached(name) || blacklist.contains(name) || !matches(name) {
            continue;
        }
        if addr == 0 {
            unmerged.insert(name.to_string());
        } else {
            matched.entry(addr).or_insert_with(|| name.to_string());
        }
    }
    // A second pass finds the ftrace name of each matched address.
    for (addr, _, name) in kallsyms.lines().filter_map(parse_line) {
        if let Some(chosen) = matched.get_mut(&addr) {
            if *chosen != name && !traceable(chosen) && traceable(name) {
                *chosen = name.to_string();
            }
        }
    }
    unmerged.extend(matched.into_values());
    unmerged.into_iter().collect()
}

/// The kernel's BTF, to ask whether a function has a type (fentry needs
/// one) when ftrace's list of functions cannot be read (lockdown).
pub struct VmlinuxBtf(*mut libbpf_sys::btf);

impl VmlinuxBtf {
    pub fn load() -> Option<Self> {
        // SAFETY: no arguments; returns an owned btf, or NULL on error.
        let btf = unsafe { libbpf_sys::btf__load_vmlinux_btf() };
        (!btf.is_null()).then_some(VmlinuxBtf(btf))
    }

    /// True when `name` is a function in the BTF.
    pub fn has_function(&self, name: &str) -> bool {
        let Ok(c) = CString::new(name) else {
            return false;
        };
        // SAFETY: self.0 is a live btf; c is a NUL-terminated string.
        let id = unsafe {
            libbpf_sys::btf__find_by_name_kind(self.0, c.as_ptr(), libbpf_sys::BTF_KIND_FUNC)
        };
        id > 0
    }
}

impl Drop for VmlinuxBtf {
    fn drop(&mut self) {
        // SAFETY: self.0 came from btf__load_vmlinux_btf and is freed once.
        unsafe { libbpf_sys::btf__free(self.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81001000 T __do_sys_getppid
ffffffff81001000 T __x64_sys_getppid
ffffffff81001000 T __ia32_sys_getppid
ffffffff81002000 t vfs_read
ffffffff81002100 t vfs_read.cold
ffffffff81002200 t perf_event_read
ffffffff81002300 T _kbl_addr_do_int3
ffffffff81002400 T __SCT__tp_func_sys_enter
ffffffff81002500 T do_int3
ffffffff81002600 T __irqentry_text_start
ffffffff81002700 T irq_entry_fn
ffffffff81002800 T __irqentry_text_end
ffffffff81002900 D some_data
ffffffff83000000 T __init_begin
ffffffff83000100 t init_only_fn
ffffffff83000200 T __init_end
ffffffffc0000000 t mod_fn\t[mymod]
";

    fn set(names: &[&str]) -> HashSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn find(pattern: &str) -> Vec<String> {
        let traceable = set(&["__do_sys_getppid", "vfs_read", "mod_fn"]);
        let blacklist = set(&["do_int3"]);
        let re = regex_lite::Regex::new(&format!("^(?:{pattern})$")).unwrap();
        functions(
            KALLSYMS,
            |n| traceable.contains(n),
            &blacklist,
            |n| re.is_match(n),
        )
    }

    #[test]
    fn regression_syscall_aliases_resolve_to_the_ftrace_name() {
        assert_eq!(find("__x64_sys_getppid"), ["__do_sys_getppid"]);
        // Three aliases of one address are attached once.
        assert_eq!(find(".*sys_getppid"), ["__do_sys_getppid"]);
    }

    #[test]
    fn bccs_exclusions_hold() {
        assert_eq!(find("vfs_read.*"), ["vfs_read"]);
        for excluded in [
            "perf_event_read",
            "_kbl_addr_do_int3",
            "__SCT__tp_func_sys_enter",
            "do_int3",
            "irq_entry_fn",
            "init_only_fn",
            "some_data",
        ] {
            assert!(find(excluded).is_empty(), "{excluded} attached");
        }
        assert_eq!(find("mod_fn"), ["mod_fn"]);
    }

    #[test]
    fn hidden_addresses_are_not_merged() {
        let text = "0000000000000000 T a_fn\n0000000000000000 T b_fn\n";
        let none = HashSet::new();
        assert_eq!(
            functions(text, |_| false, &none, |n| n.ends_with("_fn")),
            ["a_fn", "b_fn"]
        );
    }

    #[test]
    fn cold_parts_are_recognized() {
        assert!(is_cold("foo.cold") && is_cold("foo.cold.12"));
        assert!(!is_cold("foo.colder") && !is_cold("foo"));
    }
}
