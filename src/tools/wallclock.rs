//! `flare wallclock`: where each thread's time goes, on the CPU and off
//! it, in one profile whose values are time.
//!
//! [`Session::start`] loads `wallclock.bpf.c`, opens CPU-clock perf events
//! (per CPU, or per target thread) for the time on the CPU and attaches to
//! `sched_switch` for the time off it. Each read hands over raw samples in
//! microseconds of wall time; a blocked thread's stacks end in a synthetic
//! leaf frame naming the state it waits in (`[off-cpu: sleeping]`), and
//! every sample carries its CPU time as the extra value `cpu`
//! (nanoseconds), so pprof gets `wall` and `cpu` sample types.
//!
//! The state is a label frame ([`RawFrame::Label`]) at the leaf of the
//! stack, named as it is by the symbolizer; tidy drops the tracing frames
//! the kernel stack was taken in, below it.

use std::hash::BuildHasher;
use std::mem::MaybeUninit;
use std::time::Duration;

use libbpf_rs::skel::OpenSkel;
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use crate::bpf::loader;
use crate::bpf::perf::Sampling;
use crate::bpf::skel::wallclock::{types, WallclockSkel};
use crate::bpf::{comm_str, probe, PlainKey};
use crate::collect::timed::{self, TimedRing};
use crate::collect::{
    Collection, Collector, Periodic, RawFrame, RawSample, RawTask, RawTrace, Recording, Target,
    WarmUp,
};
use crate::error::{Error, Result};
use crate::procmaps::Mappings;
use crate::profile::{monotonic_ns, ExtraValue, FrameKind, Kind, Meta, Sample, Trace};
use crate::tools::offcpu::is_tracing_frame;
use crate::tools::start::{self, Plan, Watch};
use crate::unwind::Unwinder;

/// The `state` of time spent on the CPU (`WALL_ON_CPU` in wallclock.h).
const ON_CPU: u32 = u32::MAX;

/// The names of the states a thread waits in, as its leaf frame shows them.
pub const STATES: [&str; 8] = [
    "preempted",
    "sleeping",
    "disk",
    "idle",
    "stopped",
    "traced",
    "parked",
    "other",
];

/// The index in [`STATES`] of kernel task state `state` at switch-out.
pub fn state_index(state: u32) -> usize {
    const INTERRUPTIBLE: u32 = 0x1;
    const UNINTERRUPTIBLE: u32 = 0x2;
    const STOPPED: u32 = 0x4;
    const TRACED: u32 = 0x8;
    const PARKED: u32 = 0x40;
    const NOLOAD: u32 = 0x400;
    match state {
        0 => 0,
        s if s & UNINTERRUPTIBLE != 0 && s & NOLOAD != 0 => 3,
        s if s & INTERRUPTIBLE != 0 => 1,
        s if s & UNINTERRUPTIBLE != 0 => 2,
        s if s & STOPPED != 0 => 4,
        s if s & TRACED != 0 => 5,
        s if s & PARKED != 0 => 6,
        _ => 7,
    }
}

/// The synthetic leaf frame of time off the CPU in state `STATES[index]`.
pub fn state_frame_name(index: usize) -> String {
    format!("[off-cpu: {}]", STATES[index.min(STATES.len() - 1)])
}

/// Everything `flare wallclock` was asked to do.
#[derive(Clone, Debug)]
pub struct Config {
    pub target: Target,
    /// On-CPU samples per second.
    pub frequency: u64,
    /// Count only time off the CPU in this state (bcc's `--state`: 0 is
    /// preempted, other values a bitmask).
    pub state: Option<u64>,
    /// Blocked periods shorter than this (microseconds) are dropped.
    pub min_us: u64,
    /// Blocked periods shorter than this (microseconds) are sampled, as
    /// [`crate::tools::offcpu::Config::sample_us`] says; 0: none are.
    pub sample_us: u64,
    /// Threads that can be blocked at once and still be tracked.
    pub blocked_storage_size: u32,
    /// Time off the CPU of user threads only: kernel threads wait for
    /// work most of their lives (the agent, as its off-CPU profile).
    pub user_blocked_only: bool,
    /// `None`: until stopped.
    pub duration: Option<Duration>,
    /// With [`Target::Pids`] of one launched command: its children too.
    pub follow_children: bool,
    /// Which stacks, walked how, into maps of what size.
    pub recording: Recording,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            target: Target::All,
            frequency: 49,
            state: None,
            min_us: 0,
            sample_us: 0,
            blocked_storage_size: crate::defaults::BLOCKED_STORAGE_SIZE,
            user_blocked_only: false,
            duration: None,
            follow_children: false,
            recording: Recording::default(),
        }
    }
}

fn target_words(t: &Target) -> String {
    let list = |v: &[u32]| {
        let items: Vec<String> = v.iter().map(u32::to_string).collect();
        format!("[{}]", items.join(", "))
    };
    match t {
        Target::All => "all threads".into(),
        Target::Pids(p) => format!("PID {}", list(p)),
        Target::Tids(t) => format!("TID {}", list(t)),
    }
}

/// The header line for these options.
pub fn header(c: &Config) -> String {
    let stacks = match (c.recording.stacks.user, c.recording.stacks.kernel) {
        (true, false) => "user",
        (false, true) => "kernel",
        _ => "user + kernel",
    };
    let mut line = format!(
        "Sampling on-CPU at {} Hertz and tracing off-CPU time of {} by {stacks} stack",
        c.frequency,
        target_words(&c.target)
    );
    match c.duration {
        Some(d) => line.push_str(&format!(" for {} secs.", d.as_secs())),
        None => line.push_str("... Hit Ctrl-C to end."),
    }
    line
}

// SAFETY: wallclock_key is the skeleton's copy of a C struct of integers
// and a char array, valid for any bit pattern.
unsafe impl PlainKey for types::wallclock_key {}

/// A loaded and attached wall-clock profiler.
pub struct Session<'obj> {
    /// Drains the timed ring (with [`Config::timed`]); dropped before the
    /// skeleton that owns it.
    timed: Option<TimedRing<types::wallclock_key>>,
    skel: WallclockSkel<'obj>,
    config: Config,
    /// Links of the perf events and the scheduler tracepoint; dropping
    /// them detaches.
    _links: Vec<Link>,
    periodic: Periodic,
    raw_tp: bool,
    /// Feeds the BPF unwinder (not with --unwind fp).
    unwinder: Option<Unwinder>,
    /// Draws which blocked periods counted by user space are kept.
    random: std::hash::RandomState,
}

/// What start-up needs to know of these options.
fn plan(c: &Config) -> Plan<'_> {
    Plan {
        watch: Watch::from(&c.target),
        cpu: None,
        launched: c.follow_children,
        uprobes: None,
        filtered: false,
        recording: c.recording,
    }
}

impl<'obj> Session<'obj> {
    /// Validates the config, loads the BPF program and attaches it.
    pub fn start(config: Config, object: &'obj mut MaybeUninit<OpenObject>) -> Result<Self> {
        let plan = plan(&config);
        plan.prepare()?;
        crate::tools::offcpu::check_sampling(config.sample_us)?;
        if config.frequency == 0 || config.frequency > 1_000_000_000 {
            return Err(Error::Unsupported(
                "-F must be between 1 and 1000000000 Hertz".into(),
            ));
        }
        let raw_tp = !probe::tp_btf("sched_switch");
        if raw_tp && !probe::raw_tp() {
            return Err(Error::Unsupported(
                "this kernel can attach BPF programs to no scheduler tracepoint (tp_btf or raw_tp): wallclock needs Linux 4.17 or later".into(),
            ));
        }
        let load_err = loader::load_error("wallclock");
        let (mut open, mode) = plan.open::<WallclockSkel>(object, |ro| {
            ro.filter_pid = matches!(config.target, Target::Pids(_));
            ro.filter_tid = matches!(config.target, Target::Tids(_));
            ro.filter_state = config.state.is_some();
            ro.state = config.state.unwrap_or(0);
            ro.min_ns = config.min_us.saturating_mul(1000);
            ro.period_ns = 1_000_000_000 / config.frequency;
            ro.sample_ns = config.sample_us.saturating_mul(1000);
            ro.preempt_every = crate::tools::offcpu::preempt_every(config.sample_us);
            ro.user_blocked_only = config.user_blocked_only;
        })?;
        open.progs.flare_wall_switch_btf.set_autoload(!raw_tp);
        open.progs.flare_wall_switch_raw.set_autoload(raw_tp);
        open.maps
            .start
            .set_max_entries(config.blocked_storage_size)
            .map_err(load_err)?;
        let skel = open.load().map_err(load_err)?;
        let periodic = Periodic::forgetting(&skel.maps.stack_news)?;
        let unwinder = plan.start_unwinder(&skel, mode)?;
        let timed = config
            .recording
            .timed
            .then(|| TimedRing::start(&skel.maps.timed_events))
            .transpose()?;
        let mut session = Session {
            timed,
            skel,
            config,
            _links: Vec::new(),
            periodic,
            raw_tp,
            unwinder,
            random: std::hash::RandomState::new(),
        };
        session.attach()?;
        Ok(session)
    }

    fn attach(&mut self) -> Result<()> {
        let attach_err = |what: &str| {
            let what = what.to_string();
            move |source| Error::Attach { what, source }
        };
        let link = if self.raw_tp {
            self.skel
                .progs
                .flare_wall_switch_raw
                .attach_raw_tracepoint("sched_switch")
                .map_err(attach_err("raw tracepoint sched_switch"))?
        } else {
            self.skel
                .progs
                .flare_wall_switch_btf
                .attach()
                .map_err(attach_err("tp_btf sched_switch"))?
        };
        self._links.push(link);
        let prog = &self.skel.progs.flare_wall_sample;
        let sampling = Sampling::Frequency(self.config.frequency);
        let links = start::sample(prog, &plan(&self.config), sampling, false, "wallclock")?;
        self._links.extend(links);
        Ok(())
    }

    /// Threads blocked right now, with the time since they blocked (or
    /// since the last clearing read), which no switch has counted yet.
    /// With `clear`, their start is moved to now.
    fn still_blocked(&self, clear: bool) -> Vec<(types::wallclock_key, u64, u64)> {
        let now = monotonic_ns();
        let start = &self.skel.maps.start;
        let size = std::mem::size_of::<types::wallclock_start>();
        let mut out = Vec::new();
        // A preemption tracked one time in this many stands for them
        // all, as the kernel counts it at the switch back.
        let preempted = u64::from(crate::tools::offcpu::preempt_every(self.config.sample_us));
        let every = self.config.sample_us.saturating_mul(1000);
        // In batches: one syscall for all, where a lookup per thread was
        // two (the agent reads every second, beside a JVM's hundreds of
        // blocked threads).
        let entries: Vec<(Vec<u8>, Vec<u8>)> =
            match start.lookup_batch(4096, MapFlags::ANY, MapFlags::ANY) {
                Ok(batch) => batch.collect(),
                Err(_) => start
                    .keys()
                    .filter_map(|k| Some((k.clone(), start.lookup(&k, MapFlags::ANY).ok()??)))
                    .collect(),
            };
        for (key, mut value) in entries {
            if value.len() < size {
                continue;
            }
            // SAFETY: the value holds a wallclock_start (checked size), a
            // C struct of integers valid for any bit pattern; read
            // unaligned from the byte buffer.
            let s: types::wallclock_start =
                unsafe { std::ptr::read_unaligned(value.as_ptr().cast()) };
            if s.ts >= now {
                continue;
            }
            let scale = if s.key.state == 0 { preempted } else { 1 };
            let ns = (now - s.ts).saturating_mul(scale);
            // Sampled as the kernel samples the periods it counts.
            let random = self.random.hash_one(now ^ s.ts ^ u64::from(key_tid(&key))) as u32;
            if let Some(ns) = crate::tools::offcpu::sampled(ns, every, random) {
                out.push((s.key, ns, s.ts));
            }
            if clear {
                value[..8].copy_from_slice(&now.to_ne_bytes());
                // Only if still blocked: a thread that ran meanwhile was
                // counted by the kernel.
                let _ = start.update(&key, &value, MapFlags::EXIST);
            }
        }
        out
    }
}

/// The thread id a `start` map key holds.
fn key_tid(key: &[u8]) -> u32 {
    key.get(..4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_ne_bytes)
}

/// `trace` with the frame of state `STATES[index]` as its leaf.
fn with_state(trace: RawTrace, index: usize) -> RawTrace {
    let mut frames = vec![RawFrame::label(state_frame_name(index))];
    frames.extend_from_slice(trace.frames());
    RawTrace::Frames(frames.into())
}

/// True when `trace` begins with the frame of a state off the CPU.
fn leads_with_state(trace: &Trace) -> bool {
    trace
        .frames()
        .first()
        .is_some_and(|f| f.kind == FrameKind::Label && f.name.starts_with("[off-cpu: "))
}

/// Whether `sample` of a wall-clock profile is time off the CPU.
pub fn is_off_cpu(sample: &Sample) -> bool {
    leads_with_state(&sample.task.kernel) || leads_with_state(&sample.task.user)
}

/// If `sample` of a wall-clock profile is time off the CPU, the sample
/// without the state's frame, as an off-CPU profile (`offcputime`) has
/// it.
pub fn off_cpu_part(sample: &Sample) -> Option<Sample> {
    if !is_off_cpu(sample) {
        return None;
    }
    let kernel = leads_with_state(&sample.task.kernel);
    let mut s = sample.clone();
    let trace = match kernel {
        true => &mut s.task.kernel,
        false => &mut s.task.user,
    };
    if let Trace::Frames(frames) = trace {
        *frames = frames.get(1..).unwrap_or_default().into();
    }
    s.extra = Box::default();
    Some(s)
}

/// Drops the tracing frames below a state's frame at the leaf of `trace`
/// (the kernel stack was taken inside the sched_switch tracepoint); true
/// when there is a state's frame.
fn tidy_state(trace: &mut Trace) -> bool {
    if !leads_with_state(trace) {
        return false;
    }
    trace.edit_frames(|frames| {
        frames.retain(|f| !is_tracing_frame(&f.name) && !f.name.starts_with("__traceiter_"))
    });
    true
}

impl Collector for Session<'_> {
    fn share_mappings(&self, mappings: &Mappings) {
        start::share_mappings(self.unwinder.as_ref(), mappings);
    }

    fn namers(&self) -> crate::collect::Namers {
        start::namers(self.unwinder.as_ref())
    }

    fn has_runtime_frames(&self) -> bool {
        start::has_runtime_frames(self.unwinder.as_ref())
    }

    fn meta(&self) -> Meta {
        let mut meta = Meta::new(Kind::Wall, "cpu-clock + sched_switch");
        meta.target = target_words(&self.config.target);
        meta.extra_values.push(ExtraValue {
            name: "cpu".into(),
            unit: "nanoseconds".into(),
        });
        meta
    }

    fn header(&self) -> String {
        header(&self.config)
    }

    fn notes(&self) -> Vec<String> {
        if self.raw_tp {
            vec!["flare: BTF-typed tracepoints are not available here; attached with raw_tp".into()]
        } else {
            Vec::new()
        }
    }

    fn warm_up(&self) -> WarmUp {
        plan(&self.config).warm_up()
    }

    /// Names the states of off-CPU samples and sets every sample's CPU
    /// time (idempotent: the pipeline may tidy a sample twice).
    fn tidy(&self, samples: &mut [Sample]) {
        for s in samples {
            let off = tidy_state(&mut s.task.kernel) || tidy_state(&mut s.task.user);
            let cpu_ns = if off { 0 } else { s.value.saturating_mul(1000) };
            s.extra = vec![cpu_ns].into();
        }
    }

    /// Reads the time counted per thread and stack (microseconds), and
    /// the time of threads blocked right now.
    fn collect(&mut self, clear: bool) -> Result<Collection> {
        let mut read = timed::read(self.timed.as_ref(), &self.skel.maps.counts, clear)?;
        for (key, ns, since) in self.still_blocked(clear) {
            read.push(key, ns, since, key.tid);
        }
        let read = read.scale_down(1000);
        let want = self.config.recording.stacks;
        let mut stacks = self.periodic.reader(crate::collect::stacks::Storage {
            stacks: &self.skel.maps.stacks,
            tails: &self.skel.maps.stack_tails,
        });
        let mut samples = Vec::with_capacity(read.keys.len());
        for (k, value) in read.keys {
            let mut user = stacks.read(k.user_stack_id, want.user);
            let mut kernel = stacks.read(k.kernel_stack_id, want.kernel);
            if k.state != ON_CPU {
                let state = state_index(k.state);
                if want.kernel {
                    kernel = with_state(kernel, state);
                } else {
                    user = with_state(user, state);
                }
            }
            samples.push(RawSample {
                task: RawTask {
                    pid: Some(k.pid),
                    start: k.start,
                    tid: Some(k.tid),
                    comm: comm_str(&k.comm),
                    user,
                    kernel,
                },
                waker: None,
                value,
            });
        }
        let stats = self.skel.maps.bss_data.as_deref().map(|b| b.stats);
        let hash_full = stats.map_or(0, |s| s.hash_full);
        let start_full = stats.map_or(0, |s| s.start_full);
        let ring_full = stats.map_or(0, |s| s.ring_full);
        let mut lost = stacks.lost(self.periodic.delta("hash_full", hash_full, clear));
        lost.untracked = self.periodic.delta("start_full", start_full, clear);
        lost.samples = self.periodic.delta("ring_full", ring_full, clear);
        self.periodic.done(stacks, clear);
        Ok(Collection {
            samples,
            lost,
            events: read.events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Frame;

    #[test]
    fn states_are_named_as_the_kernel_keeps_them() {
        assert_eq!(STATES[state_index(0)], "preempted");
        assert_eq!(STATES[state_index(1)], "sleeping");
        assert_eq!(STATES[state_index(2)], "disk");
        assert_eq!(STATES[state_index(0x402)], "idle");
        assert_eq!(STATES[state_index(0x40)], "parked");
        assert_eq!(STATES[state_index(0x1000)], "other");
    }

    #[test]
    fn a_state_label_leads_and_tracing_frames_go() {
        let raw = with_state(RawTrace::addrs([0xffff_ffff_8100_0000]), 2);
        assert_eq!(
            raw.frames()[0],
            RawFrame::label("[off-cpu: disk]"),
            "the state is the leaf"
        );
        let mut trace = Trace::of(vec![
            Frame::named("[off-cpu: disk]", FrameKind::Label),
            Frame::named("bpf_trace_run4", FrameKind::Kernel),
            Frame::named("schedule", FrameKind::Kernel),
        ]);
        assert!(tidy_state(&mut trace));
        assert!(tidy_state(&mut trace), "tidying twice changes nothing");
        let names: Vec<&str> = trace.frames().iter().map(|f| &*f.name).collect();
        assert_eq!(names, ["[off-cpu: disk]", "schedule"]);
        let mut plain = Trace::of(vec![Frame::named("main", FrameKind::Native)]);
        assert!(!tidy_state(&mut plain));
        assert_eq!(plain.frames().len(), 1);
    }
}
