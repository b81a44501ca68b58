//! Golden tests of bcc's text and folded layouts for offcputime,
//! wakeuptime and offwaketime, with and without -d, -U and -K, including
//! stacks that could not be stored and a blocked thread nobody woke.

mod common;

use common::fixtures::{frames, task};
use common::golden;
use flare::output::{folded, offcpu, StackStyle};
use flare::profile::{Frame, FrameKind, Sample, TaskStack, Trace};

fn k(names: &[&str]) -> Trace {
    frames(names, FrameKind::Kernel)
}

fn u(names: &[&str]) -> Trace {
    frames(names, FrameKind::Native)
}

fn with_tid(mut t: TaskStack, tid: u32) -> TaskStack {
    t.tid = Some(tid);
    t
}

fn blocked_kernel() -> Trace {
    k(&[
        "__schedule",
        "schedule",
        "anon_pipe_read",
        "vfs_read",
        "ksys_read",
        "do_syscall_64",
        "entry_SYSCALL_64_after_hwframe",
    ])
}

fn waker_kernel() -> Trace {
    k(&[
        "try_to_wake_up",
        "autoremove_wake_function",
        "__wake_up_common",
        "anon_pipe_write",
        "vfs_write",
        "ksys_write",
        "do_syscall_64",
        "entry_SYSCALL_64_after_hwframe",
    ])
}

/// offwaketime samples, smallest first: nobody woke it, missed stacks, a
/// kernel thread woken by a timer, the pipe pair.
fn offwake() -> Vec<Sample> {
    vec![
        Sample {
            task: with_tid(
                task("sleepy", 40, u(&["pause", "main"]), blocked_kernel()),
                41,
            ),
            waker: None,
            value: 3,
            extra: Default::default(),
        },
        Sample {
            task: with_tid(
                task(
                    "blocker",
                    100,
                    Trace::Missed { enomem: true },
                    blocked_kernel(),
                ),
                101,
            ),
            waker: Some(with_tid(
                task(
                    "waker",
                    100,
                    u(&["wake_by_write", "waker"]),
                    Trace::Missed { enomem: false },
                ),
                102,
            )),
            value: 17,
            extra: Default::default(),
        },
        Sample {
            task: with_tid(
                task(
                    "kworker/0:1",
                    12,
                    u(&[]),
                    k(&[
                        "__schedule",
                        "schedule",
                        "worker_thread",
                        "kthread",
                        "ret_from_fork",
                    ]),
                ),
                12,
            ),
            waker: Some(with_tid(
                task(
                    "swapper/0",
                    0,
                    u(&[]),
                    k(&[
                        "try_to_wake_up",
                        "hrtimer_wakeup",
                        "__hrtimer_run_queues",
                        "do_idle",
                    ]),
                ),
                0,
            )),
            value: 250,
            extra: Default::default(),
        },
        Sample {
            task: with_tid(
                task(
                    "blocker",
                    100,
                    u(&["read", "block_in_read", "blocker"]),
                    blocked_kernel(),
                ),
                101,
            ),
            waker: Some(with_tid(
                task(
                    "waker",
                    100,
                    u(&["write", "wake_by_write", "waker"]),
                    waker_kernel(),
                ),
                102,
            )),
            value: 500123,
            extra: Default::default(),
        },
    ]
}

fn only(samples: &[Sample], user: bool, kernel: bool) -> Vec<Sample> {
    let cut = |t: &mut TaskStack| {
        if !user {
            t.user = Trace::NotCollected;
        }
        if !kernel {
            t.kernel = Trace::NotCollected;
        }
    };
    let mut v = samples.to_vec();
    for s in &mut v {
        cut(&mut s.task);
        if let Some(w) = &mut s.waker {
            cut(w);
        }
    }
    v
}

/// offcputime samples: the targets of [`offwake`] without wakers.
fn offcpu_samples() -> Vec<Sample> {
    offwake()
        .into_iter()
        .map(|mut s| {
            s.waker = None;
            s
        })
        .collect()
}

/// wakeuptime samples: target names and waker stacks with addresses.
fn wakeup(user: bool) -> Vec<Sample> {
    let with_addrs = |t: Trace, base: u64| match t {
        Trace::Frames(f) => Trace::Frames(
            f.iter()
                .enumerate()
                .map(|(i, f)| Frame {
                    addr: base + 0x40 * i as u64,
                    ..f.clone()
                })
                .collect(),
        ),
        other => other,
    };
    let target = |comm: &str| task(comm, 0, Trace::NotCollected, Trace::NotCollected);
    let waker = |comm: &str, ku: (Trace, Trace)| TaskStack {
        pid: None,
        tid: None,
        comm: comm.into(),
        user: if user {
            with_addrs(ku.1, 0x401100)
        } else {
            Trace::NotCollected
        },
        kernel: with_addrs(ku.0, 0xffff_ffff_8100_0000),
    };
    vec![
        Sample {
            task: target("kworker/1:2"),
            waker: Some(waker(
                "swapper/1",
                (k(&["try_to_wake_up", "hrtimer_wakeup", "do_idle"]), u(&[])),
            )),
            value: 9,
            extra: Default::default(),
        },
        Sample {
            task: target("blocker"),
            waker: Some(waker(
                "waker",
                (Trace::Missed { enomem: true }, u(&["write", "waker"])),
            )),
            value: 40,
            extra: Default::default(),
        },
        Sample {
            task: target("blocker"),
            waker: Some(waker(
                "waker",
                (waker_kernel(), u(&["write", "wake_by_write", "waker"])),
            )),
            value: 500123,
            extra: Default::default(),
        },
    ]
}

fn render(f: impl Fn(&mut Vec<u8>) -> std::io::Result<()>) -> String {
    let mut out = Vec::new();
    f(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

const STACKS: [(&str, bool, bool); 3] = [
    ("", true, true),
    ("-user", true, false),
    ("-kernel", false, true),
];

fn styles() -> [(&'static str, StackStyle); 2] {
    [
        ("", StackStyle::default()),
        (
            "-d",
            StackStyle {
                delimited: true,
                annotate_kernel: false,
                ..StackStyle::default()
            },
        ),
    ]
}

type Writer = fn(&mut Vec<u8>, &[Sample], StackStyle) -> std::io::Result<()>;

/// Checks `tool`'s text and folded output for every -U/-K and -d choice.
fn check_all(tool: &str, samples: &[Sample], text: Writer, fold: Writer) {
    for (stacks, user, kernel) in STACKS {
        let s = only(samples, user, kernel);
        for (flags, style) in styles() {
            let name = format!("{tool}{stacks}{flags}");
            golden::check(&format!("{name}.txt"), &render(|w| text(w, &s, style)));
            golden::check(&format!("{name}.folded"), &render(|w| fold(w, &s, style)));
        }
    }
}

#[test]
fn offcputime_formats() {
    check_all(
        "offcputime",
        &offcpu_samples(),
        |w, s, style| offcpu::offcputime_text(w, s, style),
        |w, s, style| folded::write(w, s, style),
    );
}

#[test]
fn offwaketime_formats() {
    check_all(
        "offwaketime",
        &offwake(),
        |w, s, style| offcpu::offwaketime_text(w, s, style),
        |w, s, style| offcpu::offwaketime_folded(w, s, style),
    );
}

#[test]
fn wakeuptime_formats() {
    for (name, user) in [("wakeuptime", false), ("wakeuptime-user-stack", true)] {
        let s = wakeup(user);
        golden::check(
            &format!("{name}.txt"),
            &render(|w| offcpu::wakeuptime_text(w, &s, StackStyle::default())),
        );
        golden::check(
            &format!("{name}.folded"),
            &render(|w| offcpu::wakeuptime_folded(w, &s, StackStyle::default())),
        );
    }
}
