//! Opening perf-event mode's sampling events: a software CPU clock per
//! CPU for each target thread, `inherit` set so that threads and
//! processes they start are sampled too (as `perf record` does), every
//! event of a CPU writing into that CPU's one ring buffer. The events
//! also carry the mapping, exec, fork and exit records of their targets
//! ([`crate::procmaps`]'s `track_mappings`), which is how mappings are
//! known without the system-wide events a tracker needs privileges for.
//! What the kernel refuses becomes an error that names the way out.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use libbpf_rs::libbpf_sys as sys;

use super::sample::{Layout, REGS_MASK};
use crate::bpf::perf::Sampling;
use crate::error::{Error, Result};
use crate::procmaps::perf::{track_mappings, Ring};
use crate::system::perf_event_open;

/// Bytes of user stack copied with each sample (`--unwind auto|dwarf`):
/// native stacks some 200-2,000 frames deep, a JVM's some 130 Java
/// frames (a Java frame takes 100-150 bytes of stack).
pub const STACK_BYTES: u32 = 16 * 1024;

/// The copy for a JVM: the most perf events copy (the sample's size is
/// 16 bits; the kernel trims the copy to fit beside the sample's other
/// fields), some 500 Java frames. Four times the bytes per sample, so
/// only for processes that map HotSpot.
pub const JVM_STACK_BYTES: u32 = 65528;

/// Data bytes over all CPUs' buffers tried first: each sample holds its
/// copy of the user stack ([`STACK_BYTES`]), so a buffer of 1 MiB holds
/// some 60 samples, a tenth of a second of three busy threads at 199 Hz,
/// and a thread emptying it held up longer (a busy machine, an emulated
/// guest: half a second seen) loses samples.
/// Split over the CPUs, between [`MIN_CPU_BYTES`] and [`MAX_CPU_BYTES`]
/// each; halved while the kernel refuses (an unprivileged user may lock
/// only `kernel.perf_event_mlock_kb` per CPU, plus RLIMIT_MEMLOCK).
const TOTAL_BYTES: usize = 16 << 20;
const MIN_CPU_BYTES: usize = 1 << 20;
const MAX_CPU_BYTES: usize = 4 << 20;
const MIN_PAGES: usize = 8;

/// Data pages per CPU tried first for `cpus` CPUs of `page`-byte pages
/// (a power of two).
fn pages_per_cpu(cpus: usize, page: usize) -> usize {
    let bytes = (TOTAL_BYTES / cpus.max(1)).clamp(MIN_CPU_BYTES, MAX_CPU_BYTES);
    let pages = (bytes / page.max(1)).max(MIN_PAGES);
    // The largest power of two not above it.
    1 << (usize::BITS - 1 - pages.leading_zeros())
}

/// `_IO('$', 5)` (linux/perf_event.h): send this event's records to
/// another event's buffer.
const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;

/// What to open.
pub struct Plan<'a> {
    pub sampling: Sampling,
    pub layout: Layout,
    /// Kernel stacks (and kernel samples) too.
    pub kernel: bool,
    /// Threads to sample, with `inherit`.
    pub tids: &'a [u32],
    pub inherit: bool,
    pub cpus: &'a [u32],
    /// Enabled when the (held) target calls exec: a launched command.
    pub on_exec: bool,
    /// Bytes of user stack each sample copies ([`STACK_BYTES`] or
    /// [`JVM_STACK_BYTES`]).
    pub stack_bytes: u32,
    /// Every sample wakes the reader: Python frames are read then, and
    /// Java frames walked over the JIT's live code cache, which changes
    /// under a sample read late (woken at half of a 4 MiB buffer, the Java
    /// test's parseRequest came out 1.7 points low on average).
    pub wake_each: bool,
}

/// The open events: one ring buffer per CPU, and the events redirected
/// into them.
pub struct Events {
    pub rings: Vec<Ring>,
    /// The CPU of each buffer.
    ring_cpus: Vec<u32>,
    /// Whether the events ask for build ids (the kernel refuses them
    /// before 5.12).
    build_id: bool,
    /// Events writing into another's buffer: sampling stops when they
    /// are closed.
    pub redirected: Vec<OwnedFd>,
}

fn attr(plan: &Plan<'_>, build_id: bool) -> sys::perf_event_attr {
    // SAFETY: perf_event_attr is a plain C struct for which all zeroes is a
    // valid (empty) value.
    let mut a: sys::perf_event_attr = unsafe { std::mem::zeroed() };
    a.size = std::mem::size_of::<sys::perf_event_attr>() as u32;
    a.type_ = sys::PERF_TYPE_SOFTWARE;
    a.config = sys::PERF_COUNT_SW_CPU_CLOCK as u64;
    match plan.sampling {
        Sampling::Frequency(hz) => {
            a.__bindgen_anon_1.sample_freq = hz;
            a.set_freq(1);
        }
        Sampling::Period(n) => a.__bindgen_anon_1.sample_period = n,
    }
    a.sample_type = plan.layout.sample_type();
    // Sample times on the clock the timeline and the workloads use (the
    // default, the scheduler's clock, drifts from it by milliseconds).
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    if plan.layout.user_stack {
        a.sample_regs_user = REGS_MASK;
        a.sample_stack_user = plan.stack_bytes;
        // The user stack is walked from the copy, not by the kernel.
        a.set_exclude_callchain_user(1);
    }
    a.set_exclude_kernel(!plan.kernel as u64);
    a.set_exclude_callchain_kernel(!plan.kernel as u64);
    a.set_exclude_hv(1);
    a.set_inherit(plan.inherit as u64);
    if plan.on_exec {
        a.set_disabled(1);
        a.set_enable_on_exec(1);
    }
    track_mappings(&mut a, build_id);
    if plan.wake_each {
        a.set_watermark(0);
        a.__bindgen_anon_2.wakeup_events = 1;
    }
    a
}

/// Opens every event of `plan`. `refused` turns a refusal (EACCES/EPERM)
/// for thread `tid` into the error to show.
pub fn open(plan: &Plan<'_>, refused: &dyn Fn(u32, io::Error) -> Error) -> Result<Events> {
    let mut opener = Opener {
        plan,
        refused,
        build_id: true,
    };
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let mut pages = pages_per_cpu(plan.cpus.len(), page);
    let mut events = Events {
        rings: Vec::new(),
        ring_cpus: Vec::new(),
        build_id: true,
        redirected: Vec::new(),
    };
    for &cpu in plan.cpus {
        for &tid in plan.tids {
            let Some(fd) = opener.open(tid, cpu)? else {
                continue;
            };
            match events.ring_of(cpu) {
                Some(ring) => events.redirect(fd, ring, tid, cpu)?,
                None => {
                    events.rings.push(map(fd, &mut pages)?);
                    events.ring_cpus.push(cpu);
                }
            }
        }
    }
    if events.rings.is_empty() {
        return Err(Error::Unsupported(
            "no thread of the target is left to sample (has it exited?)".into(),
        ));
    }
    events.build_id = opener.build_id;
    Ok(events)
}

/// How many times [`cover_late_threads`] lists the target's threads.
const LATE_ROUNDS: usize = 8;

/// Opens events on the threads of `pids` that started while `open` ran
/// and did not inherit its events: a thread its parent started between
/// the listing of threads and the opening of the parent's event. Missed,
/// such a thread goes unsampled, and every thread it starts: a JVM's
/// launcher starts the thread that starts all the others within
/// milliseconds of its exec, so a JVM attached to that early was not
/// sampled at all. A thread that inherited the events is told apart by
/// the fork record the inherited events wrote into the buffers.
/// `opened` holds the threads with events of their own (all of them after).
pub fn cover_late_threads(
    events: &mut Events,
    plan: &Plan<'_>,
    pids: &[u32],
    opened: &mut HashSet<u32>,
    refused: &dyn Fn(u32, io::Error) -> Error,
) -> Result<()> {
    let mut opener = Opener {
        plan,
        refused,
        build_id: events.build_id,
    };
    for _ in 0..LATE_ROUNDS {
        let mut new: Vec<u32> = pids
            .iter()
            .filter_map(|&pid| crate::system::threads(pid).ok())
            .flatten()
            .filter(|t| !opened.contains(t))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        // A thread shows in /proc a few instructions before its fork
        // record is written: look twice before taking it as uncovered.
        let mut forked = events.forked();
        new.retain(|t| !forked.contains(t));
        if !new.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(2));
            forked = events.forked();
            new.retain(|t| !forked.contains(t));
        }
        opened.extend(forked);
        for &tid in &new {
            opened.insert(tid);
            for &cpu in plan.cpus {
                let Some(fd) = opener.open(tid, cpu)? else {
                    break;
                };
                match events.ring_of(cpu) {
                    Some(ring) => events.redirect(fd, ring, tid, cpu)?,
                    // No buffer on this CPU (none of the first threads
                    // opened there): leave it unsampled rather than map one.
                    None => drop(fd),
                }
            }
        }
    }
    Ok(())
}

impl Events {
    /// The buffer of `cpu`'s events, if one was mapped.
    fn ring_of(&self, cpu: u32) -> Option<usize> {
        self.ring_cpus.iter().position(|&c| c == cpu)
    }

    /// Makes event `fd` write into buffer `ring`.
    fn redirect(&mut self, fd: OwnedFd, ring: usize, tid: u32, cpu: u32) -> Result<()> {
        // SAFETY: both are open perf event descriptors; the ioctl
        // takes the target descriptor by value.
        let rc = unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                PERF_EVENT_IOC_SET_OUTPUT,
                self.rings[ring].fd(),
            )
        };
        if rc != 0 {
            return Err(Error::PerfEvent {
                what: format!("CPU clock (thread {tid}, CPU {cpu})"),
                source: io::Error::last_os_error(),
                hint: " (cannot share the CPU's buffer)",
            });
        }
        self.redirected.push(fd);
        Ok(())
    }

    /// The threads whose fork records wait in the buffers (left there for
    /// the reader): the threads that inherited the events.
    fn forked(&self) -> HashSet<u32> {
        let mut tids = HashSet::new();
        for ring in &self.rings {
            ring.peek_raw(|rec| {
                if let Some((tid, _)) = super::sample::parse_fork(rec) {
                    tids.insert(tid);
                }
            });
        }
        tids
    }
}

/// Opens the sampling event of one thread on one CPU, asking for build
/// ids until the kernel refuses them (before 5.12).
struct Opener<'a> {
    plan: &'a Plan<'a>,
    refused: &'a dyn Fn(u32, io::Error) -> Error,
    build_id: bool,
}

impl Opener<'_> {
    /// The event of `tid` on `cpu`; None if the thread is gone.
    fn open(&mut self, tid: u32, cpu: u32) -> Result<Option<OwnedFd>> {
        let fd = match perf_event_open(&attr(self.plan, self.build_id), tid as i32, cpu as i32) {
            // Build ids in mmap2 records: 5.12 and later.
            Err(e) if self.build_id && e.raw_os_error() == Some(libc::EINVAL) => {
                self.build_id = false;
                perf_event_open(&attr(self.plan, false), tid as i32, cpu as i32)
            }
            r => r,
        };
        match fd {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(None),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                Err((self.refused)(tid, e))
            }
            Err(source) => {
                let hint = match source.raw_os_error() {
                    Some(libc::EINVAL) => {
                        " (the frequency may be above /proc/sys/kernel/perf_event_max_sample_rate)"
                    }
                    Some(libc::EMFILE) => " (too many open files: raise ulimit -n)",
                    _ => "",
                };
                Err(Error::PerfEvent {
                    what: format!("CPU clock (thread {tid}, CPU {cpu})"),
                    source,
                    hint,
                })
            }
        }
    }
}

/// Maps an event's buffer, as large as the kernel lets this user lock.
fn map(fd: OwnedFd, pages: &mut usize) -> Result<Ring> {
    loop {
        // The descriptor is needed again after a refusal: map a duplicate.
        let dup = fd.try_clone().map_err(|source| Error::Io {
            what: "duplicating a perf event descriptor".into(),
            source,
        })?;
        match Ring::map(dup, *pages) {
            Ok(r) => return Ok(r),
            Err(e)
                if *pages > MIN_PAGES
                    && matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOMEM)) =>
            {
                *pages /= 2;
            }
            Err(source) => {
                return Err(Error::PerfEvent {
                    what: "sampling buffer of the CPU clock".into(),
                    source,
                    hint: " (the perf buffers of this user exceed kernel.perf_event_mlock_kb and ulimit -l: close other perf sessions or raise them)",
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::pages_per_cpu;

    #[test]
    fn buffers_share_a_budget_within_bounds() {
        // 16 MiB over the CPUs, 1-4 MiB each, in powers of two of pages.
        assert_eq!(pages_per_cpu(1, 4096), 1024);
        assert_eq!(pages_per_cpu(2, 4096), 1024);
        assert_eq!(pages_per_cpu(4, 4096), 1024);
        assert_eq!(pages_per_cpu(6, 4096), 512);
        assert_eq!(pages_per_cpu(16, 4096), 256);
        assert_eq!(pages_per_cpu(256, 4096), 256);
        assert_eq!(pages_per_cpu(0, 4096), 1024);
        // 64 KiB pages (some arm64 kernels): the same bytes.
        assert_eq!(pages_per_cpu(2, 65536), 64);
        assert_eq!(pages_per_cpu(64, 65536), 16);
    }
}
