//! Opening files that other users choose, as root may: a process's perf
//! map (`/tmp/perf-PID.map`, written by whoever owns the process) and the
//! debug files a binary's `.gnu_debuglink` names beside it.
//!
//! Each such file is opened without following a symbolic link where the
//! other user could have put one (a link to `/root/secret` would make
//! flare print a root-only file as frame names), without blocking (a FIFO
//! would hang flare for good, deaf to signals), and only if it is a
//! regular file (`/dev/zero` would feed it without end); what is read of
//! it is bounded. The checks are made on the open descriptor, so the file
//! cannot be swapped between check and use.

use std::ffi::CString;
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// How the path is resolved.
#[derive(Clone, Copy, Debug)]
pub enum Resolve<'a> {
    /// No symbolic link anywhere in the path (the whole of it may be
    /// another user's).
    NoSymlinks,
    /// The path (absolute) inside the directory `root`, as a process whose
    /// root it is sees it (`/proc/PID/root`): links are resolved within
    /// it, never out of it, and the last component is not followed.
    InRoot(&'a Path),
}

/// `p` as a C string for a system call (an error for a NUL inside).
pub(crate) fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::ErrorKind::InvalidInput.into())
}

/// `openat2(dirfd, path, how)`.
fn openat2(dirfd: i32, path: &Path, flags: i32, resolve: u64) -> io::Result<OwnedFd> {
    let path = cstring(path)?;
    // SAFETY: open_how is plain data; zeroed is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = resolve;
    // SAFETY: `path` is a NUL-terminated string and `how` a valid open_how
    // of the size passed; the kernel reads both and returns a new fd.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Opens `path` for reading as `resolve` says, without blocking; an error
/// unless it is a regular file. The file and its metadata (from the open
/// descriptor).
pub fn open(path: &Path, resolve: Resolve<'_>) -> io::Result<(File, Metadata)> {
    let flags =
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    let fd = match resolve {
        Resolve::NoSymlinks => openat2(libc::AT_FDCWD, path, flags, libc::RESOLVE_NO_SYMLINKS),
        Resolve::InRoot(root) => {
            let root = File::open(root)?;
            use std::os::fd::AsRawFd;
            openat2(
                root.as_raw_fd(),
                path,
                flags,
                libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
            )
        }
    };
    let fd = match fd {
        Ok(fd) => fd,
        // Before 5.6 (flare needs 5.8, but a seccomp filter may refuse
        // the call): the last component is not followed, at least.
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            let full = match resolve {
                Resolve::NoSymlinks => path.to_path_buf(),
                Resolve::InRoot(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
            };
            let c = cstring(&full)?;
            // SAFETY: `c` is a NUL-terminated path; open returns a new fd.
            let fd = unsafe { libc::open(c.as_ptr(), flags) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a new descriptor that nothing else owns.
            unsafe { OwnedFd::from_raw_fd(fd) }
        }
        Err(e) => return Err(e),
    };
    let file = File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok((file, meta))
}

/// Reads `file` from its current position, at most `max` bytes; `Err`
/// when there is more (the caller says what it does with a file that
/// large).
pub fn read_bounded(file: &File, max: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_fifos_and_devices_are_refused_regular_files_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        std::fs::write(d.join("plain"), "x 1 y\n").expect("write");
        std::os::unix::fs::symlink(d.join("plain"), d.join("link")).expect("symlink");
        std::os::unix::fs::symlink(d, d.join("dirlink")).expect("symlink");
        let fifo = cstring(&d.join("fifo")).expect("path");
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

        let (f, meta) = open(&d.join("plain"), Resolve::NoSymlinks).expect("a regular file");
        assert_eq!(meta.len(), 6);
        assert_eq!(read_bounded(&f, 6).expect("read"), b"x 1 y\n");
        let (f, _) = open(&d.join("plain"), Resolve::NoSymlinks).expect("again");
        assert!(read_bounded(&f, 5).is_err(), "over the bound");

        assert!(open(&d.join("link"), Resolve::NoSymlinks).is_err());
        assert!(open(&d.join("dirlink/plain"), Resolve::NoSymlinks).is_err());
        // A FIFO is opened without blocking, then refused.
        assert!(open(&d.join("fifo"), Resolve::NoSymlinks).is_err());
        assert!(open(Path::new("/dev/zero"), Resolve::NoSymlinks).is_err());
    }

    #[test]
    fn in_root_links_stay_inside_the_root() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("tmp")).expect("mkdir");
        std::fs::write(dir.path().join("outside"), "secret").expect("write");
        std::fs::write(root.join("tmp/inside"), "ok").expect("write");
        // An absolute link, as a container's root would make it: resolved
        // inside the root, where there is no such file.
        std::os::unix::fs::symlink(dir.path().join("outside"), root.join("tmp/abs")).expect("ln");
        std::os::unix::fs::symlink("/", root.join("up")).expect("ln");
        let (f, _) = open(Path::new("/tmp/inside"), Resolve::InRoot(&root)).expect("inside");
        assert_eq!(read_bounded(&f, 10).expect("read"), b"ok");
        assert!(open(Path::new("/tmp/abs"), Resolve::InRoot(&root)).is_err());
        // A directory link is resolved within the root: /up/tmp/inside.
        assert!(open(Path::new("/up/tmp/inside"), Resolve::InRoot(&root)).is_ok());
        let outside = format!("/up/../../{}", "outside");
        assert!(open(Path::new(&outside), Resolve::InRoot(&root)).is_err());
    }
}
