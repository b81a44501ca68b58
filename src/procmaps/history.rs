//! Each process's address spaces over time, built from events that may
//! arrive out of order (perf's ring buffers are per CPU): a process's
//! mappings at any moment are its address space's own mappings up to that
//! moment laid over what it inherited from its parent at fork.
//!
//! An address space begins at a fork, an exec, or a snapshot read from
//! `/proc` (complete), or with the first mapping seen of a process that
//! was already running when tracking began (partial: the symbolizer reads
//! `/proc` instead while the process lives).
//!
//! A PID names one process after another: a fork begins a new process's
//! spaces, and a process is found by its PID and its start time (as BPF
//! reads it from the kernel), so that one that exited keeps its own
//! mappings when a later process takes its PID.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::Mapping;

/// How an address space began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// Forked from this process: starts with its mappings of the moment.
    Fork(u32),
    /// `exec`, or a snapshot from `/proc`: starts empty (the snapshot's
    /// mappings are its own).
    Fresh,
    /// Only mappings made after tracking began are known.
    Partial,
}

struct AddressSpace {
    start: u64,
    origin: Origin,
    /// Mappings with the time they were made.
    own: Vec<(u64, Mapping)>,
}

/// Address spaces kept per PID (a PID reused, or exec'd, has several).
const MAX_SPACES_PER_PID: usize = 4;
/// Processes that have exited are forgotten, oldest first, past this many.
const MAX_EXITED: usize = 1 << 16;
/// Fork chains are followed this deep.
const MAX_FORK_DEPTH: usize = 16;

/// The address spaces of every process seen.
#[derive(Default)]
pub(crate) struct History {
    procs: HashMap<u32, Vec<AddressSpace>>,
    /// Exited processes, oldest first, each with its exit's number and
    /// time.
    exited: VecDeque<(u64, u32, u64)>,
    /// Exits seen so far.
    exits: u64,
}

impl History {
    fn begin(&mut self, pid: u32, time: u64, origin: Origin, own: Vec<(u64, Mapping)>) {
        let spaces = self.procs.entry(pid).or_default();
        let at = spaces.partition_point(|s| s.start <= time);
        let mut own = own;
        // Mappings filed (out of order) under the space before this one
        // but made after it began are this space's.
        if let Some(prev) = at.checked_sub(1).map(|i| &mut spaces[i]) {
            let (later, earlier): (Vec<_>, Vec<_>) =
                prev.own.drain(..).partition(|(t, _)| *t >= time);
            prev.own = earlier;
            own.extend(later);
        }
        spaces.insert(
            at,
            AddressSpace {
                start: time,
                origin,
                own,
            },
        );
        if spaces.len() > MAX_SPACES_PER_PID {
            // The oldest space that a later one of the same process
            // replaced goes first, so that each process keeps its latest
            // and the forks that part them; else the oldest.
            let forked = |s: &AddressSpace| matches!(s.origin, Origin::Fork(_));
            let old = spaces
                .windows(2)
                .position(|w| !forked(&w[0]) && !forked(&w[1]))
                .unwrap_or(0);
            spaces.remove(old);
        }
    }

    /// `pid` was forked from `parent` at `time`.
    pub(crate) fn fork(&mut self, pid: u32, parent: u32, time: u64) {
        if pid != parent {
            self.begin(pid, time, Origin::Fork(parent), Vec::new());
        }
    }

    /// `pid` called exec at `time`.
    pub(crate) fn exec(&mut self, pid: u32, time: u64) {
        self.begin(pid, time, Origin::Fresh, Vec::new());
    }

    /// `pid`'s whole set of mappings as read at `time`.
    pub(crate) fn snapshot(&mut self, pid: u32, time: u64, mappings: Vec<Mapping>) {
        let own = mappings.into_iter().map(|m| (time, m)).collect();
        self.begin(pid, time, Origin::Fresh, own);
    }

    /// `pid` mapped `mapping` at `time`.
    pub(crate) fn map(&mut self, pid: u32, time: u64, mapping: Mapping) {
        let spaces = self.procs.entry(pid).or_default();
        let at = spaces.partition_point(|s| s.start <= time);
        if at == 0 {
            spaces.insert(
                0,
                AddressSpace {
                    start: 0,
                    origin: Origin::Partial,
                    own: Vec::new(),
                },
            );
            spaces[0].own.push((time, mapping));
        } else if !redundant(&spaces[at - 1].own, time, &mapping) {
            spaces[at - 1].own.push((time, mapping));
        }
    }

    /// `pid` exited at `time`; its mappings are kept for a while.
    pub(crate) fn exit(&mut self, pid: u32, time: u64) {
        self.exits += 1;
        self.exited.push_back((self.exits, pid, time));
        while self.exited.len() > MAX_EXITED {
            self.forget_oldest();
        }
    }

    /// The number of exits seen so far: a mark for [`History::forget_exited`].
    pub(crate) fn exits(&self) -> u64 {
        self.exits
    }

    /// Forgets the processes whose exit came at or before `mark` (a value
    /// of [`History::exits`]). Returns them.
    pub(crate) fn forget_exited(&mut self, mark: u64) -> Vec<u32> {
        let mut gone = Vec::new();
        while self.exited.front().is_some_and(|&(n, ..)| n <= mark) {
            gone.extend(self.forget_oldest());
        }
        gone
    }

    /// Forgets the process that exited first: the address spaces its PID
    /// had until then (a later process with the PID keeps its own). The
    /// PID, when nothing is left of it.
    fn forget_oldest(&mut self) -> Option<u32> {
        let (_, pid, time) = self.exited.pop_front()?;
        let spaces = self.procs.get_mut(&pid)?;
        spaces.retain(|s| s.start > time);
        if !spaces.is_empty() {
            return None;
        }
        self.procs.remove(&pid);
        Some(pid)
    }

    /// `pid`'s mappings at `at` (the latest known when `None`), sorted by
    /// address, and whether they are complete.
    pub(crate) fn mappings(&self, pid: u32, at: Option<u64>) -> Option<(Vec<Mapping>, bool)> {
        self.resolve(pid, at, 0)
    }

    /// The latest mappings of the process `pid` that started at `start`
    /// (the kernel's `start_time`), and whether they are complete: those
    /// of its latest address space, not of a later process with the PID.
    /// 0 means any: the PID's latest.
    pub(crate) fn process_mappings(&self, pid: u32, start: u64) -> Option<(Vec<Mapping>, bool)> {
        if start == 0 {
            return self.mappings(pid, None);
        }
        let spaces = self.procs.get(&pid)?;
        // The process's spaces begin at its start (its fork record comes
        // just after) and end where a later process's fork begins.
        let from = spaces.partition_point(|s| s.start < start);
        let end = spaces[from..]
            .iter()
            .position(|s| {
                matches!(s.origin, Origin::Fork(_))
                    && s.start > start.saturating_add(super::START_SLACK)
            })
            .map_or(spaces.len(), |n| from + n);
        // None of its own: the space it began in (it was running before
        // tracking began, its first mappings arrived before a snapshot).
        let space = &spaces[end.checked_sub(1)?];
        Some(self.build(space, None, 0))
    }

    /// When the process that `pid` named at `at` started, as far as the
    /// history tells: the time of its fork, else of its first known space
    /// (0: unknown). A key for [`History::process_mappings`].
    pub(crate) fn process_start(&self, pid: u32, at: u64) -> u64 {
        let Some(spaces) = self.procs.get(&pid) else {
            return 0;
        };
        let before = &spaces[..spaces.partition_point(|s| s.start <= at)];
        before
            .iter()
            .rev()
            .find(|s| matches!(s.origin, Origin::Fork(_)))
            .or(before.first())
            .map_or(0, |s| s.start)
    }

    fn resolve(&self, pid: u32, at: Option<u64>, depth: usize) -> Option<(Vec<Mapping>, bool)> {
        let spaces = self.procs.get(&pid)?;
        let space = match at {
            Some(t) => spaces[..spaces.partition_point(|s| s.start <= t)].last()?,
            None => spaces.last()?,
        };
        Some(self.build(space, at, depth))
    }

    /// The mappings of `space` at `at` (all of them when `None`): what it
    /// inherited at its fork, with its own laid over them.
    fn build(&self, space: &AddressSpace, at: Option<u64>, depth: usize) -> (Vec<Mapping>, bool) {
        let (base, complete) = match space.origin {
            Origin::Fork(parent) if depth < MAX_FORK_DEPTH => self
                .resolve(parent, Some(space.start), depth + 1)
                .unwrap_or((Vec::new(), false)),
            Origin::Fork(_) | Origin::Partial => (Vec::new(), false),
            Origin::Fresh => (Vec::new(), true),
        };
        let mut own: Vec<&(u64, Mapping)> = space
            .own
            .iter()
            .filter(|(t, _)| at.is_none_or(|at| *t <= at))
            .collect();
        own.sort_by_key(|(t, _)| *t);
        let mut layout: BTreeMap<u64, Mapping> = base.into_iter().map(|m| (m.start, m)).collect();
        for (_, m) in own {
            overlay(&mut layout, m.clone());
        }
        (layout.into_values().collect(), complete)
    }
}

/// Whether mapping `m`, made at `time`, changes nothing of what the
/// records `own` say of its range: the latest record over any of it (made
/// no later) is the same mapping, or memory with no file, of the same name,
/// covering all of it. JIT code re-protected is that: YJIT's writes make
/// an executable mapping record each, thousands a second, which every
/// look-up of the process's mappings would lay over again.
fn redundant(own: &[(u64, Mapping)], time: u64, m: &Mapping) -> bool {
    use super::Backing;
    let mut latest: Option<&(u64, Mapping)> = None;
    for r in own
        .iter()
        .filter(|(_, e)| e.start < m.end && m.start < e.end)
    {
        if r.0 > time {
            return false;
        }
        if latest.is_none_or(|l| r.0 >= l.0) {
            latest = Some(r);
        }
    }
    let Some((_, last)) = latest else {
        return false;
    };
    match (&last.backing, &m.backing) {
        (Backing::Anon(a), Backing::Anon(b)) => {
            a == b && last.start <= m.start && m.end <= last.end
        }
        (Backing::File(a), Backing::File(b)) => {
            a.id() == b.id() && (last.start, last.end, last.offset) == (m.start, m.end, m.offset)
        }
        _ => false,
    }
}

/// Puts `m` over whatever it overlaps in `layout`, trimming or splitting
/// the older mappings (as a new `mmap` over an old range does).
fn overlay(layout: &mut BTreeMap<u64, Mapping>, m: Mapping) {
    let hit: Vec<u64> = layout
        .range(..m.end)
        .rev()
        .take_while(|(_, e)| e.end > m.start)
        .map(|(&s, _)| s)
        .collect();
    for s in hit {
        let Some(e) = layout.remove(&s) else { continue };
        if e.start < m.start {
            let mut left = e.clone();
            left.end = m.start;
            layout.insert(left.start, left);
        }
        if e.end > m.end {
            let mut right = e;
            right.offset += m.end - right.start;
            right.start = m.end;
            layout.insert(right.start, right);
        }
    }
    layout.insert(m.start, m);
}

#[cfg(test)]
mod tests {
    use super::super::Backing;
    use super::*;

    fn anon(name: &str, start: u64, end: u64) -> Mapping {
        Mapping {
            start,
            end,
            offset: 0,
            backing: Backing::Anon(name.into()),
        }
    }

    fn names(m: &[Mapping]) -> Vec<(String, u64, u64)> {
        m.iter()
            .map(|m| (m.name().to_string(), m.start, m.end))
            .collect()
    }

    #[test]
    fn fork_inherits_exec_replaces_in_any_order() {
        let mut h = History::default();
        // Delivered out of order, as from two CPUs' buffers.
        h.map(10, 5, anon("child-lib", 0x5000, 0x6000));
        h.fork(10, 1, 3);
        h.snapshot(1, 1, vec![anon("bash", 0x1000, 0x2000)]);
        h.map(1, 2, anon("bash-lib", 0x3000, 0x4000));
        h.map(1, 4, anon("later", 0x7000, 0x8000));
        let (m, complete) = h.mappings(10, None).expect("known");
        assert!(complete);
        assert_eq!(
            names(&m),
            [
                ("bash".into(), 0x1000, 0x2000),
                ("bash-lib".into(), 0x3000, 0x4000),
                ("child-lib".into(), 0x5000, 0x6000),
            ],
            "the parent's mapping made after the fork is not inherited"
        );
        h.exec(10, 6);
        h.map(10, 7, anon("app", 0x1000, 0x1800));
        let (m, _) = h.mappings(10, None).expect("known");
        assert_eq!(names(&m), [("app".into(), 0x1000, 0x1800)]);
        let (m, _) = h.mappings(10, Some(5)).expect("before exec");
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn overlay_splits() {
        let mut h = History::default();
        h.snapshot(1, 1, vec![anon("big", 0x1000, 0x5000)]);
        h.map(1, 2, anon("mid", 0x2000, 0x3000));
        let (m, _) = h.mappings(1, None).expect("known");
        assert_eq!(
            names(&m),
            [
                ("big".into(), 0x1000, 0x2000),
                ("mid".into(), 0x2000, 0x3000),
                ("big".into(), 0x3000, 0x5000),
            ]
        );
        assert_eq!(m[2].offset, 0x2000);
    }

    #[test]
    fn jit_code_re_protected_is_recorded_once() {
        let mut h = History::default();
        h.snapshot(1, 1, vec![anon("bash", 0x1000, 0x2000)]);
        // YJIT's region, then its tail and itself again, over and over.
        for t in 0..1000 {
            h.map(1, 2 + 2 * t, anon("//anon", 0x10_0000, 0x20_0000));
            h.map(1, 3 + 2 * t, anon("//anon", 0x14_0000, 0x20_0000));
        }
        let space = h.procs.get(&1).and_then(|s| s.last()).expect("known");
        assert_eq!(space.own.len(), 2);
        let (m, _) = h.mappings(1, None).expect("known");
        assert_eq!(
            names(&m),
            [
                ("bash".into(), 0x1000, 0x2000),
                ("//anon".into(), 0x10_0000, 0x20_0000)
            ]
        );
        // Anything else over it is recorded: another name, a wider range,
        // or a record older than the one covering it.
        h.map(1, 5000, anon("other", 0x14_0000, 0x15_0000));
        h.map(1, 5001, anon("//anon", 0x14_0000, 0x15_0000));
        h.map(1, 5002, anon("//anon", 0x0f_0000, 0x20_0000));
        h.map(1, 1, anon("//anon", 0x10_0000, 0x11_0000));
        let space = h.procs.get(&1).and_then(|s| s.last()).expect("known");
        assert_eq!(space.own.len(), 6);
        let (m, _) = h.mappings(1, Some(5001)).expect("known");
        assert_eq!(
            names(&m)[1..],
            [
                ("//anon".into(), 0x10_0000, 0x14_0000),
                ("//anon".into(), 0x14_0000, 0x15_0000),
                ("//anon".into(), 0x15_0000, 0x20_0000)
            ]
        );
    }

    #[test]
    fn partial_until_snapshot() {
        let mut h = History::default();
        h.map(5, 9, anon("dlopened", 0x1000, 0x2000));
        assert!(!h.mappings(5, None).expect("known").1);
        assert!(h.mappings(6, None).is_none());
    }

    #[test]
    fn exited_processes_are_forgotten_up_to_a_mark() {
        let mut h = History::default();
        for pid in [1, 2, 3] {
            h.snapshot(pid, 1, vec![anon("app", 0x1000, 0x2000)]);
        }
        h.exit(1, 2);
        let mark = h.exits();
        h.exit(2, 3);
        assert_eq!(h.forget_exited(mark), [1]);
        assert!(h.mappings(1, None).is_none(), "exited before the mark");
        assert!(h.mappings(2, None).is_some(), "exited after the mark");
        assert!(h.mappings(3, None).is_some(), "still running");
        // A reused PID that exits again is kept until its last exit.
        h.snapshot(2, 5, vec![anon("again", 0x1000, 0x2000)]);
        h.exit(2, 6);
        assert_eq!(h.forget_exited(mark + 1), Vec::<u32>::new());
        assert!(h.mappings(2, None).is_some());
        assert_eq!(h.forget_exited(h.exits()), [2]);
        assert!(h.mappings(2, None).is_none());
    }

    /// Times in these tests are in seconds.
    const S: u64 = 1_000_000_000;

    #[test]
    fn a_reused_pid_keeps_each_process_apart() {
        let mut h = History::default();
        h.snapshot(1, S, vec![anon("shell", 0x1000, 0x2000)]);
        // The first process: forked (its start a little before its fork
        // record), exec'd, exits; the second takes its PID.
        h.fork(7, 1, 10 * S + 5);
        h.exec(7, 10 * S + 9);
        h.map(7, 11 * S, anon("first", 0x4000, 0x5000));
        h.exit(7, 12 * S);
        h.fork(7, 1, 13 * S + 5);
        h.exec(7, 13 * S + 9);
        h.map(7, 14 * S, anon("second", 0x8000, 0x9000));
        let of = |h: &History, start| names(&h.process_mappings(7, start).expect("known").0);
        assert_eq!(of(&h, 10 * S), [("first".into(), 0x4000, 0x5000)]);
        assert_eq!(of(&h, 13 * S), [("second".into(), 0x8000, 0x9000)]);
        assert_eq!(of(&h, 0), of(&h, 13 * S), "0: the latest");
        assert_eq!(h.process_start(7, 11 * S), 10 * S + 5);
        assert_eq!(h.process_start(7, 14 * S), 13 * S + 5);
        // A process that ran before tracking began: its snapshot.
        assert_eq!(
            names(&h.process_mappings(1, S / 2).expect("known").0)[0].0,
            "shell"
        );
        // Forgetting the first process keeps the second.
        assert_eq!(h.forget_exited(h.exits()), Vec::<u32>::new());
        assert_eq!(of(&h, 13 * S), [("second".into(), 0x8000, 0x9000)]);
    }

    #[test]
    fn each_process_keeps_its_latest_space() {
        let mut h = History::default();
        // Two processes with one PID, each with more spaces than are kept.
        for (start, name) in [(10 * S, "first"), (20 * S, "second")] {
            h.fork(7, 1, start);
            for i in 1..4 {
                h.exec(7, start + i);
            }
            h.map(7, start + 5, anon(name, 0x1000, 0x2000));
        }
        assert_eq!(h.procs[&7].len(), MAX_SPACES_PER_PID);
        let first = h.process_mappings(7, 10 * S).expect("known").0;
        assert_eq!(names(&first), [("first".into(), 0x1000, 0x2000)]);
    }
}
