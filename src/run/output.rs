//! Writing a tool's result to the files and formats `-o`/`--format` asked
//! for. Each file is written to a temporary file in the same directory and
//! renamed into place, so an interrupted or failed run never leaves half a
//! file where the result should be.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context, Result};
use flare::output::{Format, StackStyle};
use flare::profile::Profile;

use crate::cli::output::Destination;

/// Writes the profile to every destination; the first failure is returned
/// as an error naming the file.
pub fn write_outputs(
    profile: &Profile,
    destinations: &[Destination],
    style: StackStyle,
) -> Result<()> {
    for d in destinations {
        match d {
            Destination::Stdout(format) => {
                let stdout = io::stdout();
                let mut out = BufWriter::new(stdout.lock());
                format.write(&mut out, profile, style)?;
                out.flush()?;
            }
            Destination::File(path, format) => {
                write_file(path, *format, profile, style)
                    .with_context(|| format!("cannot write {} ({format})", path.display()))?;
                eprintln!("wrote {} ({format})", path.display());
            }
        }
    }
    Ok(())
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

fn write_file(path: &Path, format: Format, profile: &Profile, style: StackStyle) -> io::Result<()> {
    write_atomically(path, |w| format.write(w, profile, style))
}
