//! The windowed aggregation behind the live view: per-interval deltas of
//! interned stacks, a whole-run total, and exact "last N seconds" sums.
//!
//! Each read of the kernel maps yields only what was counted since the
//! previous read, so keeping those deltas per interval makes a window of
//! the last N intervals an exact sum rather than an estimate. Stacks and
//! frames are interned once (a stack is a few integers per frame), so a
//! second of 10,000 distinct stacks costs little more than their counts.
//! Memory is bounded: intervals older than the longest window are dropped,
//! and past [`Limits::max_stacks`] distinct stacks new ones are counted
//! under one `[too many stacks]` entry. Where the run keeps sample times,
//! each interval also holds its samples' times ([`super::times`]), dropped
//! with it.

use std::borrow::Borrow;
use std::collections::VecDeque;
use std::hash::Hash;
use std::time::Duration;

use super::fxhash::FxMap;
use super::times::{IntervalTimes, Times};
use crate::profile::{Frame, Lost, Meta, PathKind, Profile, Sample, TaskStack, Trace};

/// Strings or frames stored once and referred to by index.
#[derive(Debug)]
pub(crate) struct Interner<T> {
    index: FxMap<T, u32>,
    items: Vec<T>,
}

impl<T: Clone + Eq + Hash> Interner<T> {
    fn new() -> Self {
        Interner {
            index: FxMap::default(),
            items: Vec::new(),
        }
    }

    /// The id of `item`, stored if new (only then is it copied).
    pub(crate) fn id<Q>(&mut self, item: &Q) -> u32
    where
        T: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = T> + ?Sized,
    {
        if let Some(&i) = self.index.get(item) {
            return i;
        }
        let i = self.items.len() as u32;
        self.items.push(item.to_owned());
        self.index.insert(item.to_owned(), i);
        i
    }

    pub(crate) fn get(&self, id: u32) -> &T {
        &self.items[id as usize]
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
}

/// A stack of interned frames, or why there is none.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum TraceRef {
    NotCollected,
    Missed { enomem: bool },
    Frames(Box<[u32]>),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TaskRef {
    pid: Option<u32>,
    tid: Option<u32>,
    comm: u32,
    user: TraceRef,
    kernel: TraceRef,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct StackKey {
    task: TaskRef,
    waker: Option<TaskRef>,
}

/// One distinct stack: how to rebuild its sample, and its root-to-leaf
/// path as nodes of the store's [`Trie`].
#[derive(Debug)]
pub(crate) struct Stack {
    key: Option<StackKey>,
    pub(crate) pid: Option<u32>,
    pub(crate) comm: u32,
    pub(crate) nodes: Box<[u32]>,
}

/// Every root-to-leaf path of (name, kind) labels seen in the run, merged
/// by label. Each stack knows its nodes, so the flame graph of any view is
/// a sum into an array indexed by node, with no lookups per frame.
#[derive(Debug)]
pub(crate) struct Trie {
    /// Node 0 is the root; others hold a label of [`Store::names`].
    pub(crate) label: Vec<u32>,
    pub(crate) children: Vec<Vec<u32>>,
    index: FxMap<(u32, u32), u32>,
}

impl Trie {
    fn new() -> Self {
        Trie {
            label: vec![u32::MAX],
            children: vec![Vec::new()],
            index: FxMap::default(),
        }
    }

    /// The nodes of a path of labels, added where new.
    fn nodes(&mut self, labels: &[u32]) -> Box<[u32]> {
        let mut at = 0u32;
        labels
            .iter()
            .map(|&label| {
                let next = match self.index.get(&(at, label)) {
                    Some(&n) => n,
                    None => {
                        let n = self.label.len() as u32;
                        self.label.push(label);
                        self.children.push(Vec::new());
                        self.children[at as usize].push(n);
                        self.index.insert((at, label), n);
                        n
                    }
                };
                at = next;
                next
            })
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.label.len()
    }
}

/// Bounds on what the live view keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest "last N seconds" window that can be asked for.
    pub keep: Duration,
    /// Distinct stacks remembered over the run.
    pub max_stacks: usize,
    /// Sample times kept over [`Limits::keep`]: each interval may keep
    /// its share of them (by its length), and counts what it drops.
    pub max_events: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            keep: Duration::from_secs(300),
            max_stacks: 200_000,
            max_events: 4_000_000,
        }
    }
}

/// The counts one read of the kernel maps added.
#[derive(Debug)]
pub(crate) struct Interval {
    /// When the interval started and ended, since the start of the run.
    pub(crate) start: Duration,
    pub(crate) end: Duration,
    counts: Vec<(u32, u64)>,
    pub(crate) lost: Lost,
    /// When its samples happened, if the collector kept their times.
    pub(crate) times: Option<IntervalTimes>,
}

/// Which part of the profile to look at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// `None`: the whole run; otherwise the last N seconds (to the nearest
    /// whole intervals, at least one, at most [`Limits::keep`]).
    pub last: Option<Duration>,
    /// Only this process.
    pub pid: Option<u32>,
}

/// The counts of a selection.
#[derive(Debug, Default)]
pub struct View {
    /// (stack id, value), values above zero only.
    pub(crate) counts: Vec<(u32, u64)>,
    /// The time the selection covers.
    pub span: Duration,
    pub lost: Lost,
    /// Processes seen in the selection (before the PID filter): pid, comm
    /// id, value; largest first.
    pub(crate) processes: Vec<(Option<u32>, u32, u64)>,
}

impl View {
    /// Sum of the values.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.1).sum()
    }
}

/// The label of the entry that stands for stacks past the limit.
pub const TOO_MANY: &str = "[too many stacks]";

/// The live profile: interned stacks, recent intervals and whole-run sums.
#[derive(Debug)]
pub struct Store {
    pub(crate) meta: Meta,
    pub(crate) limits: Limits,
    /// Flame graph labels: a name (in `strings`) and what it stands for.
    names: Interner<(u32, PathKind)>,
    pub(crate) strings: Interner<String>,
    frames: Interner<Frame>,
    index: FxMap<StackKey, u32>,
    pub(crate) stacks: Vec<Stack>,
    pub(crate) trie: Trie,
    overflow: Option<u32>,
    pub(crate) intervals: VecDeque<Interval>,
    /// Threads and the time base of the intervals' times.
    pub(crate) times: Times,
    totals: Vec<u64>,
    total_lost: Lost,
    elapsed: Duration,
    seq: u64,
}

impl Store {
    /// An empty store for profiles described by `meta`.
    pub fn new(meta: Meta, limits: Limits) -> Self {
        Store {
            meta,
            limits,
            names: Interner::new(),
            strings: Interner::new(),
            frames: Interner::new(),
            index: FxMap::default(),
            stacks: Vec::new(),
            trie: Trie::new(),
            overflow: None,
            intervals: VecDeque::new(),
            times: Times::default(),
            totals: Vec::new(),
            total_lost: Lost::default(),
            elapsed: Duration::ZERO,
            seq: 0,
        }
    }

    /// How many intervals have been added.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Time covered since the start of the run.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// Distinct stacks seen in the run.
    pub fn distinct_stacks(&self) -> usize {
        self.stacks.len()
    }

    pub(crate) fn string(&self, id: u32) -> &str {
        self.strings.get(id)
    }

    /// The name and kind of a flame graph label.
    pub(crate) fn label(&self, id: u32) -> (&str, PathKind) {
        let &(name, kind) = self.names.get(id);
        (self.strings.get(name), kind)
    }

    /// How many labels there are (label ids are below this).
    pub(crate) fn labels(&self) -> usize {
        self.names.len()
    }

    fn trace_ref(&mut self, t: &Trace) -> TraceRef {
        match t {
            Trace::NotCollected => TraceRef::NotCollected,
            Trace::Missed { enomem } => TraceRef::Missed { enomem: *enomem },
            Trace::Frames(f) => TraceRef::Frames(f.iter().map(|f| self.frames.id(f)).collect()),
        }
    }

    fn task_ref(&mut self, t: &TaskStack) -> TaskRef {
        TaskRef {
            pid: t.pid,
            tid: t.tid,
            comm: self.strings.id(&*t.comm),
            user: self.trace_ref(&t.user),
            kernel: self.trace_ref(&t.kernel),
        }
    }

    fn stack_id(&mut self, s: &Sample) -> u32 {
        let key = StackKey {
            task: self.task_ref(&s.task),
            waker: s.waker.as_ref().map(|w| self.task_ref(w)),
        };
        if let Some(&id) = self.index.get(&key) {
            return id;
        }
        if self.stacks.len() >= self.limits.max_stacks {
            return self.overflow_id();
        }
        let labels: Vec<u32> = s
            .path()
            .iter()
            .map(|p| {
                let name = self.strings.id(p.name);
                self.names.id(&(name, p.kind))
            })
            .collect();
        let nodes = self.trie.nodes(&labels);
        let id = self.push_stack(Stack {
            key: Some(key.clone()),
            pid: s.task.pid,
            comm: key.task.comm,
            nodes,
        });
        self.index.insert(key, id);
        id
    }

    fn push_stack(&mut self, s: Stack) -> u32 {
        let id = self.stacks.len() as u32;
        self.stacks.push(s);
        self.totals.push(0);
        id
    }

    fn overflow_id(&mut self) -> u32 {
        if let Some(id) = self.overflow {
            return id;
        }
        let comm = self.strings.id(TOO_MANY);
        let label = self.names.id(&(comm, PathKind::Missed));
        let nodes = self.trie.nodes(&[label]);
        let id = self.push_stack(Stack {
            key: None,
            pid: None,
            comm,
            nodes,
        });
        self.overflow = Some(id);
        id
    }

    /// Adds what one read of the kernel maps returned: `samples` counted
    /// during the `length` since the previous read.
    pub fn push(&mut self, samples: &[Sample], lost: Lost, length: Duration) {
        self.push_interval(Vec::new(), samples.to_vec(), lost, length);
    }

    /// Adds one interval's profile: its samples, and their times when it
    /// has a timeline.
    pub fn push_profile(&mut self, delta: &Profile, length: Duration) {
        let ids = self.push_interval(Vec::new(), delta.samples.clone(), delta.meta.lost, length);
        if let Some(timeline) = &delta.timeline {
            let times = self.ingest_times(timeline, &delta.samples, &ids, length);
            if let Some(last) = self.intervals.back_mut() {
                last.times = Some(times);
            }
        }
    }

    /// Adds an interval made of counts of stacks already in the store
    /// (`known`: id, value) and of newly symbolized `samples`; returns the
    /// ids the new samples were given, in order.
    pub fn push_interval(
        &mut self,
        known: Vec<(u32, u64)>,
        mut samples: Vec<Sample>,
        lost: Lost,
        length: Duration,
    ) -> Vec<u32> {
        // Addresses within one function fold together; zeroed in place so
        // that frames already interned are found without copies.
        for s in &mut samples {
            for t in std::iter::once(&mut s.task).chain(s.waker.as_mut()) {
                for trace in [&mut t.user, &mut t.kernel] {
                    if let Some(f) = trace.frames_mut() {
                        f.iter_mut().for_each(|f| f.addr = 0);
                    }
                }
            }
        }
        let mut ids = Vec::with_capacity(samples.len());
        let mut counts: FxMap<u32, u64> =
            FxMap::with_capacity_and_hasher(known.len() + samples.len(), Default::default());
        for (id, value) in known {
            *counts.entry(id).or_default() += value;
        }
        for s in &samples {
            let id = self.stack_id(s);
            ids.push(id);
            *counts.entry(id).or_default() += s.value;
        }
        let mut counts: Vec<(u32, u64)> = counts.into_iter().filter(|c| c.1 > 0).collect();
        counts.sort_unstable();
        for &(id, v) in &counts {
            self.totals[id as usize] += v;
        }
        self.total_lost.add(&lost);
        let start = self.elapsed;
        self.elapsed += length;
        self.seq += 1;
        self.intervals.push_back(Interval {
            start,
            end: self.elapsed,
            counts,
            lost,
            times: None,
        });
        // Keep what the longest window needs (plus the interval that
        // straddles its start).
        while let Some(first) = self.intervals.front() {
            if self.elapsed.saturating_sub(first.end) >= self.limits.keep {
                self.intervals.pop_front();
            } else {
                break;
            }
        }
        ids
    }

    /// The counts of a selection.
    pub fn view(&self, sel: Selection) -> View {
        let mut lost = Lost::default();
        let (all, span): (Vec<(u32, u64)>, Duration) = match sel.last {
            None => {
                lost = self.total_lost;
                let counts = self
                    .totals
                    .iter()
                    .enumerate()
                    .filter(|c| *c.1 > 0)
                    .map(|(i, &v)| (i as u32, v))
                    .collect();
                (counts, self.elapsed)
            }
            Some(last) => {
                let last = last.min(self.limits.keep);
                let from = self.elapsed.saturating_sub(last);
                let mut sums: FxMap<u32, u64> = FxMap::default();
                let mut start = self.elapsed;
                // Windows are whole intervals: an interval belongs to the
                // window when more than half of it lies inside, so that
                // jitter in read times does not add a whole interval.
                let inside = |iv: &&Interval| iv.end.saturating_sub(from) * 2 > iv.end - iv.start;
                let newest = self.intervals.iter().rev();
                for (_, iv) in newest
                    .enumerate()
                    .take_while(|(i, iv)| *i == 0 || inside(iv))
                {
                    for &(id, v) in &iv.counts {
                        *sums.entry(id).or_default() += v;
                    }
                    lost.add(&iv.lost);
                    start = iv.start;
                }
                let mut counts: Vec<(u32, u64)> = sums.into_iter().collect();
                counts.sort_unstable();
                (counts, self.elapsed - start)
            }
        };
        self.finish_view(all, span, lost, sel.pid)
    }

    /// A view of `all` (stack id, value) over `span`: the process list of
    /// all of them, the counts of `pid`'s only.
    pub(crate) fn finish_view(
        &self,
        all: Vec<(u32, u64)>,
        span: Duration,
        lost: Lost,
        pid: Option<u32>,
    ) -> View {
        let mut procs: FxMap<Option<u32>, (u32, u64)> = FxMap::default();
        for &(id, v) in &all {
            let s = &self.stacks[id as usize];
            let e = procs.entry(s.pid).or_insert((s.comm, 0));
            e.1 += v;
        }
        let mut processes: Vec<(Option<u32>, u32, u64)> =
            procs.into_iter().map(|(p, (c, v))| (p, c, v)).collect();
        processes.sort_unstable_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        let counts = match pid {
            None => all,
            Some(pid) => all
                .into_iter()
                .filter(|&(id, _)| self.stacks[id as usize].pid == Some(pid))
                .collect(),
        };
        View {
            counts,
            span,
            lost,
            processes,
        }
    }

    fn trace(&self, t: &TraceRef) -> Trace {
        match t {
            TraceRef::NotCollected => Trace::NotCollected,
            TraceRef::Missed { enomem } => Trace::Missed { enomem: *enomem },
            TraceRef::Frames(ids) => {
                Trace::Frames(ids.iter().map(|&i| self.frames.get(i).clone()).collect())
            }
        }
    }

    fn task(&self, t: &TaskRef) -> TaskStack {
        TaskStack {
            pid: t.pid,
            tid: t.tid,
            comm: self.strings.get(t.comm).as_str().into(),
            user: self.trace(&t.user),
            kernel: self.trace(&t.kernel),
        }
    }

    /// A selection as a [`Profile`], for the writers (folded, SVG, pprof)
    /// and for the final output of a run. Samples are in bcc's order
    /// (ascending value).
    pub fn profile(&self, sel: Selection) -> Profile {
        self.profile_of(&self.view(sel))
    }

    /// A view as a [`Profile`] (see [`Store::profile`]).
    pub fn profile_of(&self, view: &View) -> Profile {
        let mut meta = self.meta.clone();
        meta.duration = view.span;
        meta.lost = view.lost;
        let mut profile = Profile::new(meta);
        for &(id, value) in &view.counts {
            let stack = &self.stacks[id as usize];
            let sample = match &stack.key {
                Some(k) => Sample::new(
                    self.task(&k.task),
                    k.waker.as_ref().map(|w| self.task(w)),
                    value,
                ),
                None => Sample::new(
                    TaskStack {
                        pid: None,
                        tid: None,
                        comm: TOO_MANY.into(),
                        user: Trace::NotCollected,
                        kernel: Trace::NotCollected,
                    },
                    None,
                    value,
                ),
            };
            profile.samples.push(sample);
        }
        profile.sort_ascending();
        profile
    }
}
