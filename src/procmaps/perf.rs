//! The kernel's reports of mappings, execs, forks and exits: a dummy
//! software perf event on every CPU that samples nothing but emits
//! `PERF_RECORD_MMAP2` (with the file's build id where the kernel can read
//! it), `COMM` (exec), `FORK` and `EXIT` records into a ring buffer per
//! CPU, each stamped with `CLOCK_MONOTONIC` time.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use libbpf_rs::libbpf_sys as sys;

use super::procfs::makedev;

/// Data pages per CPU (256 KiB with 4 KiB pages): room for some 2,000
/// mappings between two reads.
const DATA_PAGES: usize = 64;

/// What a record tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    /// An executable mapping was made.
    Mmap {
        pid: u32,
        time: u64,
        start: u64,
        len: u64,
        pgoff: u64,
        /// The file's build id, when the kernel read it.
        build_id: Option<Vec<u8>>,
        /// Device and inode, when no build id was given.
        inode: Option<(u64, u64)>,
        path: String,
    },
    /// The process called exec.
    Exec { pid: u32, time: u64 },
    /// A process (not a thread) was forked.
    Fork { pid: u32, ppid: u32, time: u64 },
    /// A thread exited (the process, when `pid == tid`).
    Exit { pid: u32, tid: u32, time: u64 },
    /// The kernel dropped this many records.
    Lost(u64),
}

impl Record {
    pub(crate) fn time(&self) -> u64 {
        match self {
            Record::Mmap { time, .. }
            | Record::Exec { time, .. }
            | Record::Fork { time, .. }
            | Record::Exit { time, .. } => *time,
            Record::Lost(_) => 0,
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}
fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Parses one whole record (header included). The records carry a
/// trailing `sample_id` of pid, tid and time (`sample_id_all` with
/// `PERF_SAMPLE_TID | PERF_SAMPLE_TIME`).
pub(crate) fn parse(rec: &[u8]) -> Option<Record> {
    let kind = u32_at(rec, 0)?;
    let misc = u16_at(rec, 4)? as u32;
    let body = rec.get(8..)?;
    let time = u64_at(rec, rec.len().checked_sub(8)?)?;
    match kind {
        sys::PERF_RECORD_MMAP2 => {
            let (build_id, inode) = if misc & sys::PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
                let n = (*body.get(32)? as usize).min(20);
                (Some(body.get(36..36 + n)?.to_vec()), None)
            } else {
                let dev = makedev(u32_at(body, 32)? as u64, u32_at(body, 36)? as u64);
                (None, Some((dev, u64_at(body, 40)?)))
            };
            let prot = u32_at(body, 56)?;
            if prot & libc::PROT_EXEC as u32 == 0 {
                return None;
            }
            let name_end = body.len().checked_sub(16)?;
            Some(Record::Mmap {
                pid: u32_at(body, 0)?,
                time,
                start: u64_at(body, 8)?,
                len: u64_at(body, 16)?,
                pgoff: u64_at(body, 24)?,
                build_id,
                inode,
                path: c_str(body.get(64..name_end)?),
            })
        }
        sys::PERF_RECORD_COMM if misc & sys::PERF_RECORD_MISC_COMM_EXEC != 0 => {
            Some(Record::Exec {
                pid: u32_at(body, 0)?,
                time,
            })
        }
        sys::PERF_RECORD_FORK => {
            let (pid, ppid) = (u32_at(body, 0)?, u32_at(body, 4)?);
            (pid != ppid).then_some(Record::Fork {
                pid,
                ppid,
                time: u64_at(body, 16)?,
            })
        }
        sys::PERF_RECORD_EXIT => Some(Record::Exit {
            pid: u32_at(body, 0)?,
            tid: u32_at(body, 8)?,
            time: u64_at(body, 16)?,
        }),
        sys::PERF_RECORD_LOST => Some(Record::Lost(u64_at(body, 8)?)),
        _ => None,
    }
}

/// One event and its mapped ring buffer.
pub(crate) struct Ring {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping is owned by this Ring alone and only touched through
// &mut self (or shared atomics), so moving it to another thread is sound.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base and len are exactly what mmap returned; nothing
        // refers to the mapping after the Ring is gone.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Asks the kernel for the records that keep mappings known: `mmap2`
/// (executable mappings, with build ids when `build_id`), `comm` (exec),
/// `fork` and `exit`, each stamped with the pid, tid and `CLOCK_MONOTONIC`
/// time at its end (`sample_id_all` with `PERF_SAMPLE_TID |
/// PERF_SAMPLE_TIME`, which the event's `sample_type` must hold and
/// [`parse`] expects).
pub(crate) fn track_mappings(attr: &mut sys::perf_event_attr, build_id: bool) {
    attr.sample_type |= (sys::PERF_SAMPLE_TID | sys::PERF_SAMPLE_TIME) as u64;
    attr.set_sample_id_all(1);
    // The kernel only reports mappings to events with `mmap` set;
    // `mmap2` chooses the record format.
    attr.set_mmap(1);
    attr.set_mmap2(1);
    attr.set_comm(1);
    attr.set_comm_exec(1);
    attr.set_task(1);
    attr.set_build_id(build_id as u64);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
}

impl Ring {
    fn open(cpu: u32, build_id: bool) -> io::Result<Ring> {
        // SAFETY: perf_event_attr is a plain C struct for which all zeroes
        // is a valid (empty) value.
        let mut attr: sys::perf_event_attr = unsafe { std::mem::zeroed() };
        attr.size = std::mem::size_of::<sys::perf_event_attr>() as u32;
        attr.type_ = sys::PERF_TYPE_SOFTWARE;
        attr.config = sys::PERF_COUNT_SW_DUMMY as u64;
        track_mappings(&mut attr, build_id);
        attr.set_watermark(1);
        attr.__bindgen_anon_2.wakeup_watermark = 4096;
        let fd = crate::system::perf_event_open(&attr, -1, cpu as i32)?;
        Ring::map(fd, DATA_PAGES)
    }

    /// Maps the ring buffer of event `fd`: `data_pages` (a power of two)
    /// pages of data after the control page.
    pub(crate) fn map(fd: OwnedFd, data_pages: usize) -> io::Result<Ring> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = page * (1 + data_pages);
        // SAFETY: a fresh shared mapping of the event's buffer; the result
        // is checked before use.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut ring = Ring {
            fd,
            base: base.cast(),
            len,
            data_offset: page,
            data_size: page * data_pages,
        };
        // SAFETY: the first page is the kernel's perf_event_mmap_page.
        let meta = unsafe { &*(ring.base as *const sys::perf_event_mmap_page) };
        if meta.data_size != 0 {
            ring.data_offset = meta.data_offset as usize;
            ring.data_size = meta.data_size as usize;
        }
        Ok(ring)
    }

    /// The event's descriptor (to poll, or to redirect other events into
    /// this buffer).
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn head_tail(&self) -> (&AtomicU64, &AtomicU64) {
        let meta = self.base as *mut sys::perf_event_mmap_page;
        // SAFETY: data_head and data_tail are 8-byte aligned u64 fields of
        // the mapped control page, shared with the kernel, which is what
        // atomics are for; the mapping lives as long as self.
        unsafe {
            (
                &*(std::ptr::addr_of_mut!((*meta).data_head) as *const AtomicU64),
                &*(std::ptr::addr_of_mut!((*meta).data_tail) as *const AtomicU64),
            )
        }
    }

    /// Parses every record waiting in the buffer and frees its room.
    fn read(&mut self, out: &mut Vec<Record>) {
        self.read_raw(|rec| {
            if let Some(r) = parse(rec) {
                out.push(r);
            }
        });
    }

    /// Hands every whole record waiting in the buffer (header included)
    /// to `f`, in order, and frees its room.
    pub(crate) fn read_raw(&mut self, f: impl FnMut(&[u8])) {
        let tail = self.walk(f);
        self.head_tail().1.store(tail, Ordering::Release);
    }

    /// Hands every whole record waiting in the buffer to `f`, in order,
    /// leaving them there for [`Ring::read_raw`].
    pub(crate) fn peek_raw(&self, f: impl FnMut(&[u8])) {
        self.walk(f);
    }

    /// Hands the waiting records to `f`; the tail past the last one.
    fn walk(&self, mut f: impl FnMut(&[u8])) -> u64 {
        let (head, tail_ptr) = self.head_tail();
        let head = head.load(Ordering::Acquire);
        let mut tail = tail_ptr.load(Ordering::Relaxed);
        // SAFETY: the data area lies inside the mapping, data_size bytes
        // from data_offset; the kernel does not write between tail and head
        // until data_tail moves past them.
        let data =
            unsafe { std::slice::from_raw_parts(self.base.add(self.data_offset), self.data_size) };
        let size = self.data_size as u64;
        let mut rec = Vec::new();
        while tail + 8 <= head {
            let at = (tail % size) as usize;
            let copy = |rec: &mut Vec<u8>, n: usize| {
                rec.clear();
                let first = n.min(self.data_size - at);
                rec.extend_from_slice(&data[at..at + first]);
                rec.extend_from_slice(&data[..n - first]);
            };
            copy(&mut rec, 8);
            let len = u16_at(&rec, 6).unwrap_or(0) as u64;
            if len < 8 || tail + len > head {
                break;
            }
            copy(&mut rec, len as usize);
            f(&rec);
            tail += len;
        }
        tail
    }
}

/// One ring buffer per online CPU.
pub(crate) struct Rings {
    rings: Vec<Ring>,
}

impl Rings {
    /// Opens the events on `cpus`, asking for build ids where the kernel
    /// gives them (5.12 and later).
    pub(crate) fn open(cpus: &[u32]) -> io::Result<Rings> {
        let with_ids = cpus.first().map(|&c| Ring::open(c, true));
        let build_id = !matches!(with_ids, Some(Err(_)));
        let mut rings = Vec::with_capacity(cpus.len());
        for (i, &cpu) in cpus.iter().enumerate() {
            rings.push(match (i, &with_ids) {
                (0, Some(Ok(_))) => continue,
                _ => Ring::open(cpu, build_id)?,
            });
        }
        if let Some(Ok(first)) = with_ids {
            rings.insert(0, first);
        }
        Ok(Rings { rings })
    }

    /// The descriptors to poll for data.
    pub(crate) fn fds(&self) -> Vec<RawFd> {
        self.rings.iter().map(|r| r.fd.as_raw_fd()).collect()
    }

    /// Every waiting record of every CPU, in time order.
    pub(crate) fn read_all(&mut self) -> Vec<Record> {
        let mut out = Vec::new();
        for r in &mut self.rings {
            r.read(&mut out);
        }
        out.sort_by_key(Record::time);
        out
    }
}

/// Calls `each` whenever one of the buffers `fds` fills past its
/// watermark, or every `timeout_ms`, until `stop` is set. The descriptors
/// must stay open meanwhile.
pub(crate) fn poll_until(
    fds: &[RawFd],
    stop: &std::sync::atomic::AtomicBool,
    timeout_ms: i32,
    mut each: impl FnMut(),
) {
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: polls is a valid array of pollfd of the given length; the
        // caller keeps the descriptors open.
        unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, timeout_ms) };
        for p in &mut polls {
            // The event's thread exited: poll would return at once from
            // now on (records of the threads that inherited the event may
            // still come, and are read every timeout_ms).
            if p.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                p.fd = -1;
            }
        }
        each();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, misc: u16, body: &[u8], time: u64) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_ne_bytes());
        r.extend_from_slice(&misc.to_ne_bytes());
        r.extend_from_slice(&((8 + body.len() + 16) as u16).to_ne_bytes());
        r.extend_from_slice(body);
        r.extend_from_slice(&[0; 8]);
        r.extend_from_slice(&time.to_ne_bytes());
        r
    }

    #[test]
    fn parses_mmap2_with_build_id() {
        let mut b = Vec::new();
        for v in [7u32, 8] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [0x1000u64, 0x2000, 0x3000] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.push(3);
        b.extend_from_slice(&[0; 3]);
        b.extend_from_slice(&[0xab, 0xcd, 0xef]);
        b.extend_from_slice(&[0; 17]);
        b.extend_from_slice(&(libc::PROT_READ | libc::PROT_EXEC).to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(b"/usr/bin/app\0\0\0\0");
        let r = record(
            sys::PERF_RECORD_MMAP2,
            sys::PERF_RECORD_MISC_MMAP_BUILD_ID as u16,
            &b,
            99,
        );
        assert_eq!(
            parse(&r),
            Some(Record::Mmap {
                pid: 7,
                time: 99,
                start: 0x1000,
                len: 0x2000,
                pgoff: 0x3000,
                build_id: Some(vec![0xab, 0xcd, 0xef]),
                inode: None,
                path: "/usr/bin/app".into(),
            })
        );
    }

    #[test]
    fn parses_task_records() {
        let mut b = Vec::new();
        for v in [10u32, 1, 10, 1] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&55u64.to_ne_bytes());
        let fork = record(sys::PERF_RECORD_FORK, 0, &b, 55);
        assert_eq!(
            parse(&fork),
            Some(Record::Fork {
                pid: 10,
                ppid: 1,
                time: 55
            })
        );
        let mut c = Vec::new();
        c.extend_from_slice(&10u32.to_ne_bytes());
        c.extend_from_slice(&10u32.to_ne_bytes());
        c.extend_from_slice(b"app\0\0\0\0\0");
        let exec = record(
            sys::PERF_RECORD_COMM,
            sys::PERF_RECORD_MISC_COMM_EXEC as u16,
            &c,
            60,
        );
        assert_eq!(parse(&exec), Some(Record::Exec { pid: 10, time: 60 }));
        let rename = record(sys::PERF_RECORD_COMM, 0, &c, 61);
        assert_eq!(parse(&rename), None, "a rename is no exec");
    }
}
