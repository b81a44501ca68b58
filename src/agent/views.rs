//! The agent's profiles as views of one wall-clock collection.
//!
//! A wall-clock collector sees everything the agent's three profiles
//! need: its samples on the CPU are the CPU profile's timer samples (the
//! same CPU-clock perf event at the same frequency), and its periods off
//! the CPU are the off-CPU profile's blocked time (the same
//! `sched_switch`, sampled alike). So when more than one profile is
//! chosen the agent runs that one collector, and each window of it is
//! reported once per chosen profile, as [`View`]s. Each stack is then
//! walked, stored, named and unwound once: three collectors detected
//! every new process's runtimes, built its unwind tables, followed its
//! mappings and named its stacks three times.

use super::Source;
use crate::bpf::perf::Sampling;
use crate::collect::Target;
use crate::error::Result;
use crate::pipeline::{Sink, Times};
use crate::profile::{Event, Kind, Meta, Profile, Sample};
use crate::tools::{offcpu, profile, wallclock};

/// One profile the agent reports from a wall-clock profile.
#[derive(Clone, Debug)]
pub enum View {
    /// The wall-clock profile itself.
    Wall,
    /// Its samples on the CPU, as timer samples of `period_ns` each
    /// (`flare profile`'s), its threads merged unless `per_thread`.
    Cpu {
        meta: Meta,
        period_ns: u64,
        per_thread: bool,
    },
    /// Its time off the CPU, without the states' frames (`flare
    /// offcputime`'s).
    OffCpu { meta: Meta },
}

impl View {
    /// The kind of the profiles it makes.
    pub fn kind(&self) -> Kind {
        match self {
            View::Wall => Kind::Wall,
            View::Cpu { .. } => Kind::Cpu,
            View::OffCpu { .. } => Kind::OffCpu,
        }
    }

    /// This view of `wall`, a wall-clock profile; `None` for
    /// [`View::Wall`], which is `wall` itself.
    pub fn of(&self, wall: &Profile) -> Option<Profile> {
        let meta = match self {
            View::Wall => return None,
            View::Cpu { meta, .. } | View::OffCpu { meta } => meta,
        };
        let cpu = matches!(self, View::Cpu { .. });
        let mut out = Profile::new(meta.clone());
        out.meta.duration = wall.meta.duration;
        out.meta.lost = wall.meta.lost;
        // Each of the wall profile's samples' index in the view.
        let mut map = Vec::with_capacity(wall.samples.len());
        for s in &wall.samples {
            map.push(self.pick(s).map(|s| {
                out.samples.push(s);
                out.samples.len() as u32 - 1
            }));
        }
        out.timeline = wall.timeline.as_ref().map(|t| {
            let mut view = t.clone_empty();
            view.events = t
                .events
                .iter()
                .filter_map(|e| {
                    let sample = (*map.get(e.sample as usize)?)?;
                    // A timer sample counts one.
                    let value = if cpu { 1 } else { e.value };
                    Some(Event {
                        sample,
                        value,
                        ..*e
                    })
                })
                .collect();
            view
        });
        out.merge_identical();
        out.sort_ascending();
        Some(out)
    }

    /// `s`, a wall-clock profile's sample, as this view has it, if it
    /// has it ([`View::Wall`] has no view of its own: see [`View::of`]).
    fn pick(&self, s: &Sample) -> Option<Sample> {
        match self {
            View::Wall => None,
            View::Cpu {
                period_ns,
                per_thread,
                ..
            } => {
                if wallclock::is_off_cpu(s) {
                    return None;
                }
                let mut s = s.clone();
                s.value = samples_in(s.value, *period_ns);
                s.extra = Box::default();
                if !per_thread {
                    s.task.tid = None;
                }
                (s.value > 0).then_some(s)
            }
            View::OffCpu { .. } => wallclock::off_cpu_part(s),
        }
    }
}

/// How many timer samples of `period_ns` make `us` microseconds on the
/// CPU (each sample added one period, in nanoseconds, before the sum was
/// made microseconds).
fn samples_in(us: u64, period_ns: u64) -> u64 {
    let ns = u128::from(us) * 1000;
    let period = u128::from(period_ns.max(1));
    ((ns + period / 2) / period) as u64
}

/// One collector the agent runs, and the profiles it reports of each
/// window: none but its own when `views` is empty.
#[derive(Clone, Debug)]
pub struct Run {
    pub source: Source,
    pub views: Vec<View>,
}

impl Run {
    /// The kinds of the profiles it reports.
    pub fn kinds(&self) -> Vec<Kind> {
        match self.views.is_empty() {
            true => vec![self.source.kind()],
            false => self.views.iter().map(View::kind).collect(),
        }
    }
}

/// The collectors that take `sources`: one wall-clock collector for
/// them all when there are several and they agree on what it would
/// sample (frequency, threads, stacks); otherwise one each.
pub fn runs(sources: &[Source]) -> Vec<Run> {
    match joint(sources) {
        Some(run) => vec![run],
        None => sources
            .iter()
            .map(|s| Run {
                source: s.clone(),
                views: Vec::new(),
            })
            .collect(),
    }
}

/// The one wall-clock run that gives every one of `sources`, if they
/// are several and it can.
fn joint(sources: &[Source]) -> Option<Run> {
    if sources.len() < 2 {
        return None;
    }
    let mut wall: Option<wallclock::Config> = None;
    let mut sample_us = None;
    let mut off_target = None;
    let mut views = Vec::new();
    // Every source must ask the same of the one collector.
    let mut agree = |c: wallclock::Config| match &wall {
        Some(w) => w.frequency == c.frequency && w.target == c.target && w.recording == c.recording,
        None => {
            wall = Some(c);
            true
        }
    };
    for source in sources {
        match source {
            Source::Cpu(c) => {
                let Sampling::Frequency(hz) = c.sampling else {
                    return None;
                };
                if hz == 0 || c.include_idle || c.cpu.is_some() {
                    return None;
                }
                if c.cgroup_map.is_some() || c.mntns_map.is_some() {
                    return None;
                }
                let w = wallclock::Config {
                    target: c.target.clone(),
                    frequency: hz,
                    recording: c.recording,
                    ..wallclock::Config::default()
                };
                if !agree(w) {
                    return None;
                }
                views.push(View::Cpu {
                    meta: profile::meta(c),
                    period_ns: 1_000_000_000 / hz,
                    per_thread: c.per_thread || matches!(c.target, Target::Tids(_)),
                });
            }
            Source::OffCpu(c) => {
                if c.tool != offcpu::Tool::OffCpu || c.state.is_some() {
                    return None;
                }
                off_target = Some(match &c.threads {
                    offcpu::Threads::User => Target::All,
                    offcpu::Threads::Pids(p) => Target::Pids(p.clone()),
                    _ => return None,
                });
                sample_us = Some(c.sample_us);
                views.push(View::OffCpu {
                    meta: offcpu::meta(c),
                });
            }
            Source::Wall(c) => {
                if c.state.is_some() || c.min_us != 0 || !c.user_blocked_only {
                    return None;
                }
                if !agree(c.clone()) {
                    return None;
                }
                sample_us = sample_us.or(Some(c.sample_us));
                views.push(View::Wall);
            }
        }
    }
    let mut wall = wall?;
    if off_target.is_some_and(|t| t != wall.target) {
        return None;
    }
    wall.sample_us = sample_us.unwrap_or(0);
    wall.user_blocked_only = true;
    Some(Run {
        source: Source::Wall(wall),
        views,
    })
}

/// Reports each window of a wall-clock collector once per view, one
/// at a time (a view is dropped before the next is made), into `inner`.
pub struct Views<'a> {
    pub views: &'a [View],
    pub inner: &'a mut dyn Sink,
}

impl Sink for Views<'_> {
    fn times(&self) -> Times {
        self.inner.times()
    }

    fn report(&mut self, profile: &Profile) -> Result<()> {
        let mut first = Ok(());
        for v in self.views {
            let r = match v.of(profile) {
                Some(view) => self.inner.report(&view),
                None => self.inner.report(profile),
            };
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, FrameKind, TaskStack, Timeline, Trace};

    const PERIOD: u64 = 52_631_578;

    fn task(tid: u32, kernel: &[(&str, FrameKind)], user: &[&str]) -> TaskStack {
        let frames = |v: Vec<Frame>| Trace::of(v);
        TaskStack {
            pid: Some(7),
            tid: Some(tid),
            comm: "work".into(),
            user: frames(
                user.iter()
                    .map(|n| Frame::named(*n, FrameKind::Native))
                    .collect(),
            ),
            kernel: frames(kernel.iter().map(|(n, k)| Frame::named(*n, *k)).collect()),
        }
    }

    /// Two threads computing in `spin` (3 and 2 timer samples), one
    /// sleeping in `rest` 40 ms and one preempted in it 5 ms, as the
    /// wallclock collector hands them over after tidying.
    fn wall() -> Profile {
        let mut meta = Meta::new(Kind::Wall, "cpu-clock + sched_switch");
        meta.lost.hash_full = 3;
        let on = |tid, n: u64| {
            let mut s = Sample::new(task(tid, &[], &["spin", "main"]), None, n * PERIOD / 1000);
            s.extra = vec![n * PERIOD].into();
            s
        };
        let off = |state: &str, us| {
            let kernel = [(state, FrameKind::Label), ("schedule", FrameKind::Kernel)];
            let mut s = Sample::new(task(9, &kernel, &["rest", "main"]), None, us);
            s.extra = vec![0].into();
            s
        };
        let mut p = Profile::untimed(
            meta,
            vec![
                on(7, 3),
                on(8, 2),
                off("[off-cpu: sleeping]", 40_000),
                off("[off-cpu: preempted]", 5_000),
            ],
        );
        let mut t = Timeline::starting_now();
        let at = |sample, value| Event {
            time_ns: 1,
            value,
            sample,
            tid: 7,
            cpu: 0,
        };
        t.events = vec![at(0, PERIOD / 1000), at(1, PERIOD / 1000), at(2, 40_000)];
        p.timeline = Some(t);
        p
    }

    fn names(t: &Trace) -> Vec<&str> {
        t.frames().iter().map(|f| &*f.name).collect()
    }

    #[test]
    fn the_cpu_view_is_the_timer_samples_merged_by_process() {
        let meta = Meta::new(Kind::Cpu, "cpu-clock");
        let view = View::Cpu {
            meta: meta.clone(),
            period_ns: PERIOD,
            per_thread: false,
        }
        .of(&wall())
        .expect("a view");
        assert_eq!(view.meta.kind, Kind::Cpu);
        assert_eq!(view.meta.lost.hash_full, 3, "losses are the collector's");
        assert_eq!(view.samples.len(), 1, "two threads, one process: one stack");
        let s = &view.samples[0];
        assert_eq!((s.value, s.task.tid), (5, None));
        assert!(s.extra.is_empty());
        assert_eq!(names(&s.task.user), ["spin", "main"]);
        let events = &view.timeline.as_ref().expect("times kept").events;
        assert_eq!(events.len(), 2, "the sleep's event is not the CPU's");
        assert!(events.iter().all(|e| e.value == 1 && e.sample == 0));

        let apart = View::Cpu {
            meta,
            period_ns: PERIOD,
            per_thread: true,
        }
        .of(&wall())
        .expect("a view");
        let mut values: Vec<u64> = apart.samples.iter().map(|s| s.value).collect();
        values.sort();
        assert_eq!(values, [2, 3]);
    }

    #[test]
    fn the_off_cpu_view_is_the_blocked_time_without_states() {
        let view = View::OffCpu {
            meta: Meta::new(Kind::OffCpu, "sched_switch"),
        }
        .of(&wall())
        .expect("a view");
        assert_eq!(view.meta.kind, Kind::OffCpu);
        assert_eq!(view.samples.len(), 1, "the two states' stacks merge");
        let s = &view.samples[0];
        assert_eq!(s.value, 45_000);
        assert_eq!(names(&s.task.kernel), ["schedule"]);
        assert_eq!(names(&s.task.user), ["rest", "main"]);
        let events = &view.timeline.as_ref().expect("times kept").events;
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].value, events[0].sample), (40_000, 0));
    }

    #[test]
    fn the_wall_view_is_the_profile_itself() {
        assert!(View::Wall.of(&wall()).is_none());
    }

    #[test]
    fn timer_samples_are_counted_back_whole() {
        for n in [1, 2, 19, 190, 100_000] {
            assert_eq!(samples_in(n * PERIOD / 1000, PERIOD), n);
        }
        assert_eq!(samples_in(0, PERIOD), 0);
        assert_eq!(samples_in(5, 0), 5_000, "no period: nanoseconds");
    }

    /// A sink that keeps what it is given.
    #[derive(Default)]
    struct Keep(Vec<Profile>);

    impl Sink for Keep {
        fn report(&mut self, profile: &Profile) -> Result<()> {
            self.0.push(profile.clone());
            Ok(())
        }
    }

    #[test]
    fn each_window_is_reported_once_per_view_in_order() {
        let views = [
            View::OffCpu {
                meta: Meta::new(Kind::OffCpu, "sched_switch"),
            },
            View::Wall,
            View::Cpu {
                meta: Meta::new(Kind::Cpu, "cpu-clock"),
                period_ns: PERIOD,
                per_thread: false,
            },
        ];
        let mut keep = Keep::default();
        let mut sink = Views {
            views: &views,
            inner: &mut keep,
        };
        let wall = wall();
        sink.report(&wall).expect("reported");
        let kinds: Vec<Kind> = keep.0.iter().map(|p| p.meta.kind).collect();
        assert_eq!(kinds, [Kind::OffCpu, Kind::Wall, Kind::Cpu]);
        assert_eq!(keep.0[1], wall);
    }
    /// The three sources as `flare agent --profiles` makes them.
    fn sources(target: Target) -> Vec<Source> {
        let recording = crate::collect::Recording::default();
        let threads = match &target {
            Target::Pids(p) => offcpu::Threads::Pids(p.clone()),
            _ => offcpu::Threads::User,
        };
        vec![
            Source::Cpu(profile::Config {
                target: target.clone(),
                sampling: Sampling::Frequency(19),
                recording,
                ..profile::Config::default()
            }),
            Source::OffCpu(offcpu::Config {
                threads,
                recording,
                sample_us: 52_631,
                ..offcpu::Config::new(offcpu::Tool::OffCpu)
            }),
            Source::Wall(wallclock::Config {
                target,
                frequency: 19,
                recording,
                sample_us: 52_631,
                user_blocked_only: true,
                ..wallclock::Config::default()
            }),
        ]
    }

    #[test]
    fn several_profiles_share_one_wall_clock_collector() {
        for target in [Target::All, Target::Pids(vec![42])] {
            let all = sources(target.clone());
            let joint = runs(&all);
            assert_eq!(joint.len(), 1);
            let Source::Wall(w) = &joint[0].source else {
                panic!("not a wall-clock collector: {:?}", joint[0].source);
            };
            assert_eq!((w.frequency, w.sample_us), (19, 52_631));
            assert!(w.user_blocked_only);
            assert_eq!(w.target, target);
            assert_eq!(joint[0].kinds(), [Kind::Cpu, Kind::OffCpu, Kind::Wall]);
            let View::Cpu { period_ns, .. } = &joint[0].views[0] else {
                panic!("not the CPU view first");
            };
            assert_eq!(*period_ns, 1_000_000_000 / 19);

            // Without the wall-clock profile: still one, made for them.
            let two = runs(&all[..2]);
            assert_eq!(two.len(), 1);
            assert_eq!(two[0].kinds(), [Kind::Cpu, Kind::OffCpu]);
            let Source::Wall(w) = &two[0].source else {
                panic!("not a wall-clock collector");
            };
            assert_eq!((w.frequency, w.sample_us, &w.target), (19, 52_631, &target));
            assert!(w.user_blocked_only);
        }
    }

    #[test]
    fn one_profile_or_a_disagreement_runs_its_own_collectors() {
        let all = sources(Target::All);
        let one = runs(&all[..1]);
        assert_eq!(one.len(), 1);
        assert!(one[0].views.is_empty());
        assert!(matches!(one[0].source, Source::Cpu(_)));

        let mut filtered = all.clone();
        if let Source::Cpu(c) = &mut filtered[0] {
            c.cgroup_map = Some("/sys/fs/bpf/cgroups".into());
        }
        assert_eq!(
            runs(&filtered).len(),
            3,
            "the cgroup filter is the CPU's own"
        );

        let mut other = all.clone();
        if let Source::Wall(c) = &mut other[2] {
            c.frequency = 99;
        }
        assert_eq!(runs(&other).len(), 3, "two frequencies");

        let mut apart = all;
        if let Source::OffCpu(c) = &mut apart[1] {
            c.threads = offcpu::Threads::Pids(vec![42]);
        }
        let runs = runs(&apart);
        assert_eq!(runs.len(), 3, "two targets");
        assert!(runs.iter().all(|r| r.views.is_empty()));
    }
}
