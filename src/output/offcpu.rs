//! bcc's text and folded layouts for the off-CPU family.
//!
//! offcputime prints like `profile` but names the thread (`comm (tid)`);
//! its folded lines are `profile`'s ([`super::folded`]). wakeuptime prints
//! the target, the waker's stack and the waker; its folded lines run from
//! the waker's name, root first, to the target's. offwaketime prints the
//! waker's stacks root first above a `--` line and the target's leaf first
//! below it; its folded lines put the target's stacks root first and then
//! the waker's leaf first, so that a flame graph shows the waker upside
//! down on top of the blocked stack.

use std::borrow::Cow;
use std::io::{self, Write};

use super::{kernel_name, text, StackStyle};
use crate::profile::{folded_safe, Frame, Sample, TaskStack, Trace};

const MISSED_USER: &str = "[Missed User Stack]";
const MISSED_KERNEL: &str = "[Missed Kernel Stack]";

/// A task with no stacks and no name: offwaketime's waker when no wakeup
/// was seen (bcc prints the zeroed key fields).
fn nobody() -> TaskStack {
    TaskStack {
        pid: None,
        tid: None,
        comm: "".into(),
        user: Trace::of(Vec::new()),
        kernel: Trace::of(Vec::new()),
    }
}

/// offcputime's multi-line output: stacks as `profile` prints them, then
/// `-  comm (tid)` and the microseconds.
pub fn offcputime_text<'a, W: Write>(
    w: &mut W,
    samples: impl IntoIterator<Item = &'a Sample>,
    style: StackStyle,
) -> io::Result<()> {
    for s in samples {
        let t = &s.task;
        text::write_stacks(w, t, style)?;
        writeln!(
            w,
            "    {:<16} {} ({})",
            "-",
            t.comm,
            t.tid.or(t.pid).unwrap_or(0)
        )?;
        writeln!(w, "        {}\n", s.value)?;
    }
    Ok(())
}

/// One side of a folded line: the frames of `trace` in the given order
/// (`kernel` ones annotated as `style` says), a placeholder for a stack
/// that could not be stored.
fn push_frames<'a>(
    parts: &mut Vec<Cow<'a, str>>,
    trace: &'a Trace,
    root_first: bool,
    missed: &'static str,
    style: StackStyle,
    kernel: bool,
) {
    let name = |f: &'a Frame| match kernel {
        true => kernel_name(&folded_safe(style.name(f)), style)
            .into_owned()
            .into(),
        false => folded_safe(style.name(f)),
    };
    match trace {
        Trace::NotCollected => {}
        Trace::Missed { .. } => parts.push(missed.into()),
        Trace::Frames(f) if root_first => parts.extend(f.iter().rev().map(name)),
        Trace::Frames(f) => parts.extend(f.iter().map(name)),
    }
}

fn write_lines<W: Write>(
    w: &mut W,
    trace: &Trace,
    missed: &str,
    line: impl Fn(&Frame) -> String,
) -> io::Result<()> {
    match trace {
        Trace::NotCollected => Ok(()),
        Trace::Missed { .. } => writeln!(w, "    {missed}"),
        Trace::Frames(f) => f.iter().try_for_each(|f| writeln!(w, "{}", line(f))),
    }
}

/// wakeuptime's multi-line output: `target:`, the waker's frames leaf
/// first with their addresses, `waker:` and the microseconds.
pub fn wakeuptime_text<'a, W: Write>(
    w: &mut W,
    samples: impl IntoIterator<Item = &'a Sample>,
    style: StackStyle,
) -> io::Result<()> {
    let none = nobody();
    for s in samples {
        let wk = s.waker.as_ref().unwrap_or(&none);
        writeln!(w, "    {:<16} {}", "target:", s.task.comm)?;
        let line = |f: &Frame| format!("    {:<16x} {}", f.addr, style.name(f));
        write_lines(w, &wk.kernel, MISSED_KERNEL, line)?;
        write_lines(w, &wk.user, MISSED_USER, line)?;
        writeln!(w, "    {:<16} {}", "waker:", wk.comm)?;
        writeln!(w, "        {}\n", s.value)?;
    }
    Ok(())
}

/// wakeuptime's folded lines: `waker;frames root first;target N`.
pub fn wakeuptime_folded<'a, W: Write>(
    w: &mut W,
    samples: impl IntoIterator<Item = &'a Sample>,
    style: StackStyle,
) -> io::Result<()> {
    let none = nobody();
    for s in samples {
        let wk = s.waker.as_ref().unwrap_or(&none);
        let mut parts: Vec<Cow<'_, str>> = vec![folded_safe(&wk.comm)];
        // bcc's wakeuptime does not annotate kernel frames.
        let plain = StackStyle {
            annotate_kernel: false,
            ..style
        };
        push_frames(&mut parts, &wk.user, true, MISSED_USER, plain, false);
        push_frames(&mut parts, &wk.kernel, true, MISSED_KERNEL, plain, true);
        parts.push(folded_safe(&s.task.comm));
        writeln!(w, "{} {}", parts.join(";"), s.value)?;
    }
    Ok(())
}

/// offwaketime's `waker:` / `target:` line: label, name, thread id.
fn task_line<W: Write>(w: &mut W, label: &str, t: &TaskStack) -> io::Result<()> {
    writeln!(
        w,
        "    {label:<16} {} {}",
        t.comm,
        t.tid.or(t.pid).unwrap_or(0)
    )
}

/// offwaketime's multi-line output: `waker:`, its user then kernel frames
/// root first, `--  --`, the target's kernel then user frames leaf first,
/// `target:` and the microseconds. `-d` puts `-` between user and kernel
/// frames on both sides.
pub fn offwaketime_text<'a, W: Write>(
    w: &mut W,
    samples: impl IntoIterator<Item = &'a Sample>,
    style: StackStyle,
) -> io::Result<()> {
    let none = nobody();
    for s in samples {
        let wk = s.waker.as_ref().unwrap_or(&none);
        let t = &s.task;
        let kname = |f: &Frame| format!("    {}", kernel_name(style.name(f), style));
        let uname = |f: &Frame| format!("    {}", style.name(f));
        let rev = |trace: &Trace| match trace {
            Trace::Frames(f) => Trace::of(f.iter().rev().cloned().collect()),
            other => other.clone(),
        };
        task_line(w, "waker:", wk)?;
        write_lines(w, &rev(&wk.user), MISSED_USER, uname)?;
        if style.delimited {
            writeln!(w, "    -")?;
        }
        write_lines(w, &rev(&wk.kernel), MISSED_KERNEL, kname)?;
        // bcc: "%-16s %s" % ("--", "--")
        writeln!(w, "    --               --")?;
        write_lines(w, &t.kernel, MISSED_KERNEL, kname)?;
        if style.delimited {
            writeln!(w, "    -")?;
        }
        write_lines(w, &t.user, MISSED_USER, uname)?;
        task_line(w, "target:", t)?;
        writeln!(w, "        {}\n", s.value)?;
    }
    Ok(())
}

/// offwaketime's folded lines:
/// `target;user;D;kernel;--;waker kernel;D;waker user;waker N`, the
/// target's frames root first, the waker's leaf first, `D` being `-` under
/// `-d` and empty otherwise (as bcc joins them).
pub fn offwaketime_folded<'a, W: Write>(
    w: &mut W,
    samples: impl IntoIterator<Item = &'a Sample>,
    style: StackStyle,
) -> io::Result<()> {
    let delim = if style.delimited { "-" } else { "" };
    let none = nobody();
    for s in samples {
        let wk = s.waker.as_ref().unwrap_or(&none);
        let t = &s.task;
        let mut parts: Vec<Cow<'_, str>> = vec![folded_safe(&t.comm)];
        push_frames(&mut parts, &t.user, true, MISSED_USER, style, false);
        parts.push(delim.into());
        push_frames(&mut parts, &t.kernel, true, MISSED_KERNEL, style, true);
        parts.push("--".into());
        push_frames(&mut parts, &wk.kernel, false, MISSED_KERNEL, style, true);
        parts.push(delim.into());
        push_frames(&mut parts, &wk.user, false, MISSED_USER, style, false);
        parts.push(folded_safe(&wk.comm));
        writeln!(w, "{} {}", parts.join(";"), s.value)?;
    }
    Ok(())
}
