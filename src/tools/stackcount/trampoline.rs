//! Kernel stacks counted through fentry start inside the BPF program,
//! which its trampoline called at the traced function's entry. Both come
//! off the top here, so that the traced function is the leaf, as a
//! kprobe's stack (and bcc's) has it.

use crate::profile::Sample;

/// How deep below the top of a kernel stack the trampoline can sit (the
/// program's frame above it, named or not).
const TRAMPOLINE_DEPTH: usize = 4;

/// Drops each kernel stack's top down to its trampoline; the pipeline
/// then merges what became identical.
pub fn strip_trampolines(samples: &mut [Sample]) {
    for s in samples {
        s.task
            .kernel
            .drop_top_through(TRAMPOLINE_DEPTH, |name| name.starts_with("bpf_trampoline_"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, FrameKind, TaskStack, Trace};

    fn sample(kernel: &[&str]) -> Sample {
        let frames = kernel
            .iter()
            .map(|n| Frame::named(*n, FrameKind::Kernel))
            .collect();
        Sample::new(
            TaskStack {
                pid: Some(1),
                tid: None,
                comm: "x".into(),
                user: Trace::NotCollected,
                kernel: Trace::of(frames),
            },
            None,
            1,
        )
    }

    fn names(s: &Sample) -> Vec<&str> {
        s.task.kernel.frames().iter().map(|f| &*f.name).collect()
    }

    #[test]
    fn the_traced_function_becomes_the_leaf() {
        let mut samples = vec![
            // As 6.12 gives it: the program, the trampoline, the function.
            sample(&[
                "bpf_prog_41138fd137e3fdc3_flare_sc_fentry",
                "bpf_trampoline_6442467375",
                "__do_sys_getppid",
                "do_syscall_64",
            ]),
            // The program's frame misnamed by a kallsyms reader.
            sample(&["__start_bss", "bpf_trampoline_1", "vfs_read"]),
            // A trampoline deep in the stack is some other tracer's.
            sample(&["a", "b", "c", "d", "bpf_trampoline_2", "e"]),
        ];
        strip_trampolines(&mut samples);
        assert_eq!(names(&samples[0]), ["__do_sys_getppid", "do_syscall_64"]);
        assert_eq!(names(&samples[1]), ["vfs_read"]);
        assert_eq!(
            names(&samples[2]),
            ["a", "b", "c", "d", "bpf_trampoline_2", "e"]
        );
    }
}
