//! Output selection shared by every tool: `-o FILE` (repeatable) and
//! `--format`. Flatten [`OutputArgs`] into a tool's arguments and hand it
//! to `run::output`.

use std::path::PathBuf;

use clap::Args;
use flare::output::format::{EXTENSIONS, FORMAT_NAMES};
use flare::output::Format;

/// Where a tool's result goes besides bcc's text on standard output.
#[derive(Clone, Debug, Default, Args)]
pub struct OutputArgs {
    /// Write the result to FILE, in the format of its extension (.svg,
    /// .folded or .txt, .pb.gz or .pprof, .json); give -o again for more files
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub outputs: Vec<PathBuf>,

    /// Write this format whatever the extension (to standard output when no
    /// -o is given): text, folded, svg, pprof, speedscope
    #[arg(long, value_name = "FORMAT", value_parser = format)]
    pub format: Option<Format>,
}

fn format(s: &str) -> Result<Format, String> {
    Format::from_name(s).ok_or_else(|| format!("unknown format '{s}' (known: {FORMAT_NAMES})"))
}

/// One place to write to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    File(PathBuf, Format),
    Stdout(Format),
}

impl OutputArgs {
    /// True when `--format` takes standard output (no `-o` given): then
    /// nothing else may be printed there.
    pub fn format_on_stdout(&self) -> bool {
        self.outputs.is_empty() && self.format.is_some()
    }

    /// Whether the tool prints bcc's stacks (text, or folded under `-f`) on
    /// standard output: when no file was asked for, or `-f` asks for
    /// folded stacks next to the files.
    pub fn bcc_stdout(&self, folded: bool) -> bool {
        !self.format_on_stdout() && (self.outputs.is_empty() || folded)
    }

    /// Whether the tool prints bcc's header line ("Sampling at ..."): not
    /// when standard output carries folded stacks or another format.
    pub fn bcc_header(&self, folded: bool) -> bool {
        !folded && !self.format_on_stdout()
    }

    /// Where to write, checked before any work is done: every file's format
    /// must be known and its directory must exist.
    pub fn destinations(&self) -> Result<Vec<Destination>, String> {
        if self.outputs.is_empty() {
            return Ok(self.format.map(Destination::Stdout).into_iter().collect());
        }
        self.outputs
            .iter()
            .map(|path| {
                let format = self.format.or_else(|| Format::from_path(path)).ok_or_else(|| {
                    format!(
                        "cannot tell the format of '{}' from its extension: use one of {EXTENSIONS}, or name it with --format",
                        path.display()
                    )
                })?;
                let dir = match path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => std::path::Path::new("."),
                };
                if !dir.is_dir() {
                    return Err(format!(
                        "cannot write '{}': directory '{}' does not exist",
                        path.display(),
                        dir.display()
                    ));
                }
                Ok(Destination::File(path.clone(), format))
            })
            .collect()
    }
}
