//! Finding tracefs, where the kernel lists its tracepoints and the
//! functions kprobes may attach to. A fresh machine often has it unmounted:
//! flare mounts it at `/sys/kernel/tracing` when it can, and otherwise says
//! why it cannot.

use std::ffi::CString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Where tracefs is mounted by default on current kernels.
pub const TRACEFS: &str = "/sys/kernel/tracing";
/// The older location, inside debugfs.
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// True when `dir` looks like a mounted tracefs.
fn is_tracefs(dir: &Path) -> bool {
    dir.join("events").is_dir()
}

/// The tracefs mount point, mounting tracefs at [`TRACEFS`] first if it is
/// not mounted anywhere.
pub fn root() -> Result<PathBuf> {
    for dir in [TRACEFS, DEBUGFS_TRACING] {
        if is_tracefs(Path::new(dir)) {
            return Ok(PathBuf::from(dir));
        }
    }
    if let Some(dir) = mount_point_from(&fs::read_to_string("/proc/mounts").unwrap_or_default()) {
        if is_tracefs(&dir) {
            return Ok(dir);
        }
    }
    mount(Path::new(TRACEFS)).map_err(|e| {
        Error::Unsupported(format!(
            "tracefs is not mounted and mounting it at {TRACEFS} failed: {e} (mount it yourself with `mount -t tracefs nodev {TRACEFS}`, as root)"
        ))
    })?;
    if is_tracefs(Path::new(TRACEFS)) {
        Ok(PathBuf::from(TRACEFS))
    } else {
        Err(Error::Unsupported(format!(
            "tracefs was mounted at {TRACEFS} but has no events directory (is CONFIG_TRACING enabled in this kernel?)"
        )))
    }
}

/// The first tracefs mount point listed in a `/proc/mounts` text.
fn mount_point_from(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_dev, dir, kind) = (f.next()?, f.next()?, f.next()?);
        (kind == "tracefs").then(|| PathBuf::from(dir))
    })
}

fn mount(dir: &Path) -> io::Result<()> {
    let target = CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: all pointers are to NUL-terminated strings that outlive the
    // call; a null data pointer is allowed for tracefs.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Every tracepoint as `category:event`, sorted.
pub fn tracepoints() -> Result<Vec<String>> {
    let events = root()?.join("events");
    let io_err = |what: &Path| {
        let what = format!("listing tracepoints in {}", what.display());
        move |source| Error::Io { what, source }
    };
    let mut out = Vec::new();
    for cat in fs::read_dir(&events).map_err(io_err(&events))? {
        let cat = cat.map_err(io_err(&events))?;
        if !cat.path().is_dir() {
            continue;
        }
        let Ok(list) = fs::read_dir(cat.path()) else {
            continue;
        };
        for ev in list.flatten() {
            if ev.path().join("id").exists() {
                out.push(format!(
                    "{}:{}",
                    cat.file_name().to_string_lossy(),
                    ev.file_name().to_string_lossy()
                ));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The kernel functions kprobes can attach to (`available_filter_functions`,
/// without module annotations), sorted and without duplicates.
pub fn filter_functions() -> Result<Vec<String>> {
    let path = root()?.join("available_filter_functions");
    let text = fs::read_to_string(&path).map_err(|source| Error::Io {
        what: format!("reading {}", path.display()),
        source,
    })?;
    Ok(parse_filter_functions(&text))
}

/// Function names of an `available_filter_functions` text: the first word
/// of each line (a module follows in brackets), sorted, deduplicated.
pub fn parse_filter_functions(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_tracefs_in_mounts() {
        let mounts = "sysfs /sys sysfs rw 0 0\ntracefs /sys/kernel/tracing tracefs rw 0 0\n";
        assert_eq!(
            mount_point_from(mounts),
            Some(PathBuf::from("/sys/kernel/tracing"))
        );
        assert_eq!(mount_point_from("sysfs /sys sysfs rw 0 0\n"), None);
    }

    #[test]
    fn filter_functions_drop_modules_and_duplicates() {
        let text = "vfs_read\nkfree\nvfs_read\nxfs_iread [xfs]\n";
        assert_eq!(
            parse_filter_functions(text),
            vec!["kfree", "vfs_read", "xfs_iread"]
        );
    }
}
