//! Folded stacks, one line per stack: `comm;user frames;-;kernel frames N`,
//! root first, as bcc's `-f` prints them and as flame graph tools read them.

use std::io::{self, Write};

use super::{kernel_name, StackStyle};
use crate::profile::{folded_safe, Sample, Trace};

/// The frames of one sample joined by `;`, without the value.
pub fn line(s: &Sample, style: StackStyle) -> String {
    let t = &s.task;
    let mut parts: Vec<std::borrow::Cow<'_, str>> = vec![folded_safe(&t.comm)];
    match &t.user {
        Trace::NotCollected => {}
        Trace::Missed { .. } => parts.push("[Missed User Stack]".into()),
        Trace::Frames(f) => parts.extend(f.iter().rev().map(|f| folded_safe(style.name(f)))),
    }
    if t.kernel != Trace::NotCollected {
        if style.delimited && t.user.has_frames() && t.kernel.has_frames() {
            parts.push("-".into());
        }
        match &t.kernel {
            Trace::Missed { .. } => parts.push("[Missed Kernel Stack]".into()),
            trace => parts.extend(trace.frames().iter().rev().map(|f| {
                kernel_name(&folded_safe(style.name(f)), style)
                    .into_owned()
                    .into()
            })),
        }
    }
    parts.join(";")
}

/// Writes every sample as a folded line in the profile's current order.
pub fn write<'a, W: Write>(
    w: &mut W,
    samples: impl IntoIterator<Item = &'a Sample>,
    style: StackStyle,
) -> io::Result<()> {
    for s in samples {
        writeln!(w, "{} {}", line(s, style), s.value)?;
    }
    Ok(())
}
