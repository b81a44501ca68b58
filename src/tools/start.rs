//! One start-up path for the BPF tools.
//!
//! Every tool starts the same way: check the targets, open the object
//! build its unwinding mode needs, set the knobs and size the maps every
//! program has, load, fill the targets map, start the unwinder, attach;
//! `profile` and `wallclock` also open the same CPU-clock perf events.
//! Written out in each tool, that was a hundred lines four times over, and
//! a step changed in one tool had to be found and changed in the others.
//! Here each shared step is written once, so that a tool's `start` states
//! only what is its own: its checks, its knobs and maps, how it attaches.
//!
//! A tool describes its options in a [`Plan`]; [`Skeleton`] is what the
//! steps need of a generated skeleton (`skeleton!` implements it for each
//! tool's, whose types differ but whose common maps and knobs are named
//! alike).

use std::collections::HashSet;
use std::mem::MaybeUninit;
use std::path::Path;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapMut, OpenObject, ProgramMut};

use crate::bpf::loader::{self, CommonKnobs, Targets};
use crate::bpf::perf::{self, Sampling, Scope};
use crate::bpf::{skel, variant};
use crate::collect::{Recording, Target, WarmUp};
use crate::error::{Error, Result};
use crate::procmaps::Mappings;
use crate::system;
use crate::unwind::{self, Mode, ModeExt, Unwinder};

/// The threads a tool watches.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Watch<'a> {
    All,
    /// The threads of these processes.
    Pids(&'a [u32]),
    /// These threads.
    Tids(&'a [u32]),
}

impl<'a> From<&'a Target> for Watch<'a> {
    fn from(target: &'a Target) -> Self {
        match target {
            Target::All => Watch::All,
            Target::Pids(p) => Watch::Pids(p),
            Target::Tids(t) => Watch::Tids(t),
        }
    }
}

/// What start-up needs to know of a tool's options.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan<'a> {
    pub watch: Watch<'a>,
    /// A CPU the tool is limited to.
    pub cpu: Option<u32>,
    /// The one process watched is a command flare launched (`-- CMD`):
    /// the processes it starts are watched too, and it has not exec'd yet.
    pub launched: bool,
    /// How stacks are recorded.
    pub recording: Recording,
    /// The binary of user probes (stackcount's): with no process watched,
    /// the unwinder loads the processes mapping it, not every process.
    pub uprobes: Option<&'a Path>,
    /// A pinned set (--cgroupmap, --mntnsmap) limits what is sampled: with
    /// no process watched, the unwinder loads the processes BPF meets, not
    /// every process at start (an agent, at each renewal, read
    /// every binary on the host each time, 14 MiB at once beside a build).
    pub filtered: bool,
}

impl Plan<'_> {
    /// The ids in the targets map: processes' or threads'.
    fn ids(&self) -> &[u32] {
        match self.watch {
            Watch::All => &[],
            Watch::Pids(ids) | Watch::Tids(ids) => ids,
        }
    }

    /// Checks the environment and the targets, and raises limits.
    pub fn prepare(&self) -> Result<()> {
        let (pids, tids): (&[u32], &[u32]) = match self.watch {
            Watch::All => (&[], &[]),
            Watch::Pids(p) => (p, &[]),
            Watch::Tids(t) => (&[], t),
        };
        loader::prepare(Targets {
            pids,
            tids,
            cpu: self.cpu,
        })
    }

    /// Opens skeleton `S` in the build the unwinding mode needs, sets
    /// the knobs every program has (and the tool's own, with `own`) and
    /// sizes the maps every program has. Returns the mode too.
    pub fn open<'obj, S: Skeleton<'obj>>(
        &self,
        object: &'obj mut MaybeUninit<OpenObject>,
        own: impl FnOnce(&mut S::Rodata),
    ) -> Result<(S::Open, Mode)> {
        let load_err = loader::load_error(S::NAME);
        let mode = self.recording.unwind.effective(self.recording.stacks.user);
        let mut open =
            variant::open(mode.build(), || S::Builder::default().open(object)).map_err(load_err)?;
        let ro = S::rodata(&mut open)
            .ok_or_else(|| Error::Unsupported(format!("{}.bpf.c has no rodata", S::NAME)))?;
        own(ro);
        let follow = self.ids().first().copied().filter(|_| self.launched);
        let knobs = CommonKnobs::new(self.recording.include_self)
            .recording(self.recording.stacks.user, self.recording.stacks.kernel)
            .following(follow)
            .timed(self.recording.timed.then(crate::collect::timed::ring_size));
        S::set_knobs(ro, knobs, mode);
        S::size_maps(&mut open, self, mode).map_err(load_err)?;
        if mode == Mode::Fp {
            // No runtime walk: its maps cost nothing.
            for mut map in open.open_object_mut().maps_mut() {
                if crate::runtime::bpf_maps().any(|n| map.name() == std::ffi::OsStr::new(n)) {
                    map.set_max_entries(1).map_err(load_err)?;
                }
            }
        }
        Ok((open, mode))
    }

    /// Fills the loaded skeleton's targets map and starts its unwinder
    /// (unless `mode` walks frame pointers), which loads the processes
    /// watched before this returns and, when all are, every other soon
    /// after.
    pub fn start_unwinder<'obj, S: Skeleton<'obj>>(
        &self,
        skel: &S,
        mode: Mode,
    ) -> Result<Option<Unwinder>> {
        if let Some(map) = skel.targets() {
            loader::fill_targets(map, self.ids(), S::NAME)?;
        }
        let (pids, all) = match (self.watch, self.uprobes) {
            // A launched command has not exec'd yet: its maps are read
            // when the unwinder first meets it.
            (Watch::Pids(_), _) if self.launched => (Vec::new(), false),
            (Watch::Pids(p), _) => (p.to_vec(), false),
            (Watch::Tids(_), _) => (Vec::new(), false),
            // A uprobe's processes are loaded before it fires.
            (Watch::All, Some(binary)) => (unwind::procs::pids_mapping(binary), false),
            (Watch::All, None) => (Vec::new(), !self.filtered),
        };
        let mut hooks = unwind::RuntimeHooks::default();
        if mode != Mode::Fp {
            let object = skel.object();
            hooks = crate::runtime::bpf_sides(self.recording.runtimes, |name| {
                let map = object
                    .maps()
                    .find(|m| m.name() == std::ffi::OsStr::new(name))?;
                libbpf_rs::MapHandle::try_from(&map).ok()
            });
        }
        unwind::start(mode, skel.unwind_maps(), S::NAME, &pids, all, hooks)
    }

    /// What symbolization may load while collecting: the kernel's symbols
    /// if kernel stacks are recorded, the processes watched.
    pub fn warm_up(&self) -> WarmUp {
        WarmUp {
            kernel: self.recording.stacks.kernel,
            pids: match self.watch {
                Watch::Pids(p) => p.to_vec(),
                _ => Vec::new(),
            },
        }
    }
}

/// Hands the pipeline's record of mappings to the unwinder, if any.
pub(crate) fn share_mappings(unwinder: Option<&Unwinder>, mappings: &Mappings) {
    if let Some(u) = unwinder {
        u.use_mappings(mappings.clone());
    }
}

/// The namers of the runtime frames the unwinder's stacks hold, if any.
pub(crate) fn namers(unwinder: Option<&Unwinder>) -> crate::collect::Namers {
    unwinder.map(Unwinder::namers).unwrap_or_default()
}

/// True once the unwinder met a process with runtime frames.
pub(crate) fn has_runtime_frames(unwinder: Option<&Unwinder>) -> bool {
    unwinder.is_some_and(Unwinder::has_runtime_frames)
}

/// Opens CPU-clock events sampling the threads `plan` watches and
/// attaches `prog` (tool `name`'s) to each; dropping the links detaches
/// and closes them. All threads: one event per CPU (every online one, or
/// the plan's). Otherwise one per target thread, so that nothing else is
/// interrupted; a process's events are inherited by the threads it starts
/// later, and its threads are listed twice, the second time for those
/// started while the first events were being opened. With `strict`, a
/// process gone by the first listing is an error; else it is passed over.
pub(crate) fn sample(
    prog: &ProgramMut<'_>,
    plan: &Plan<'_>,
    sampling: Sampling,
    strict: bool,
    name: &str,
) -> Result<Vec<Link>> {
    let mut links = Vec::new();
    let mut done = HashSet::new();
    let mut attach = |scopes: Vec<Scope>| -> Result<()> {
        for scope in scopes {
            if done.insert(scope) {
                links.extend(perf::attach_cpu_clock(prog, scope, sampling, name)?);
            }
        }
        Ok(())
    };
    attach(scopes(plan, strict)?)?;
    if let Watch::Pids(_) = plan.watch {
        attach(scopes(plan, false)?)?;
    }
    Ok(links)
}

/// The scopes of the events sampling what `plan` watches (see [`sample`]).
fn scopes(plan: &Plan<'_>, strict: bool) -> Result<Vec<Scope>> {
    let cpu = plan.cpu;
    Ok(match plan.watch {
        Watch::All => match cpu {
            Some(c) => vec![Scope::Cpu(c)],
            None => system::online_cpus()?
                .0
                .into_iter()
                .map(Scope::Cpu)
                .collect(),
        },
        Watch::Pids(pids) => {
            let mut scopes = Vec::new();
            for &pid in pids {
                let tids = match system::threads(pid) {
                    Err(e) if strict => return Err(e),
                    listed => listed.unwrap_or_default(),
                };
                scopes.extend(tids.into_iter().map(|tid| Scope::Thread {
                    tid,
                    cpu,
                    inherit: true,
                }));
            }
            scopes
        }
        Watch::Tids(tids) => tids
            .iter()
            .map(|&tid| Scope::Thread {
                tid,
                cpu,
                inherit: false,
            })
            .collect(),
    })
}

/// What start-up needs of a tool's generated skeleton: the maps and knobs
/// every flare program has (`flare.bpf.h`, `unwind.h`, `targets.h`).
pub(crate) trait Skeleton<'obj>: Skel<'obj> + Sized {
    type Builder: SkelBuilder<'obj, Output = Self::Open> + Default;
    type Open: OpenSkel<'obj, Output = Self>;
    type Rodata;
    /// The program's name, in errors.
    const NAME: &'static str;

    fn rodata(open: &mut Self::Open) -> Option<&mut Self::Rodata>;
    /// Sets the knobs every program has.
    fn set_knobs(ro: &mut Self::Rodata, knobs: CommonKnobs, mode: Mode);
    /// Sizes the maps every program has.
    fn size_maps(open: &mut Self::Open, plan: &Plan<'_>, mode: Mode) -> libbpf_rs::Result<()>;
    /// The map of target ids, in the programs that take `-p`/`-t` lists.
    fn targets(&self) -> Option<&MapMut<'obj>>;
    fn unwind_maps(&self) -> libbpf_rs::Result<unwind::Maps>;
}

/// Implements [`Skeleton`] for the skeleton of `bpf/$module.bpf.c`, which
/// has a targets map if `$targets` names it.
macro_rules! skeleton {
    ($module:ident: $skel:ident, $open:ident, $builder:ident $(, $targets:ident)?) => {
        impl<'obj> Skeleton<'obj> for skel::$module::$skel<'obj> {
            type Builder = skel::$module::$builder;
            type Open = skel::$module::$open<'obj>;
            type Rodata = skel::$module::types::rodata;
            const NAME: &'static str = stringify!($module);

            fn rodata(open: &mut Self::Open) -> Option<&mut Self::Rodata> {
                open.maps.rodata_data.as_deref_mut()
            }

            fn set_knobs(ro: &mut Self::Rodata, knobs: CommonKnobs, mode: Mode) {
                crate::set_common_knobs!(ro, knobs);
                ro.unwind_mode = mode.bpf_value();
            }

            fn size_maps(
                open: &mut Self::Open,
                plan: &Plan<'_>,
                mode: Mode,
            ) -> libbpf_rs::Result<()> {
                let maps = &mut open.maps;
                maps.counts.set_max_entries(plan.recording.hash_storage_size)?;
                crate::collect::stacks::size_storage(
                    &mut maps.stacks,
                    &mut maps.stack_tails,
                    &mut maps.stack_scratch,
                    &mut maps.stack_news,
                    plan.recording.stack_storage_size,
                    mode,
                )?;
                maps.timed_events.set_max_entries(match plan.recording.timed {
                    true => crate::collect::timed::ring_size() as u32,
                    false => crate::collect::timed::idle_ring_size() as u32,
                })?;
                $(maps.$targets.set_max_entries((plan.ids().len() as u32).max(1))?;)?
                crate::unwind_size_maps!(maps, mode)
            }

            fn targets(&self) -> Option<&MapMut<'obj>> {
                None $(.or(Some(&self.maps.$targets)))?
            }

            fn unwind_maps(&self) -> libbpf_rs::Result<unwind::Maps> {
                crate::unwind_maps!(self.maps)
            }
        }
    };
}

skeleton!(profile: ProfileSkel, OpenProfileSkel, ProfileSkelBuilder, targets);
skeleton!(wallclock: WallclockSkel, OpenWallclockSkel, WallclockSkelBuilder, targets);
skeleton!(offcpu: OffcpuSkel, OpenOffcpuSkel, OffcpuSkelBuilder, targets);
skeleton!(stackcount: StackcountSkel, OpenStackcountSkel, StackcountSkelBuilder);
