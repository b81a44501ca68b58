//! bcc's `-s`: frame names with the offset of the address into its
//! function (`vfs_read+0x5`), from the offset the symbolizer recorded on
//! each frame, so that a process that has exited gets them too.

use crate::profile::Sample;

/// Appends `+0xOFFSET` to every named frame, once: the pipeline tidies
/// each stack once ([`crate::collect::Collector::tidy`]).
pub fn add_offsets(samples: &mut [Sample]) {
    for s in samples {
        let tasks = std::iter::once(&mut s.task).chain(s.waker.as_mut());
        for t in tasks {
            for trace in [&mut t.kernel, &mut t.user] {
                if let Some(frames) = trace.frames_mut() {
                    for f in frames.iter_mut().filter(|f| !f.unnamed) {
                        f.name = format!("{}+0x{:x}", f.name, f.offset).into();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, FrameKind, TaskStack, Trace};

    #[test]
    fn named_frames_get_their_offset_unnamed_ones_none() {
        let named = Frame {
            offset: 0x1c,
            ..Frame::named("vfs_read", FrameKind::Kernel)
        };
        let mut samples = vec![Sample::new(
            TaskStack {
                pid: Some(1),
                tid: None,
                comm: "x".into(),
                user: Trace::of(vec![Frame::unknown(0x10, FrameKind::Native)]),
                kernel: Trace::of(vec![named]),
            },
            None,
            1,
        )];
        add_offsets(&mut samples);
        let t = &samples[0].task;
        assert_eq!(&*t.kernel.frames()[0].name, "vfs_read+0x1c");
        assert_eq!(&*t.user.frames()[0].name, "[unknown]");
    }
}
