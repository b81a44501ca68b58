//! Launching the command a tool profiles (`flare TOOL ... -- CMD ARGS`).
//!
//! The command's process is forked first and held before it runs its
//! program, so that a tool can attach to it (its pid is known) and see its
//! very first instructions: [`Launch::spawn`] forks a child that waits on
//! a pipe, [`Launch::release`] lets it `exec` and reports whether that
//! worked. Run through sudo, the command runs as the invoking user
//! (`SUDO_UID`/`SUDO_GID`), not as root. [`Running::wait`] gives its exit
//! status the way a shell does (128 + the signal that killed it).

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Exit status of a command that could not be found (as a shell).
pub const NOT_FOUND: u8 = 127;
/// Exit status of a command that was found but could not run.
pub const CANNOT_RUN: u8 = 126;

/// A forked command, held before it runs its program.
#[derive(Debug)]
pub struct Launch {
    pid: u32,
    program: PathBuf,
    /// Closing or writing to it lets the child go on.
    go: Option<OwnedFd>,
    /// Carries the errno of a failed `exec` (closed on a successful one).
    failed: Option<OwnedFd>,
}

/// A command that runs its program.
#[derive(Clone, Copy, Debug)]
pub struct Running {
    pid: u32,
}

/// Finds `name` as a shell would: a path when it holds a slash, else the
/// first executable file of that name on `PATH`.
pub fn find_program(name: &OsStr) -> Result<PathBuf> {
    let not_found = || Error::Command {
        program: name.to_string_lossy().into_owned(),
        reason: "command not found".into(),
        code: NOT_FOUND,
    };
    if name.is_empty() {
        return Err(not_found());
    }
    if name.as_bytes().contains(&b'/') {
        let path = PathBuf::from(name);
        return if path.exists() {
            Ok(path)
        } else {
            Err(Error::Command {
                program: name.to_string_lossy().into_owned(),
                reason: "no such file".into(),
                code: NOT_FOUND,
            })
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(not_found)
}

/// The user and group to run the command as: the invoking user's when
/// flare runs as root through sudo.
fn sudo_user() -> Option<(libc::uid_t, libc::gid_t)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let uid = std::env::var("SUDO_UID").ok()?.parse().ok()?;
    let gid = std::env::var("SUDO_GID").ok()?.parse().ok()?;
    (uid != 0).then_some((uid, gid))
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::Io {
            what: "creating a pipe to start the command".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: pipe2 succeeded, so both are open descriptors owned by nobody
    // else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn cstring(s: &OsStr) -> Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| Error::Command {
        program: s.to_string_lossy().into_owned(),
        reason: "an argument holds a NUL byte".into(),
        code: CANNOT_RUN,
    })
}

impl Launch {
    /// Forks the process that will run `argv` (`argv[0]` looked up on
    /// `PATH`) and holds it before `exec` until [`Launch::release`].
    pub fn spawn(argv: &[OsString]) -> Result<Launch> {
        let first = argv.first().ok_or_else(|| Error::Command {
            program: String::new(),
            reason: "no command given after --".into(),
            code: NOT_FOUND,
        })?;
        let program = find_program(first)?;
        // Everything the child needs is made before fork: after it, only
        // async-signal-safe calls are allowed (flare has other threads).
        let path = cstring(program.as_os_str())?;
        let args = argv
            .iter()
            .map(|a| cstring(a))
            .collect::<Result<Vec<CString>>>()?;
        let mut arg_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        arg_ptrs.push(std::ptr::null());
        let user = sudo_user();
        let (go_read, go_write) = pipe()?;
        let (failed_read, failed_write) = pipe()?;
        // SAFETY: fork has no preconditions; the child only makes
        // async-signal-safe calls on memory prepared above and then execs
        // or exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(Error::Io {
                what: "forking the command's process".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        if pid == 0 {
            // SAFETY: the child, between fork and exec: see child().
            unsafe {
                child(
                    go_read.as_raw_fd(),
                    go_write.as_raw_fd(),
                    failed_write.as_raw_fd(),
                    user,
                    &path,
                    &arg_ptrs,
                )
            }
        }
        drop(go_read);
        drop(failed_write);
        Ok(Launch {
            pid: pid as u32,
            program,
            go: Some(go_write),
            failed: Some(failed_read),
        })
    }

    /// The command's process id (as flare's PID namespace sees it).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The program the command runs.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Lets the command run its program; fails (the process has exited)
    /// when `exec` failed.
    pub fn release(mut self) -> Result<Running> {
        let pid = self.pid;
        if let Some(go) = self.go.take() {
            let byte = [1u8];
            // SAFETY: writes one byte from a live buffer to an open pipe.
            unsafe { libc::write(go.as_raw_fd(), byte.as_ptr().cast(), 1) };
        }
        let mut errno = [0u8; 4];
        let got = match self.failed.take() {
            Some(fd) => File::from(fd).read(&mut errno).unwrap_or(0),
            None => 0,
        };
        if got == errno.len() {
            let source = std::io::Error::from_raw_os_error(i32::from_ne_bytes(errno));
            reap(pid);
            self.pid = 0;
            let code = if source.kind() == std::io::ErrorKind::NotFound {
                NOT_FOUND
            } else {
                CANNOT_RUN
            };
            return Err(Error::Command {
                program: self.program.display().to_string(),
                reason: source.to_string(),
                code,
            });
        }
        self.pid = 0;
        Ok(Running { pid })
    }
}

impl Drop for Launch {
    /// A command never released (the tool failed to start) is killed.
    fn drop(&mut self) {
        if self.pid != 0 {
            // SAFETY: signals our own child, which has not been reaped.
            unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
            reap(self.pid);
        }
    }
}

/// Waits for child `pid` to exit, returning its raw wait status.
fn reap(pid: u32) -> Option<i32> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid place for waitpid to write.
        let r = unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        if r == pid as i32 {
            return Some(status);
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

/// The code a shell gives a process that ended with wait status `status`.
pub fn exit_code(status: i32) -> u8 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status) as u8
    } else if libc::WIFSIGNALED(status) {
        (128 + libc::WTERMSIG(status)) as u8
    } else {
        1
    }
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits for the command to end: its exit code as a shell gives it.
    pub fn wait(&self) -> u8 {
        reap(self.pid).map_or(1, exit_code)
    }

    /// Sends `signal` to the command.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signals our own child; a process that has already been
        // reaped makes kill fail harmlessly (its pid is not reused while
        // flare has not waited for it).
        unsafe { libc::kill(self.pid as i32, signal) };
    }
}

/// The command's process between fork and exec: waits until released,
/// becomes the invoking user, runs the program. Never returns.
///
/// # Safety
/// Only for the child of fork; all pointers must be valid (prepared
/// before fork).
unsafe fn child(
    go_read: i32,
    go_write: i32,
    failed_write: i32,
    user: Option<(libc::uid_t, libc::gid_t)>,
    path: &CString,
    argv: &[*const libc::c_char],
) -> ! {
    libc::close(go_write);
    let mut byte = 0u8;
    // Released by a byte; end of file means flare is gone.
    loop {
        let r = libc::read(go_read, (&mut byte as *mut u8).cast(), 1);
        if r == 1 {
            break;
        }
        if r == 0 || *libc::__errno_location() != libc::EINTR {
            libc::_exit(NOT_FOUND as i32);
        }
    }
    let fail = |errno: i32| -> ! {
        let bytes = errno.to_ne_bytes();
        libc::write(failed_write, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(CANNOT_RUN as i32)
    };
    if let Some((uid, gid)) = user {
        let groups = [gid];
        if libc::setgroups(1, groups.as_ptr()) != 0
            || libc::setgid(gid) != 0
            || libc::setuid(uid) != 0
        {
            fail(*libc::__errno_location());
        }
    }
    libc::execv(path.as_ptr(), argv.as_ptr());
    fail(*libc::__errno_location())
}
