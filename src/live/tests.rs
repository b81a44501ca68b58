//! Unit tests of the windowed aggregation, the tree and the snapshot.

use std::time::Duration;

use super::tree::Tree;
use super::window::{Limits, Selection, Store, TOO_MANY};
use super::{download, snapshot_json, Format};
use crate::profile::{Frame, FrameKind, Kind, Lost, Meta, Sample, TaskStack, Trace};

pub(super) fn sample(pid: u32, comm: &str, user: &[&str], value: u64) -> Sample {
    Sample {
        task: TaskStack {
            pid: Some(pid),
            tid: None,
            comm: comm.into(),
            user: Trace::Frames(
                user.iter()
                    .map(|n| Frame::named(*n, FrameKind::Native))
                    .collect(),
            ),
            kernel: Trace::of(vec![]),
        },
        waker: None,
        value,
        extra: Default::default(),
    }
}

fn store(keep: u64) -> Store {
    Store::new(
        Meta::new(Kind::Cpu, "cpu-clock"),
        Limits {
            keep: Duration::from_secs(keep),
            max_stacks: 1000,
            ..Limits::default()
        },
    )
}

const SEC: Duration = Duration::from_secs(1);

fn last(secs: u64) -> Selection {
    Selection {
        last: Some(Duration::from_secs(secs)),
        pid: None,
    }
}

/// Interval i (from 1) counts i in func_a and 10*i in func_b.
fn filled(n: u64, keep: u64) -> Store {
    let mut s = store(keep);
    for i in 1..=n {
        s.push(
            &[
                sample(10, "app", &["func_a", "main"], i),
                sample(10, "app", &["func_b", "main"], 10 * i),
            ],
            Lost {
                stacks: 1,
                ..Lost::default()
            },
            SEC,
        );
    }
    s
}

#[test]
fn whole_run_sums_every_interval() {
    let s = filled(5, 300);
    let v = s.view(Selection::default());
    assert_eq!(v.total(), 11 * (1 + 2 + 3 + 4 + 5));
    assert_eq!(v.span, 5 * SEC);
    assert_eq!(v.lost.stacks, 5);
    assert_eq!(s.distinct_stacks(), 2);
}

#[test]
fn last_n_seconds_is_exact() {
    let s = filled(5, 300);
    let v = s.view(last(2));
    assert_eq!(v.total(), 11 * (4 + 5));
    assert_eq!(v.span, 2 * SEC);
    assert_eq!(v.lost.stacks, 2);
    // A window longer than the run is the whole run.
    assert_eq!(s.view(last(60)).total(), 11 * 15);
}

#[test]
fn windows_take_the_nearest_whole_intervals() {
    let mut s = store(300);
    for i in 1..=4 {
        s.push(&[sample(1, "a", &["f"], i)], Lost::default(), SEC / 2);
    }
    let window = |ms| {
        s.view(Selection {
            last: Some(Duration::from_millis(ms)),
            pid: None,
        })
    };
    // 1.2 s: the last two half-second intervals (0.2 s of the third is
    // less than half of it).
    assert_eq!(window(1200).total(), 3 + 4);
    assert_eq!(window(1200).span, SEC);
    // 1.3 s: more than half of the third.
    assert_eq!(window(1300).total(), 2 + 3 + 4);
    assert_eq!(window(1300).span, Duration::from_millis(1500));
    // A window shorter than an interval still shows the last one.
    assert_eq!(window(100).total(), 4);
}

#[test]
fn memory_is_bounded_by_the_longest_window() {
    let s = filled(20, 3);
    // Only 3 s are kept: a longer window is clamped to them, the whole
    // run still counts everything.
    assert_eq!(s.view(last(10)).total(), 11 * (18 + 19 + 20));
    assert_eq!(s.view(Selection::default()).total(), 11 * 210);
}

#[test]
fn process_filter_and_list() {
    let mut s = store(300);
    s.push(
        &[
            sample(1, "one", &["f"], 3),
            sample(2, "two", &["g"], 5),
            sample(2, "two", &["h"], 1),
        ],
        Lost::default(),
        SEC,
    );
    let v = s.view(Selection {
        last: None,
        pid: Some(2),
    });
    assert_eq!(v.total(), 6);
    // The list is of every process, largest first, so that the filter can
    // be changed.
    let procs: Vec<(Option<u32>, &str, u64)> = v
        .processes
        .iter()
        .map(|&(p, c, n)| (p, s.string(c), n))
        .collect();
    assert_eq!(procs, vec![(Some(2), "two", 6), (Some(1), "one", 3)]);
}

#[test]
fn addresses_in_one_function_merge() {
    let mut s = store(300);
    let mut a = sample(1, "a", &["f", "main"], 2);
    let mut b = a.clone();
    if let Some(f) = a.task.user.frames_mut() {
        f[0].addr = 0x1000;
    }
    if let Some(f) = b.task.user.frames_mut() {
        f[0].addr = 0x1008;
    }
    s.push(&[a, b], Lost::default(), SEC);
    assert_eq!(s.distinct_stacks(), 1);
    assert_eq!(s.view(Selection::default()).total(), 4);
}

#[test]
fn too_many_stacks_are_counted_not_dropped() {
    let mut s = Store::new(
        Meta::new(Kind::Cpu, "cpu-clock"),
        Limits {
            keep: Duration::from_secs(10),
            max_stacks: 2,
            ..Limits::default()
        },
    );
    let names = ["a", "b", "c", "d"];
    let samples: Vec<Sample> = names.iter().map(|n| sample(1, "p", &[n], 1)).collect();
    s.push(&samples, Lost::default(), SEC);
    let p = s.profile(Selection::default());
    assert_eq!(p.total(), 4);
    let over: Vec<&Sample> = p
        .samples
        .iter()
        .filter(|x| &*x.task.comm == TOO_MANY)
        .collect();
    assert_eq!(over.len(), 1);
    assert_eq!(over[0].value, 2);
}

#[test]
fn profile_round_trips_through_folded() {
    let s = filled(3, 300);
    let d = download(&s, last(2), Format::Folded).unwrap();
    let text = String::from_utf8(d.body).unwrap();
    assert_eq!(text, "app;main;func_a 5\napp;main;func_b 50\n");
}

#[test]
fn tree_values_and_pruning() {
    let mut s = store(300);
    s.push(
        &[
            sample(1, "app", &["big", "main"], 990),
            sample(1, "app", &["tiny", "main"], 10),
        ],
        Lost::default(),
        SEC,
    );
    let v = s.view(Selection::default());
    let full = Tree::build(&s, &v, 0);
    let name = |t: &Tree, n: u32| t.names[t.nodes[n as usize].name as usize].0.clone();
    // all -> app -> main -> {big, tiny}
    assert_eq!(full.total(), 1000);
    assert_eq!(full.depth(), 4);
    let main = full.nodes[full.nodes[0].children[0] as usize].children[0];
    assert_eq!(name(&full, main), "main");
    let kids: Vec<String> = full.nodes[main as usize]
        .children
        .iter()
        .map(|&c| name(&full, c))
        .collect();
    assert_eq!(kids, vec!["big", "tiny"]);
    let pruned = Tree::build(&s, &v, 11);
    assert_eq!(pruned.total(), 1000, "pruning keeps the totals");
    assert_eq!(pruned.nodes.len(), 4);
    assert!(!pruned.names.iter().any(|(n, _)| n == "tiny"));
}

#[test]
fn snapshot_is_json_with_totals() {
    let s = filled(4, 300);
    let json = snapshot_json(&s, last(2), 0.0);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["total"], 11 * (3 + 4));
    assert_eq!(v["span"], 2.0);
    assert_eq!(v["rate"], 38.5);
    assert_eq!(v["processes"], 1);
    assert_eq!(v["lost"]["stacks"], 2);
    assert_eq!(v["procs"][0][1], "app");
    let names = v["graph"]["names"].as_array().unwrap();
    assert!(names.iter().any(|n| n[0] == "func_a" && n[1] == "u"));
    assert_eq!(v["graph"]["root"][1], 77);
    assert_eq!(
        v["downloads"],
        serde_json::json!(["svg", "folded", "pprof"])
    );
}

#[test]
fn names_are_escaped() {
    let mut s = store(10);
    s.push(
        &[sample(1, "a\"b", &["operator<<(\\x)", "\u{1}"], 1)],
        Lost::default(),
        SEC,
    );
    let json = snapshot_json(&s, Selection::default(), 0.0);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["procs"][0][1], "a\"b");
    let svg = download(&s, Selection::default(), Format::Svg).unwrap();
    let svg = String::from_utf8(svg.body).unwrap();
    assert!(svg.contains("operator&lt;&lt;(\\x)"));
    assert!(!svg.contains('\u{1}'));
    assert!(svg.trim_end().ends_with("</svg>"));
}

#[test]
fn pprof_download_is_a_gzipped_profile() {
    let s = filled(1, 10);
    let d = download(&s, Selection::default(), Format::Pprof).unwrap();
    assert_eq!(d.file_name, "flare.pb.gz");
    assert_eq!(&d.body[..2], &[0x1f, 0x8b], "gzip magic");
}

#[test]
fn bind_addresses() {
    use super::parse_bind;
    assert_eq!(parse_bind(":8080").unwrap().to_string(), "127.0.0.1:8080");
    assert_eq!(parse_bind("0.0.0.0:1").unwrap().to_string(), "0.0.0.0:1");
    assert_eq!(parse_bind("[::1]:9").unwrap().to_string(), "[::1]:9");
    assert!(parse_bind("localhost:7").unwrap().ip().is_loopback());
    assert!(parse_bind("10").is_err(), "a bare number is a duration");
    assert!(parse_bind(":x").is_err());
}
