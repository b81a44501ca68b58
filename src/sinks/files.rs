//! Output files (`-o FILE`, `--format`): every report written in each
//! format asked for. Each file is written whole before it takes its name
//! ([`write_atomically`]), so an interrupted or failed run never leaves
//! half a file where the result should be; stackcount's intervals
//! rewrite the files at every report. Only regular files are replaced.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::output::{Format, StackStyle};
use crate::pipeline::{Sink, Times};
use crate::profile::Profile;
use crate::untrusted::cstring;

/// One place to write to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    File(PathBuf, Format),
    /// `--format` without `-o`: the format takes standard output.
    Stdout(Format),
}

impl Destination {
    /// The format written there.
    pub fn format(&self) -> Format {
        match self {
            Destination::File(_, f) | Destination::Stdout(f) => *f,
        }
    }
}

/// Writes every report to each destination.
pub struct Files {
    destinations: Vec<Destination>,
    style: StackStyle,
}

impl Files {
    pub fn new(destinations: Vec<Destination>, style: StackStyle) -> Self {
        Files {
            destinations,
            style,
        }
    }

    /// Writes `profile` to every destination. Each file is tried even when
    /// an earlier one failed; the failures are returned as one error, one
    /// line per file.
    pub fn write(&self, profile: &Profile) -> Result<()> {
        let mut failed = Vec::new();
        for d in &self.destinations {
            match d {
                Destination::Stdout(format) => {
                    let mut out = BufWriter::new(io::stdout().lock());
                    format
                        .write(&mut out, profile, self.style)
                        .and_then(|()| out.flush())
                        .map_err(|source| Error::Io {
                            what: "writing to standard output".into(),
                            source,
                        })?;
                }
                Destination::File(path, format) => {
                    match write_atomically(path, |w| format.write(w, profile, self.style)) {
                        Ok(()) => {
                            crate::notes::note(format!("wrote {} ({format})", path.display()))
                        }
                        Err(e) => {
                            failed.push(format!("cannot write {} ({format}): {e}", path.display()))
                        }
                    }
                }
            }
        }
        match failed.len() {
            0 => Ok(()),
            _ => Err(Error::Output(failed.join("\nflare: error: "))),
        }
    }
}

impl Sink for Files {
    fn times(&self) -> Times {
        Times {
            updates: false,
            reports: self.destinations.iter().any(|d| d.format().keeps_time()),
        }
    }

    fn report(&mut self, profile: &Profile) -> Result<()> {
        self.write(profile)
    }
}

/// Why `path` cannot be written as a result file, if it cannot: flare
/// replaces regular files only. A symbolic link (another user's, in
/// /tmp), a device such as /dev/null, a FIFO or a directory would be
/// replaced by a regular file, or followed.
pub fn refusal(path: &Path) -> Option<String> {
    let meta = fs::symlink_metadata(path).ok()?;
    let t = meta.file_type();
    let what = if t.is_file() {
        return None;
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Some(format!(
        "'{}' is {what}: flare writes only regular files (give -o - --format FORMAT for standard output)",
        path.display()
    ))
}

/// Writes a file atomically: the whole file or none is ever seen at
/// `path`, and an existing file keeps its mode and owner. The data goes
/// to an unnamed file in the same directory (O_TMPFILE), linked in when
/// complete, so that even SIGKILL leaves nothing behind; where the
/// filesystem has no O_TMPFILE, to a named temporary file renamed into
/// place. Only a regular file (or nothing) at `path` is replaced.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<&fs::File>) -> io::Result<()>,
) -> io::Result<()> {
    if let Some(why) = refusal(path) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let old = fs::metadata(path).ok();
    let unnamed = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(dir);
    match unnamed {
        Ok(file) => {
            fill(&file, old.as_ref(), write)?;
            link_into_place(&file, dir, path)
        }
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
            ) =>
        {
            let tmp = tempfile::Builder::new()
                .prefix(".flare-")
                .suffix(".tmp")
                .tempfile_in(dir)?;
            fill(tmp.as_file(), old.as_ref(), write)?;
            tmp.persist(path).map_err(|e| e.error)?;
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Writes the content, then gives the file the mode and owner of the file
/// it replaces (`old`), or 0644 for a new one.
fn fill(
    file: &fs::File,
    old: Option<&fs::Metadata>,
    write: impl FnOnce(&mut BufWriter<&fs::File>) -> io::Result<()>,
) -> io::Result<()> {
    {
        let mut w = BufWriter::new(file);
        write(&mut w)?;
        w.flush()?;
    }
    // No fsync: readers see the whole file or none, which is what a
    // profile written at the end of a run needs; waiting for the disk
    // cost 10-70 ms of the way from Ctrl-C to output on a busy machine.
    // (The agent's rotated files, kept for days, are synced.)
    match old {
        Some(m) => {
            file.set_permissions(fs::Permissions::from_mode(m.mode() & 0o7777))?;
            // Root may give it the old owner; anyone else keeps their own.
            let _ = std::os::unix::fs::fchown(file, Some(m.uid()), Some(m.gid()));
        }
        None => file.set_permissions(fs::Permissions::from_mode(0o644))?,
    }
    Ok(())
}

/// Gives the unnamed `file` the name `path`: linked in directly where
/// nothing is there yet, else under a temporary name renamed over it.
fn link_into_place(file: &fs::File, dir: &Path, path: &Path) -> io::Result<()> {
    let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
    let link = |to: &Path| -> io::Result<()> {
        let from = cstring(Path::new(&proc_path))?;
        let to = cstring(to)?;
        // SAFETY: both are NUL-terminated paths; linkat only reads them.
        let r = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    match link(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    // The target exists: checked again, then replaced in one rename.
    if let Some(why) = refusal(path) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
    }
    let tmp = dir.join(format!(
        ".flare-{}-{}.tmp",
        std::process::id(),
        file.as_raw_fd()
    ));
    link(&tmp)?;
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn results_replace_regular_files_only_keeping_mode() {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let put = |p: &Path, text: &str| write_atomically(p, |w| w.write_all(text.as_bytes()));

        put(&d.join("new"), "one").expect("a new file");
        assert_eq!(fs::read_to_string(d.join("new")).expect("read"), "one");
        assert_eq!(
            fs::metadata(d.join("new")).expect("meta").mode() & 0o777,
            0o644
        );

        fs::set_permissions(d.join("new"), fs::Permissions::from_mode(0o600)).expect("chmod");
        put(&d.join("new"), "two").expect("replaced");
        assert_eq!(fs::read_to_string(d.join("new")).expect("read"), "two");
        assert_eq!(
            fs::metadata(d.join("new")).expect("meta").mode() & 0o777,
            0o600
        );

        std::os::unix::fs::symlink(d.join("new"), d.join("link")).expect("symlink");
        let err = put(&d.join("link"), "x").expect_err("a link is refused");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(fs::read_to_string(d.join("new")).expect("read"), "two");
        assert!(put(Path::new("/dev/null"), "x").is_err());
        assert!(fs::metadata("/dev/null")
            .expect("meta")
            .file_type()
            .is_char_device());
        assert!(put(d, "x").is_err(), "a directory");
        // Nothing left behind: only the files made here.
        let mut names: Vec<String> = fs::read_dir(d)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["link", "new"]);
    }
}
