//! The pipeline driven by a fake collector that replays fixed reads, into
//! sinks that record what they were given: the order of calls, what each
//! mode reads and reports, tidying (once per stack), merging, losses, and sink failures.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::mpsc::{self, Sender};
use std::sync::Mutex;
use std::time::Duration;

use super::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::collect::{Namer, RawFrame, RawSample, RawTask, RawTrace, Runtime, RuntimeFrame};
use crate::error::Error;
use crate::live::{Limits, Selection, Store};
use crate::output::format::write_folded;
use crate::output::StackStyle;
use crate::profile::{Event, Kind, Lost};

/// A collector that returns one prepared read per call (then nothing),
/// logs whether each read cleared, and can send a stop after `n` reads.
struct Fake {
    reads: VecDeque<Collection>,
    log: Rc<RefCell<Vec<bool>>>,
    stop_after: Option<(usize, Sender<()>)>,
}

impl Collector for Fake {
    fn meta(&self) -> Meta {
        Meta::new(Kind::Count, "fake:event")
    }

    fn header(&self) -> String {
        "Tracing a fake event".into()
    }

    fn notes(&self) -> Vec<String> {
        vec!["attached the fake way".into()]
    }

    fn collect(&mut self, clear: bool) -> Result<Collection> {
        self.log.borrow_mut().push(clear);
        if let Some((n, tx)) = &self.stop_after {
            if self.log.borrow().len() == *n {
                let _ = tx.send(());
            }
        }
        Ok(self.reads.pop_front().unwrap_or_default())
    }

    /// Appends `+` to process names, so that tests see tidying happened,
    /// and happened once (as `-s` appends offsets).
    fn tidy(&self, samples: &mut [Sample]) {
        for s in samples {
            s.task.comm = format!("{}+", s.task.comm).into();
        }
    }
}

/// A stack of a process that does not exist: symbolizes to `[unknown]`
/// frames without touching the system.
fn raw(comm: &str, addrs: &[u64], value: u64) -> RawSample {
    RawSample {
        task: RawTask {
            pid: Some(u32::MAX - 1),
            start: 0,
            tid: None,
            comm: comm.into(),
            user: RawTrace::addrs(addrs.iter().copied()),
            kernel: RawTrace::NotCollected,
        },
        waker: None,
        value,
    }
}

fn read(samples: Vec<RawSample>, stacks_lost: u64) -> Collection {
    Collection {
        samples,
        lost: Lost {
            stacks: stacks_lost,
            ..Lost::default()
        },
        events: None,
    }
}

/// What a sink saw, as text.
#[derive(Default)]
struct Recorder {
    events: Vec<String>,
    fail_reports: bool,
}

fn folded(p: &Profile) -> String {
    let mut out = Vec::new();
    write_folded(&mut out, p, StackStyle::default()).unwrap();
    String::from_utf8(out).unwrap().replace('\n', "|")
}

impl Sink for Recorder {
    fn begin(&mut self, meta: &Meta, header: &str, notes: &[String]) -> Result<()> {
        self.events
            .push(format!("begin {:?} {header} {notes:?}", meta.kind));
        Ok(())
    }

    fn update(&mut self, delta: &Profile, _length: Duration) -> Result<()> {
        self.events.push(format!("update {}", folded(delta)));
        Ok(())
    }

    fn report(&mut self, p: &Profile) -> Result<()> {
        self.events
            .push(format!("report {} lost={}", folded(p), p.meta.lost.stacks));
        if self.fail_reports {
            return Err(Error::Output("cannot write".into()));
        }
        Ok(())
    }

    fn end(&mut self) -> Result<()> {
        self.events.push("end".into());
        Ok(())
    }
}

fn plan(duration: Option<Duration>, mode: Mode) -> Plan {
    Plan {
        duration,
        mode,
        symbolize: Default::default(),
        gate: None,
    }
}

#[test]
fn once_reads_once_then_tidies_merges_and_sorts() {
    let log = Rc::new(RefCell::new(Vec::new()));
    let fake = Fake {
        reads: VecDeque::from([read(
            vec![
                raw("app", &[0x10, 0x20], 5),
                raw("app", &[0x30, 0x20], 2),
                // Same names ([unknown];[unknown]) as the first: merged.
                raw("app", &[0x11, 0x21], 1),
            ],
            3,
        )]),
        log: Rc::clone(&log),
        stop_after: None,
    };
    let (tx, stop) = mpsc::channel();
    tx.send(()).unwrap();
    let mut a = Recorder::default();
    let mut b = Recorder::default();
    run(
        Box::new(fake),
        &mut [&mut a, &mut b],
        &plan(None, Mode::Once),
        &stop,
    )
    .unwrap();
    assert_eq!(*log.borrow(), vec![false], "one read, not clearing");
    let expected = vec![
        "begin Count Tracing a fake event [\"attached the fake way\"]".to_string(),
        "report app+;[unknown];[unknown] 8| lost=3".to_string(),
        "end".to_string(),
    ];
    assert_eq!(a.events, expected);
    assert_eq!(b.events, expected, "every sink sees the same");
}

#[test]
fn periodic_runs_report_each_interval_or_the_whole_run() {
    for report_each in [true, false] {
        let log = Rc::new(RefCell::new(Vec::new()));
        let (tx, stop) = mpsc::channel();
        let fake = Fake {
            reads: VecDeque::from([
                read(vec![raw("a", &[1], 3)], 1),
                read(vec![raw("a", &[1], 4), raw("b", &[2, 3], 1)], 0),
                read(vec![], 2),
            ]),
            log: Rc::clone(&log),
            // The third read is the last: a stop arrives after it.
            stop_after: Some((2, tx)),
        };
        let mut rec = Recorder::default();
        let mode = Mode::Periodic {
            interval: Duration::from_millis(1),
            report_each,
        };
        run(Box::new(fake), &mut [&mut rec], &plan(None, mode), &stop).unwrap();
        assert_eq!(*log.borrow(), vec![true, true, true], "clearing reads");
        let updates: Vec<&String> = rec
            .events
            .iter()
            .filter(|e| e.starts_with("update"))
            .collect();
        assert_eq!(
            updates,
            [
                "update a+;[unknown] 3|",
                "update b+;[unknown];[unknown] 1|a+;[unknown] 4|",
                "update ",
            ]
        );
        let reports: Vec<&String> = rec
            .events
            .iter()
            .filter(|e| e.starts_with("report"))
            .collect();
        if report_each {
            assert_eq!(
                reports,
                [
                    "report a+;[unknown] 3| lost=1",
                    "report b+;[unknown];[unknown] 1|a+;[unknown] 4| lost=0",
                    "report  lost=2",
                ]
            );
        } else {
            assert_eq!(
                reports,
                ["report b+;[unknown];[unknown] 1|a+;[unknown] 7| lost=3"]
            );
        }
        assert_eq!(rec.events.last().map(String::as_str), Some("end"));
    }
}

/// A sink that feeds the live store, as the live view does.
struct Feed<'a>(&'a Mutex<Store>);

impl Sink for Feed<'_> {
    fn update(&mut self, delta: &Profile, length: Duration) -> Result<()> {
        self.0
            .lock()
            .unwrap()
            .push(&delta.samples, delta.meta.lost, length);
        Ok(())
    }
}

#[test]
fn periodic_updates_fill_a_live_store_with_one_stack_across_intervals() {
    let (tx, stop) = mpsc::channel();
    let fake = Fake {
        reads: VecDeque::from([
            read(vec![raw("gone", &[0x1000, 0x2000], 3)], 0),
            read(vec![raw("gone", &[0x1000, 0x2000], 4)], 0),
        ]),
        log: Rc::default(),
        stop_after: Some((2, tx)),
    };
    let store = Mutex::new(Store::new(fake.meta(), Limits::default()));
    let mode = Mode::Periodic {
        interval: Duration::from_millis(1),
        report_each: false,
    };
    run(
        Box::new(fake),
        &mut [&mut Feed(&store)],
        &plan(None, mode),
        &stop,
    )
    .unwrap();
    let s = store.lock().unwrap();
    assert_eq!(s.seq(), 3);
    assert_eq!(s.distinct_stacks(), 1);
    assert_eq!(s.view(Selection::default()).total(), 7);
}

#[test]
fn a_failing_sink_does_not_keep_the_others_from_the_report() {
    let (tx, stop) = mpsc::channel();
    tx.send(()).unwrap();
    let fake = Fake {
        reads: VecDeque::from([read(vec![raw("app", &[1], 1)], 0)]),
        log: Rc::default(),
        stop_after: None,
    };
    let mut failing = Recorder {
        fail_reports: true,
        ..Recorder::default()
    };
    let mut after = Recorder::default();
    let err = run(
        Box::new(fake),
        &mut [&mut failing, &mut after],
        &plan(None, Mode::Once),
        &stop,
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "cannot write");
    assert!(after.events.iter().any(|e| e.starts_with("report app+")));
    assert_eq!(after.events.last().map(String::as_str), Some("end"));
}

#[test]
fn a_duration_ends_the_run_without_a_stop() {
    let (_tx, stop) = mpsc::channel();
    let fake = Fake {
        reads: VecDeque::from([read(vec![raw("app", &[1], 2)], 0)]),
        log: Rc::default(),
        stop_after: None,
    };
    let mut rec = Recorder::default();
    run(
        Box::new(fake),
        &mut [&mut rec],
        &plan(Some(Duration::from_millis(5)), Mode::Once),
        &stop,
    )
    .unwrap();
    assert!(rec
        .events
        .iter()
        .any(|e| e == "report app+;[unknown] 2| lost=0"));
}

/// A process with one Python frame that "exits" at the collector's
/// second read: its namer can name the frame only before that.
struct ShortLived {
    reads: Rc<RefCell<usize>>,
    alive: Arc<AtomicBool>,
}

/// Names a frame only while the process is alive, as a namer reading
/// the process's memory does.
struct WhileAlive(Arc<AtomicBool>);

impl Namer for WhileAlive {
    fn name(&mut self, _pid: u32, _frame: &RuntimeFrame) -> Option<Vec<crate::profile::Frame>> {
        self.0.load(Ordering::SeqCst).then(|| {
            vec![crate::profile::Frame::named(
                "handle_request",
                crate::profile::FrameKind::Interpreted,
            )]
        })
    }
}

impl Collector for ShortLived {
    fn meta(&self) -> Meta {
        Meta::new(Kind::Count, "fake:event")
    }

    fn header(&self) -> String {
        String::new()
    }

    fn collect(&mut self, _clear: bool) -> Result<Collection> {
        *self.reads.borrow_mut() += 1;
        if *self.reads.borrow() >= 2 {
            self.alive.store(false, Ordering::SeqCst);
        }
        let frame = RawFrame::Runtime(Box::new(RuntimeFrame {
            runtime: Runtime::Python,
            ids: [0xc0de, 1],
            cookie: 7,
        }));
        let mut sample = raw("app", &[], 1);
        sample.task.user = RawTrace::Frames(Arc::from([frame]));
        Ok(read(vec![sample], 0))
    }

    fn mappings(&self) -> Option<crate::procmaps::Mappings> {
        Some(crate::procmaps::Mappings::on_demand())
    }

    fn namers(&self) -> crate::collect::Namers {
        vec![(
            Runtime::Python,
            Box::new(WhileAlive(Arc::clone(&self.alive))),
        )]
    }
}

/// Runs a [`ShortLived`] collector by `plan`: that it was read at least
/// twice, and that its frame was reported named.
fn named_before_exit(plan: &Plan) {
    let reads = Rc::new(RefCell::new(0));
    let collector = ShortLived {
        reads: Rc::clone(&reads),
        alive: Arc::new(AtomicBool::new(true)),
    };
    let (_tx, stop) = mpsc::channel();
    let mut rec = Recorder::default();
    run(Box::new(collector), &mut [&mut rec], plan, &stop).unwrap();
    assert!(*reads.borrow() >= 2, "{} reads", reads.borrow());
    assert!(
        rec.events
            .iter()
            .any(|e| e == "report app;handle_request 1| lost=0"),
        "{:?}",
        rec.events
    );
}

/// A one-shot run whose collector has runtime frames reads it while
/// collecting, so a frame is named while its process lives and keeps the
/// name after it exits; without those reads it would be named only at
/// the end, too late.
#[test]
fn runtime_frames_are_named_while_their_process_lives() {
    // One read while collecting (at LEARN_EVERY), one at the end.
    named_before_exit(&plan(Some(LEARN_EVERY + LEARN_EVERY / 2), Mode::Once));
}

/// So does a periodic run (the agent) between its windows: a process
/// that exits within a window keeps the names read while it lived.
#[test]
fn runtime_frames_are_named_within_a_window_of_a_periodic_run() {
    // One read between windows (at LEARN_PERIODIC), one at the window's
    // end, which is the run's.
    let window = LEARN_PERIODIC + LEARN_PERIODIC / 2;
    let mode = Mode::Periodic {
        interval: window,
        report_each: true,
    };
    named_before_exit(&plan(Some(window), mode));
}

/// A sink keeping each update's events as (comm, time) pairs.
#[derive(Default)]
struct Times(Vec<Vec<(std::sync::Arc<str>, u64)>>);

impl Sink for Times {
    fn update(&mut self, delta: &Profile, _length: Duration) -> Result<()> {
        // The read after the last prepared one is empty and untimed.
        let Some(t) = delta.timeline.as_ref() else {
            return Ok(());
        };
        let mut sums = vec![0u64; delta.samples.len()];
        let mut seen: Vec<(std::sync::Arc<str>, u64)> = t
            .events
            .iter()
            .map(|e| {
                sums[e.sample as usize] += e.value;
                (
                    delta.samples[e.sample as usize].task.comm.clone(),
                    e.time_ns,
                )
            })
            .collect();
        for (s, sum) in delta.samples.iter().zip(sums) {
            assert_eq!(
                s.value, sum,
                "{}: its value is its events' sum",
                s.task.comm
            );
        }
        seen.sort();
        self.0.push(seen);
        Ok(())
    }
}

#[test]
fn events_keep_their_stacks_when_an_interval_mixes_known_and_new_ones() {
    // The second interval reads a stack named before ("a") after a new
    // one ("b"): the resolver names "b" now and takes "a" from what it
    // knows; each event must still point at its own stack.
    let timed = |samples: Vec<RawSample>, times: &[(u32, u64)]| Collection {
        events: Some(
            times
                .iter()
                .map(|&(sample, time_ns)| Event {
                    time_ns,
                    value: 1,
                    sample,
                    tid: 1,
                    cpu: crate::profile::UNKNOWN_CPU,
                })
                .collect(),
        ),
        ..read(samples, 0)
    };
    let log = Rc::new(RefCell::new(Vec::new()));
    let (tx, stop) = mpsc::channel();
    let fake = Fake {
        reads: VecDeque::from([
            timed(vec![raw("a", &[1], 1)], &[(0, 10)]),
            timed(
                vec![raw("b", &[2], 2), raw("a", &[1], 1)],
                &[(0, 20), (0, 21), (1, 22)],
            ),
        ]),
        log: Rc::clone(&log),
        stop_after: Some((2, tx)),
    };
    let mut times = Times::default();
    let mode = Mode::Periodic {
        interval: Duration::from_millis(1),
        report_each: true,
    };
    run(Box::new(fake), &mut [&mut times], &plan(None, mode), &stop).unwrap();
    let second: Vec<(&str, u64)> = times.0[1].iter().map(|(c, t)| (&**c, *t)).collect();
    assert_eq!(second, [("a+", 22), ("b+", 20), ("b+", 21)]);
}

/// A sink that records, at each call, whether [`GATE`] was held.
#[derive(Default)]
struct GateWatch {
    held: Vec<(&'static str, bool)>,
}

static GATE: Mutex<()> = Mutex::new(());

impl Sink for GateWatch {
    fn update(&mut self, _delta: &Profile, _length: Duration) -> Result<()> {
        self.held.push(("update", GATE.try_lock().is_err()));
        Ok(())
    }

    fn report(&mut self, _p: &Profile) -> Result<()> {
        self.held.push(("report", GATE.try_lock().is_err()));
        Ok(())
    }

    fn end(&mut self) -> Result<()> {
        self.held.push(("end", GATE.try_lock().is_err()));
        Ok(())
    }
}

#[test]
fn a_gated_periodic_run_holds_its_gate_from_each_read_to_its_report() {
    let (tx, stop) = mpsc::channel();
    let fake = Fake {
        reads: VecDeque::from([
            read(vec![raw("a", &[1], 3)], 0),
            read(vec![raw("b", &[2], 1)], 0),
        ]),
        log: Rc::default(),
        stop_after: Some((1, tx)),
    };
    let mut watch = GateWatch::default();
    let mode = Mode::Periodic {
        interval: Duration::from_millis(1),
        report_each: true,
    };
    let plan = Plan {
        gate: Some(&GATE),
        ..plan(None, mode)
    };
    run(Box::new(fake), &mut [&mut watch], &plan, &stop).unwrap();
    assert_eq!(
        watch.held,
        [
            ("update", true),
            ("report", true),
            ("update", true),
            ("report", true),
            ("end", false)
        ],
        "the gate, held (true) or free at each call"
    );
}
