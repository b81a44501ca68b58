//! bcc's output on standard output: the header line when the run starts,
//! then each report as bcc prints it (multi-line text or folded stacks, in
//! the layout of the profile's kind), with bcc's blank lines, `-T`
//! timestamps and closing line where the tool has them.

use std::io::{self, BufWriter, Write};

use crate::error::{Error, Result};
use crate::output::format::{write_folded, write_text};
use crate::output::{stackcount, StackStyle};
use crate::pipeline::Sink;
use crate::profile::{Meta, Profile};

/// Where bcc's header line goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeaderTo {
    #[default]
    Stdout,
    /// Kept off standard output, which carries something a program reads.
    Stderr,
    Nowhere,
}

/// What the printer prints.
#[derive(Clone, Debug, Default)]
pub struct PrinterOptions {
    pub header: HeaderTo,
    /// Print the stacks of each report (off when only files are written).
    pub stacks: bool,
    /// Folded stacks rather than bcc's multi-line text.
    pub folded: bool,
    /// A blank line before each report (bcc's text output).
    pub blank_line: bool,
    /// The local time before each report (stackcount's `-T`).
    pub timestamp: bool,
    /// A last line when the run ends (`Detaching...`).
    pub trailer: Option<String>,
    pub style: StackStyle,
    /// stackcount's own text options (`-v` addresses, the process line),
    /// used for count profiles in text form.
    pub counts: Option<stackcount::Style>,
}

/// Prints to standard output as bcc does.
pub struct Printer {
    options: PrinterOptions,
}

impl Printer {
    pub fn new(options: PrinterOptions) -> Self {
        Printer { options }
    }
}

fn io_err(source: io::Error) -> Error {
    Error::Io {
        what: "writing to standard output".into(),
        source,
    }
}

/// The local time as bcc's `strftime("%H:%M:%S")`.
fn clock() -> String {
    // SAFETY: time(NULL) has no preconditions; tm is plain data that
    // localtime_r fills from the time value we pass.
    unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return "??:??:??".into();
        }
        format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
    }
}

impl Printer {
    fn write_report<W: Write>(&self, out: &mut W, profile: &Profile) -> io::Result<()> {
        let o = &self.options;
        if o.blank_line {
            writeln!(out)?;
        }
        if o.timestamp {
            writeln!(out, "{:<8}", clock())?;
        }
        if o.stacks {
            match (o.folded, o.counts) {
                (true, _) => write_folded(out, profile, o.style)?,
                (false, Some(sc)) => stackcount::write(out, &profile.samples, sc)?,
                (false, None) => write_text(out, profile, o.style)?,
            }
        }
        out.flush()
    }
}

impl Sink for Printer {
    fn begin(&mut self, _meta: &Meta, header: &str, _notes: &[String]) -> Result<()> {
        match self.options.header {
            HeaderTo::Stdout => {
                let mut out = io::stdout().lock();
                writeln!(out, "{header}")
                    .and_then(|()| out.flush())
                    .map_err(io_err)?;
            }
            HeaderTo::Stderr => crate::notes::note(header),
            HeaderTo::Nowhere => {}
        }
        Ok(())
    }

    fn report(&mut self, profile: &Profile) -> Result<()> {
        let mut out = BufWriter::new(io::stdout().lock());
        self.write_report(&mut out, profile).map_err(io_err)
    }

    fn end(&mut self) -> Result<()> {
        if let Some(t) = &self.options.trailer {
            let mut out = io::stdout().lock();
            writeln!(out, "{t}")
                .and_then(|()| out.flush())
                .map_err(io_err)?;
        }
        Ok(())
    }
}
