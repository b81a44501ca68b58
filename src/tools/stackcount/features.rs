//! What this kernel can attach, probed before choosing how to trace a
//! pattern: kprobes (and their multi-attach link), uprobe multi-links,
//! and, after a failed fentry load, why it failed.

use std::path::Path;

use super::KernelAttach;
pub use crate::bpf::system::{kernel_version, parse_version};
use crate::error::{Error, Result};

/// True when the kernel has kprobes: the perf kprobe PMU (4.17+) or the
/// tracefs kprobe interface exists.
pub fn has_kprobes() -> bool {
    Path::new("/sys/bus/event_source/devices/kprobe/type").exists()
        || Path::new("/sys/kernel/tracing/kprobe_events").exists()
        || Path::new("/sys/kernel/debug/tracing/kprobe_events").exists()
}

/// True when multi-kprobe links may exist (5.18+); attaching still falls
/// back to single kprobes if the kernel lacks fprobe support.
pub fn may_have_kprobe_multi() -> bool {
    kernel_version() >= (5, 18)
}

/// True when uprobe multi-links may exist (6.6+). Loading a program of
/// that kind fails on older kernels, so it is only loaded when this holds.
pub fn may_have_uprobe_multi() -> bool {
    kernel_version() >= (6, 6)
}

/// Fails with one line when a forced way of attaching kernel functions
/// cannot work on this kernel. Multi-kprobes need fprobe, not kprobes, and
/// fentry needs BTF and no lockdown: both are only known when tried.
pub fn check_kernel_attach(how: KernelAttach) -> Result<()> {
    let (major, minor) = kernel_version();
    let why = match how {
        KernelAttach::Kprobe if !has_kprobes() => {
            "this kernel has no kprobes (CONFIG_KPROBES is off)".to_string()
        }
        KernelAttach::KprobeMulti if !may_have_kprobe_multi() => {
            format!("multi-kprobe links need Linux 5.18 or later, this is {major}.{minor}")
        }
        _ => return Ok(()),
    };
    Err(Error::Unsupported(format!(
        "--attach {}: {why}",
        how.name()
    )))
}

/// Why fentry may be refused, for the error message: kernel lockdown.
pub fn lockdown() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/security/lockdown").ok()?;
    let active = text
        .split_whitespace()
        .find(|w| w.starts_with('['))?
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    (active != "none").then_some(active)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("6.18.0-1-amd64"), (6, 18));
        assert_eq!(parse_version("5.4.0"), (5, 4));
        assert_eq!(parse_version("garbage"), (0, 0));
    }
}
