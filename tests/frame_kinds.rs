//! Every kind of raw frame a collector can hand over — kernel and native
//! addresses, labels, runtime frames named by the collector's namers
//! (interpreted, JIT with an inlined method, one that cannot be named) —
//! through the pipeline (symbolizer, namers, model) into every writer:
//! bcc's text and folded stacks, the SVG flame graph, pprof, speedscope
//! and the live page's snapshot, against golden files
//! (`FLARE_BLESS=1` rewrites them).

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::golden;
use flare::collect::{
    Collection, Collector, Namer, Namers, RawFrame, RawSample, RawTask, RawTrace, Runtime,
    RuntimeFrame,
};
use flare::live::{snapshot_json, Limits, Selection, Store};
use flare::output::pprof;
use flare::output::{Format, StackStyle};
use flare::pipeline::{self, Mode, Plan, Sink};
use flare::procmaps::Mappings;
use flare::profile::{Frame, FrameKind, Kind, Lost, Meta, Profile, SourceLine};

/// A process that does not exist: its native frames stay unnamed, the
/// same on every machine.
const PID: u32 = u32::MAX - 1;
/// An address below every kernel symbol: an unnamed kernel frame.
const KERNEL: u64 = 0x1;

fn runtime(runtime: Runtime, ids: [u64; 2], cookie: u64) -> RawFrame {
    RawFrame::Runtime(Box::new(RuntimeFrame {
        runtime,
        ids,
        cookie,
    }))
}

/// Names Python frames as a CPython namer would: a function and its
/// source line, when the cookie matches.
struct FakePython;

impl Namer for FakePython {
    fn name(&mut self, pid: u32, frame: &RuntimeFrame) -> Option<Vec<Frame>> {
        assert_eq!(pid, PID, "asked of the sample's process");
        (frame.cookie == 7).then(|| {
            vec![Frame {
                source: Some(Box::new(SourceLine {
                    file: "app.py".into(),
                    line: Some(40 + frame.ids[1] as u32),
                })),
                ..Frame::named("handle_request", FrameKind::Interpreted)
            }]
        })
    }
}

/// Names Java frames as a HotSpot namer would: a compiled method with
/// one inlined into it (innermost last).
struct FakeJava;

impl Namer for FakeJava {
    fn name(&mut self, _pid: u32, _frame: &RuntimeFrame) -> Option<Vec<Frame>> {
        Some(vec![
            Frame::named("Parser.parse", FrameKind::Jit),
            Frame {
                inlined: true,
                ..Frame::named("Lexer.next", FrameKind::Jit)
            },
        ])
    }
}

struct Fake {
    read: Option<Collection>,
}

impl Collector for Fake {
    fn meta(&self) -> Meta {
        let mut m = Meta::new(Kind::Cpu, "cpu-clock");
        m.period_ns = Some(10_000_000);
        m
    }

    fn header(&self) -> String {
        "Sampling every kind of frame".into()
    }

    fn collect(&mut self, _clear: bool) -> flare::error::Result<Collection> {
        Ok(self.read.take().unwrap_or_default())
    }

    fn mappings(&self) -> Option<Mappings> {
        Some(Mappings::on_demand())
    }

    fn namers(&self) -> Namers {
        vec![
            (Runtime::Python, Box::new(FakePython)),
            (Runtime::Java, Box::new(FakeJava)),
        ]
    }
}

fn task(user: Vec<RawFrame>, kernel: Vec<RawFrame>) -> RawTask {
    let trace = |f: Vec<RawFrame>| match f.is_empty() {
        true => RawTrace::NotCollected,
        false => RawTrace::Frames(Arc::from(f)),
    };
    RawTask {
        pid: Some(PID),
        start: 0,
        tid: None,
        comm: "app".into(),
        user: trace(user),
        kernel: trace(kernel),
    }
}

/// Two samples: a mixed user stack under a kernel one, and a label at the
/// leaf of a kernel stack (wall-clock's thread state).
fn raw() -> Vec<RawSample> {
    let mixed = vec![
        RawFrame::Addr(0x1000),
        runtime(Runtime::Python, [0xc0de, 2], 7),
        runtime(Runtime::Java, [0x3e7, 5], 0),
        runtime(Runtime::Python, [0xdead, 0], 1),
        RawFrame::Addr(0x2000),
    ];
    let blocked = vec![
        RawFrame::label("[off-cpu: sleeping]"),
        RawFrame::Addr(KERNEL),
    ];
    vec![
        RawSample {
            task: task(mixed.clone(), vec![RawFrame::Addr(KERNEL)]),
            waker: None,
            value: 30,
        },
        RawSample {
            task: task(mixed, blocked),
            waker: None,
            value: 12,
        },
    ]
}

#[derive(Default)]
struct Keep(Option<Profile>);

impl Sink for Keep {
    fn report(&mut self, p: &Profile) -> flare::error::Result<()> {
        self.0 = Some(p.clone());
        Ok(())
    }
}

/// The profile the pipeline makes of [`raw`], its duration fixed.
fn profile() -> Profile {
    let fake = Fake {
        read: Some(Collection {
            samples: raw(),
            lost: Lost::default(),
            events: None,
        }),
    };
    let mut keep = Keep::default();
    let (_tx, stop) = mpsc::channel();
    let plan = Plan {
        duration: Some(Duration::ZERO),
        mode: Mode::Once,
        symbolize: Default::default(),
        gate: None,
    };
    pipeline::run(Box::new(fake), &mut [&mut keep], &plan, &stop).expect("the pipeline runs");
    let mut p = keep.0.expect("a report");
    p.meta.duration = Duration::from_secs(5);
    p
}

fn render(p: &Profile, f: Format) -> String {
    let mut out = Vec::new();
    f.write(&mut out, p, StackStyle::default()).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn the_model_says_what_each_frame_is() {
    let p = profile();
    let mixed = p
        .samples
        .iter()
        .find(|s| s.value == 30)
        .expect("the sample");
    let user: Vec<(&str, FrameKind, bool)> = mixed
        .task
        .user
        .frames()
        .iter()
        .map(|f| (&*f.name, f.kind, f.inlined))
        .collect();
    assert_eq!(
        user,
        [
            ("[unknown]", FrameKind::Native, false),
            ("handle_request", FrameKind::Interpreted, false),
            ("Lexer.next", FrameKind::Jit, true),
            ("Parser.parse", FrameKind::Jit, false),
            ("python+0xdead", FrameKind::Interpreted, false),
            ("[unknown]", FrameKind::Native, false),
        ]
    );
    assert_eq!(mixed.task.user.frames()[1].line(), Some(42));
    assert!(
        mixed.task.user.frames()[4].unnamed,
        "the cookie did not match"
    );
    let blocked = p
        .samples
        .iter()
        .find(|s| s.value == 12)
        .expect("the sample");
    let kernel: Vec<(&str, FrameKind)> = blocked
        .task
        .kernel
        .frames()
        .iter()
        .map(|f| (&*f.name, f.kind))
        .collect();
    assert_eq!(
        kernel,
        [
            ("[off-cpu: sleeping]", FrameKind::Label),
            ("[unknown]", FrameKind::Kernel)
        ]
    );
}

#[test]
fn every_writer_shows_every_kind() {
    let p = profile();
    golden::check("frame-kinds.txt", &render(&p, Format::Text));
    golden::check("frame-kinds.folded", &render(&p, Format::Folded));
    let svg = render(&p, Format::Svg);
    golden::check("frame-kinds.svg", &svg);
    golden::check(
        "frame-kinds.pprof.txt",
        &common::pprof::text(&pprof::build(&p, 0)),
    );
    golden::check(
        "frame-kinds.speedscope.json",
        &render(&p, Format::Speedscope),
    );
    let mut store = Store::new(p.meta.clone(), Limits::default());
    store.push(&p.samples, Lost::default(), Duration::from_secs(5));
    let live: serde_json::Value =
        serde_json::from_str(&snapshot_json(&store, Selection::default(), 0.0)).unwrap();
    let live = serde_json::to_string_pretty(&live["graph"]).unwrap();
    golden::check("frame-kinds.live.json", &live);

    // The kinds as each writer shows them, beyond the goldens' bytes:
    // flame graph colours (JIT green, interpreted a lighter green, labels
    // grey), pprof's [jit] mapping, the live page's kind codes.
    let fill = |name: &str| -> String {
        let at = svg
            .find(&format!("<title>{name} ("))
            .unwrap_or_else(|| panic!("{name} in the SVG"));
        let rest = &svg[at..];
        let fill = &rest[rest.find("fill=\"").expect("a fill") + 6..];
        fill[..fill.find('"').unwrap()].to_string()
    };
    assert!(
        fill("Parser.parse").starts_with("rgb(0,"),
        "{}",
        fill("Parser.parse")
    );
    assert_ne!(fill("handle_request"), fill("Parser.parse"));
    assert_ne!(fill("[off-cpu: sleeping]"), fill("handle_request"));
    let pb = pprof::build(&p, 0);
    assert!(pb.string_table.iter().any(|s| s == "[jit]"));
    assert!(live.contains("\"i\"") && live.contains("\"j\"") && live.contains("\"l\""));
}
