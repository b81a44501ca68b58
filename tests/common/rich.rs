//! Profiles with everything the file formats carry: metadata, modules,
//! source lines, inlined frames, thread ids, wakers, lost stacks.

use std::time::Duration;

use flare::profile::{Frame, FrameKind, Kind, Meta, Profile, Sample, SourceLine, TaskStack, Trace};

use super::fixtures::{self, frames, task};

fn located(name: &str, addr: u64, module: &str, file: &str, line: u32) -> Frame {
    Frame {
        addr,
        object: Some(flare::profile::ObjectRef::path(module)),
        source: Some(Box::new(SourceLine {
            file: file.into(),
            line: Some(line),
        })),
        ..Frame::named(name, FrameKind::Native)
    }
}

/// `fixtures::cpu_profile` as a 5-second, 99 Hz run, plus a thread whose
/// stack has a source-located, inlined frame.
pub fn cpu() -> Profile {
    let mut p = fixtures::cpu_profile();
    p.meta.duration = Duration::from_millis(5000);
    p.meta.period_ns = Some(10_101_010);
    p.meta.target = "all threads".into();
    p.meta.lost.stacks = 2;
    p.meta.lost.stacks_enomem = true;
    let mut inlined = located("hash_step", 0x401136, "/usr/bin/app", "hash.h", 12);
    inlined.inlined = true;
    let user = Trace::of(vec![
        inlined,
        located("hash_buf", 0x401136, "/usr/bin/app", "hash.c", 40),
        located("main", 0x401200, "/usr/bin/app", "main.c", 9),
        located(
            "__libc_start_main",
            0x7f00_1234,
            "/usr/lib/libc.so.6",
            "libc-start.c",
            360,
        ),
    ]);
    let mut t = task("app", 4242, user, Trace::of(vec![]));
    t.tid = Some(4243);
    p.samples.push(Sample {
        task: t,
        waker: None,
        value: 11,
        extra: Default::default(),
    });
    p
}

/// An `offwaketime` result in microseconds, with wakers.
pub fn offcpu() -> Profile {
    use FrameKind::*;
    let mut meta = Meta::new(Kind::OffWake, "sched_switch");
    meta.duration = Duration::from_secs(3);
    meta.target = "all threads".into();
    let blocked = |comm: &str, pid: u32, user: &[&str], kernel: &[&str]| TaskStack {
        tid: Some(pid),
        ..task(comm, pid, frames(user, Native), frames(kernel, Kernel))
    };
    let samples = vec![
        Sample {
            task: blocked(
                "sleep",
                700,
                &["clock_nanosleep", "main"],
                &["schedule", "do_nanosleep", "hrtimer_nanosleep"],
            ),
            waker: Some(blocked(
                "swapper/1",
                0,
                &[],
                &["hrtimer_wakeup", "__hrtimer_run_queues"],
            )),
            value: 1_000_000,
            extra: Default::default(),
        },
        Sample {
            task: blocked(
                "reader",
                701,
                &["read", "main"],
                &["schedule", "pipe_read", "vfs_read"],
            ),
            waker: Some(blocked(
                "writer",
                702,
                &["write", "main"],
                &["try_to_wake_up", "pipe_write"],
            )),
            value: 250_000,
            extra: Default::default(),
        },
    ];
    Profile::untimed(meta, samples)
}

/// A `stackcount` result: kernel stacks with event counts.
pub fn counts() -> Profile {
    let mut meta = Meta::new(Kind::Count, "submit_bio");
    meta.duration = Duration::from_secs(2);
    meta.target = "all threads".into();
    let k = |n: &[&str]| frames(n, FrameKind::Kernel);
    let samples = vec![
        Sample {
            task: task(
                "kworker/u4:2",
                90,
                Trace::NotCollected,
                k(&["submit_bio", "ext4_io_submit", "ext4_writepages"]),
            ),
            waker: None,
            value: 40,
            extra: Default::default(),
        },
        Sample {
            task: task(
                "dd",
                91,
                Trace::NotCollected,
                k(&["submit_bio", "blkdev_write_iter", "vfs_write"]),
            ),
            waker: None,
            value: 160,
            extra: Default::default(),
        },
    ];
    Profile::untimed(meta, samples)
}
