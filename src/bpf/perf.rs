//! Opening the perf events that drive sampling: the software CPU clock,
//! either one event per CPU (system-wide) or one per target thread.

use std::io;
use std::os::fd::OwnedFd;

use libbpf_rs::libbpf_sys as sys;

/// How often an event fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// Samples per second.
    Frequency(u64),
    /// One sample every N nanoseconds of CPU clock.
    Period(u64),
}

/// Where an event counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every task on one CPU.
    Cpu(u32),
    /// One thread, on any CPU or on `cpu` only; `inherit` makes threads and
    /// processes it creates later count too.
    Thread {
        tid: u32,
        cpu: Option<u32>,
        inherit: bool,
    },
}

/// Opens a software CPU-clock sampling event, enabled at once.
pub fn open_cpu_clock(scope: Scope, sampling: Sampling) -> io::Result<OwnedFd> {
    // SAFETY: perf_event_attr is a plain C struct for which all zeroes is a
    // valid (empty) value.
    let mut attr: sys::perf_event_attr = unsafe { std::mem::zeroed() };
    attr.size = std::mem::size_of::<sys::perf_event_attr>() as u32;
    attr.type_ = sys::PERF_TYPE_SOFTWARE;
    attr.config = sys::PERF_COUNT_SW_CPU_CLOCK as u64;
    match sampling {
        Sampling::Frequency(hz) => {
            attr.__bindgen_anon_1.sample_freq = hz;
            attr.set_freq(1);
        }
        Sampling::Period(n) => attr.__bindgen_anon_1.sample_period = n,
    }
    let (pid, cpu) = match scope {
        Scope::Cpu(cpu) => (-1, cpu as i32),
        Scope::Thread { tid, cpu, inherit } => {
            attr.set_inherit(inherit as u64);
            (tid as i32, cpu.map_or(-1, |c| c as i32))
        }
    };
    crate::system::perf_event_open(&attr, pid, cpu)
}

/// Opens a CPU-clock event for `scope` and attaches `prog` to it: the
/// link, or `None` for a thread that exited between being listed and
/// being opened. `name` says which tool's program it is, for errors.
pub fn attach_cpu_clock(
    prog: &libbpf_rs::ProgramMut<'_>,
    scope: Scope,
    sampling: Sampling,
    name: &str,
) -> crate::error::Result<Option<libbpf_rs::Link>> {
    use crate::error::Error;
    use std::os::fd::{AsRawFd, IntoRawFd};

    let fd = match open_cpu_clock(scope, sampling) {
        Ok(fd) => fd,
        Err(e)
            if e.raw_os_error() == Some(libc::ESRCH) && matches!(scope, Scope::Thread { .. }) =>
        {
            return Ok(None)
        }
        Err(source) => {
            let what = match scope {
                Scope::Cpu(c) => format!("CPU clock (CPU {c})"),
                Scope::Thread { tid, .. } => format!("CPU clock (thread {tid})"),
            };
            let hint = match source.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) => " (run as root, or grant CAP_PERFMON and CAP_BPF; check /proc/sys/kernel/perf_event_paranoid)",
                Some(libc::EINVAL) => " (the frequency may be above /proc/sys/kernel/perf_event_max_sample_rate)",
                _ => "",
            };
            return Err(Error::PerfEvent { what, source, hint });
        }
    };
    let link = prog
        .attach_perf_event(fd.as_raw_fd())
        .map_err(|source| Error::Attach {
            what: format!("the {name} program to a perf event"),
            source,
        })?;
    // libbpf's perf-event link owns the descriptor from here on and
    // closes it when the link is dropped.
    let _ = fd.into_raw_fd();
    Ok(Some(link))
}
