//! Reading another process's memory, for the runtimes' structures and names.
//!
//! `process_vm_readv` reads what the process has mapped, without stopping
//! it; a read of unmapped memory is an error, never a fault in flare.
//! Tests read a fake memory ([`Memory`] over a buffer). [`Pages`] serves
//! one walk's many small reads from a few whole pages.

use std::cell::RefCell;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io;

/// Memory of one process, read at its addresses.
pub trait Memory {
    /// Fills `buf` from `addr`; an error unless all of it was read.
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()>;

    fn read_u64(&self, addr: u64) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    fn read_u32(&self, addr: u64) -> io::Result<u32> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_ne_bytes(b))
    }
}

/// A live process's memory.
#[derive(Clone, Copy, Debug)]
pub struct ProcessMemory {
    pub pid: u32,
}

impl Memory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `local` covers exactly `buf`, which is writable for its
        // length; the remote range is only read, by the kernel, which
        // checks it against the target's mappings.
        let n =
            unsafe { libc::process_vm_readv(self.pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != buf.len() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }
}

/// The unit [`Pages`] reads: the smallest page of every architecture
/// flare runs on, so that one is readable whole when any byte of it is.
const PAGE: u64 = 4096;

/// Most pages one [`Pages`] holds (1 MiB); reads past them go to the
/// memory itself, one system call each.
const MAX_PAGES: usize = 256;

/// Memory `M` read a whole page at a time, each page once: the reads of
/// one walk at one moment. A walk of a deep stack reads thousands of
/// words (a CPython frame's fields and its code object's), which sit on
/// a few pages (3.11's frames share the thread's data stack chunk, and a
/// recursion repeats its code objects): a few system calls instead of
/// thousands. Reads longer than a page go to the memory whole. A page is
/// what the process held when it was read; the
/// walk's own checks (code objects' types, cookies) stay the judge of
/// what it finds there.
pub struct Pages<M> {
    mem: M,
    /// By page address; `None`: the page could not be read.
    pages: RefCell<HashMap<u64, Option<Box<[u8]>>>>,
}

impl<M: Memory> Pages<M> {
    pub fn new(mem: M) -> Self {
        Pages {
            mem,
            pages: RefCell::new(HashMap::new()),
        }
    }

    /// Copies `buf.len()` bytes at `off` in page `page` into `buf` (all
    /// within the page); reads the page when not yet held.
    fn copy(&self, page: u64, off: usize, buf: &mut [u8]) -> io::Result<()> {
        let mut pages = self.pages.borrow_mut();
        let held = pages.len();
        let page_bytes = match pages.entry(page) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(_) if held >= MAX_PAGES => {
                return self.mem.read(page.wrapping_add(off as u64), buf);
            }
            Entry::Vacant(e) => {
                let mut bytes = vec![0u8; PAGE as usize].into_boxed_slice();
                e.insert(self.mem.read(page, &mut bytes).ok().map(|()| bytes))
            }
        };
        let bytes = page_bytes
            .as_deref()
            .and_then(|p| p.get(off..off.checked_add(buf.len())?))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(bytes);
        Ok(())
    }
}

impl<M: Memory> Memory for Pages<M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        // A read of more than a page (a line table, a name's bytes) is one
        // system call of its own, not one per page it covers.
        if buf.len() > PAGE as usize {
            return self.mem.read(addr, buf);
        }
        let mut done = 0;
        while done < buf.len() {
            let at = addr
                .checked_add(done as u64)
                .ok_or(io::ErrorKind::UnexpectedEof)?;
            let page = at & !(PAGE - 1);
            let off = (at - page) as usize;
            let n = (PAGE as usize - off).min(buf.len() - done);
            self.copy(page, off, &mut buf[done..done + n])?;
            done += n;
        }
        Ok(())
    }
}

/// A buffer standing for memory from `base` on (tests).
#[derive(Clone, Debug, Default)]
pub struct Buffer {
    pub base: u64,
    pub bytes: Vec<u8>,
}

impl Memory for Buffer {
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let start = addr
            .checked_sub(self.base)
            .and_then(|s| usize::try_from(s).ok())
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        let src = start
            .checked_add(buf.len())
            .and_then(|end| self.bytes.get(start..end))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_refuses_unmapped_memory() {
        let value: u64 = 0x1122_3344_5566_7788;
        let me = ProcessMemory {
            pid: std::process::id(),
        };
        assert_eq!(me.read_u64(&value as *const u64 as u64).unwrap(), value);
        assert!(me.read_u64(8).is_err());
    }

    /// A memory that counts its reads.
    struct Counted<'a>(&'a Buffer, &'a std::cell::Cell<usize>);

    impl Memory for Counted<'_> {
        fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
            self.1.set(self.1.get() + 1);
            self.0.read(addr, buf)
        }
    }

    #[test]
    fn pages_read_each_page_once_and_across_page_ends() {
        let b = Buffer {
            base: 0x10000,
            bytes: (0..3 * PAGE).map(|i| (i % 251) as u8).collect(),
        };
        let reads = std::cell::Cell::new(0);
        let pages = Pages::new(Counted(&b, &reads));
        for addr in (0x10000..0x11000).step_by(8) {
            assert_eq!(pages.read_u64(addr).unwrap(), b.read_u64(addr).unwrap());
        }
        assert_eq!(reads.get(), 1, "one page, read once");
        // Straddling the first and second pages.
        let mut buf = [0u8; 16];
        pages.read(0x10ff8, &mut buf).unwrap();
        let mut want = [0u8; 16];
        b.read(0x10ff8, &mut want).unwrap();
        assert_eq!(buf, want);
        assert_eq!(reads.get(), 2);
        // Unreadable pages stay unreadable, read once.
        assert!(pages.read_u64(0x20000).is_err());
        assert!(pages.read_u64(0x20008).is_err());
        assert_eq!(reads.get(), 3);
        assert!(pages.read_u64(u64::MAX - 3).is_err());
    }

    #[test]
    fn a_read_longer_than_a_page_is_one_read() {
        let b = Buffer {
            base: 0x10000,
            bytes: (0..4 * PAGE).map(|i| (i % 251) as u8).collect(),
        };
        let reads = std::cell::Cell::new(0);
        let pages = Pages::new(Counted(&b, &reads));
        let mut buf = vec![0u8; 2 * PAGE as usize + 8];
        pages.read(0x10ff8, &mut buf).unwrap();
        assert_eq!(buf[..], b.bytes[0xff8..0xff8 + buf.len()]);
        assert_eq!(reads.get(), 1);
        assert!(pages.pages.borrow().is_empty(), "not kept as pages");
        // Past the end: an error, as the memory gives it.
        let mut buf = vec![0u8; 2 * PAGE as usize];
        assert!(pages.read(0x10000 + 3 * PAGE, &mut buf).is_err());
    }

    #[test]
    fn pages_past_the_limit_are_read_directly() {
        let b = Buffer {
            base: 0,
            bytes: vec![7u8; (MAX_PAGES as u64 + 2) as usize * PAGE as usize],
        };
        let reads = std::cell::Cell::new(0);
        let pages = Pages::new(Counted(&b, &reads));
        for i in 0..MAX_PAGES as u64 + 2 {
            assert_eq!(pages.read_u32(i * PAGE).unwrap(), 0x0707_0707);
        }
        assert_eq!(pages.pages.borrow().len(), MAX_PAGES);
        assert_eq!(reads.get(), MAX_PAGES + 2);
    }

    #[test]
    fn a_buffer_reads_inside_only() {
        let b = Buffer {
            base: 0x1000,
            bytes: (0u8..16).collect(),
        };
        assert_eq!(
            b.read_u32(0x1004).unwrap(),
            u32::from_ne_bytes([4, 5, 6, 7])
        );
        assert!(b.read_u64(0x100c).is_err());
        assert!(b.read_u64(0xff8).is_err());
    }
}
