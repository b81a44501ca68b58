//! Writing a tool's result to the files and formats `-o`/`--format` asked
//! for. Each file is written to a temporary file in the same directory and
//! renamed into place, so an interrupted or failed run never leaves half a
//! file where the result should be.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{bail, Result};
use flare::output::StackStyle;
use flare::profile::Profile;

use crate::cli::output::{Destination, OutputArgs};

/// Writes the profile to every file and format `-o`/`--format` asked for.
/// Each file is tried even when an earlier one failed; the failures are
/// then returned as one error, one line per file.
pub fn write_outputs(profile: &Profile, args: &OutputArgs, style: StackStyle) -> Result<()> {
    let destinations = args.destinations().map_err(anyhow::Error::msg)?;
    let mut failed = Vec::new();
    for d in &destinations {
        match d {
            Destination::Stdout(format) => {
                let stdout = io::stdout();
                let mut out = BufWriter::new(stdout.lock());
                format.write(&mut out, profile, style)?;
                out.flush()?;
            }
            Destination::File(path, format) => {
                match write_atomically(path, |w| format.write(w, profile, style)) {
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
        _ => bail!("{}", failed.join("\nflare: error: ")),
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
    tmp.as_file().sync_all()?;
    // tempfile creates files readable by the owner only; results are
    // ordinary files.
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(0o644))?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
