//! Facts about the running system, the lowest layer: privileges, BTF, the
//! kernel's version, online CPUs, PID namespaces, process threads, limits,
//! and the `perf_event_open` call. BPF loaders, the perf-event collector
//! and the mapping tracker all stand on it; it imports nothing of flare's
//! but its errors.

use std::fs;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Fails early with a clear message when flare cannot load BPF programs.
pub fn check_environment() -> Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 && !has_bpf_caps() {
        return Err(Error::NotPermitted);
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err(Error::NoBtf);
    }
    check_kernel_version(kernel_version())
}

/// The oldest kernel flare supports.
pub const OLDEST_KERNEL: (u32, u32) = (5, 8);

/// Fails with one line naming what a kernel older than [`OLDEST_KERNEL`]
/// lacks. (0, 0), an unreadable version, is let through: loading says.
pub fn check_kernel_version((major, minor): (u32, u32)) -> Result<()> {
    if (major, minor) == (0, 0) || (major, minor) >= OLDEST_KERNEL {
        return Ok(());
    }
    Err(Error::Unsupported(format!(
        "Linux {major}.{minor} is older than {}.{}, the oldest flare supports: it has no BPF ring buffers (5.8), which flare reports through (it also needs the bpf_get_ns_current_pid_tgid helper, 5.7, and BTF)",
        OLDEST_KERNEL.0, OLDEST_KERNEL.1
    )))
}

/// True when the effective capability set has CAP_BPF (39) and
/// CAP_PERFMON (38), or CAP_SYS_ADMIN (21).
fn has_bpf_caps() -> bool {
    let Ok(status) = fs::read_to_string("/proc/self/status") else {
        return false;
    };
    let Some(eff) = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    else {
        return false;
    };
    let has = |bit: u32| eff & (1u64 << bit) != 0;
    (has(39) && has(38)) || has(21)
}

/// Raises RLIMIT_MEMLOCK for kernels that still charge BPF memory to it.
/// Newer kernels charge the memory cgroup instead, and an unprivileged
/// container may not raise the limit at all: failure is not an error.
pub fn raise_memlock() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass and nothing else.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
}

/// Raises the open-file soft limit to the hard limit: per-thread perf
/// events take one descriptor per thread.
pub fn raise_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass; setrlimit reads it.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Parses a kernel CPU list such as `0-3,5,7-8`.
pub fn parse_cpu_list(s: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    cpus.extend(a..=b);
                }
            }
            None => cpus.extend(part.parse::<u32>().ok()),
        }
    }
    cpus
}

/// The online CPUs, and the list as the kernel writes it (for messages).
pub fn online_cpus() -> Result<(Vec<u32>, String)> {
    let path = "/sys/devices/system/cpu/online";
    let text = fs::read_to_string(path).map_err(|source| Error::Io {
        what: format!("reading {path}"),
        source,
    })?;
    Ok((parse_cpu_list(&text), text.trim().to_string()))
}

/// Checks that `cpu` is online.
pub fn check_cpu(cpu: u32) -> Result<()> {
    let (cpus, online) = online_cpus()?;
    if cpus.contains(&cpu) {
        Ok(())
    } else {
        Err(Error::NoSuchCpu { cpu, online })
    }
}

/// The inode number of the initial PID namespace (PROC_PID_INIT_INO).
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;

/// flare's own PID namespace as (device, inode), or `None` when flare runs
/// in the initial namespace and kernel PIDs are already what users see.
pub fn pid_namespace() -> Option<(u64, u64)> {
    let meta = fs::metadata("/proc/self/ns/pid").ok()?;
    if meta.ino() == PROC_PID_INIT_INO {
        None
    } else {
        Some((meta.dev(), meta.ino()))
    }
}

/// Fails unless process `pid` exists.
pub fn check_process(pid: u32) -> Result<()> {
    // A thread id also has a /proc entry (hidden from listings), so check
    // that it leads its thread group.
    match fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(s)
            if s.lines()
                .any(|l| l.split_whitespace().eq(["Tgid:", &pid.to_string()])) =>
        {
            Ok(())
        }
        _ => Err(Error::NoSuchProcess(pid)),
    }
}

/// Fails unless thread `tid` exists.
pub fn check_thread(tid: u32) -> Result<()> {
    if Path::new(&format!("/proc/{tid}/status")).exists() {
        Ok(())
    } else {
        Err(Error::NoSuchThread(tid))
    }
}

/// The thread ids of process `pid`.
pub fn threads(pid: u32) -> Result<Vec<u32>> {
    let dir = fs::read_dir(format!("/proc/{pid}/task")).map_err(|_| Error::NoSuchProcess(pid))?;
    Ok(dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}

/// `kernel.perf_event_max_stack`: the frames the kernel's own stack walks
/// (perf callchains, `bpf_get_stack`) stop at; its default, 127, where
/// it cannot be read.
pub fn perf_event_max_stack() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(127)
}

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
        .map(|&c| c.to_ne_bytes()[0])
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

/// Opens a perf event (`perf_event_open(attr, pid, cpu, -1)`), not yet
/// mapped.
pub fn perf_event_open(
    attr: &libbpf_rs::libbpf_sys::perf_event_attr,
    pid: i32,
    cpu: i32,
) -> io::Result<OwnedFd> {
    // SAFETY: attr is initialised and outlives the call; the syscall
    // returns a new descriptor or -1 and keeps no pointer.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const libbpf_rs::libbpf_sys::perf_event_attr,
            pid,
            cpu,
            -1,
            libbpf_rs::libbpf_sys::PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_older_than_5_8_are_refused_in_one_line() {
        let err = check_kernel_version((5, 4)).unwrap_err().to_string();
        assert!(err.starts_with("Linux 5.4 is older than 5.8"), "{err}");
        assert!(err.contains("ring buffers") && !err.contains('\n'));
        assert!(check_kernel_version((4, 19)).is_err());
        assert!(check_kernel_version((5, 8)).is_ok());
        assert!(check_kernel_version((5, 10)).is_ok());
        assert!(check_kernel_version((6, 18)).is_ok());
        assert!(check_kernel_version((0, 0)).is_ok());
    }

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("6.18.0-1-amd64"), (6, 18));
        assert_eq!(parse_version("5.4.0"), (5, 4));
        assert_eq!(parse_version("garbage"), (0, 0));
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,5,7-8\n"), vec![0, 1, 2, 3, 5, 7, 8]);
        assert_eq!(parse_cpu_list("0"), vec![0]);
        assert_eq!(parse_cpu_list(""), Vec::<u32>::new());
    }
}
