//! Feature probes, the one place every tool asks what this kernel can do:
//! what it can attach to, tested by loading a trivial program where that
//! is possible rather than guessed from its version, so that tools can
//! choose the best way to attach and explain the choice when none works.

use std::ffi::CString;
use std::path::Path;

use libbpf_rs::libbpf_sys as sys;

use crate::system::kernel_version;

/// True when a `tp_btf` (BTF-typed tracepoint) program for tracepoint `tp`
/// loads: the kernel has BTF for the tracepoint and BPF tracing programs
/// are allowed (lockdown or an old kernel may refuse them).
pub fn tp_btf(tp: &str) -> bool {
    let Ok(name) = CString::new(format!("btf_trace_{tp}")) else {
        return false;
    };
    // SAFETY: btf__load_vmlinux_btf returns an owned object or NULL (libbpf
    // 1.0 mode); it is freed below and not used afterwards.
    let btf = unsafe { sys::btf__load_vmlinux_btf() };
    if btf.is_null() {
        return false;
    }
    // SAFETY: btf is valid and name is a NUL-terminated string.
    let id = unsafe { sys::btf__find_by_name_kind(btf, name.as_ptr(), sys::BTF_KIND_TYPEDEF) };
    // SAFETY: btf came from btf__load_vmlinux_btf and is freed once.
    unsafe { sys::btf__free(btf) };
    if id <= 0 {
        return false;
    }
    // r0 = 0; exit
    // SAFETY: bpf_insn is a plain C struct; all zeroes is a valid value.
    let mut insns: [sys::bpf_insn; 2] = unsafe { std::mem::zeroed() };
    insns[0].code = (sys::BPF_ALU64 | sys::BPF_MOV | sys::BPF_K) as u8;
    insns[1].code = (sys::BPF_JMP | sys::BPF_EXIT) as u8;
    // SAFETY: as above, all zeroes is a valid (empty) options struct.
    let mut opts: sys::bpf_prog_load_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<sys::bpf_prog_load_opts>() as _;
    opts.expected_attach_type = sys::BPF_TRACE_RAW_TP;
    opts.attach_btf_id = id as u32;
    let license = c"GPL";
    // SAFETY: the instructions, license and options outlive the call;
    // bpf_prog_load returns a new descriptor or a negative error.
    let fd = unsafe {
        sys::bpf_prog_load(
            sys::BPF_PROG_TYPE_TRACING,
            std::ptr::null(),
            license.as_ptr(),
            insns.as_ptr(),
            insns.len() as _,
            &mut opts,
        )
    };
    if fd < 0 {
        return false;
    }
    // SAFETY: fd is a descriptor we own and close once.
    unsafe { libc::close(fd) };
    true
}

/// False when this process may not load BPF programs that sample (a
/// trivial perf-event program is refused with EPERM or EACCES: no root,
/// no CAP_BPF and CAP_PERFMON). Other failures count as allowed, so that
/// loading the real program reports them.
pub fn bpf_allowed() -> bool {
    crate::system::raise_memlock();
    // r0 = 0; exit
    // SAFETY: bpf_insn is a plain C struct; all zeroes is a valid value.
    let mut insns: [sys::bpf_insn; 2] = unsafe { std::mem::zeroed() };
    insns[0].code = (sys::BPF_ALU64 | sys::BPF_MOV | sys::BPF_K) as u8;
    insns[1].code = (sys::BPF_JMP | sys::BPF_EXIT) as u8;
    let license = c"GPL";
    // SAFETY: the instructions and license outlive the call; NULL options
    // are allowed; bpf_prog_load returns a new descriptor or a negative
    // error.
    let fd = unsafe {
        sys::bpf_prog_load(
            sys::BPF_PROG_TYPE_PERF_EVENT,
            std::ptr::null(),
            license.as_ptr(),
            insns.as_ptr(),
            insns.len() as _,
            std::ptr::null_mut(),
        )
    };
    if fd >= 0 {
        // SAFETY: fd is a descriptor we own and close once.
        unsafe { libc::close(fd) };
        return true;
    }
    !matches!(-fd, libc::EPERM | libc::EACCES)
}

/// True when raw tracepoint programs can be loaded (Linux 4.17 and later).
pub fn raw_tp() -> bool {
    // SAFETY: the probe takes no pointers besides the (NULL) options.
    unsafe {
        sys::libbpf_probe_bpf_prog_type(sys::BPF_PROG_TYPE_RAW_TRACEPOINT, std::ptr::null()) == 1
    }
}

/// True when the kernel can place kprobes: it has the perf kprobe event
/// source libbpf attaches through (or the older tracefs interface).
pub fn kprobes() -> bool {
    Path::new("/sys/bus/event_source/devices/kprobe").exists()
        || Path::new("/sys/kernel/tracing/kprobe_events").exists()
        || Path::new("/sys/kernel/debug/tracing/kprobe_events").exists()
}

/// The name under which kernel function `func` can be probed: the plain
/// name, or a compiler-made variant such as `finish_task_switch.isra.0`,
/// from /proc/kallsyms.
pub fn kernel_symbol(func: &str) -> Option<String> {
    let syms = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let mut variant = None;
    for line in syms.lines() {
        let Some(name) = line.split_whitespace().nth(2) else {
            continue;
        };
        if name == func {
            return Some(name.to_string());
        }
        if variant.is_none()
            && name
                .strip_prefix(func)
                .is_some_and(|rest| rest.starts_with('.'))
        {
            variant = Some(name.to_string());
        }
    }
    variant
}

/// True when multi-kprobe links may exist (5.18+); attaching still falls
/// back to single kprobes if the kernel lacks fprobe support.
pub fn may_have_kprobe_multi() -> bool {
    kernel_version() >= (5, 18)
}

/// True when uprobe multi-links may exist (6.6+). Loading a program of
/// that kind fails on older kernels, so it is only loaded when this holds.
pub fn may_have_uprobe_multi() -> bool {
    kernel_version() >= (6, 6)
}

/// Why fentry may be refused, for the error message: kernel lockdown.
pub fn lockdown() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/security/lockdown").ok()?;
    let active = text
        .split_whitespace()
        .find(|w| w.starts_with('['))?
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    (active != "none").then_some(active)
}
