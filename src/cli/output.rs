//! Output selection shared by every tool: `-o FILE` (repeatable) and
//! `--format`. Flatten [`OutputArgs`] into a tool's arguments and hand it
//! to `run::output`.

use std::path::PathBuf;

use clap::Args;
use flare::live::Options as LiveOptions;
use flare::output::format::{EXTENSIONS, FORMAT_NAMES};
use flare::output::{Format, StackStyle};
use flare::pipeline::{Mode, Plan};
use flare::sinks::print::HeaderTo;
use flare::sinks::PrinterOptions;
use flare::tools::ToolConfig;

pub use flare::sinks::Destination;

use crate::run::Request;

/// Where a tool's result goes besides bcc's text on standard output.
#[derive(Clone, Debug, Default, Args)]
pub struct OutputArgs {
    /// Write the result to FILE, in the format of its extension (.svg,
    /// .folded or .txt, .pb.gz or .pprof, .json for speedscope, .json.gz
    /// for the Firefox Profiler, with sample times); give -o again for more
    /// files; - for standard output (with --format). Only a regular file
    /// is replaced, keeping its mode and owner
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub outputs: Vec<PathBuf>,

    /// Write this format whatever the extension (to standard output when no
    /// -o is given): text, folded, svg, pprof, speedscope, firefox (gzipped)
    #[arg(long, value_name = "FORMAT", value_parser = format)]
    pub format: Option<Format>,

    /// How bcc's text and folded output name a function without a symbol:
    /// bcc's `[unknown]`, or `offset` for `object+0xSTART` (its start from
    /// .eh_frame), as flame graphs, pprof and speedscope always do
    #[arg(long, value_name = "NAMES", value_enum, default_value_t = Unknown::Bcc)]
    pub unknown: Unknown,
}

/// `--unknown`: how bcc's formats name functions without a symbol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Unknown {
    /// `[unknown]`, as bcc prints them
    #[default]
    Bcc,
    /// `object+0xSTART`: one name per function
    Offset,
}

fn format(s: &str) -> Result<Format, String> {
    Format::from_name(s).ok_or_else(|| format!("unknown format '{s}' (known: {FORMAT_NAMES})"))
}

impl OutputArgs {
    /// `style` with the naming `--unknown` asks for.
    pub fn styled(&self, style: StackStyle) -> StackStyle {
        StackStyle {
            unknown_offsets: self.unknown == Unknown::Offset,
            ..style
        }
    }

    /// True when `--format` takes standard output (no `-o` given): then
    /// nothing else may be printed there.
    pub fn format_on_stdout(&self) -> bool {
        let to_stdout =
            self.outputs.is_empty() || self.outputs.iter().any(|p| p.as_os_str() == "-");
        to_stdout && self.format.is_some()
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
                if path.as_os_str() == "-" {
                    return self.format.map(Destination::Stdout).ok_or_else(|| {
                        format!("-o - writes to standard output in the format --format names: add --format, one of {FORMAT_NAMES}")
                    });
                }
                if let Some(why) = flare::sinks::files::refusal(path) {
                    return Err(why);
                }
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

/// The printer for profile and the off-CPU tools: bcc's header and, when
/// standard output carries bcc's stacks, a blank line, the stacks and the
/// tool's closing line (`trailer`).
pub fn bcc_printer(
    output: &OutputArgs,
    folded: bool,
    style: StackStyle,
    trailer: Option<&str>,
) -> PrinterOptions {
    let stacks = output.bcc_stdout(folded);
    PrinterOptions {
        header: if output.bcc_header(folded) {
            HeaderTo::Stdout
        } else {
            HeaderTo::Nowhere
        },
        stacks,
        folded,
        blank_line: stacks && !folded,
        trailer: trailer.filter(|_| stacks && !folded).map(str::to_string),
        style: output.styled(style),
        ..PrinterOptions::default()
    }
}

/// A request to run `tool` once (or live, with `--serve`) into bcc's
/// printer and the files asked for.
pub fn request(
    tool: ToolConfig,
    duration: Option<std::time::Duration>,
    output: &OutputArgs,
    live: Option<LiveOptions>,
    printer: PrinterOptions,
    style: StackStyle,
) -> anyhow::Result<Request> {
    // Check where the result goes before spending the profiling time.
    let destinations = output.destinations().map_err(anyhow::Error::msg)?;
    let mode = match &live {
        Some(l) => Mode::Periodic {
            interval: l.interval,
            report_each: false,
        },
        None => Mode::Once,
    };
    Ok(Request {
        tool,
        plan: Plan {
            duration,
            mode,
            symbolize: Default::default(),
            gate: None,
        },
        printer,
        destinations,
        style: output.styled(style),
        live,
        command: Vec::new(),
        push: None,
    })
}
