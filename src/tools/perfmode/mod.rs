//! `flare profile` without BPF: perf-event mode, for users who may not
//! load BPF programs (no root, no CAP_BPF and CAP_PERFMON).
//!
//! With `kernel.perf_event_paranoid` at 2, as most distributions ship it,
//! a user may still sample their own processes' user space with perf
//! events — what `perf record -g -- CMD` does. This collector does that
//! for a command flare starts (`-- CMD`), processes of the user's own
//! (`-p`) or threads (`-L`): CPU-clock samples carrying the kernel's
//! callchain (`--unwind fp`, and kernel stacks where paranoid ≤ 1) or the
//! user registers and a copy of the top of the user stack, walked in user
//! space with flare's unwind tables ([`walk`], the same rows and rules as
//! the BPF unwinder). The same events report their targets' mappings,
//! which feed the [`Mappings`] the symbolizer and the walk read, so no
//! privileged tracker is needed. Samples are counted into the same raw
//! samples the BPF collector returns, so the pipeline, printers, files,
//! `--serve` and warnings work unchanged. One thread empties the ring
//! buffers as they fill, another walks what it read ([`reader`]).

mod events;
mod reader;
mod sample;
mod tables;
pub mod walk;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use libbpf_rs::libbpf_sys as sys;

use self::reader::{Reader, Threads};
use self::sample::{Layout, Sample};
use self::tables::Tables;
use crate::collect::Target;
use crate::collect::{
    Collection, Collector, RawFrame, RawSample, RawTask, RawTrace, RuntimeFinds, WarmUp,
};
use crate::error::{Error, Result};
use crate::procmaps::perf::Ring;
use crate::procmaps::{procfs, Mappings};
use crate::profile::{Event, Lost, Meta, UNKNOWN_CPU};
use crate::runtime::perf::PerfRuntime;
use crate::system;
use crate::tools::profile::Config;
use crate::unwind::cache::DiskCache;
use crate::unwind::elf::Machine;
use crate::unwind::Mode;

/// Frames kept per user stack, as in BPF.
const MAX_DEPTH: usize = crate::collect::stacks::MAX_FRAMES;

/// How long the reading thread sleeps when no buffer fills (and how long
/// a stop may take).
const POLL_MS: i32 = 50;

/// The one message every perf-event-mode run starts with.
const NOT_ROOT: &str = "flare: not root: sampling with perf events";

/// The way out when BPF is needed.
const RUN_AS_ROOT: &str = "run flare as root (sudo), or grant it CAP_BPF and CAP_PERFMON";

/// `kernel.perf_event_paranoid` (2, the usual default, when unreadable).
pub fn paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}

/// A running perf-event-mode profiler.
pub struct Session {
    config: Config,
    /// The processes each runtime on found, for the namers.
    finds: Vec<Arc<dyn RuntimeFinds>>,
    reader: Arc<Reader>,
    /// The reading threads, stopped when dropped.
    _threads: Threads,
    note: String,
}

/// A counted stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    pid: u32,
    /// When the process started, as its mapping records tell (0: unknown,
    /// or no user stacks): processes that had the PID in turn are apart.
    start: u64,
    /// 0 unless threads are kept apart.
    tid: u32,
    comm: Arc<str>,
    user: Option<Arc<[RawFrame]>>,
    kernel: Option<Arc<[RawFrame]>>,
}

/// Thread `tid`'s name: from the kernel's records (`comms`), else read
/// now under `proc`. A thread gone before its samples are read (the
/// reader behind on a busy machine, its records lost) takes its
/// process's main thread's name, which it was born with, rather than
/// none: its stacks then stay under their process's name (an arm64
/// guest's run lost 958 samples and put a worker's 292 under
/// `[unknown]`).
fn thread_comm(
    comms: &mut HashMap<u32, Arc<str>>,
    proc: &std::path::Path,
    pid: u32,
    tid: u32,
) -> Arc<str> {
    if let Some(c) = comms.get(&tid) {
        return c.clone();
    }
    let read = |path: std::path::PathBuf| {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| Arc::<str>::from(crate::profile::clean_name(s.trim_end_matches('\n'))))
    };
    let c = read(proc.join(format!("{pid}/task/{tid}/comm")))
        .or_else(|| comms.get(&pid).cloned())
        .or_else(|| read(proc.join(format!("{pid}/comm"))))
        .unwrap_or_else(|| "[unknown]".into());
    comms.insert(tid, c.clone());
    c
}

/// What the samples read so far came to.
struct State {
    layout: Layout,
    mode: Mode,
    user: bool,
    kernel: bool,
    per_thread: bool,
    max_keys: usize,
    /// The frames of the kernel's callchains (`--unwind fp`): one this
    /// long, kernel and user frames together, may have been cut.
    kernel_max_frames: usize,
    /// Each distinct key's place in `counts`.
    index: HashMap<Key, u32>,
    counts: Vec<(Key, u64)>,
    /// With times kept: an event per sample, pointing into `counts`.
    events: Option<Vec<Event>>,
    stacks: std::collections::HashSet<Arc<[RawFrame]>>,
    comms: HashMap<u32, Arc<str>>,
    tables: Tables,
    lost: Lost,
    /// The runtimes whose frames are read (`--python on`, ...), with
    /// user stacks.
    runtimes: Vec<Box<dyn PerfRuntime>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    /// Takes in one record other than a mapping record.
    fn record(&mut self, rec: &[u8], mappings: &Mappings) {
        match sample::kind(rec) {
            Some(sys::PERF_RECORD_SAMPLE) => {
                if let Some(s) = sample::parse_sample(rec, self.layout) {
                    self.add(&s, mappings);
                }
            }
            Some(sys::PERF_RECORD_COMM) => {
                if let Some((tid, comm)) = sample::parse_comm(rec) {
                    self.comms.insert(tid, comm.into());
                }
            }
            Some(sys::PERF_RECORD_FORK) => {
                if let Some((tid, parent)) = sample::parse_fork(rec) {
                    if let Some(c) = self.comms.get(&parent).cloned() {
                        self.comms.insert(tid, c);
                    }
                }
            }
            _ => {}
        }
    }

    fn intern(&mut self, frames: Vec<RawFrame>) -> Arc<[RawFrame]> {
        if let Some(s) = self.stacks.get(frames.as_slice()) {
            return s.clone();
        }
        let s: Arc<[RawFrame]> = frames.into();
        self.stacks.insert(s.clone());
        s
    }

    /// Thread `tid`'s name ([`thread_comm`]).
    fn comm(&mut self, pid: u32, tid: u32) -> Arc<str> {
        thread_comm(&mut self.comms, std::path::Path::new("/proc"), pid, tid)
    }

    /// Counts one sample.
    fn add(&mut self, s: &Sample<'_>, mappings: &Mappings) {
        let start = match self.user {
            true => mappings.process_start(s.pid, s.time),
            false => 0,
        };
        // Whether the user stack was cut at a depth limit.
        let mut cut = false;
        let leaf = s.leaf;
        let user = match (self.user, self.mode, s.regs) {
            (false, ..) => None,
            (true, Mode::Fp, _) => {
                cut = s.user.len() + s.kernel.len() >= self.kernel_max_frames;
                self.lost.capped += u64::from(cut);
                Some(s.user.clone())
            }
            (true, _, None) => Some(Vec::new()),
            (true, mode, Some((pc, sp, bp))) => {
                let space = mappings.space(s.pid, Some(s.time));
                let regs = walk::Regs { pc, sp, bp };
                let tables = &mut self.tables;
                let mut row = |addr| tables.row(space.as_ref()?, addr);
                let first = walk::Start {
                    machine: Machine::HOST,
                    regs,
                    lr: leaf.lr,
                };
                let runtimes = &mut self.runtimes;
                let mut walk_over = |data: &[u8]| {
                    let stack = walk::StackCopy::new(sp, data);
                    // The first runtime that steps this process's frames.
                    let stepper = runtimes
                        .iter_mut()
                        .find_map(|r| r.stepper(s.pid, start, leaf, mappings));
                    match stepper {
                        Some(mut stepper) => {
                            let words = |a| stack.read(a);
                            walk::walk_with(mode, first, &stack, MAX_DEPTH, &mut row, |r, ra| {
                                stepper.step(&words, r, ra)
                            })
                        }
                        None => {
                            walk::walk_with(mode, first, &stack, MAX_DEPTH, &mut row, |_, _| None)
                        }
                    }
                };
                let w = walk_over(s.stack);
                cut = w.cut;
                Some(w.pcs)
            }
        };
        // A walked stack may hold runtime frames among its addresses.
        let runtimes = &mut self.runtimes;
        let user = user.map(|pcs| {
            let spliced = (!pcs.is_empty())
                .then(|| {
                    runtimes
                        .iter_mut()
                        .find_map(|r| r.splice(s.pid, start, s.tid, s.time, &pcs, leaf, mappings))
                })
                .flatten();
            spliced.unwrap_or_else(|| crate::collect::stacks::decode(&pcs))
        });
        let user = user.map(|mut frames| {
            if cut {
                frames.push(crate::collect::stacks::truncated(None));
            }
            frames
        });
        let user = user.map(|u| self.intern(u));
        let kernel = self.kernel.then(|| self.intern(addrs(s.kernel.clone())));
        let key = Key {
            pid: s.pid,
            start,
            tid: if self.per_thread { s.tid } else { 0 },
            comm: self.comm(s.pid, s.tid),
            user,
            kernel,
        };
        let tid = s.tid;
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None if self.counts.len() >= self.max_keys => {
                self.lost.hash_full += 1;
                return;
            }
            None => {
                let i = self.counts.len() as u32;
                self.index.insert(key.clone(), i);
                self.counts.push((key, 0));
                i
            }
        };
        self.counts[i as usize].1 += 1;
        if let Some(events) = &mut self.events {
            events.push(Event {
                time_ns: s.time,
                value: 1,
                sample: i,
                tid,
                cpu: UNKNOWN_CPU,
            });
        }
    }
}

fn addrs(pcs: Vec<u64>) -> Vec<RawFrame> {
    pcs.into_iter().map(RawFrame::Addr).collect()
}

/// The error for an event the kernel refused on thread `tid` of `pid`.
fn refused(pid: u32, paranoid: i32) -> Error {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if procfs::effective_uid(pid).is_some_and(|uid| uid != me) {
        return Error::Unsupported(format!(
            "cannot sample PID {pid}: it belongs to another user, and without root flare samples only your own processes (run flare as root with sudo, or grant it CAP_PERFMON and CAP_SYS_PTRACE; lowering kernel.perf_event_paranoid does not open other users' processes)"
        ));
    }
    if paranoid >= 3 {
        return Error::Unsupported(format!(
            "cannot sample PID {pid}: perf events are off for unprivileged users here (kernel.perf_event_paranoid = {paranoid}): run flare as root, grant it CAP_PERFMON, or set kernel.perf_event_paranoid to 2 (user stacks) or 1 (kernel stacks too)"
        ));
    }
    Error::Unsupported(format!(
        "cannot sample PID {pid}: permission denied (run flare as root, grant it CAP_PERFMON, or lower kernel.perf_event_paranoid, now {paranoid})"
    ))
}

impl Session {
    /// Holds back the walking of samples for `pause`, as a slow walk
    /// would (tables built under emulation): for tests that nothing is
    /// lost meanwhile. Returns once the walk is held.
    pub fn pause_walking(&self, pause: std::time::Duration) {
        self.reader.pause_walking(pause);
    }

    /// Checks that perf events can do what `config` asks, opens them and
    /// starts the reading threads.
    pub fn start(mut config: Config) -> Result<Session> {
        let paranoid = paranoid();
        for (set, option) in [
            (config.cgroup_map.is_some(), "--cgroupmap"),
            (config.mntns_map.is_some(), "--mntnsmap"),
        ] {
            if set {
                return Err(Error::Unsupported(format!(
                    "{option} filters through a BPF map, which needs BPF: {RUN_AS_ROOT}"
                )));
            }
        }
        let kernel_allowed = paranoid <= 1;
        if !config.recording.stacks.user && !kernel_allowed {
            return Err(Error::Unsupported(format!(
                "-K (kernel stacks only) without root needs kernel.perf_event_paranoid <= 1 (now {paranoid}; sudo sysctl kernel.perf_event_paranoid=1), or {RUN_AS_ROOT}"
            )));
        }
        // (pid, tid) of every thread to open events on.
        let mut threads: Vec<(u32, u32)> = Vec::new();
        let (inherit, launched) = match &config.target {
            Target::All => return Err(Error::Unsupported(
                "without root, flare profile samples only a command it starts (flare profile -- CMD) or your own processes (-p PID): sampling all threads needs root, or the capabilities CAP_BPF and CAP_PERFMON (run it with sudo)".into()
            )),
            Target::Pids(pids) if config.follow_children => {
                threads.extend(pids.iter().map(|&p| (p, p)));
                (true, true)
            }
            Target::Pids(pids) => {
                for &pid in pids {
                    system::check_process(pid)?;
                    threads.extend(system::threads(pid)?.into_iter().map(|t| (pid, t)));
                }
                hold_after_listing();
                (true, false)
            }
            Target::Tids(tids) => {
                for &tid in tids {
                    system::check_thread(tid)?;
                    threads.push((tid, tid));
                }
                (false, false)
            }
        };
        let cpus = match config.cpu {
            Some(c) => {
                system::check_cpu(c)?;
                vec![c]
            }
            None => system::online_cpus()?.0,
        };
        let kernel = config.recording.stacks.kernel && kernel_allowed;
        let wanted_kernel = config.recording.stacks.kernel;
        config.recording.stacks.kernel = kernel;
        let user = config.recording.stacks.user;
        let mode = match (
            user,
            cfg!(any(target_arch = "x86_64", target_arch = "aarch64")),
        ) {
            (true, true) => config.recording.unwind,
            _ => Mode::Fp,
        };
        let layout = Layout {
            callchain: kernel || (user && mode == Mode::Fp),
            user_stack: user && mode != Mode::Fp,
        };
        // Each runtime on, as perf-event mode reads it.
        let runtimes: Vec<Box<dyn PerfRuntime>> = crate::runtime::ALL
            .iter()
            .filter(|r| user && config.recording.runtimes.on(r.kind))
            .filter_map(|r| (r.perf)(mode != Mode::Fp))
            .collect();
        let mappings = Mappings::fed();
        // A JVM's Java frames are large: its samples copy all the stack
        // perf events allow. (A launched command is not yet one when the
        // events open: it copies the usual bytes.)
        let mut stack_bytes = events::STACK_BYTES;
        if !launched {
            let mut pids: Vec<u32> = threads.iter().map(|&(p, _)| p).collect();
            pids.dedup();
            mappings.snapshot(&pids);
            let whole = |&p: &u32| runtimes.iter().any(|r| r.wants_whole_stack(&mappings, p));
            if pids.iter().any(whole) {
                stack_bytes = events::JVM_STACK_BYTES;
            }
        }
        system::raise_nofile();
        let tids: Vec<u32> = threads.iter().map(|&(_, t)| t).collect();
        let pid_of: HashMap<u32, u32> = threads.iter().map(|&(p, t)| (t, p)).collect();
        let plan = events::Plan {
            sampling: config.sampling,
            layout,
            kernel,
            tids: &tids,
            inherit,
            cpus: &cpus,
            on_exec: launched,
            // Runtime frames are read as samples arrive.
            wake_each: !runtimes.is_empty(),
            stack_bytes,
        };
        let refused = |tid, _| refused(pid_of.get(&tid).copied().unwrap_or(tid), paranoid);
        let mut events = events::open(&plan, &refused)?;
        if let (Target::Pids(pids), false) = (&config.target, launched) {
            let mut opened = tids.iter().copied().collect();
            events::cover_late_threads(&mut events, &plan, pids, &mut opened, &refused)?;
        }
        let fds: Vec<i32> = events.rings.iter().map(Ring::fd).collect();
        let finds = runtimes.iter().map(|r| r.finds()).collect();
        let reader = Arc::new(Reader::new(
            events.rings,
            events.redirected,
            State {
                layout,
                mode,
                user,
                kernel,
                per_thread: config.per_thread || matches!(config.target, Target::Tids(_)),
                max_keys: config.recording.hash_storage_size as usize,
                kernel_max_frames: crate::collect::stacks::kernel_max_frames() as usize,
                index: HashMap::new(),
                counts: Vec::new(),
                events: config.recording.timed.then(Vec::new),
                stacks: Default::default(),
                comms: HashMap::new(),
                tables: Tables::new(DiskCache::from_env()),
                lost: Lost::default(),
                runtimes,
            },
            mappings,
        ));
        let threads = Threads::start(&reader, fds)?;
        let what = match (user, kernel, wanted_kernel) {
            (_, false, true) => "user stacks only, time in the kernel unsampled; kernel stacks need root, CAP_PERFMON or kernel.perf_event_paranoid <= 1",
            (true, true, _) => "user and kernel stacks",
            (false, true, _) => "kernel stacks",
            (_, false, false) => "user stacks",
        };
        Ok(Session {
            config,
            finds,
            reader,
            _threads: threads,
            note: format!("{NOT_ROOT} ({what})"),
        })
    }
}

impl Collector for Session {
    fn meta(&self) -> Meta {
        crate::tools::profile::meta(&self.config)
    }

    fn header(&self) -> String {
        crate::tools::profile::header(&self.config)
    }

    fn notes(&self) -> Vec<String> {
        vec![self.note.clone()]
    }

    fn warm_up(&self) -> WarmUp {
        WarmUp {
            kernel: self.config.recording.stacks.kernel,
            pids: match &self.config.target {
                Target::Pids(p) => p.clone(),
                _ => Vec::new(),
            },
        }
    }

    fn mappings(&self) -> Option<Mappings> {
        Some(self.reader.mappings.clone())
    }

    fn namers(&self) -> crate::collect::Namers {
        self.finds.iter().flat_map(|f| f.namers()).collect()
    }

    fn has_runtime_frames(&self) -> bool {
        self.finds.iter().any(|f| f.any_process())
    }

    fn collect(&mut self, clear: bool) -> Result<Collection> {
        self.reader.drain();
        let mut state = lock(&self.reader.state);
        let trace = |t: &Option<Arc<[RawFrame]>>| match t {
            Some(a) => RawTrace::Frames(a.clone()),
            None => RawTrace::NotCollected,
        };
        let samples = state
            .counts
            .iter()
            .map(|&(ref k, n)| RawSample {
                task: RawTask {
                    pid: Some(k.pid),
                    start: k.start,
                    tid: (k.tid != 0).then_some(k.tid),
                    comm: k.comm.to_string(),
                    user: trace(&k.user),
                    kernel: trace(&k.kernel),
                },
                waker: None,
                value: n,
            })
            .collect();
        let (lost, events) = if clear {
            state.counts.clear();
            state.index.clear();
            let events = state.events.as_mut().map(std::mem::take);
            (std::mem::take(&mut state.lost), events)
        } else {
            (state.lost, state.events.clone())
        };
        Ok(Collection {
            samples,
            lost,
            events,
        })
    }
}

/// Tests only: with `FLARE_TEST_HOLD_AFTER_LISTING=FILE`, creates FILE
/// once the target's threads are listed and waits (a minute at most)
/// until it is removed, so that a test can start threads between the
/// listing and the opening of the events.
fn hold_after_listing() {
    let Some(file) = std::env::var_os("FLARE_TEST_HOLD_AFTER_LISTING") else {
        return;
    };
    let file = std::path::PathBuf::from(file);
    if std::fs::write(&file, b"listed\n").is_err() {
        return;
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while file.exists() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[cfg(test)]
mod comm_tests {
    use super::*;

    #[test]
    fn a_thread_gone_takes_its_process_name() {
        let proc = tempfile::tempdir().expect("temp dir");
        let dir = proc.path().join("7/task/8");
        std::fs::create_dir_all(&dir).expect("dirs");
        std::fs::write(proc.path().join("7/comm"), "app\n").expect("comm");
        std::fs::write(dir.join("comm"), "worker 1\n").expect("comm");
        let mut comms = HashMap::new();
        assert_eq!(&*thread_comm(&mut comms, proc.path(), 7, 8), "worker 1");
        assert_eq!(&*thread_comm(&mut comms, proc.path(), 7, 9), "app", "gone");
        assert_eq!(
            &*thread_comm(&mut comms, proc.path(), 5, 6),
            "[unknown]",
            "process gone too"
        );
        comms.insert(11, Arc::from("named"));
        assert_eq!(
            &*thread_comm(&mut comms, proc.path(), 11, 12),
            "named",
            "the main thread's recorded name first"
        );
    }
}
