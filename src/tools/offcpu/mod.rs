//! `flare offcputime`, `wakeuptime` and `offwaketime`: where threads block,
//! for how long, and who wakes them, summed in the kernel by stack.
//!
//! One BPF object (`offcpu.bpf.c`) serves the three tools; [`Tool`] picks
//! its mode. [`Config`] is the plain form of a command line, [`header`] is
//! bcc's first line for it, [`Session`] loads, attaches and is the tools'
//! collector, and [`tidy_samples`] finishes symbolized samples (tracing
//! frames off the top of kernel stacks, wakeuptime's per-name keys).

mod session;
mod tidy;

use std::time::Duration;

pub(crate) use session::meta;
pub use session::Session;
pub use tidy::{is_tracing_frame, tidy_samples};

use crate::collect::{Recording, Stacks};
use crate::error::{Error, Result};

/// Which of the three tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// Off-CPU time by the blocked thread's stack.
    OffCpu,
    /// Time from sleep to wakeup by the waker's stack.
    Wakeup,
    /// Off-CPU time by the blocked thread's stack and its waker's.
    OffWake,
}

impl Tool {
    /// The command's name, as bcc calls the tool.
    pub fn name(self) -> &'static str {
        match self {
            Tool::OffCpu => "offcputime",
            Tool::Wakeup => "wakeuptime",
            Tool::OffWake => "offwaketime",
        }
    }
}

/// Which blocked threads to trace (bcc's -p, -t, -u, -k).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Threads {
    #[default]
    All,
    /// Threads of these processes.
    Pids(Vec<u32>),
    /// These threads.
    Tids(Vec<u32>),
    /// No kernel threads.
    User,
    /// Kernel threads only.
    Kernel,
}

/// How the programs attach to the scheduler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Attach {
    /// The first that works of tp_btf, raw_tp, kprobes.
    #[default]
    Auto,
    /// BTF-typed tracepoints (Linux 5.5+).
    TpBtf,
    /// Raw tracepoints (Linux 4.17+).
    RawTp,
    /// kprobes on finish_task_switch and try_to_wake_up.
    Kprobe,
}

impl Attach {
    pub fn name(self) -> &'static str {
        match self {
            Attach::Auto => "auto",
            Attach::TpBtf => "tp_btf",
            Attach::RawTp => "raw_tp",
            Attach::Kprobe => "kprobe",
        }
    }
}

/// Everything one of the tools was asked to do.
#[derive(Clone, Debug)]
pub struct Config {
    pub tool: Tool,
    pub threads: Threads,
    /// Trace only threads leaving the CPU in this state (bcc's --state: 0
    /// is running, i.e. preempted; other values are a bitmask).
    pub state: Option<u64>,
    /// Blocked periods shorter than this (microseconds) are dropped.
    pub min_us: u64,
    /// Blocked periods longer than this (microseconds) are dropped.
    pub max_us: u64,
    /// Blocked periods shorter than this (microseconds) are sampled: each
    /// is kept with probability length / `sample_us` and counted as
    /// `sample_us` long (true sums on average, far fewer records on a busy
    /// machine). 0, bcc's way: every period is counted as it is.
    pub sample_us: u64,
    /// Threads that can be blocked at once and still be tracked.
    pub blocked_storage_size: u32,
    pub attach: Attach,
    /// `None`: until stopped.
    pub duration: Option<Duration>,
    /// With [`Threads::Pids`] of one launched command (`-- CMD`): the
    /// processes it starts are traced too.
    pub follow_children: bool,
    /// offcputime's `-s`: frame names with the offset into their function.
    pub offsets: bool,
    /// Which stacks, walked how, into maps of what size.
    pub recording: Recording,
}

impl Config {
    /// bcc's defaults for `tool`.
    pub fn new(tool: Tool) -> Self {
        Config {
            tool,
            threads: Threads::All,
            state: None,
            min_us: 1,
            max_us: u64::MAX,
            sample_us: 0,
            blocked_storage_size: crate::defaults::BLOCKED_STORAGE_SIZE,
            attach: Attach::Auto,
            duration: None,
            follow_children: false,
            offsets: false,
            recording: Recording {
                stacks: Stacks {
                    user: tool != Tool::Wakeup,
                    kernel: true,
                },
                // bcc's offwaketime still defaults to 1024, which its
                // siblings left for 16384: with two stacks per side, 1024
                // buckets collide (-EEXIST) within seconds on a busy host.
                stack_storage_size: crate::defaults::STACK_STORAGE_SIZE,
                hash_storage_size: 10240,
                ..Recording::default()
            },
        }
    }

    /// Fails when the options contradict each other: a minimum block time
    /// above the maximum would keep nothing.
    pub fn validate(&self) -> Result<()> {
        if self.min_us > self.max_us {
            return Err(Error::Unsupported(format!(
                "the minimum block time ({} us, -m) is above the maximum ({} us, -M): nothing would be kept",
                self.min_us, self.max_us
            )));
        }
        check_sampling(self.sample_us)
    }
}

/// With blocked periods sampled over `sample_us`, one preemption in this
/// many is tracked (and stands for as many): a preempted thread waits a
/// few scheduler slices, under 4 ms, which sampling keeps with
/// probability length / `sample_us` anyway, so tracking one in
/// `sample_us` / 4 ms loses nothing for those, and spares walking and
/// storing the stacks of the rest (BPF's flare_preempt_scale). 1: all.
pub fn preempt_every(sample_us: u64) -> u32 {
    u32::try_from(sample_us / 4000).unwrap_or(u32::MAX).max(1)
}

/// A blocked period of `len` counted by user space, sampled over
/// `every` as BPF's flare_sampled samples those the kernel counts: one
/// shorter than `every` is kept with probability `len` / `every` and then
/// counts `every`; `None` when it is not kept. `random` is uniform over
/// the u32s.
pub fn sampled(len: u64, every: u64, random: u32) -> Option<u64> {
    if every == 0 || len >= every {
        return Some(len);
    }
    ((u64::from(random) * every) >> 32 < len).then_some(every)
}

/// Blocked periods are sampled over at most a second (the BPF side draws
/// within 2^32 nanoseconds).
pub fn check_sampling(sample_us: u64) -> Result<()> {
    if sample_us > 1_000_000 {
        return Err(Error::Unsupported(format!(
            "blocked periods are sampled over at most 1000 ms, not {} ms",
            sample_us / 1000
        )));
    }
    Ok(())
}

/// Who is traced, in bcc's words (`PID 185`, `user threads`).
pub fn thread_context(threads: &Threads) -> String {
    let ids = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    match threads {
        Threads::All => "all threads".into(),
        Threads::Pids(p) => format!("PID {}", ids(p)),
        Threads::Tids(t) => format!("TID {}", ids(t)),
        Threads::User => "user threads".into(),
        Threads::Kernel => "kernel threads".into(),
    }
}

fn stack_context(stacks: Stacks) -> &'static str {
    match (stacks.user, stacks.kernel) {
        (true, false) => "user",
        (false, true) => "kernel",
        _ => "user + kernel",
    }
}

/// bcc's header line for these options (without the trailing newline).
pub fn header(c: &Config) -> String {
    let stacks = stack_context(c.recording.stacks);
    let mut line = match c.tool {
        Tool::OffCpu => format!(
            "Tracing off-CPU time (us) of {} by {stacks} stack",
            thread_context(&c.threads)
        ),
        Tool::Wakeup => format!("Tracing blocked time (us) by {stacks} stack"),
        Tool::OffWake => format!("Tracing blocked time (us) by {stacks} off-CPU and waker stack"),
    };
    match c.duration {
        Some(d) => line.push_str(&format!(" for {} secs.", d.as_secs())),
        None => line.push_str("... Hit Ctrl-C to end."),
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_above_max_is_refused() {
        let mut c = Config::new(Tool::OffCpu);
        (c.min_us, c.max_us) = (100, 10);
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("(100 us, -m) is above the maximum (10 us, -M)"),
            "{err}"
        );
        (c.min_us, c.max_us) = (10, 10);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn headers_match_bcc() {
        let mut c = Config::new(Tool::OffCpu);
        assert_eq!(
            header(&c),
            "Tracing off-CPU time (us) of all threads by user + kernel stack... Hit Ctrl-C to end."
        );
        c.threads = Threads::Pids(vec![185]);
        c.recording.stacks.user = false;
        c.duration = Some(Duration::from_secs(5));
        assert_eq!(
            header(&c),
            "Tracing off-CPU time (us) of PID 185 by kernel stack for 5 secs."
        );
        c.threads = Threads::User;
        assert!(header(&c).contains(" of user threads by "));
        let w = Config::new(Tool::Wakeup);
        assert_eq!(
            header(&w),
            "Tracing blocked time (us) by kernel stack... Hit Ctrl-C to end."
        );
        let mut o = Config::new(Tool::OffWake);
        o.duration = Some(Duration::from_secs(3));
        assert_eq!(
            header(&o),
            "Tracing blocked time (us) by user + kernel off-CPU and waker stack for 3 secs."
        );
    }

    #[test]
    fn defaults_match_bcc() {
        assert_eq!(
            Config::new(Tool::OffWake).recording.stack_storage_size,
            16384
        );
        assert_eq!(
            Config::new(Tool::OffCpu).recording.stack_storage_size,
            16384
        );
        let w = Config::new(Tool::Wakeup);
        assert!(!w.recording.stacks.user && w.recording.stacks.kernel);
        assert_eq!((w.min_us, w.max_us), (1, u64::MAX));
    }

    #[test]
    fn one_preemption_in_the_sampling_period_over_4_ms_is_tracked() {
        assert_eq!(preempt_every(0), 1, "no sampling: every one");
        assert_eq!(preempt_every(5_025), 1, "199 Hz");
        assert_eq!(preempt_every(20_408), 5, "49 Hz");
        assert_eq!(preempt_every(52_631), 13, "19 Hz, the agent's");
        assert_eq!(preempt_every(1_000_000), 250);
    }

    #[test]
    fn periods_counted_in_user_space_are_sampled_as_the_kernel_does() {
        let every = 20_000_000;
        assert_eq!(sampled(5, 0, 0), Some(5), "not sampled");
        assert_eq!(
            sampled(every + 1, every, 0),
            Some(every + 1),
            "long: as it is"
        );
        // A quarter of a period is kept for a quarter of the draws.
        let kept = (0..1024u32)
            .filter_map(|i| sampled(every / 4, every, i << 22))
            .collect::<Vec<_>>();
        assert_eq!(kept.len(), 256);
        assert!(
            kept.iter().all(|&v| v == every),
            "each counts a whole period"
        );
    }
}
