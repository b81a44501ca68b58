//! Profiles with timelines: the rich CPU profile spread over its five
//! seconds, a wall-clock profile with off-CPU periods, and a profile of
//! a known time shape (a steady function and a burst of another).

use std::sync::Arc;
use std::time::Duration;

use flare::profile::{
    Event, ExtraValue, Frame, FrameKind, Kind, Meta, ObjectRef, Profile, Sample, SourceLine,
    TaskStack, Timeline, Trace,
};

use super::fixtures::{frames, task};
use super::rich;

/// The clocks of every timed fixture: monotonic and Unix origins.
pub const ORIGIN_NS: u64 = 1_000_000_000_000;
pub const ORIGIN_UNIX_NS: u64 = 1_700_000_000_000_000_000;

fn timeline(events: Vec<Event>) -> Timeline {
    Timeline {
        origin_ns: ORIGIN_NS,
        origin_unix_ns: ORIGIN_UNIX_NS,
        events,
    }
}

/// `rich::cpu` with a build id and file offsets on the app's frames, a
/// kernel frame with an address, a Python frame, and each sample's
/// events spread over the run on its thread.
pub fn cpu() -> Profile {
    let mut p = rich::cpu();
    let app = Arc::new(ObjectRef {
        path: "/usr/bin/app".into(),
        build_id: Some(Arc::from(
            &[
                0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
            ][..],
        )),
    });
    for s in &mut p.samples {
        if let Some(f) = s.task.user.frames_mut() {
            for f in f.iter_mut().filter(|f| f.module() == Some("/usr/bin/app")) {
                f.object = Some(app.clone());
                f.file_offset = f.addr - 0x400000;
            }
        }
        if let Some(f) = s.task.kernel.frames_mut() {
            for f in f.iter_mut() {
                // One address per name, as in a kernel.
                let h = f
                    .name
                    .bytes()
                    .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
                f.addr = 0xffff_ffff_8100_0000 + (h % 0x10_0000) * 0x10;
            }
        }
    }
    let py = Frame {
        source: Some(Box::new(SourceLine {
            file: "worker.py".into(),
            line: Some(17),
        })),
        ..Frame::named("crunch", FrameKind::Interpreted)
    };
    let mut t = task(
        "python3",
        5151,
        Trace::of(vec![
            py,
            Frame::named("_PyEval_EvalFrameDefault", FrameKind::Native),
        ]),
        Trace::of(vec![]),
    );
    t.tid = Some(5152);
    p.samples.push(Sample::new(t, None, 4));
    let mut events = Vec::new();
    for (i, s) in p.samples.iter().enumerate() {
        let tid = s.task.tid.or(s.task.pid).unwrap_or(0);
        for k in 0..s.value {
            events.push(Event {
                time_ns: ORIGIN_NS + (i as u64 * 37 + k * 401) % 5000 * 1_000_000,
                value: 1,
                sample: i as u32,
                tid,
                cpu: (k % 2) as u32,
            });
        }
    }
    let mut t = timeline(events);
    t.sort();
    p.timeline = Some(t);
    p
}

/// A wall-clock profile of one thread: on the CPU in `compute`, then
/// sleeping (the `[off-cpu: sleeping]` label), then on the CPU again.
pub fn wall() -> Profile {
    let mut meta = Meta::new(Kind::Wall, "wallclock");
    meta.duration = Duration::from_secs(1);
    meta.target = "PID [300]".into();
    meta.extra_values = vec![ExtraValue {
        name: "cpu".into(),
        unit: "nanoseconds".into(),
    }];
    let on = TaskStack {
        tid: Some(300),
        ..task(
            "srv",
            300,
            frames(&["compute", "main"], FrameKind::Native),
            Trace::of(vec![]),
        )
    };
    let mut off = TaskStack {
        tid: Some(300),
        ..task(
            "srv",
            300,
            frames(&["nanosleep", "main"], FrameKind::Native),
            frames(&["schedule"], FrameKind::Kernel),
        )
    };
    off.kernel
        .edit_frames(|k| k.insert(0, Frame::named("[off-cpu: sleeping]", FrameKind::Label)));
    let samples = vec![
        Sample {
            task: on,
            waker: None,
            value: 400_000,
            extra: Box::new([400_000_000]),
        },
        Sample {
            task: off,
            waker: None,
            value: 500_000,
            extra: Box::new([0]),
        },
    ];
    let ev = |ms: u64, us: u64, sample: u32| Event {
        time_ns: ORIGIN_NS + ms * 1_000_000,
        value: us,
        sample,
        tid: 300,
        cpu: 0,
    };
    Profile {
        meta,
        samples,
        timeline: Some(timeline(vec![
            ev(0, 200_000, 0),
            ev(200, 500_000, 1),
            ev(700, 200_000, 0),
        ])),
    }
}

/// 4 s of `steady` at 100 Hz on one thread, except a 500 ms burst of
/// `burst` from 2.0 s.
pub fn burst() -> Profile {
    let mut meta = Meta::new(Kind::Cpu, "cpu-clock");
    meta.period_ns = Some(10_000_000);
    meta.duration = Duration::from_secs(4);
    let stack = |leaf: &str| TaskStack {
        tid: Some(77),
        ..task(
            "shape",
            77,
            frames(&[leaf, "main"], FrameKind::Native),
            Trace::of(vec![]),
        )
    };
    let mut samples = vec![
        Sample::new(stack("steady"), None, 0),
        Sample::new(stack("burst"), None, 0),
    ];
    let mut events = Vec::new();
    for k in 0..400u64 {
        let ms = k * 10;
        let sample = usize::from((2000..2500).contains(&ms));
        samples[sample].value += 1;
        events.push(Event {
            time_ns: ORIGIN_NS + ms * 1_000_000 + 3_000_000,
            value: 1,
            sample: sample as u32,
            tid: 77,
            cpu: 0,
        });
    }
    Profile {
        meta,
        samples,
        timeline: Some(timeline(events)),
    }
}
