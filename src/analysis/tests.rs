//! Unit tests of the folded parser, the top table and the differential join.

use super::*;
use crate::profile::{Frame, FrameKind, Kind, Meta, Profile, Sample, TaskStack, Trace};

fn stacks(text: &str) -> Stacks {
    parse(text.as_bytes(), "t.folded").expect("valid folded input")
}

fn line_error(text: &str) -> (usize, String) {
    match parse(text.as_bytes(), "bad.folded") {
        Err(ParseError::Line { line, reason, .. }) => (line, reason),
        other => panic!("expected a line error, got {other:?}"),
    }
}

#[test]
fn reads_flare_bcc_and_perf_folded_lines() {
    let s = stacks(
        "dd;read;-;vfs_read_[k] 7\n\
         \n\
         perf-1234/1234;main;operator new(unsigned long) 3\r\n\
         java;Lfoo/Bar;.run\t12\n",
    );
    assert_eq!(s.stacks.len(), 3);
    assert_eq!(s.stacks[0].frames, ["dd", "read", "-", "vfs_read_[k]"]);
    assert_eq!(s.stacks[1].frames[2], "operator new(unsigned long)");
    assert_eq!(s.stacks[1].value, 3);
    assert_eq!(s.stacks[2].value, 12);
    assert_eq!(s.total(), 22);
}

#[test]
fn malformed_lines_name_the_line() {
    assert_eq!(line_error("a;b 1\na;b\n").0, 2);
    let (line, reason) = line_error("a;b 1\n\na;c x12\n");
    assert_eq!(line, 3);
    assert!(
        reason.contains("'x12' is not a whole-number count"),
        "{reason}"
    );
    assert!(
        line_error(" 5\n").1.contains("no count") || line_error(" 5\n").1.contains("no frames")
    );
    assert!(line_error("a;;b 5\n").1.contains("empty frame"));
    assert!(line_error("a;b -3\n").1.contains("not a whole-number"));
    let err = parse(&b"a;\xff 1\n"[..], "bin").unwrap_err().to_string();
    assert_eq!(err, "bin:1: the line is not valid UTF-8 text");
}

#[test]
fn empty_input_is_an_error() {
    let err = parse(&b"\n\n"[..], "empty.folded").unwrap_err().to_string();
    assert!(err.starts_with("empty.folded: no stacks found"), "{err}");
}

#[test]
fn top_counts_self_and_total_once_per_stack() {
    let s = stacks("p;main;f;f 4\np;main;g 6\np;main 1\n");
    let t = top(&s);
    let get = |n: &str| t.iter().find(|e| e.name == n).unwrap().clone();
    assert_eq!(t[0].name, "g");
    assert_eq!((get("g").self_value, get("g").total_value), (6, 6));
    // Recursion: f is on one stack twice but counted once.
    assert_eq!((get("f").self_value, get("f").total_value), (4, 4));
    assert_eq!((get("main").self_value, get("main").total_value), (1, 11));
    assert_eq!((get("p").self_value, get("p").total_value), (0, 11));
}

#[test]
fn diff_normalises_before_to_after_total() {
    let before = stacks("a;b 100\na;c 100\n");
    let after = stacks("a;b 100\na;c 300\na;d 0\n");
    let d = diff(&before, &after);
    let get = |leaf: &str| d.iter().find(|s| s.frames[1] == leaf).unwrap().clone();
    // Before is doubled to the after total of 400: b halved its share, c grew.
    assert_eq!((get("b").before, get("b").after), (200, 100));
    assert_eq!((get("c").before, get("c").after), (200, 300));
    assert_eq!((get("d").before, get("d").after), (0, 0));
}

#[test]
fn profile_paths_are_annotated_for_flame_graphs() {
    let mut inl = Frame::named("inner", FrameKind::Native);
    inl.inlined = true;
    let task = |comm: &str| TaskStack {
        pid: Some(1),
        tid: None,
        comm: comm.into(),
        user: Trace::of(vec![inl.clone(), Frame::named("main;x", FrameKind::Native)]),
        kernel: Trace::of(vec![Frame::named("schedule", FrameKind::Kernel)]),
    };
    let mut p = Profile::new(Meta::new(Kind::OffWake, "sched_switch"));
    p.samples.push(Sample {
        task: task("app"),
        waker: Some(task("waker")),
        value: 9,
        extra: Default::default(),
    });
    let s = Stacks::from_profile(&p);
    assert_eq!(
        s.folded_lines(),
        ["app;main:x;inner_[i];schedule_[k];schedule_[w];inner_[w];main:x_[w];waker 9"]
    );
}

#[test]
fn an_endless_line_is_an_error_not_all_of_memory() {
    // /dev/zero's first "line" is endless: reading stops past the bound.
    let zero = std::fs::File::open("/dev/zero").expect("/dev/zero");
    match parse(std::io::BufReader::new(zero), "/dev/zero") {
        Err(ParseError::Line { line, reason, .. }) => {
            assert_eq!(line, 1);
            assert!(reason.contains("longer than 4 MiB"), "{reason}");
        }
        other => panic!("expected a line error, got {other:?}"),
    }
}

#[test]
fn counts_add_up_without_wrapping() {
    let s = stacks("a;b 18446744073709551615\na;c 10\n");
    assert_eq!(s.total(), u64::MAX);
    let t = top(&s);
    let a = t.iter().find(|e| e.name == "a").expect("a");
    assert_eq!(a.total_value, u64::MAX, "saturated, not wrapped to 9");
    assert!(t.iter().all(|e| e.total_value <= s.total()));
}
