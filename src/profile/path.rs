//! Root-to-leaf paths of a sample, the shape flame graphs, pprof and
//! speedscope want: one list of named frames per sample.

use super::{Frame, FrameKind, Sample, TaskStack, Trace};

/// What a path element stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathKind {
    /// The process (comm) at the root of the path.
    Process,
    Kernel,
    /// Native user code.
    User,
    /// A runtime's interpreted function (a Python frame).
    Interpreted,
    /// Code compiled at run time.
    Jit,
    /// A collector's fixed name (wall-clock's thread state).
    Label,
    /// A placeholder for a stack that could not be stored.
    Missed,
    /// The waker's side of an off-CPU/wakeup pair.
    WakerKernel,
    WakerUser,
    /// The waker's process name.
    WakerProcess,
}

/// One element of a root-to-leaf path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathFrame<'a> {
    pub name: &'a str,
    pub kind: PathKind,
    /// The symbolized frame, for elements that are frames.
    pub frame: Option<&'a Frame>,
}

impl<'a> PathFrame<'a> {
    fn of(frame: &'a Frame, waker: bool) -> Self {
        let kind = match (frame.kind, waker) {
            (FrameKind::Kernel, false) => PathKind::Kernel,
            (FrameKind::Native, false) => PathKind::User,
            (FrameKind::Interpreted, false) => PathKind::Interpreted,
            (FrameKind::Jit, false) => PathKind::Jit,
            (FrameKind::Label, false) => PathKind::Label,
            // The waker's side is one colour: its kernel and the rest.
            (FrameKind::Kernel, true) => PathKind::WakerKernel,
            (_, true) => PathKind::WakerUser,
        };
        PathFrame {
            name: &frame.name,
            kind,
            frame: Some(frame),
        }
    }

    fn label(name: &'a str, kind: PathKind) -> Self {
        PathFrame {
            name,
            kind,
            frame: None,
        }
    }
}

fn push_trace<'a>(out: &mut Vec<PathFrame<'a>>, trace: &'a Trace, missed: &'static str) {
    match trace {
        Trace::NotCollected => {}
        Trace::Missed { .. } => out.push(PathFrame::label(missed, PathKind::Missed)),
        Trace::Frames(frames) => out.extend(frames.iter().rev().map(|f| PathFrame::of(f, false))),
    }
}

fn push_waker<'a>(out: &mut Vec<PathFrame<'a>>, waker: &'a TaskStack) {
    // The waker hangs below the target, leaf first, ending in its name: the
    // layout of bcc's offwaketime folded output.
    match &waker.kernel {
        Trace::Missed { .. } => {
            out.push(PathFrame::label("[Missed Kernel Stack]", PathKind::Missed))
        }
        Trace::Frames(f) => out.extend(f.iter().map(|f| PathFrame::of(f, true))),
        Trace::NotCollected => {}
    }
    match &waker.user {
        Trace::Missed { .. } => out.push(PathFrame::label("[Missed User Stack]", PathKind::Missed)),
        Trace::Frames(f) => out.extend(f.iter().map(|f| PathFrame::of(f, true))),
        Trace::NotCollected => {}
    }
    out.push(PathFrame::label(&waker.comm, PathKind::WakerProcess));
}

impl Sample {
    /// The sample as one root-to-leaf path: the process name, user frames,
    /// kernel frames, then (for wakeup pairs) the waker's frames leaf first
    /// and its name. Stacks that could not be stored appear as
    /// `[Missed User Stack]` / `[Missed Kernel Stack]`.
    pub fn path(&self) -> Vec<PathFrame<'_>> {
        let t = &self.task;
        let mut out = Vec::with_capacity(1 + t.user.frames().len() + t.kernel.frames().len());
        out.push(PathFrame::label(&t.comm, PathKind::Process));
        push_trace(&mut out, &t.user, "[Missed User Stack]");
        push_trace(&mut out, &t.kernel, "[Missed Kernel Stack]");
        if let Some(w) = &self.waker {
            push_waker(&mut out, w);
        }
        out
    }
}
