//! What this kernel can attach, probed before choosing how to trace a
//! pattern: kprobes (and their multi-attach link), uprobe multi-links,
//! and, after a failed fentry load, why it failed.

use std::path::Path;

/// The running kernel's (major, minor) version, from uname.
pub fn kernel_version() -> (u32, u32) {
    // SAFETY: utsname is plain data, valid when zeroed; uname fills it.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uts is a valid, writable utsname.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return (0, 0);
    }
    let release: Vec<u8> = uts
        .release
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    parse_version(&String::from_utf8_lossy(&release))
}

/// `6.18.0-foo` -> (6, 18).
pub fn parse_version(release: &str) -> (u32, u32) {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor)
}

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
