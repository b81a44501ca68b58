use super::*;

fn frames(names: &[&str], kind: FrameKind) -> Trace {
    Trace::Frames(names.iter().map(|n| Frame::named(*n, kind)).collect())
}

fn sample(comm: &str, pid: u32, user: &[&str], kernel: &[&str], value: u64) -> Sample {
    Sample {
        task: TaskStack {
            pid: Some(pid),
            tid: None,
            comm: comm.into(),
            user: frames(user, FrameKind::Native),
            kernel: frames(kernel, FrameKind::Kernel),
        },
        waker: None,
        value,
        extra: Default::default(),
    }
}

fn profile(samples: Vec<Sample>) -> Profile {
    Profile {
        meta: Meta::new(Kind::Cpu, "cpu-clock"),
        samples,
    }
}

#[test]
fn merge_joins_same_names_at_different_addresses() {
    let mut a = sample("app", 1, &["f", "main"], &[], 3);
    let b = sample("app", 1, &["f", "main"], &[], 4);
    if let Trace::Frames(f) = &mut a.task.user {
        f[0].addr = 0x1000;
    }
    let mut p = profile(vec![a, b, sample("app", 1, &["g", "main"], &[], 1)]);
    p.merge_identical();
    assert_eq!(p.samples.len(), 2);
    assert_eq!(p.samples[0].value, 7);
    assert_eq!(
        p.samples[0].task.user.frames()[0].addr,
        0x1000,
        "first sample's details kept"
    );
    assert_eq!(p.total(), 8);
}

#[test]
fn merge_keeps_processes_and_missed_stacks_apart() {
    let mut missed = sample("app", 1, &[], &[], 1);
    missed.task.user = Trace::Missed { enomem: true };
    let mut p = profile(vec![
        sample("app", 1, &["f"], &[], 1),
        sample("app", 2, &["f"], &[], 1),
        sample("other", 1, &["f"], &[], 1),
        missed.clone(),
        missed,
    ]);
    p.merge_identical();
    assert_eq!(p.samples.len(), 4);
    assert_eq!(p.samples[3].value, 2);
}

#[test]
fn sort_is_ascending_and_stable() {
    let mut p = profile(vec![
        sample("a", 1, &["x"], &[], 5),
        sample("b", 1, &["x"], &[], 1),
        sample("c", 1, &["x"], &[], 5),
    ]);
    p.sort_ascending();
    let order: Vec<&str> = p.samples.iter().map(|s| s.task.comm.as_str()).collect();
    assert_eq!(order, ["b", "a", "c"]);
}

#[test]
fn path_is_root_first_with_waker_leaf_first() {
    let mut s = sample("app", 1, &["leaf", "main"], &["kfunc", "entry"], 1);
    let names: Vec<&str> = s.path().iter().map(|f| f.name).collect();
    assert_eq!(names, ["app", "main", "leaf", "entry", "kfunc"]);
    s.waker = Some(TaskStack {
        pid: Some(2),
        tid: None,
        comm: "waker".into(),
        user: frames(&["write", "wmain"], FrameKind::Native),
        kernel: Trace::Missed { enomem: false },
    });
    let path = s.path();
    let names: Vec<&str> = path.iter().map(|f| f.name).collect();
    assert_eq!(
        names,
        [
            "app",
            "main",
            "leaf",
            "entry",
            "kfunc",
            "[Missed Kernel Stack]",
            "write",
            "wmain",
            "waker"
        ]
    );
    assert_eq!(path[0].kind, PathKind::Process);
    assert_eq!(path[3].kind, PathKind::Kernel);
    assert_eq!(path[6].kind, PathKind::WakerUser);
    assert_eq!(path[8].kind, PathKind::WakerProcess);
}

#[test]
fn frames_stay_small() {
    // Frames are many: the object is one shared pointer, the offset a u64.
    assert_eq!(std::mem::size_of::<Frame>(), 56);
}

#[test]
fn merging_sums_extra_values_too() {
    let mut a = sample("app", 1, &["f"], &[], 2);
    a.extra = vec![10, 1].into();
    let mut b = sample("app", 1, &["f"], &[], 3);
    b.extra = vec![5, 2].into();
    let mut p = profile(vec![a, b]);
    p.merge_identical();
    assert_eq!(p.samples.len(), 1);
    assert_eq!(p.samples[0].value, 5);
    assert_eq!(&*p.samples[0].extra, &[15, 3]);
}

#[test]
fn names_are_cleaned_of_control_characters_and_folded_separators() {
    assert_eq!(clean_name("read"), "read");
    assert!(matches!(clean_name("read"), std::borrow::Cow::Borrowed(_)));
    assert_eq!(clean_name("evil 99999999\nx"), "evil 99999999?x");
    assert_eq!(clean_name("a\x1b[31mred\r\t"), "a?[31mred??");
    assert_eq!(folded_safe("ns::f;g\n"), "ns::f:g?");
    assert_eq!(folded_safe("plain"), "plain");
}
