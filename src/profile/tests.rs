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
    Profile::untimed(Meta::new(Kind::Cpu, "cpu-clock"), samples)
}

#[test]
fn merge_joins_same_names_at_different_addresses() {
    let mut a = sample("app", 1, &["f", "main"], &[], 3);
    let b = sample("app", 1, &["f", "main"], &[], 4);
    if let Some(f) = a.task.user.frames_mut() {
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
    let order: Vec<&str> = p.samples.iter().map(|s| &*s.task.comm).collect();
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

#[test]
fn names_are_cleaned_of_format_and_separator_characters_and_cut() {
    // Right-to-left override, line and paragraph separators, BOM, a
    // zero-width joiner, C1's NEL; letters of any script stay.
    assert_eq!(
        clean_name("a\u{202E}b\u{2028}c\u{2029}d\u{FEFF}e\u{200D}f\u{85}g"),
        "a?b?c?d?e?f?g"
    );
    assert_eq!(clean_name("naïve_関数_функция"), "naïve_関数_функция");
    let long = "é".repeat(3000);
    let cut = clean_name(&long);
    assert!(
        cut.len() <= MAX_NAME + 3 && cut.len() > MAX_NAME - 4,
        "{}",
        cut.len()
    );
    assert!(cut.ends_with('…') && cut.starts_with("éé"));
    assert_eq!(clean_name_within("abcdef", 4), "abcd…");
    assert_eq!(clean_name_within("abcd", 4), "abcd");
}

fn event(time_ns: u64, sample: u32, tid: u32) -> Event {
    Event {
        time_ns,
        value: 1,
        sample,
        tid,
        cpu: 0,
    }
}

fn timed(samples: Vec<Sample>, events: Vec<Event>) -> Profile {
    let mut p = profile(samples);
    p.timeline = Some(Timeline {
        origin_ns: 1_000,
        origin_unix_ns: 0,
        events,
    });
    p
}

/// The leaf of each event's sample, in event order.
fn leaves(p: &Profile) -> Vec<(u64, &str)> {
    let t = p.timeline.as_ref().unwrap();
    t.events
        .iter()
        .map(|e| {
            let s = &p.samples[e.sample as usize];
            (t.offset_ns(e), &*s.task.user.frames()[0].name)
        })
        .collect()
}

#[test]
fn merging_and_sorting_keep_events_on_their_stacks() {
    let mut p = timed(
        vec![
            sample("app", 1, &["f", "main"], &[], 2),
            sample("app", 1, &["g", "main"], &[], 1),
            sample("app", 1, &["f", "main"], &[], 1),
        ],
        vec![
            event(1_100, 0, 1),
            event(1_200, 1, 1),
            event(1_300, 2, 2),
            event(1_400, 0, 1),
        ],
    );
    let before: Vec<(u64, String)> = leaves(&p)
        .into_iter()
        .map(|(t, n)| (t, n.to_string()))
        .collect();
    p.merge_identical();
    p.sort_ascending();
    assert_eq!(p.samples.len(), 2);
    assert_eq!(&*p.samples[0].task.user.frames()[0].name, "g", "sorted");
    let after: Vec<(u64, String)> = leaves(&p)
        .into_iter()
        .map(|(t, n)| (t, n.to_string()))
        .collect();
    assert_eq!(before, after);
}

#[test]
fn absorbing_offsets_the_other_profiles_events() {
    let mut whole = Profile::new(Meta::new(Kind::Cpu, "cpu-clock"));
    whole.absorb(timed(
        vec![sample("app", 1, &["f"], &[], 1)],
        vec![event(1_100, 0, 1)],
    ));
    whole.absorb(timed(
        vec![sample("app", 1, &["g"], &[], 1)],
        vec![event(1_200, 0, 1)],
    ));
    assert_eq!(leaves(&whole), vec![(100, "f"), (200, "g")]);
}

#[test]
fn a_range_is_the_profile_of_its_events() {
    let mut wall = timed(
        vec![
            sample("app", 1, &["early"], &[], 2),
            sample("app", 1, &["late"], &[], 2),
        ],
        vec![
            event(1_100, 0, 1),
            event(1_200, 0, 1),
            event(1_600, 1, 1),
            event(1_900, 1, 1),
        ],
    );
    wall.samples[1].extra = vec![40].into();
    let r = wall.range(500, 800).unwrap();
    assert_eq!(r.samples.len(), 1);
    assert_eq!(&*r.samples[0].task.user.frames()[0].name, "late");
    assert_eq!(r.samples[0].value, 1);
    assert_eq!(&*r.samples[0].extra, &[20], "extra values scale");
    assert_eq!(leaves(&r), vec![(600, "late")]);
    assert_eq!(r.meta.duration, Duration::from_nanos(300));
    assert_eq!(wall.range(0, 1_000).unwrap().total(), 4);
    assert!(profile(vec![]).range(0, 1).is_none(), "no times");
}

#[test]
fn absorbing_merges_stacks_and_keeps_their_events() {
    let mut whole = Profile::new(Meta::new(Kind::Cpu, "cpu-clock"));
    whole.absorb(timed(
        vec![
            sample("app", 1, &["f"], &[], 1),
            sample("app", 1, &["g"], &[], 1),
        ],
        vec![event(1_100, 0, 1), event(1_150, 1, 1)],
    ));
    whole.absorb(timed(
        vec![sample("app", 1, &["g"], &[], 2)],
        vec![event(1_200, 0, 1), event(1_300, 0, 2)],
    ));
    assert_eq!(whole.samples.len(), 2);
    assert_eq!(whole.samples[1].value, 3);
    assert_eq!(
        leaves(&whole),
        vec![(100, "f"), (150, "g"), (200, "g"), (300, "g")]
    );
}
