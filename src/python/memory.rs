//! Reading another process's memory, for Python's structures and names.
//!
//! `process_vm_readv` reads what the process has mapped, without stopping
//! it; a read of unmapped memory is an error, never a fault in flare.
//! Tests read a fake memory ([`Memory`] over a buffer).

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
