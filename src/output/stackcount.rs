//! bcc stackcount's multi-line output: each stack leaf first, kernel then
//! user, one frame a line indented by 2 spaces (with `-v`, the address
//! first, padded to 16), an optional `--` between them, `    comm [pid]`
//! unless a single process is traced or processes are counted together,
//! then the count indented by 4 and a blank line.

use std::io::{self, Write};

use crate::profile::{Frame, Sample, Trace};

/// How stackcount prints stacks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// Print `--` between the kernel and user stacks (`-d` when both
    /// stacks are collected).
    pub delimited: bool,
    /// Print each frame's address before its name (`-v`).
    pub addresses: bool,
    /// Print the `comm [pid]` line (bcc: unless `-p`, and unless kernel
    /// stacks of all processes were counted together).
    pub tasks: bool,
    /// Name functions without a symbol `object+0xSTART`
    /// (`--unknown=offset`), not `[unknown]`.
    pub unknown_offsets: bool,
}

fn frame<W: Write>(w: &mut W, f: &Frame, style: Style) -> io::Result<()> {
    let name = f.bcc_name(style.unknown_offsets);
    if style.addresses {
        writeln!(w, "  {:<16x} {name}", f.addr)
    } else {
        writeln!(w, "  {name}")
    }
}

fn trace<W: Write>(w: &mut W, t: &Trace, missed: &str, style: Style) -> io::Result<()> {
    match t {
        Trace::NotCollected => Ok(()),
        Trace::Missed { .. } => writeln!(w, "  {missed}"),
        Trace::Frames(frames) => frames.iter().try_for_each(|f| frame(w, f, style)),
    }
}

/// Writes one counted stack.
pub fn write_sample<W: Write>(w: &mut W, s: &Sample, style: Style) -> io::Result<()> {
    let t = &s.task;
    trace(w, &t.kernel, "[Missed Kernel Stack]", style)?;
    if style.delimited {
        writeln!(w, "    --")?;
    }
    trace(w, &t.user, "[Missed User Stack]", style)?;
    if let (true, Some(pid)) = (style.tasks, t.pid) {
        writeln!(w, "    {} [{pid}]", t.comm)?;
    }
    writeln!(w, "    {}\n", s.value)
}

/// Writes every sample in the profile's current order.
pub fn write<'a, W: Write>(
    w: &mut W,
    samples: impl IntoIterator<Item = &'a Sample>,
    style: Style,
) -> io::Result<()> {
    samples
        .into_iter()
        .try_for_each(|s| write_sample(w, s, style))
}
