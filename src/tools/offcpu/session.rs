//! Loading `offcpu.bpf.c` for one of the three tools, attaching it the best
//! way this kernel allows, and reading back what it summed.

use std::mem::MaybeUninit;

use libbpf_rs::skel::OpenSkel;
use libbpf_rs::{Link, OpenObject};

use super::{header, tidy_samples};
use super::{thread_context, Attach, Config, Threads, Tool};
use crate::bpf::loader;
use crate::bpf::skel::offcpu::{types, OffcpuSkel};
use crate::bpf::{comm_str, probe, PlainKey};
use crate::collect::timed::{self, TimedRing};
use crate::collect::{Collection, Collector, Periodic, RawSample, RawTask, RawTrace, WarmUp};
use crate::error::{Error, Result};
use crate::procmaps::Mappings;
use crate::profile::{Kind, Meta, Sample};
use crate::tools::start::{self, Plan, Watch};
use crate::unwind::Unwinder;

/// Mirrors the `OFFCPU_*` constants of `offcpu.h`.
const MODE_OFFCPU: u32 = 0;
const MODE_WAKEUP: u32 = 1;
const MODE_OFFWAKE: u32 = 2;
const THREADS_ALL: u32 = 0;
const THREADS_PIDS: u32 = 1;
const THREADS_TIDS: u32 = 2;
const THREADS_USER: u32 = 3;
const THREADS_KERNEL: u32 = 4;

// SAFETY: offcpu_key is the skeleton's copy of a C struct of integers and
// char arrays, valid for any bit pattern.
unsafe impl PlainKey for types::offcpu_key {}

/// A loaded and attached off-CPU tracer.
pub struct Session<'obj> {
    /// Drains the timed periods' ring (with [`Config::timed`]); dropped
    /// before the skeleton that owns the ring.
    timed: Option<TimedRing<types::offcpu_key>>,
    skel: OffcpuSkel<'obj>,
    config: Config,
    attach: Attach,
    /// Dropping the links detaches the programs.
    _links: Vec<Link>,
    /// State kept between clearing reads.
    periodic: Periodic,
    /// Feeds the BPF unwinder (not with --unwind fp).
    unwinder: Option<Unwinder>,
}

/// The way to attach: the one asked for, or the first that works.
fn choose(asked: Attach, tool: Tool) -> Result<Attach> {
    let waker_tp = if tool == Tool::OffCpu {
        None
    } else {
        Some("sched_waking")
    };
    let btf_ok = || probe::tp_btf("sched_switch") && waker_tp.is_none_or(probe::tp_btf);
    match asked {
        Attach::Auto if btf_ok() => Ok(Attach::TpBtf),
        Attach::Auto if probe::raw_tp() => Ok(Attach::RawTp),
        Attach::Auto if probe::kprobes() => Ok(Attach::Kprobe),
        Attach::Auto => Err(Error::Unsupported(
            "this kernel can attach BPF programs neither to scheduler tracepoints (tp_btf, raw_tp) nor to kprobes: off-CPU tracing needs Linux 4.17 or later, or one built with CONFIG_KPROBES".into(),
        )),
        Attach::TpBtf if !btf_ok() => Err(Error::Unsupported(
            "--attach tp-btf: this kernel refuses BTF-typed tracepoint programs (it needs Linux 5.5+ with BTF, and no lockdown forbidding BPF tracing): use --attach raw-tp".into(),
        )),
        Attach::RawTp if !probe::raw_tp() => Err(Error::Unsupported(
            "--attach raw-tp: this kernel has no raw tracepoint programs (Linux 4.17+): use --attach kprobe".into(),
        )),
        Attach::Kprobe if !probe::kprobes() => Err(Error::Unsupported(
            "--attach kprobe: this kernel has no kprobe support (no kprobe event source: it was built without CONFIG_KPROBES): use --attach tp-btf or raw-tp".into(),
        )),
        other => Ok(other),
    }
}

/// What start-up needs to know of these options.
fn plan(c: &Config) -> Plan<'_> {
    Plan {
        watch: match &c.threads {
            Threads::Pids(p) => Watch::Pids(p),
            Threads::Tids(t) => Watch::Tids(t),
            _ => Watch::All,
        },
        cpu: None,
        launched: c.follow_children,
        uprobes: None,
        filtered: false,
        recording: c.recording,
    }
}

impl<'obj> Session<'obj> {
    /// Validates the config against the system, loads the BPF program and
    /// starts tracing.
    pub fn start(config: Config, object: &'obj mut MaybeUninit<OpenObject>) -> Result<Self> {
        config.validate()?;
        let plan = plan(&config);
        plan.prepare()?;
        let attach = choose(config.attach, config.tool)?;
        let load_err = loader::load_error("offcpu");
        let (mut open, mode) = plan.open::<OffcpuSkel>(object, |ro| {
            ro.mode = match config.tool {
                Tool::OffCpu => MODE_OFFCPU,
                Tool::Wakeup => MODE_WAKEUP,
                Tool::OffWake => MODE_OFFWAKE,
            };
            ro.thread_filter = match config.threads {
                Threads::All => THREADS_ALL,
                Threads::Pids(_) => THREADS_PIDS,
                Threads::Tids(_) => THREADS_TIDS,
                Threads::User => THREADS_USER,
                Threads::Kernel => THREADS_KERNEL,
            };
            ro.filter_state = config.state.is_some();
            ro.state = config.state.unwrap_or(0);
            ro.min_us = config.min_us;
            ro.max_us = config.max_us;
            ro.sample_us = config.sample_us;
            ro.preempt_every = super::preempt_every(config.sample_us);
            ro.stacks_at_switch_in = attach == Attach::Kprobe;
        })?;
        let waker = config.tool != Tool::OffCpu;
        let progs = &mut open.progs;
        let wanted = [
            (&mut progs.flare_switch_btf, attach == Attach::TpBtf),
            (
                &mut progs.flare_waking_btf,
                attach == Attach::TpBtf && waker,
            ),
            (&mut progs.flare_switch_raw, attach == Attach::RawTp),
            (
                &mut progs.flare_waking_raw,
                attach == Attach::RawTp && waker,
            ),
            (&mut progs.flare_switch_kprobe, attach == Attach::Kprobe),
            (
                &mut progs.flare_waking_kprobe,
                attach == Attach::Kprobe && waker,
            ),
        ];
        for (prog, on) in wanted {
            prog.set_autoload(on);
        }
        let maps = &mut open.maps;
        maps.start
            .set_max_entries(config.blocked_storage_size)
            .map_err(load_err)?;
        if config.tool != Tool::OffWake {
            // Unused: keep it from taking memory.
            maps.wokeby.set_max_entries(1).map_err(load_err)?;
        }
        let skel = open.load().map_err(load_err)?;
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
            attach,
            _links: Vec::new(),
            periodic: Periodic::default(),
            unwinder,
        };
        session.attach_programs()?;
        Ok(session)
    }

    fn attach_programs(&mut self) -> Result<()> {
        let waker = self.config.tool != Tool::OffCpu;
        let progs = &self.skel.progs;
        let attach_err = |what: &str| {
            let what = what.to_string();
            move |source| Error::Attach { what, source }
        };
        match self.attach {
            Attach::Kprobe => {
                let mut pairs = vec![(&progs.flare_switch_kprobe, "finish_task_switch")];
                if waker {
                    pairs.push((&progs.flare_waking_kprobe, "try_to_wake_up"));
                }
                for (prog, func) in pairs {
                    let sym = probe::kernel_symbol(func).ok_or_else(|| {
                        Error::Unsupported(format!(
                            "cannot attach a kprobe to {func}: no such function in /proc/kallsyms (use --attach tp-btf or raw-tp)"
                        ))
                    })?;
                    let link = prog.attach_kprobe(false, &sym).map_err(|e| {
                        Error::Unsupported(format!(
                            "cannot attach a kprobe to {sym}: {e} (this kernel may lack kprobe support, CONFIG_KPROBES: use --attach tp-btf or raw-tp)"
                        ))
                    })?;
                    self._links.push(link);
                }
            }
            Attach::RawTp => {
                let link = progs
                    .flare_switch_raw
                    .attach_raw_tracepoint("sched_switch")
                    .map_err(attach_err("raw tracepoint sched_switch"))?;
                self._links.push(link);
                if waker {
                    let link = progs
                        .flare_waking_raw
                        .attach_raw_tracepoint("sched_waking")
                        .map_err(attach_err("raw tracepoint sched_waking"))?;
                    self._links.push(link);
                }
            }
            Attach::TpBtf | Attach::Auto => {
                let link = progs
                    .flare_switch_btf
                    .attach()
                    .map_err(attach_err("tp_btf sched_switch"))?;
                self._links.push(link);
                if waker {
                    let link = progs
                        .flare_waking_btf
                        .attach()
                        .map_err(attach_err("tp_btf sched_waking"))?;
                    self._links.push(link);
                }
            }
        }
        Ok(())
    }

    /// The tool this session serves.
    pub fn tool(&self) -> Tool {
        self.config.tool
    }

    /// How the programs were attached.
    pub fn attach(&self) -> Attach {
        self.attach
    }
}

/// What a profile made with `c` is of.
pub(crate) fn meta(c: &Config) -> Meta {
    let (kind, event) = match c.tool {
        Tool::OffCpu => (Kind::OffCpu, "sched_switch"),
        Tool::Wakeup => (Kind::Wakeup, "sched_waking"),
        Tool::OffWake => (Kind::OffWake, "sched_switch"),
    };
    let mut meta = Meta::new(kind, event);
    meta.target = thread_context(&c.threads);
    meta
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

    fn notes(&self) -> Vec<String> {
        if self.config.attach == Attach::Auto && self.attach != Attach::TpBtf {
            vec![format!(
                "flare: BTF-typed tracepoints are not available here; attached with {}",
                self.attach.name()
            )]
        } else {
            Vec::new()
        }
    }

    fn tidy(&self, samples: &mut [Sample]) {
        tidy_samples(samples, self.config.tool);
        if self.config.offsets {
            crate::tools::stackcount::offsets::add_offsets(samples);
        }
    }

    fn warm_up(&self) -> WarmUp {
        plan(&self.config).warm_up()
    }

    /// Reads every summed key. With `clear`, the sums are removed as they
    /// are read, so the next call returns only what came after (periods
    /// still running are counted when they end).
    fn collect(&mut self, clear: bool) -> Result<Collection> {
        let mut stacks = self.periodic.reader(crate::collect::stacks::Storage {
            stacks: &self.skel.maps.stacks,
            tails: &self.skel.maps.stack_tails,
        });
        let mut samples = Vec::new();
        let want = self.config.recording.stacks;
        let mut task = |t: &types::offcpu_task| RawTask {
            pid: Some(t.pid),
            start: t.start,
            tid: (t.tid != 0).then_some(t.tid),
            comm: comm_str(&t.comm),
            user: stacks.read(t.user_stack_id, want.user),
            kernel: stacks.read(t.kernel_stack_id, want.kernel),
        };
        let read = timed::read(self.timed.as_ref(), &self.skel.maps.counts, clear)?;
        for (k, us) in read.keys {
            let sample = match self.config.tool {
                Tool::OffCpu => RawSample {
                    task: task(&k.target),
                    waker: None,
                    value: us,
                },
                Tool::OffWake => RawSample {
                    task: task(&k.target),
                    waker: (k.has_waker != 0).then(|| task(&k.waker)),
                    value: us,
                },
                Tool::Wakeup => RawSample {
                    task: RawTask {
                        pid: None,
                        start: 0,
                        tid: None,
                        comm: comm_str(&k.target.comm),
                        user: RawTrace::NotCollected,
                        kernel: RawTrace::NotCollected,
                    },
                    waker: Some(task(&k.waker)),
                    value: us,
                },
            };
            samples.push(sample);
        }
        let stats = self
            .skel
            .maps
            .bss_data
            .as_deref()
            .map(|b| b.stats)
            .unwrap_or_default();
        let mut lost = stacks.lost(self.periodic.delta("hash_full", stats.hash_full, clear));
        lost.untracked = self.periodic.delta("start_full", stats.start_full, clear);
        lost.samples = self.periodic.delta("ring_full", stats.ring_full, clear);
        self.periodic.done(stacks, clear);
        Ok(Collection {
            samples,
            lost,
            events: read.events,
        })
    }
}
