//! Output files (`-o FILE`, `--format`): every report written in each
//! format asked for. Each file is written to a temporary file in the same
//! directory and renamed into place, so an interrupted or failed run never
//! leaves half a file where the result should be; stackcount's intervals
//! rewrite the files at every report.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::output::{Format, StackStyle};
use crate::pipeline::Sink;
use crate::profile::Profile;

/// One place to write to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    File(PathBuf, Format),
    /// `--format` without `-o`: the format takes standard output.
    Stdout(Format),
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
                        Ok(()) => eprintln!("wrote {} ({format})", path.display()),
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
    fn report(&mut self, profile: &Profile) -> Result<()> {
        self.write(profile)
    }
}

/// Writes a file atomically: a temporary file next to it, then a rename.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<&fs::File>) -> io::Result<()>,
) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = tempfile::Builder::new()
        .prefix(".flare-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    {
        let mut w = BufWriter::new(tmp.as_file());
        write(&mut w)?;
        w.flush()?;
    }
    // No fsync: readers see the whole file or none (the rename), which is
    // what a profile written at the end of a run needs; waiting for the
    // disk cost 10-70 ms of the way from Ctrl-C to output on a busy
    // machine. (The agent's rotated files, kept for days, are synced.)
    // tempfile creates files readable by the owner only; results are
    // ordinary files.
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(0o644))?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
