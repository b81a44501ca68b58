//! The start-up steps every tool's loader shares: checks that fail early
//! with a clear message (privileges, BTF, the targets and the CPU exist),
//! limits raised where the kernel still charges them, the knobs that every
//! BPF program has in its read-only data (stacks, PID namespace, flare's
//! own process), and filling a target-id map.

use libbpf_rs::{MapCore, MapFlags};

use crate::error::{Error, Result};
use crate::system;

/// What a tool will watch, checked before anything is loaded.
#[derive(Clone, Copy, Debug, Default)]
pub struct Targets<'a> {
    /// Processes that must exist.
    pub pids: &'a [u32],
    /// Threads that must exist.
    pub tids: &'a [u32],
    /// A CPU that must be online.
    pub cpu: Option<u32>,
}

/// Checks the environment and the targets, then raises the limits BPF
/// and per-thread perf events may need (failures to raise are not fatal:
/// newer kernels charge BPF memory to the cgroup instead).
pub fn prepare(targets: Targets<'_>) -> Result<()> {
    system::check_environment()?;
    targets
        .pids
        .iter()
        .try_for_each(|&p| system::check_process(p))?;
    targets
        .tids
        .iter()
        .try_for_each(|&t| system::check_thread(t))?;
    if let Some(cpu) = targets.cpu {
        system::check_cpu(cpu)?;
    }
    system::raise_memlock();
    system::raise_nofile();
    Ok(())
}

/// The knobs every flare BPF program has (`flare.bpf.h`), in the form the
/// skeletons' read-only data takes them.
#[derive(Clone, Copy, Debug)]
pub struct CommonKnobs {
    pub user_stacks: bool,
    pub kernel_stacks: bool,
    /// flare's own process id as its PID namespace sees it, or 0 to
    /// profile flare too.
    pub self_tgid: u32,
    /// flare's PID namespace (device, inode) when it is not the initial
    /// one.
    pub pidns: Option<(u64, u64)>,
    /// A launched command's process whose descendants are targets too, or
    /// 0 (see [`CommonKnobs::following`]).
    pub follow_tgid: u32,
    /// The bits of a stack's hash that make its id in the stack storage:
    /// all, unless `FLARE_TEST_STACK_HASH_BITS` narrows them (tests make
    /// different stacks collide on purpose, to see them kept apart).
    pub stack_hash_mask: u64,
    /// User stacks end in a test runtime frame (`FLARE_TEST_RUNTIME_FRAME`
    /// is 1), for tests of frames that are not addresses.
    pub test_runtime_frame: bool,
    /// The size in bytes of the ring time-stamped records are sent to
    /// (`bpf/timed.h`), or 0 when the run counts in the kernel.
    pub timed_ring: u64,
    /// The frames the kernel's own walk stops at
    /// ([`system::perf_event_max_stack`]; BPF asks for 1,024 at most).
    pub kernel_max_frames: u32,
}

/// The stack hash mask `FLARE_TEST_STACK_HASH_BITS` asks for (all bits
/// when unset or not a number below 64).
fn stack_hash_mask() -> u64 {
    std::env::var("FLARE_TEST_STACK_HASH_BITS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&b| b < 64)
        .map_or(!0, |b| (1u64 << b) - 1)
}

impl CommonKnobs {
    /// The knobs for a run recording both stacks; flare's own process is
    /// left out unless `include_self`.
    pub fn new(include_self: bool) -> Self {
        CommonKnobs {
            user_stacks: true,
            kernel_stacks: true,
            self_tgid: if include_self { 0 } else { std::process::id() },
            pidns: system::pid_namespace(),
            follow_tgid: 0,
            stack_hash_mask: stack_hash_mask(),
            test_runtime_frame: std::env::var_os("FLARE_TEST_RUNTIME_FRAME")
                .is_some_and(|v| v == "1"),
            timed_ring: 0,
            kernel_max_frames: system::perf_event_max_stack(),
        }
    }

    /// Sends time-stamped records to a ring of `bytes` (a power of two
    /// number of pages) instead of counting, when `Some`.
    pub fn timed(mut self, bytes: Option<u64>) -> Self {
        self.timed_ring = bytes.unwrap_or(0);
        self
    }

    /// Records user stacks only if `user`, kernel stacks only if `kernel`
    /// (bcc's `-U` and `-K`).
    pub fn recording(mut self, user: bool, kernel: bool) -> Self {
        self.user_stacks = user;
        self.kernel_stacks = kernel;
        self
    }

    /// Also targets the processes `pid` starts, at any depth (`-- CMD`).
    /// The BPF side compares ids of the initial PID namespace, so inside
    /// another one only `pid` itself is followed (through the targets).
    pub fn following(mut self, pid: Option<u32>) -> Self {
        if self.pidns.is_none() {
            self.follow_tgid = pid.unwrap_or(0);
        }
        self
    }
}

/// Sets [`CommonKnobs`] in a skeleton's read-only data (every program's
/// rodata has these fields, from `flare.bpf.h`).
#[macro_export]
macro_rules! set_common_knobs {
    ($ro:expr, $knobs:expr) => {{
        let k: $crate::bpf::loader::CommonKnobs = $knobs;
        $ro.user_stacks = k.user_stacks;
        $ro.kernel_stacks = k.kernel_stacks;
        $ro.self_tgid = k.self_tgid;
        $ro.follow_tgid = k.follow_tgid;
        $ro.stack_hash_mask = k.stack_hash_mask;
        $ro.test_runtime_frame = k.test_runtime_frame;
        $ro.kernel_max_frames = k.kernel_max_frames;
        if k.timed_ring > 0 {
            $ro.timed = true;
            $ro.timed_ring_size = k.timed_ring;
        }
        if let Some((dev, ino)) = k.pidns {
            $ro.use_pidns = true;
            $ro.pidns_dev = dev;
            $ro.pidns_ino = ino;
        }
    }};
}

/// The error for a failure to open or load program `prog`.
pub fn load_error(prog: &'static str) -> impl Fn(libbpf_rs::Error) -> Error + Copy {
    move |source| Error::Load { prog, source }
}

/// Marks each id in a `u32 -> u8` hash map of targets.
pub fn fill_targets<M: MapCore>(map: &M, ids: &[u32], prog: &'static str) -> Result<()> {
    for id in ids {
        map.update(&id.to_ne_bytes(), &[1u8], MapFlags::ANY)
            .map_err(load_error(prog))?;
    }
    Ok(())
}
