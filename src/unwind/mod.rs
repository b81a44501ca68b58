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
pub mod runtimes;
mod spares;
pub mod table;

use std::str::FromStr;
use std::sync::Once;

use libbpf_rs::libbpf_sys as sys;
use libbpf_rs::OpenMapMut;

pub use loader::{Maps, Unwinder};

/// How user stacks are walked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Unwind tables where an object has them, frame pointers elsewhere.
    #[default]
    Auto,
    /// Frame pointers only (the kernel's own walk, as bcc does).
    Fp,
    /// Unwind tables only: code without them ends the stack.
    Dwarf,
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "fp" => Ok(Mode::Fp),
            "dwarf" => Ok(Mode::Dwarf),
            _ => Err(format!("unknown unwind mode {s:?} (auto, fp or dwarf)")),
        }
    }
}

impl Mode {
    /// The value of the BPF rodata `unwind_mode` (unwind_types.h).
    pub fn bpf_value(self) -> u32 {
        match self {
            Mode::Fp => 0,
            Mode::Auto => 1,
            Mode::Dwarf => 2,
        }
    }

    /// The BPF object build this mode needs.
    pub fn build(self) -> crate::bpf::variant::Build {
        match self {
            Mode::Fp => crate::bpf::variant::Build::FramePointers,
            Mode::Auto | Mode::Dwarf => crate::bpf::variant::Build::Full,
        }
    }

    /// The mode this machine can do: frame pointers where the kernel
    /// lacks what the unwinder needs (said once on stderr), or when user
    /// stacks are not collected at all.
    pub fn effective(self, user_stacks: bool) -> Mode {
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

    fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Fp => "fp",
            Mode::Dwarf => "dwarf",
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

/// Starts feeding the unwinder of a loaded tool (`prog`), unless `mode`
/// walks frame pointers: `pids` are loaded before this returns, and with
/// `all` every other process soon after.
pub fn start(
    mode: Mode,
    maps: libbpf_rs::Result<Maps>,
    prog: &'static str,
    pids: &[u32],
    all: bool,
    runtimes: Runtimes,
) -> crate::Result<Option<Unwinder>> {
    if mode == Mode::Fp {
        return Ok(None);
    }
    let maps = maps.map_err(|source| crate::Error::Load { prog, source })?;
    Unwinder::start(maps, pids, all, runtimes)
        .map(Some)
        .map_err(|source| crate::Error::Io {
            what: "starting the unwinder thread".into(),
            source,
        })
}

/// The runtimes whose frames the walk reads (--python, --java).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Runtimes {
    pub python: bool,
    pub java: bool,
}

impl Default for Runtimes {
    fn default() -> Self {
        Runtimes {
            python: true,
            java: true,
        }
    }
}

/// The unwinder's maps of a tool's object, before load.
pub struct OpenMaps<'a, 'obj> {
    pub procs: &'a mut OpenMapMut<'obj>,
    pub mappings: &'a mut OpenMapMut<'obj>,
    pub tables: &'a mut OpenMapMut<'obj>,
    pub reported: &'a mut OpenMapMut<'obj>,
    pub events: &'a mut OpenMapMut<'obj>,
    pub python: &'a mut OpenMapMut<'obj>,
    pub java: &'a mut OpenMapMut<'obj>,
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
    m.python.set_max_entries(1)?;
    m.java.set_max_entries(1)?;
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
                python: &mut $maps.py_procs,
                java: &mut $maps.java_procs,
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
            &$maps.py_procs,
            &$maps.java_procs,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!("auto".parse(), Ok(Mode::Auto));
        assert_eq!("fp".parse(), Ok(Mode::Fp));
        assert_eq!("dwarf".parse(), Ok(Mode::Dwarf));
        assert!("lbr".parse::<Mode>().is_err());
        assert_eq!(Mode::default(), Mode::Auto);
        assert_eq!(Mode::Auto.effective(false), Mode::Fp);
    }
}
