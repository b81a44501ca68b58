//! Loading only the entry points a pattern needs and attaching them: one
//! uprobe per function or one uprobe multi-link, libbpf's USDT attachment,
//! tracepoints, kprobes (multi-link where the kernel has it) or fentry,
//! and the clear error when kernel functions cannot be traced at all.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use libbpf_rs::skel::Skel;
use libbpf_rs::{KprobeMultiOpts, MapCore, ObjectBuilder, TracepointCategory, UprobeMultiOpts};

use super::{KernelAttach, Pattern, Session, Targets};
use crate::bpf::skel::stackcount::OpenStackcountProgs;
use crate::bpf::{probe, tracefs, variant};
use crate::error::{Error, Result};
use crate::unwind::ModeExt;

/// The compiled program, for the extra objects fentry needs (one per
/// function: an fentry program is bound to its function at load time), in
/// both builds (see `bpf::variant`).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/stackcount.bpf.o"));
static OBJECT_FP: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/stackcount_fp.bpf.o"));

/// Turns autoload off for every entry point the targets do not use.
pub(super) fn choose_programs(
    progs: &mut OpenStackcountProgs<'_>,
    pattern: &Pattern,
    targets: &Targets,
) -> Result<()> {
    let (mut uprobe, mut uprobe_multi, mut usdt, mut tp) = (false, false, false, false);
    let (mut kprobe, mut kprobe_multi, mut fentry) = (false, false, false);
    match targets {
        Targets::User { functions, .. } => {
            uprobe = true;
            uprobe_multi = functions.len() > 1 && probe::may_have_uprobe_multi();
        }
        Targets::Usdt { .. } => usdt = true,
        Targets::Tracepoints(_) => tp = true,
        Targets::Kernel { functions, how } => match how {
            KernelAttach::KprobeMulti => {
                kprobe_multi = true;
                kprobe = true;
            }
            KernelAttach::Kprobe => kprobe = true,
            KernelAttach::Fentry => {
                fentry = true;
                let first = functions.first().cloned().unwrap_or_default();
                progs
                    .flare_sc_fentry
                    .set_attach_target(0, Some(first.clone()))
                    .map_err(|e| no_kernel_probes(pattern, &no_btf(&first, e)))?;
            }
        },
    }
    progs.flare_sc_uprobe.set_autoload(uprobe);
    progs.flare_sc_uprobe_multi.set_autoload(uprobe_multi);
    progs.flare_sc_usdt.set_autoload(usdt);
    progs.flare_sc_tracepoint.set_autoload(tp);
    progs.flare_sc_kprobe.set_autoload(kprobe);
    progs.flare_sc_kprobe_multi.set_autoload(kprobe_multi);
    progs.flare_sc_fentry.set_autoload(fentry);
    Ok(())
}

/// Fails with one line when a forced way of attaching kernel functions
/// cannot work on this kernel. Multi-kprobes need fprobe, not kprobes, and
/// fentry needs BTF and no lockdown: both are only known when tried.
pub(super) fn check_kernel_attach(how: KernelAttach) -> Result<()> {
    let (major, minor) = crate::system::kernel_version();
    let why = match how {
        KernelAttach::Kprobe if !probe::kprobes() => {
            "this kernel has no kprobes (CONFIG_KPROBES is off)".to_string()
        }
        KernelAttach::KprobeMulti if !probe::may_have_kprobe_multi() => {
            format!("multi-kprobe links need Linux 5.18 or later, this is {major}.{minor}")
        }
        _ => return Ok(()),
    };
    Err(Error::Unsupported(format!(
        "--attach {}: {why}",
        how.name()
    )))
}

/// A few tracepoints whose names contain the pattern's name, to suggest.
fn similar_tracepoints(pattern: &Pattern) -> Vec<String> {
    let needle: String = pattern
        .name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let needle = needle.trim_start_matches('_');
    if needle.len() < 3 {
        return Vec::new();
    }
    tracefs::tracepoints()
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.split(':').nth(1).is_some_and(|e| e.contains(needle)))
        .take(3)
        .map(|t| format!("t:{t}"))
        .collect()
}

/// Why fentry cannot be set up for `func`: no BTF type of that name.
fn no_btf(func: &str, e: libbpf_rs::Error) -> String {
    format!("{func} has no BTF function type: {e}")
}

/// The error for kernel functions that can be attached neither way, or,
/// when kprobes exist (fentry was asked for), why fentry cannot.
pub(super) fn no_kernel_probes(pattern: &Pattern, fentry: &dyn std::fmt::Display) -> Error {
    let lockdown = probe::lockdown()
        .map(|l| format!(", kernel lockdown is '{l}'"))
        .unwrap_or_default();
    if probe::kprobes() {
        return Error::Unsupported(format!(
            "--attach fentry: cannot trace kernel functions for \"{}\" with fentry ({fentry}{lockdown}); --attach kprobe works on this kernel",
            pattern.text
        ));
    }
    let similar = similar_tracepoints(pattern);
    let suggestion = if similar.is_empty() {
        "count a tracepoint instead, e.g. t:syscalls:sys_enter_read (list them in /sys/kernel/tracing/events)".to_string()
    } else {
        format!("count a tracepoint instead, e.g. {}", similar.join(" or "))
    };
    Error::Unsupported(format!(
        "cannot trace kernel functions for \"{}\": this kernel has no kprobes (CONFIG_KPROBES is off) and fentry is refused ({fentry}{lockdown}); {suggestion}",
        pattern.text
    ))
}

/// Explains a failed load: for fentry, that kernel functions cannot be
/// traced on this machine.
pub(super) fn load_error(pattern: &Pattern, targets: &Targets, source: libbpf_rs::Error) -> Error {
    match targets {
        Targets::Kernel {
            how: KernelAttach::Fentry,
            ..
        } => no_kernel_probes(pattern, &source),
        _ => Error::Load {
            prog: "stackcount",
            source,
        },
    }
}

/// Runs of a program the kernel skipped (`recursion_misses`).
pub(super) fn recursion_misses(fd: BorrowedFd<'_>) -> u64 {
    // SAFETY: bpf_prog_info is plain data, valid when zeroed.
    let mut info: libbpf_rs::libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: info is writable for len bytes; the fd is a loaded program.
    let rc = unsafe {
        libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len)
    };
    if rc == 0 {
        info.recursion_misses
    } else {
        0
    }
}

/// The innermost error of a chain: the system's reason, without libbpf's
/// context repeated.
fn root_cause<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> &'a (dyn std::error::Error + 'static) {
    let mut cause = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause
}

fn attach_err(what: String) -> impl FnOnce(libbpf_rs::Error) -> Error {
    move |source| Error::Attach { what, source }
}

impl Session<'_> {
    pub(super) fn attach(&mut self, targets: &Targets) -> Result<()> {
        // A launched command's probes are for every process, filtered in
        // the kernel, so that the processes it starts are counted too.
        let pid = match (self.config.pid, &self.config.command) {
            (Some(p), None) => p as i32,
            _ => -1,
        };
        let progs = &self.skel.progs;
        match targets {
            Targets::User { binary, functions } => {
                let offsets: Vec<usize> = functions.iter().map(|f| f.offset as usize).collect();
                if functions.len() > 1 && probe::may_have_uprobe_multi() {
                    let opts = UprobeMultiOpts {
                        offsets: offsets.clone(),
                        ..Default::default()
                    };
                    if let Ok(link) = progs
                        .flare_sc_uprobe_multi
                        .attach_uprobe_multi_with_opts(pid, binary, "", opts)
                    {
                        self._links.push(link);
                        self.matched = functions.len();
                        return Ok(());
                    }
                }
                for f in functions {
                    let link = progs
                        .flare_sc_uprobe
                        .attach_uprobe(false, pid, binary, f.offset as usize)
                        .map_err(attach_err(format!(
                            "a uprobe to {} in {}",
                            f.name,
                            binary.display()
                        )))?;
                    self._links.push(link);
                }
            }
            Targets::Usdt { binary, probes } => {
                for p in probes {
                    let link = progs
                        .flare_sc_usdt
                        .attach_usdt(pid, binary, &p.provider, &p.name)
                        .map_err(attach_err(format!(
                            "USDT probe {}:{} in {}",
                            p.provider,
                            p.name,
                            binary.display()
                        )))?;
                    self._links.push(link);
                }
            }
            Targets::Tracepoints(tps) => {
                for tp in tps {
                    let (cat, event) = tp.split_once(':').unwrap_or((tp, ""));
                    let link = progs
                        .flare_sc_tracepoint
                        .attach_tracepoint(TracepointCategory::Custom(cat.into()), event)
                        .map_err(attach_err(format!("tracepoint {tp}")))?;
                    self._links.push(link);
                }
            }
            Targets::Kernel { functions, how } => self.attach_kernel(functions, *how)?,
        }
        self.matched = targets.len();
        Ok(())
    }

    fn attach_kernel(&mut self, functions: &[String], how: KernelAttach) -> Result<()> {
        let progs = &self.skel.progs;
        match how {
            KernelAttach::KprobeMulti => {
                let opts = KprobeMultiOpts {
                    symbols: functions.to_vec(),
                    ..Default::default()
                };
                // A refusal is handled here: keep libbpf's line about it
                // out of the way.
                let print = libbpf_rs::set_print(None);
                let attached = progs
                    .flare_sc_kprobe_multi
                    .attach_kprobe_multi_with_opts(opts);
                libbpf_rs::set_print(print);
                match attached {
                    Ok(link) => self._links.push(link),
                    Err(e) if self.config.attach.is_some() => {
                        let e = root_cause(&e);
                        return Err(Error::Unsupported(format!(
                            "--attach kprobe-multi: this kernel refuses multi-kprobe links ({e}; they need CONFIG_FPROBE); --attach kprobe attaches one kprobe per function"
                        )));
                    }
                    // No fprobe support: one kprobe each.
                    Err(_) => return self.attach_kernel(functions, KernelAttach::Kprobe),
                }
            }
            KernelAttach::Kprobe => {
                for f in functions {
                    let link = progs
                        .flare_sc_kprobe
                        .attach_kprobe(false, f)
                        .map_err(attach_err(format!("a kprobe to {f}")))?;
                    self._links.push(link);
                }
            }
            KernelAttach::Fentry => {
                // A refusal (no BPF trampolines: arm64 before 6.0's, -ENOTSUPP)
                // is explained here: keep libbpf's line about it out of the way.
                let print = libbpf_rs::set_print(None);
                let attached = progs.flare_sc_fentry.attach_trace();
                libbpf_rs::set_print(print);
                let link =
                    attached.map_err(|e| super::attach::no_kernel_probes(&self.pattern, &e))?;
                self._links.push(link);
                self.fentry = true;
                for f in &functions[1..] {
                    self.attach_fentry_extra(f)?;
                }
            }
        }
        Ok(())
    }

    /// Loads one more copy of the program for fentry on `func`, sharing
    /// this session's maps, and attaches it.
    fn attach_fentry_extra(&mut self, func: &str) -> Result<()> {
        let load_err = |source| Error::Load {
            prog: "stackcount (fentry)",
            source,
        };
        let main = self.skel.object();
        // The copy must bear the skeleton's object name: libbpf names the
        // .rodata and .bss maps after it, and a copy whose knobs (-p, -c,
        // flare's own pid, the unwind mode) are not the skeleton's would
        // count every process.
        let mut builder = ObjectBuilder::default();
        if let Some(name) = main.name() {
            builder.name(name.to_string_lossy()).map_err(load_err)?;
        }
        let mut open = builder
            .open_memory(variant::open(self.unwind.build(), || {
                variant::pick(OBJECT, OBJECT_FP)
            }))
            .map_err(load_err)?;
        for mut map in open.maps_mut() {
            let name = map.name().to_string_lossy().into_owned();
            let shared = main
                .maps()
                .find(|m| m.name().to_string_lossy() == name)
                .ok_or_else(|| {
                    load_err(libbpf_rs::Error::from(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("the copy's map {name} is not among the skeleton's"),
                    )))
                })?;
            map.reuse_fd(shared.as_fd()).map_err(load_err)?;
        }
        for mut prog in open.progs_mut() {
            let is_fentry = prog.name().to_string_lossy() == "flare_sc_fentry";
            prog.set_autoload(is_fentry);
            if is_fentry {
                prog.set_attach_target(0, Some(func.to_string()))
                    .map_err(|e| no_kernel_probes(&self.pattern, &no_btf(func, e)))?;
            }
        }
        let object = open
            .load()
            .map_err(|e| no_kernel_probes(&self.pattern, &e))?;
        for prog in object.progs_mut() {
            if prog.name().to_string_lossy() == "flare_sc_fentry" {
                let link = prog
                    .attach_trace()
                    .map_err(attach_err(format!("fentry to {func}")))?;
                self._links.push(link);
            }
        }
        self._extra.push(object);
        Ok(())
    }
}
