//! Output formats. Each module writes a [`Profile`](crate::profile::Profile)
//! to any `impl Write`; none of them knows how the profile was collected.

pub mod firefox;
pub mod folded;
pub mod format;
pub mod heatmap;
pub mod offcpu;
pub mod pprof;
pub mod speedscope;
pub mod stackcount;
pub mod svg;
pub mod text;

pub use format::Format;

use crate::profile::Frame;

/// How stacks are printed in bcc's text and folded formats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackStyle {
    /// Put a delimiter between kernel and user stacks (`-d`): `--` in the
    /// multi-line output, `-` in folded output.
    pub delimited: bool,
    /// Append `_[k]` to kernel frames (`-a`).
    pub annotate_kernel: bool,
    /// Name functions without a symbol `object+0xSTART`, as flare's own
    /// formats do (`--unknown=offset`), instead of bcc's `[unknown]`.
    pub unknown_offsets: bool,
}

impl StackStyle {
    /// A frame's name as these formats print it (without `_[k]`).
    pub(crate) fn name(self, f: &Frame) -> &str {
        f.bcc_name(self.unknown_offsets)
    }
}

/// The name of a kernel frame as printed, with `_[k]` under `-a`.
pub(crate) fn kernel_name(name: &str, style: StackStyle) -> std::borrow::Cow<'_, str> {
    if style.annotate_kernel {
        format!("{name}_[k]").into()
    } else {
        name.into()
    }
}
