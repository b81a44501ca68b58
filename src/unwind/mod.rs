//! Unwinding user stacks without frame pointers (`--unwind`).
//!
//! The walk itself happens in BPF (bpf/unwind.h). This module feeds it:
//! [`table`] turns an object's call-frame information into rows,
//! [`cache`] keeps them on disk between runs, [`objects`] puts each
//! object's rows in BPF once (shared by every process mapping it),
//! [`procs`] reads a process's executable mappings, and [`loader`] keeps
//! the BPF maps up to date as the unwinder reports processes and
//! addresses it does not know yet. Tools call [`size_maps`] before load
//! and [`Unwinder::start`] after.

pub mod cache;
pub mod elf;
pub mod loader;
pub mod objects;
pub mod procs;
mod spares;
pub mod table;

use std::sync::Once;

use libbpf_rs::libbpf_sys as sys;
use libbpf_rs::OpenMapMut;

pub use loader::{Maps, Unwinder, Watcher};

/// How user stacks are walked (the option lives with the collector
/// contract, [`crate::collect::UnwindMode`]).
pub use crate::collect::UnwindMode as Mode;

/// What the unwinder makes of a [`Mode`]: the BPF build it needs, and the
/// mode this machine can do.
pub trait ModeExt {
    /// The BPF object build this mode needs.
    fn build(self) -> crate::bpf::variant::Build;
    /// The mode this machine can do: frame pointers where the kernel
    /// lacks what the unwinder needs (said once on stderr), or when user
    /// stacks are not collected at all.
    fn effective(self, user_stacks: bool) -> Mode;
}

impl ModeExt for Mode {
    fn build(self) -> crate::bpf::variant::Build {
        match self {
            Mode::Fp => crate::bpf::variant::Build::FramePointers,
            Mode::Auto | Mode::Dwarf => crate::bpf::variant::Build::Full,
        }
    }

    fn effective(self, user_stacks: bool) -> Mode {
        if self == Mode::Fp || !user_stacks {
            return Mode::Fp;
        }
        match missing_support() {
            None => self,
            Some(why) => {
                static WARN: Once = Once::new();
                WARN.call_once(|| {
                    crate::notes::note(format!(
                        "WARNING: --unwind {}: {why}; user stacks are walked by frame pointers, without Python or Java frames.",
                        self.name()
                    ))
                });
                Mode::Fp
            }
        }
    }
}

/// What this kernel (or machine) lacks for the unwinder, if anything.
fn missing_support() -> Option<&'static str> {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return Some("the unwinder supports x86-64 and arm64 only");
    }
    let helper = |id| {
        // SAFETY: the probe loads a tiny program; it takes no pointers
        // besides the (NULL) options.
        unsafe {
            sys::libbpf_probe_bpf_helper(sys::BPF_PROG_TYPE_PERF_EVENT, id, std::ptr::null()) == 1
        }
    };
    if !helper(sys::BPF_FUNC_loop) {
        return Some("this kernel has no bpf_loop (Linux 5.17 or later)");
    }
    if !helper(sys::BPF_FUNC_task_pt_regs) {
        return Some("this kernel has no bpf_task_pt_regs (Linux 5.15 or later)");
    }
    None
}

/// What the runtimes bring to a tool's unwinder: a watcher of the
/// processes it loads for each runtime on (which fills that runtime's BPF
/// map), and what names their frames.
#[derive(Default)]
pub struct RuntimeHooks {
    pub watchers: Vec<Box<dyn Watcher>>,
    pub finds: Vec<std::sync::Arc<dyn crate::collect::RuntimeFinds>>,
}

/// Starts feeding the unwinder of a loaded tool (`prog`), unless `mode`
/// walks frame pointers: `pids` are loaded before this returns, and with
/// `all` every other process soon after.
pub fn start(
    mode: Mode,
    maps: libbpf_rs::Result<Maps>,
    prog: &'static str,
    pids: &[u32],
    all: bool,
    runtimes: RuntimeHooks,
) -> crate::Result<Option<Unwinder>> {
    if mode == Mode::Fp {
        return Ok(None);
    }
    let maps = maps.map_err(|source| crate::Error::Load { prog, source })?;
    Unwinder::start(maps, pids, all, runtimes.watchers, runtimes.finds)
        .map(Some)
        .map_err(|source| crate::Error::Io {
            what: "starting the unwinder thread".into(),
            source,
        })
}

/// The unwinder's maps of a tool's object, before load.
pub struct OpenMaps<'a, 'obj> {
    pub procs: &'a mut OpenMapMut<'obj>,
    pub mappings: &'a mut OpenMapMut<'obj>,
    pub tables: &'a mut OpenMapMut<'obj>,
    pub reported: &'a mut OpenMapMut<'obj>,
    pub events: &'a mut OpenMapMut<'obj>,
}

/// Sizes the unwinder's maps for `mode`: with frame pointers, one entry
/// each, so they cost nothing.
pub fn size_maps(mode: Mode, m: OpenMaps<'_, '_>) -> libbpf_rs::Result<()> {
    if mode != Mode::Fp {
        return Ok(());
    }
    m.procs.set_max_entries(1)?;
    m.mappings.set_max_entries(1)?;
    m.tables.set_max_entries(1)?;
    m.reported.set_max_entries(1)?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u32;
    m.events.set_max_entries(page)
}

/// Sizes the unwinder maps of an open skeleton (`$maps`: its `maps`).
#[macro_export]
macro_rules! unwind_size_maps {
    ($maps:expr, $mode:expr) => {
        $crate::unwind::size_maps(
            $mode,
            $crate::unwind::OpenMaps {
                procs: &mut $maps.unwind_procs,
                mappings: &mut $maps.unwind_mappings,
                tables: &mut $maps.unwind_tables,
                reported: &mut $maps.unwind_reported,
                events: &mut $maps.unwind_events,
            },
        )
    };
}

/// The unwinder's maps of a loaded skeleton (`$maps`: its `maps`).
#[macro_export]
macro_rules! unwind_maps {
    ($maps:expr) => {
        $crate::unwind::Maps::new(
            &$maps.unwind_procs,
            &$maps.unwind_mappings,
            &$maps.unwind_tables,
            &$maps.unwind_events,
            &$maps.unwind_reported,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_user_stacks_frame_pointers_do() {
        assert_eq!(Mode::Auto.effective(false), Mode::Fp);
        assert_eq!(Mode::Dwarf.build(), crate::bpf::variant::Build::Full);
        assert_eq!(Mode::Fp.build(), crate::bpf::variant::Build::FramePointers);
    }
}
