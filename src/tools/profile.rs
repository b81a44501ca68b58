//! `flare profile`: timed sampling of stack traces, counted in the kernel.
//!
//! [`Config`] is the plain form of the command line. [`Session::start`]
//! loads `profile.bpf.c`, opens the perf events and attaches; [`Session::
//! collect`] reads what the kernel counted (and can clear it, for periodic
//! views). [`header`] is bcc's first line for the chosen options.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::time::Duration;

use libbpf_rs::skel::OpenSkel;
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, MapType, OpenObject};

use crate::bpf::loader;
use crate::bpf::perf::Sampling;
use crate::bpf::skel::profile::{types, ProfileSkel};
use crate::bpf::{comm_str, PlainKey};
use crate::collect::timed::{self, TimedRing};
use crate::collect::{
    Collection, Collector, Periodic, RawSample, RawTask, Recording, Target, WarmUp,
};
use crate::error::{Error, Result};
use crate::procmaps::Mappings;
use crate::profile::{Kind, Meta};
use crate::tools::start::{self, Plan, Watch};
use crate::unwind::Unwinder;

/// Everything `flare profile` was asked to do.
#[derive(Clone, Debug)]
pub struct Config {
    pub target: Target,
    pub sampling: Sampling,
    pub include_idle: bool,
    pub cpu: Option<u32>,
    pub cgroup_map: Option<PathBuf>,
    pub mntns_map: Option<PathBuf>,
    /// Keep threads of one process apart (implied by [`Target::Tids`]).
    pub per_thread: bool,
    /// `None`: until stopped.
    pub duration: Option<Duration>,
    /// With [`Target::Pids`] of one launched command (`-- CMD`): the
    /// processes it starts are profiled too.
    pub follow_children: bool,
    /// Which stacks, walked how, into maps of what size.
    pub recording: Recording,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            target: Target::All,
            sampling: Sampling::Frequency(crate::defaults::FREQUENCY),
            include_idle: false,
            cpu: None,
            cgroup_map: None,
            mntns_map: None,
            per_thread: false,
            duration: None,
            follow_children: false,
            recording: Recording::default(),
        }
    }
}

/// bcc's header line for these options (without the trailing newline).
pub fn header(c: &Config) -> String {
    let sample = match c.sampling {
        Sampling::Frequency(hz) => format!("{hz} Hertz"),
        Sampling::Period(n) => format!("every {n} events"),
    };
    let who = match &c.target {
        Target::All => "all threads".to_string(),
        Target::Pids(p) => format!("PID {}", py_list(p)),
        Target::Tids(t) => format!("TID {}", py_list(t)),
    };
    let stacks = match (c.recording.stacks.user, c.recording.stacks.kernel) {
        (true, false) => "user",
        (false, true) => "kernel",
        _ => "user + kernel",
    };
    let mut line = format!("Sampling at {sample} of {who} by {stacks} stack");
    if let Some(cpu) = c.cpu {
        line.push_str(&format!(" on CPU#{cpu}"));
    }
    match c.duration {
        Some(d) => line.push_str(&format!(" for {} secs.", d.as_secs())),
        None => line.push_str("... Hit Ctrl-C to end."),
    }
    line
}

/// What a profile of these options measures (either collector's).
pub(crate) fn meta(c: &Config) -> Meta {
    let mut meta = Meta::new(Kind::Cpu, "cpu-clock");
    meta.period_ns = match c.sampling {
        Sampling::Frequency(hz) if hz > 0 => Some(1_000_000_000 / hz),
        Sampling::Period(n) => Some(n),
        _ => None,
    };
    meta.target = match &c.target {
        Target::All => "all threads".into(),
        Target::Pids(p) => format!("PID {}", py_list(p)),
        Target::Tids(t) => format!("TID {}", py_list(t)),
    };
    meta
}

/// A list as Python prints it (`[1, 2]`), which is what bcc's header shows.
fn py_list(v: &[u32]) -> String {
    let items: Vec<String> = v.iter().map(u32::to_string).collect();
    format!("[{}]", items.join(", "))
}

// SAFETY: profile_key is the skeleton's copy of a C struct of integers and
// a char array, valid for any bit pattern.
unsafe impl PlainKey for types::profile_key {}

/// A loaded and attached profiler.
pub struct Session<'obj> {
    /// Drains the timed samples' ring (with [`Config::timed`]); dropped
    /// before the skeleton that owns the ring.
    timed: Option<TimedRing<types::profile_key>>,
    skel: ProfileSkel<'obj>,
    config: Config,
    /// Links attaching the program to each perf event; dropping them
    /// detaches and closes the events.
    _links: Vec<Link>,
    /// State kept between clearing reads.
    periodic: Periodic,
    /// Feeds the BPF unwinder (not with --unwind fp).
    unwinder: Option<Unwinder>,
}

/// Opens the user's pinned map at `path`, checking it can serve as a
/// filter set keyed by a 64-bit id.
fn pinned_filter_map(option: &'static str, path: &PathBuf) -> Result<MapHandle> {
    let err = |reason: String| Error::PinnedMap {
        option,
        path: path.clone(),
        reason,
    };
    if !path.exists() {
        return Err(err("no such file (pin a BPF hash map there first, e.g. with bpftool map create ... pinned PATH)".into()));
    }
    let map = MapHandle::from_pinned_path(path)
        .map_err(|e| err(format!("not a pinned BPF map ({e})")))?;
    if !matches!(map.map_type(), MapType::Hash) || map.key_size() != 8 {
        return Err(err(format!(
            "must be a BPF hash map with 8-byte keys (found a {:?} map with {}-byte keys)",
            map.map_type(),
            map.key_size()
        )));
    }
    Ok(map)
}

/// What start-up needs to know of these options.
fn plan(c: &Config) -> Plan<'_> {
    Plan {
        watch: Watch::from(&c.target),
        cpu: c.cpu,
        launched: c.follow_children,
        uprobes: None,
        recording: c.recording,
        filtered: c.cgroup_map.is_some() || c.mntns_map.is_some(),
    }
}

impl<'obj> Session<'obj> {
    /// Validates the config against the system, loads the BPF program and
    /// starts sampling.
    pub fn start(config: Config, object: &'obj mut MaybeUninit<OpenObject>) -> Result<Self> {
        let plan = plan(&config);
        plan.prepare()?;
        let cgroup = config
            .cgroup_map
            .as_ref()
            .map(|p| pinned_filter_map("--cgroupmap", p))
            .transpose()?;
        let mntns = config
            .mntns_map
            .as_ref()
            .map(|p| pinned_filter_map("--mntnsmap", p))
            .transpose()?;
        let load_err = loader::load_error("profile");
        let (mut open, mode) = plan.open::<ProfileSkel>(object, |ro| {
            ro.filter_pid = matches!(config.target, Target::Pids(_));
            ro.filter_tid = matches!(config.target, Target::Tids(_));
            ro.per_thread = config.per_thread || matches!(config.target, Target::Tids(_));
            ro.include_idle = config.include_idle;
            ro.filter_cgroup = cgroup.is_some();
            ro.filter_mntns = mntns.is_some();
        })?;
        let maps = &mut open.maps;
        if let Some(m) = &cgroup {
            maps.cgroup_sets
                .set_inner_map_fd(m.as_fd())
                .map_err(load_err)?;
        }
        if let Some(m) = &mntns {
            maps.mntns_sets
                .set_inner_map_fd(m.as_fd())
                .map_err(load_err)?;
        }
        let skel = open.load().map_err(load_err)?;
        let periodic = Periodic::forgetting(&skel.maps.stack_news)?;
        let zero = 0u32.to_ne_bytes();
        for (sets, user) in [
            (&skel.maps.cgroup_sets, &cgroup),
            (&skel.maps.mntns_sets, &mntns),
        ] {
            if let Some(m) = user {
                let fd = m.as_fd().as_raw_fd() as u32;
                sets.update(&zero, &fd.to_ne_bytes(), MapFlags::ANY)
                    .map_err(load_err)?;
            }
        }
        let unwinder = plan.start_unwinder(&skel, mode)?;
        let prog = &skel.progs.flare_profile_sample;
        let timed = config
            .recording
            .timed
            .then(|| TimedRing::start(&skel.maps.timed_events))
            .transpose()?;
        let links = start::sample(prog, &plan, config.sampling, true, "profile")?;
        Ok(Session {
            timed,
            skel,
            config,
            _links: links,
            periodic,
            unwinder,
        })
    }
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
        meta(&self.config)
    }

    fn header(&self) -> String {
        header(&self.config)
    }

    fn warm_up(&self) -> WarmUp {
        plan(&self.config).warm_up()
    }

    /// Reads every counted stack. With `clear`, the counts are removed as
    /// they are read, so the next call returns only what came after (stack
    /// map entries are kept: their ids may still be in use).
    fn collect(&mut self, clear: bool) -> Result<Collection> {
        let mut stacks = self.periodic.reader(crate::collect::stacks::Storage {
            stacks: &self.skel.maps.stacks,
            tails: &self.skel.maps.stack_tails,
        });
        let mut samples = Vec::new();
        let read = timed::read(self.timed.as_ref(), &self.skel.maps.counts, clear)?;
        for (k, count) in read.keys {
            let user = stacks.read(k.user_stack_id, self.config.recording.stacks.user);
            let kernel = stacks.read(k.kernel_stack_id, self.config.recording.stacks.kernel);
            samples.push(RawSample {
                task: RawTask {
                    pid: Some(k.pid),
                    start: k.start,
                    tid: (k.tid != 0).then_some(k.tid),
                    comm: comm_str(&k.comm),
                    user,
                    kernel,
                },
                waker: None,
                value: count,
            });
        }
        let bss = self.skel.maps.bss_data.as_deref();
        let hash_full = bss.map_or(0, |b| b.stats.hash_full);
        let ring_full = bss.map_or(0, |b| b.stats.ring_full);
        let mut lost = stacks.lost(self.periodic.delta("hash_full", hash_full, clear));
        lost.samples = self.periodic.delta("ring_full", ring_full, clear);
        self.periodic.done(stacks, clear);
        Ok(Collection {
            samples,
            lost,
            events: read.events,
        })
    }
}
