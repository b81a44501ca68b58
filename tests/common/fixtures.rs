//! Hand-made profiles with every kind of stack a writer must handle.

use flare::profile::{Frame, FrameKind, Kind, Meta, Profile, Sample, TaskStack, Trace};

pub fn frames(names: &[&str], kind: FrameKind) -> Trace {
    Trace::Frames(names.iter().map(|n| Frame::named(*n, kind)).collect())
}

pub fn task(comm: &str, pid: u32, user: Trace, kernel: Trace) -> TaskStack {
    TaskStack {
        pid: Some(pid),
        tid: None,
        comm: comm.into(),
        user,
        kernel,
    }
}

/// A `flare profile` result: a syscall stack, a missed user stack, a kernel
/// thread, a user-only sample and a missed kernel stack, in ascending order.
pub fn cpu_profile() -> Profile {
    use FrameKind::*;
    let k = |n: &[&str]| frames(n, Kernel);
    let u = |n: &[&str]| frames(n, Native);
    let samples = vec![
        (
            task(
                "cp",
                9036,
                Trace::Missed { enomem: true },
                k(&[
                    "filemap_map_pages",
                    "handle_mm_fault",
                    "exc_page_fault",
                    "asm_exc_page_fault",
                ]),
            ),
            1,
        ),
        (
            task(
                "kworker/0:1",
                12,
                u(&[]),
                k(&[
                    "memset_orig",
                    "process_one_work",
                    "worker_thread",
                    "kthread",
                    "ret_from_fork",
                ]),
            ),
            2,
        ),
        (
            task(
                "dd",
                25036,
                u(&["read", "main"]),
                Trace::Missed { enomem: false },
            ),
            3,
        ),
        (
            task(
                "func_ab",
                13549,
                u(&["func_a", "main", "__libc_start_main", "[unknown]"]),
                k(&[]),
            ),
            5,
        ),
        (
            task(
                "dd",
                25036,
                u(&["read", "[unknown]"]),
                k(&[
                    "__clear_user",
                    "iov_iter_zero",
                    "read_iter_zero",
                    "vfs_read",
                    "ksys_read",
                    "do_syscall_64",
                    "entry_SYSCALL_64_after_hwframe",
                ]),
            ),
            7,
        ),
    ];
    Profile {
        meta: Meta::new(Kind::Cpu, "cpu-clock"),
        samples: samples
            .into_iter()
            .map(|(task, value)| Sample {
                task,
                waker: None,
                value,
                extra: Default::default(),
            })
            .collect(),
        timeline: None,
    }
}

/// The same profile as recorded with only one kind of stack.
pub fn only(profile: &Profile, user: bool, kernel: bool) -> Profile {
    let mut p = profile.clone();
    for s in &mut p.samples {
        if !user {
            s.task.user = Trace::NotCollected;
        }
        if !kernel {
            s.task.kernel = Trace::NotCollected;
        }
    }
    p
}

/// A `flare stackcount` result: a uprobe reached from two callers of one
/// process, a tracepoint with kernel and user stacks, and a stack that
/// could not be stored. Frames carry addresses for `-v`.
pub fn stack_counts() -> Profile {
    use FrameKind::*;
    let at = |names: &[(&str, u64)], kind| {
        Trace::Frames(
            names
                .iter()
                .map(|(n, a)| Frame {
                    addr: *a,
                    ..Frame::named(*n, kind)
                })
                .collect(),
        )
    };
    let samples = vec![
        (
            task(
                "leafcalls",
                4242,
                Trace::Missed { enomem: true },
                at(&[("ksys_read", 0xffffffff81400010)], Kernel),
            ),
            1,
        ),
        (
            task(
                "leafcalls",
                4242,
                at(
                    &[
                        ("leaf", 0x401126),
                        ("caller_a", 0x401140),
                        ("main", 0x401190),
                    ],
                    Native,
                ),
                Trace::of(vec![]),
            ),
            500,
        ),
        (
            task(
                "leafcalls",
                4242,
                at(
                    &[
                        ("leaf", 0x401126),
                        ("caller_b", 0x401160),
                        ("main", 0x4011a0),
                    ],
                    Native,
                ),
                Trace::of(vec![]),
            ),
            500,
        ),
        (
            task(
                "dd",
                25036,
                at(&[("read", 0x7f0000001000), ("main", 0x401000)], Native),
                at(
                    &[
                        ("ksys_read", 0xffffffff81400010),
                        ("do_syscall_64", 0xffffffff81a00020),
                    ],
                    Kernel,
                ),
            ),
            777,
        ),
    ];
    Profile {
        meta: Meta::new(Kind::Count, "leafcalls:leaf"),
        samples: samples
            .into_iter()
            .map(|(task, value)| Sample {
                task,
                waker: None,
                value,
                extra: Default::default(),
            })
            .collect(),
        timeline: None,
    }
}
