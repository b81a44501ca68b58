//! Unit tests of the store's time bookkeeping and of the time views:
//! slices and ranges add up to the events in them, filters and bounds
//! hold, and a run without times still works.

use std::time::Duration;

use serde_json::Value;

use super::tests::sample;
use super::timeview::{range_profile, MAX_SLICES};
use super::window::{Limits, Selection, Store};
use super::{range_json, snapshot_json, timeline_json, TimeQuery};
use crate::profile::{Event, Kind, Lost, Meta, Profile, Sample, Timeline};

const ORIGIN: u64 = 5_000_000_000;
const SEC: Duration = Duration::from_secs(1);

fn store(keep: u64, max_events: usize) -> Store {
    Store::new(
        Meta::new(Kind::Cpu, "cpu-clock"),
        Limits {
            keep: Duration::from_secs(keep),
            max_stacks: 1000,
            max_events,
        },
    )
}

/// A profile of `samples` whose timeline has one event of value 1 per
/// (µs from the start, sample index, tid); values follow the events.
fn timed(mut samples: Vec<Sample>, events: &[(u64, u32, u32)]) -> Profile {
    for s in &mut samples {
        s.value = 0;
    }
    let mut evs = Vec::new();
    for &(us, i, tid) in events {
        samples[i as usize].value += 1;
        evs.push(Event {
            time_ns: ORIGIN + us * 1000,
            value: 1,
            sample: i,
            tid,
            cpu: 0,
        });
    }
    Profile {
        meta: Meta::new(Kind::Cpu, "cpu-clock"),
        samples,
        timeline: Some(Timeline {
            origin_ns: ORIGIN,
            origin_unix_ns: 0,
            events: evs,
        }),
    }
}

fn two() -> Vec<Sample> {
    vec![
        sample(10, "app", &["base", "main"], 0),
        sample(20, "other", &["burst", "main"], 0),
    ]
}

/// Three 1 s intervals: `base` (pid 10, tid 11) every 10 ms, `burst`
/// (pid 20, tid 21) every 5 ms from 1.2 s to 1.7 s, and the same events
/// as one whole profile for comparison.
fn filled(s: &mut Store) -> Profile {
    let mut whole: Option<Profile> = None;
    for i in 0..3u64 {
        let mut ev = Vec::new();
        for k in 0..100 {
            ev.push((i * 1_000_000 + k * 10_000 + 3, 0, 11));
        }
        if i == 1 {
            for k in 0..100 {
                ev.push((1_200_000 + k * 5_000, 1, 21));
            }
        }
        let p = timed(two(), &ev);
        s.push_profile(&p, SEC);
        match &mut whole {
            Some(w) => w.absorb(p),
            None => whole = Some(p),
        }
    }
    whole.unwrap_or_else(|| Profile::new(Meta::new(Kind::Cpu, "cpu-clock")))
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).expect("valid JSON")
}

fn q(from: Option<u64>, to: Option<u64>) -> TimeQuery {
    TimeQuery {
        slice_ms: 100,
        from_ms: from,
        to_ms: to,
        ..TimeQuery::default()
    }
}

fn value_of(v: &Value, name: &str) -> u64 {
    let names = v["graph"]["names"].as_array().unwrap();
    fn walk(n: &Value, names: &[Value], name: &str) -> u64 {
        let here = if names[n[0].as_u64().unwrap() as usize][0] == name {
            n[1].as_u64().unwrap()
        } else {
            0
        };
        here + n
            .get(2)
            .and_then(Value::as_array)
            .map_or(0, |k| k.iter().map(|c| walk(c, names, name)).sum())
    }
    walk(&v["graph"]["root"], names, name)
}

#[test]
fn range_sums_equal_the_events_in_range() {
    let mut s = store(300, 1_000_000);
    let whole = filled(&mut s);
    for (from, to) in [
        (0, 3000),
        (1200, 1700),
        (0, 1),
        (1195, 1205),
        (2999, 5000),
        (400, 2600),
    ] {
        let v = json(&range_json(&s, &q(Some(from), Some(to)), 0.0).unwrap());
        let truth = whole.range(from * 1_000_000, to * 1_000_000).unwrap();
        assert_eq!(v["total"].as_u64(), Some(truth.total()), "{from}..{to}");
        let burst: u64 = truth
            .samples
            .iter()
            .filter(|x| &*x.task.comm == "other")
            .map(|x| x.value)
            .sum();
        assert_eq!(value_of(&v, "burst"), burst, "{from}..{to}");
        assert_eq!(v["range"], serde_json::json!([from, to]));
        // The download of the range is the same profile.
        let p = range_profile(&s, &q(Some(from), Some(to))).unwrap();
        assert_eq!(p.total(), truth.total());
    }
    // The whole run and the snapshot of the whole run agree.
    let all = json(&snapshot_json(&s, Selection::default(), 0.0));
    assert_eq!(all["total"].as_u64(), Some(whole.total()));
    assert_eq!(all["timed"], true);
}

#[test]
fn slices_add_up_to_the_events_in_them() {
    let mut s = store(300, 1_000_000);
    let whole = filled(&mut s);
    let v = json(&timeline_json(&s, &q(None, None)));
    assert_eq!(v["timed"], true);
    assert_eq!(v["origin_ns"], ORIGIN);
    assert_eq!(v["slice"], 100);
    assert_eq!(v["from"], 0);
    let all: Vec<u64> = v["all"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(all.len(), 30);
    assert_eq!(all.iter().sum::<u64>(), whole.total());
    for (i, &n) in all.iter().enumerate() {
        let i = i as u64;
        let truth = whole.range(i * 100_000_000, (i + 1) * 100_000_000).unwrap();
        assert_eq!(n, truth.total(), "slice {i}");
    }
    // Burst slices: 10 of base and 20 of burst.
    assert_eq!(all[12..17], [30, 30, 30, 30, 30]);
    assert_eq!(all[11], 10);
    assert_eq!(v["filtered"], false);
    assert!(v.get("counts").is_none());
    // 20 ms slices (the heat map's) from 1 s to 2 s.
    let h = json(&timeline_json(
        &s,
        &TimeQuery {
            slice_ms: 20,
            ..q(Some(1000), Some(2000))
        },
    ));
    assert_eq!(h["from"], 1000);
    assert_eq!(h["all"].as_array().unwrap().len(), 50);
    assert_eq!(h["total"], 200);
}

#[test]
fn timeline_filters_by_search_process_and_thread() {
    let mut s = store(300, 1_000_000);
    filled(&mut s);
    let burst_slices = |v: &Value| -> Vec<usize> {
        v["counts"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, c)| c.as_u64() > Some(0))
            .map(|(i, _)| i)
            .collect()
    };
    for query in [
        TimeQuery {
            search: Some("BURS".into()),
            ..q(None, None)
        },
        TimeQuery {
            pid: Some(20),
            ..q(None, None)
        },
        TimeQuery {
            tid: Some(21),
            ..q(None, None)
        },
    ] {
        let v = json(&timeline_json(&s, &query));
        assert_eq!(v["filtered"], true, "{query:?}");
        assert_eq!(v["matched"], 100, "{query:?}");
        assert_eq!(v["total"], 400, "{query:?}");
        assert_eq!(burst_slices(&v), vec![12, 13, 14, 15, 16], "{query:?}");
    }
    // A search matching a caller matches every stack under it.
    let main = json(&timeline_json(
        &s,
        &TimeQuery {
            search: Some("mai".into()),
            ..q(None, None)
        },
    ));
    assert_eq!(main["matched"], 400);
    // Threads, largest first, with their names and processes.
    let v = json(&timeline_json(&s, &q(None, None)));
    assert_eq!(
        v["threads"],
        serde_json::json!([[11, "app", 10, 300], [21, "other", 20, 100]])
    );
    // A process's threads only, with its filter.
    let p = json(&timeline_json(
        &s,
        &TimeQuery {
            pid: Some(20),
            ..q(None, None)
        },
    ));
    assert_eq!(p["threads"], serde_json::json!([[21, "other", 20, 100]]));
    // A thread's range graph holds only its events.
    let t = json(
        &range_json(
            &s,
            &TimeQuery {
                tid: Some(11),
                ..q(Some(0), Some(3000))
            },
            0.0,
        )
        .unwrap(),
    );
    assert_eq!(t["total"], 300);
    assert_eq!(value_of(&t, "burst"), 0);
}

#[test]
fn compare_scales_the_rest_of_the_run() {
    let mut s = store(300, 1_000_000);
    filled(&mut s);
    let v = json(
        &range_json(
            &s,
            &TimeQuery {
                compare: true,
                ..q(Some(1200), Some(1700))
            },
            0.0,
        )
        .unwrap(),
    );
    assert_eq!(v["compare"], true);
    // Range: 50 base + 100 burst; rest: 250 base, scaled to 150.
    assert_eq!(v["total"], 150);
    assert_eq!(v["rest_total"], 250);
    let root = &v["graph"]["root"];
    assert_eq!(root[1], 150);
    assert_eq!(root[3], 150, "the rest is scaled to the range's total");
    let names = v["graph"]["names"].as_array().unwrap().clone();
    let find = |name: &str| -> Value {
        fn go(n: &Value, names: &[Value], name: &str) -> Option<Value> {
            if names[n[0].as_u64()? as usize][0] == name {
                return Some(n.clone());
            }
            n[2].as_array()?.iter().find_map(|c| go(c, names, name))
        }
        go(root, &names, name).unwrap_or(Value::Null)
    };
    assert_eq!(find("burst")[1], 100);
    assert_eq!(find("burst")[3], 0, "burst has nothing in the rest");
    assert_eq!(find("base")[1], 50);
    assert_eq!(find("base")[3], 150);
    // Without compare, nodes have no baseline.
    let plain = json(&range_json(&s, &q(Some(1200), Some(1700)), 0.0).unwrap());
    assert!(plain["graph"]["root"].get(3).is_none());
}

#[test]
fn times_go_with_their_intervals_past_keep() {
    let mut s = store(2, 1_000_000);
    let whole = filled(&mut s);
    let v = json(&timeline_json(&s, &q(None, None)));
    // The first second is gone; the others remain.
    assert_eq!(v["kept"][0], 1000.0);
    assert_eq!(v["from"], 1000);
    assert_eq!(v["total"], 300);
    let r = json(&range_json(&s, &q(Some(0), Some(1000)), 0.0).unwrap());
    assert_eq!(r["total"], 0);
    // The whole-run counts still count everything.
    let all = json(&snapshot_json(&s, Selection::default(), 0.0));
    assert_eq!(all["total"].as_u64(), Some(whole.total()));
}

#[test]
fn events_past_the_cap_are_counted_not_kept() {
    // 150 events over 300 s at 1 s intervals: each interval may keep its
    // share (0.5) but at least MIN_EVENTS_PER_INTERVAL (100).
    let mut s = store(300, 150);
    let ev: Vec<(u64, u32, u32)> = (0..250).map(|k| (k * 1000, 0, 11)).collect();
    s.push_profile(&timed(two(), &ev), SEC);
    let v = json(&timeline_json(&s, &q(None, None)));
    assert_eq!(v["total"], 100);
    assert_eq!(v["dropped"]["events"], 150);
    assert_eq!(v["dropped"]["value"], 150);
    // The latest are dropped: from the 101st event's time on.
    assert_eq!(v["dropped"]["spans"], serde_json::json!([[100.0, 249.001]]));
    // The aggregate still counts them all.
    assert_eq!(
        json(&snapshot_json(&s, Selection::default(), 0.0))["total"],
        250
    );
}

#[test]
fn slices_are_capped() {
    let mut s = store(300, 1_000_000);
    filled(&mut s);
    let v = json(&timeline_json(
        &s,
        &TimeQuery {
            slice_ms: 1,
            from_ms: Some(0),
            to_ms: Some(1_000_000),
            ..TimeQuery::default()
        },
    ));
    assert_eq!(v["all"].as_array().unwrap().len(), MAX_SLICES);
    // The latest slices are given.
    assert_eq!(v["from"], 1_000_000 - MAX_SLICES as u64);
}

#[test]
fn long_blocked_periods_keep_their_value() {
    let mut s = store(300, 1_000_000);
    let mut p = timed(two(), &[(10, 0, 11)]);
    let big = 3 * u64::from(u32::MAX) + 7;
    p.samples[0].value = big;
    if let Some(t) = &mut p.timeline {
        t.events[0].value = big;
    }
    s.push_profile(&p, SEC);
    let v = json(&range_json(&s, &q(Some(0), Some(1000)), 0.0).unwrap());
    assert_eq!(v["total"], big);
}

#[test]
fn a_run_without_times_still_works() {
    let mut s = store(300, 1_000_000);
    s.push(&[sample(1, "app", &["f", "main"], 5)], Lost::default(), SEC);
    let v = json(&timeline_json(&s, &q(None, None)));
    assert_eq!(v["timed"], false);
    assert_eq!(v["seq"], 1);
    assert!(range_json(&s, &q(Some(0), Some(1000)), 0.0).is_none());
    assert!(range_profile(&s, &q(Some(0), Some(1000))).is_none());
    let snap = json(&snapshot_json(&s, Selection::default(), 0.0));
    assert_eq!(snap["total"], 5);
    assert_eq!(snap["timed"], false);
    // A profile without a timeline through push_profile is the same.
    let mut u = store(300, 1_000_000);
    u.push_profile(
        &Profile::untimed(
            Meta::new(Kind::Cpu, "cpu-clock"),
            vec![sample(1, "app", &["f"], 3)],
        ),
        SEC,
    );
    assert!(!u.timed());
    assert_eq!(
        json(&snapshot_json(&u, Selection::default(), 0.0))["total"],
        3
    );
}

#[test]
fn threads_past_the_cap_are_counted_not_named() {
    use super::times::MAX_THREADS;
    // Kept for 1 s: one interval may keep all of its events.
    let mut s = store(1, 1_000_000);
    let n = MAX_THREADS as u32 + 5;
    let ev: Vec<(u64, u32, u32)> = (0..n).map(|t| (u64::from(t), 0, t + 1)).collect();
    s.push_profile(&timed(two(), &ev), SEC);
    let v = json(&timeline_json(&s, &q(None, None)));
    assert_eq!(v["unnamed_threads"], 5);
    assert_eq!(v["total"], u64::from(n), "their samples still count");
    assert_eq!(
        v["threads"].as_array().unwrap().len(),
        super::timeview::MAX_THREADS_LISTED
    );
    // The last threads have no name.
    let last = json(
        &range_json(
            &s,
            &TimeQuery {
                tid: Some(n),
                ..q(Some(0), Some(1000))
            },
            0.0,
        )
        .unwrap(),
    );
    assert_eq!(last["total"], 1);
    assert!(s.thread(n).is_none());
    assert_eq!(s.thread(1), Some(("app", Some(10))));
}
