//! Finishing an off-CPU profile after symbolization: the frames of the
//! tracing machinery itself come off the top of kernel stacks (the BPF
//! program, its trampoline and the tracepoint glue are where the stack was
//! taken, not where the thread blocked), and wakeuptime's entries are
//! summed per waker name, as bcc keys them.

use super::Tool;
use crate::profile::{Sample, TaskStack};

/// True for frames of the BPF tracing machinery: programs
/// (`bpf_prog_<tag>_<name>`), trampolines, and the tracepoint glue that
/// calls them (`bpf_trace_run2`, `__bpf_trace_sched_switch`, and on
/// newer kernels the tracepoint's iterator `__traceiter_sched_switch`).
pub fn is_tracing_frame(name: &str) -> bool {
    [
        "bpf_prog_",
        "bpf_trampoline_",
        "bpf_trace_run",
        "__bpf_trace_",
        "__traceiter_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// How deep below the top of a kernel stack the tracing machinery can sit.
const TRACING_DEPTH: usize = 8;

/// Drops the top of a kernel stack down to its last tracing frame. The BPF
/// program's own frame is not always named (kallsyms readers may resolve
/// it to whatever symbol precedes it), so everything above the tracing
/// glue goes with it.
fn strip(task: &mut TaskStack) {
    task.kernel
        .drop_top_through(TRACING_DEPTH, is_tracing_frame);
}

/// Strips tracing frames (and keys wakeuptime's wakers by name only); the
/// pipeline then merges what became identical.
pub fn tidy_samples(samples: &mut [Sample], tool: Tool) {
    for s in samples {
        strip(&mut s.task);
        if let Some(w) = &mut s.waker {
            strip(w);
            if tool == Tool::Wakeup {
                w.pid = None;
                w.tid = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, FrameKind, Kind, Meta, Profile, Sample, Trace};

    fn kernel(names: &[&str]) -> Trace {
        Trace::of(
            names
                .iter()
                .map(|n| Frame::named(*n, FrameKind::Kernel))
                .collect(),
        )
    }

    fn sample(k: &[&str], value: u64) -> Sample {
        Sample {
            task: TaskStack {
                pid: Some(1),
                tid: Some(1),
                comm: "a".into(),
                user: Trace::NotCollected,
                kernel: kernel(k),
            },
            waker: None,
            value,
            extra: Default::default(),
        }
    }

    /// Tracing frames deeper than the top of a stack are left alone.
    const DEEP: [&str; 10] = [
        "a",
        "b",
        "c",
        "d",
        "e",
        "f",
        "g",
        "h",
        "bpf_trace_run4",
        "x",
    ];

    #[test]
    fn tracing_frames_and_what_is_above_them_leave_the_top() {
        let mut p = Profile::new(Meta::new(Kind::OffCpu, "sched_switch"));
        p.samples = vec![
            sample(
                &[
                    "bpf_prog_6deef7357e7b4530_flare_switch_btf",
                    "bpf_trace_run4",
                    "__bpf_trace_sched_switch",
                    "__schedule",
                    "schedule",
                ],
                5,
            ),
            sample(&["bpf_prog_1_other", "__schedule", "schedule"], 2),
            sample(
                &[
                    "__start_bss_decrypted",
                    "bpf_trace_run4",
                    "__schedule",
                    "schedule",
                ],
                3,
            ),
            sample(&DEEP, 1),
            // 6.x kernels: the tracepoint's iterator sits on __schedule.
            sample(&["__traceiter_sched_switch", "__schedule", "schedule"], 5),
        ];
        tidy_samples(&mut p.samples, Tool::OffCpu);
        p.merge_identical();
        p.sort_ascending();
        let names: Vec<Vec<&str>> = p
            .samples
            .iter()
            .map(|s| s.task.kernel.frames().iter().map(|f| &*f.name).collect())
            .collect();
        assert_eq!(names, vec![DEEP.to_vec(), vec!["__schedule", "schedule"],]);
        assert_eq!(p.samples[1].value, 15);
    }
}
