//! Warnings on stderr: notes from the collector when it starts, and after
//! every report bcc's lines about what the kernel could not record, each
//! with the option that would have avoided it.

use crate::error::Result;
use crate::pipeline::Sink;
use crate::profile::{Lost, Meta, Profile};

/// Prints notes and losses on stderr.
#[derive(Debug, Default)]
pub struct Warnings;

/// The warnings for `lost`, one line each (bcc's wording where bcc has
/// one).
pub fn lines(lost: &Lost) -> Vec<String> {
    let mut out = Vec::new();
    if lost.stacks > 0 {
        let hint = if lost.stacks_enomem {
            " Consider increasing --stack-storage-size."
        } else {
            ""
        };
        out.push(format!(
            "WARNING: {} stack traces could not be displayed.{hint}",
            lost.stacks
        ));
    }
    if lost.hash_full > 0 {
        out.push(format!(
            "WARNING: {} samples were dropped because the hash table was full. Consider increasing --hash-storage-size.",
            lost.hash_full
        ));
    }
    if lost.untracked > 0 {
        out.push(format!(
            "WARNING: {} off-CPU periods were not tracked because too many threads were blocked at once. Consider increasing --blocked-storage-size.",
            lost.untracked
        ));
    }
    if lost.missed_events > 0 {
        out.push(format!(
            "WARNING: {} events were not counted: the kernel skipped the program while another BPF program ran on the same CPU.",
            lost.missed_events
        ));
    }
    if lost.capped > 0 {
        out.push(format!(
            "WARNING: {} user stacks reached the kernel's limit of {} frames and may be cut (marked [truncated]): --unwind fp walks them in the kernel. Use --unwind auto (Linux 5.17+), or raise the limit: sysctl kernel.perf_event_max_stack=1024.",
            lost.capped,
            crate::collect::stacks::kernel_max_frames()
        ));
    }
    if lost.samples > 0 {
        out.push(format!(
            "WARNING: {} samples were lost: flare's perf buffers were full. Consider a lower -F.",
            lost.samples
        ));
    }
    out
}

impl Sink for Warnings {
    fn begin(&mut self, _meta: &Meta, _header: &str, notes: &[String]) -> Result<()> {
        for n in notes {
            crate::notes::note(n);
        }
        Ok(())
    }

    fn report(&mut self, profile: &Profile) -> Result<()> {
        for l in lines(&profile.meta.lost) {
            crate::notes::note(l);
        }
        Ok(())
    }
}
