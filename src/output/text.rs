//! bcc's default multi-line output: each stack leaf first, one frame a line
//! indented by 4 spaces, then `-  comm (pid)` and the value indented by 8,
//! then a blank line. Scripts parse this, so it is kept byte for byte.

use std::io::{self, Write};

use super::{kernel_name, StackStyle};
use crate::profile::{Sample, TaskStack, Trace};

/// Writes one sample the way bcc's `profile` and `stackcount` do: kernel
/// frames, an optional `--` delimiter, user frames, the task line and the
/// value.
pub fn write_sample<W: Write>(w: &mut W, s: &Sample, style: StackStyle) -> io::Result<()> {
    let t = &s.task;
    write_stacks(w, t, style)?;
    writeln!(w, "    {:<16} {} ({})", "-", t.comm, t.pid.unwrap_or(0))?;
    writeln!(w, "        {}\n", s.value)
}

/// Writes a task's kernel frames, the optional `--` delimiter and its user
/// frames, one per line, leaf first: the body of a bcc entry.
pub(crate) fn write_stacks<W: Write>(
    w: &mut W,
    t: &TaskStack,
    style: StackStyle,
) -> io::Result<()> {
    match &t.kernel {
        Trace::NotCollected => {}
        Trace::Missed { .. } => writeln!(w, "    [Missed Kernel Stack]")?,
        Trace::Frames(frames) => {
            for f in frames.iter() {
                writeln!(w, "    {}", kernel_name(style.name(f), style))?;
            }
        }
    }
    if t.user != Trace::NotCollected {
        if style.delimited && t.user.has_frames() && t.kernel.has_frames() {
            writeln!(w, "    --")?;
        }
        match &t.user {
            Trace::Missed { .. } => writeln!(w, "    [Missed User Stack]")?,
            trace => {
                for f in trace.frames() {
                    writeln!(w, "    {}", style.name(f))?;
                }
            }
        }
    }
    Ok(())
}

/// Writes every sample in the profile's current order.
pub fn write<'a, W: Write>(
    w: &mut W,
    samples: impl IntoIterator<Item = &'a Sample>,
    style: StackStyle,
) -> io::Result<()> {
    for s in samples {
        write_sample(w, s, style)?;
    }
    Ok(())
}
