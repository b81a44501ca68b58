//! A runtime's side of perf-event mode (`flare profile` without root),
//! where no BPF program reads runtime frames at the sample's moment: the
//! collector offers each runtime a sample's frames while it walks them
//! ([`PerfRuntime::stepper`], as Java's frames are stepped) and once
//! walked ([`PerfRuntime::splice`], as Python's are read from the thread
//! and put in place of the eval loop's), and keeps each runtime's
//! processes by (process id, start) as [`Procs`] here say. Frames read
//! from the live thread after its sample are only worth it while the
//! thread has not moved on: [`late`] says when, on this machine's time
//! scale ([`slowdown`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::collect::{RawFrame, RuntimeFinds};
use crate::procmaps::Mappings;

/// The registers a step starts from and gives the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    pub pc: u64,
    pub sp: u64,
    pub bp: u64,
}

/// What is known of the interrupted (leaf) frame's registers besides pc,
/// sp and the frame pointer: HotSpot's interpreter's bytecode pointer
/// register (r13 on x86-64, x22 on arm64), arm64's link register, x30,
/// and CRuby's loop's instruction pointer and control frame registers
/// (r14 and r15; x19 and x20).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Leaf {
    pub bcp: u64,
    pub lr: u64,
    pub ruby_pc: u64,
    pub ruby_cfp: u64,
}

/// What one sample's walk asks of a runtime: the frame at `regs`, when it
/// is the runtime's, as a stack record's words (header first) and the
/// caller's registers; `stack` reads the sample's copy of the stack.
pub trait Stepper {
    fn step(
        &mut self,
        stack: &dyn Fn(u64) -> Option<u64>,
        regs: Regs,
        return_address: bool,
    ) -> Option<([u64; 4], Regs)>;
}

/// A runtime in perf-event mode.
pub trait PerfRuntime: Send {
    /// What names its frames: the processes it found.
    fn finds(&self) -> Arc<dyn RuntimeFinds>;

    /// Whether a process mapping `mappings` runs it, as far as its file
    /// names tell: its samples then copy the most stack perf events allow.
    fn wants_whole_stack(&self, _mappings: &Mappings, _pid: u32) -> bool {
        false
    }

    /// The stepper for a sample of process `pid` (started at `start`)
    /// whose leaf's other registers are `leaf`, when its frames are
    /// stepped in the walk and it runs the runtime.
    fn stepper(
        &mut self,
        _pid: u32,
        _start: u64,
        _leaf: Leaf,
        _mappings: &Mappings,
    ) -> Option<Box<dyn Stepper + '_>> {
        None
    }

    /// The user stack `pcs` (leaf first, its registers `leaf`) of a
    /// sample of thread `tid` of process `pid` (started at `start`) taken
    /// at `time` (monotonic nanoseconds) with the runtime's frames in
    /// place, when the process runs it and they could be read.
    #[allow(clippy::too_many_arguments)]
    fn splice(
        &mut self,
        _pid: u32,
        _start: u64,
        _tid: u32,
        _time: u64,
        _pcs: &[u64],
        _leaf: Leaf,
        _mappings: &Mappings,
    ) -> Option<Vec<RawFrame>> {
        None
    }
}

/// What a process is to a runtime's reader (Python's, Java's), by its
/// (process id, start).
pub enum Entry<T> {
    /// The runtime, found, and what reading it needs.
    Found(T),
    /// Not ready yet (a runtime starting): tried again after
    /// [`RETRY_GAP`](crate::runtime::tracker::RETRY_GAP), until `until`
    /// if there is one.
    Retry {
        at: std::time::Instant,
        until: Option<std::time::Instant>,
    },
    /// Native frames only.
    Native,
    /// No runtime found yet (looked at again when it maps more).
    NotYet(NoRuntime),
}

/// A runtime reader's processes, by (process id, start).
pub type Procs<T> = HashMap<(u32, u64), Entry<T>>;

impl<T> Entry<T> {
    /// Not ready: tried again after a while, for as long as it takes.
    pub fn retry() -> Self {
        Entry::Retry {
            at: std::time::Instant::now(),
            until: None,
        }
    }

    /// Whether to look at process `pid`, whose entry is `entry` (`None`:
    /// not seen yet), again.
    pub fn due(entry: Option<&mut Self>, pid: u32, mappings: &Mappings) -> bool {
        match entry {
            None => true,
            Some(Entry::Retry { at, .. }) => at.elapsed() >= crate::runtime::tracker::RETRY_GAP,
            Some(Entry::NotYet(no)) => no.due(pid, mappings),
            Some(_) => false,
        }
    }
}

/// A process in which no runtime was found, as it was mapped then: the
/// samples that come first may precede the runtime's library (a `java`
/// launcher before it loads libjvm, a program that loads libpython
/// later), so the process is looked at again, at most every
/// [`RETRY_GAP`](crate::runtime::tracker::RETRY_GAP), once it maps
/// something else.
pub struct NoRuntime {
    at: std::time::Instant,
    /// How many mappings the process had when looked at.
    objects: usize,
}

impl NoRuntime {
    /// Found none in a process of `objects` mappings.
    pub fn new(objects: usize) -> NoRuntime {
        NoRuntime {
            at: std::time::Instant::now(),
            objects,
        }
    }

    /// Whether to look at process `pid` again.
    pub fn due(&mut self, pid: u32, mappings: &Mappings) -> bool {
        if self.at.elapsed() < crate::runtime::tracker::RETRY_GAP {
            return false;
        }
        self.at = std::time::Instant::now();
        mappings.space(pid, None).map(|s| s.mappings.len()) != Some(self.objects)
    }
}

/// A runtime's processes as perf-event mode finds them, each looked at
/// with the same lifecycle: found (and put in the registry its namer
/// reads), not ready yet (tried again, until detection has spent its
/// budget on the process), unsupported (said once, native frames), none
/// yet (looked at again when the process maps more).
pub struct Finder<R: crate::runtime::Runtime, T> {
    pub registry: crate::runtime::tracker::Registry<R::Process>,
    detector: R::Detector,
    /// By (process id, start): what the runtime's reader keeps of each.
    pub procs: Procs<T>,
    said: std::collections::HashSet<String>,
    /// What detection spent on processes not ready yet.
    spent: crate::runtime::tracker::Spent,
    /// The processes found, as mapped then: found again once they map
    /// more (V8 copies its builtins beside its code after start-up).
    mapped: HashMap<(u32, u64), NoRuntime>,
}

impl<R: crate::runtime::Runtime, T> Default for Finder<R, T> {
    fn default() -> Self {
        Finder {
            registry: Default::default(),
            detector: Default::default(),
            procs: Procs::new(),
            said: Default::default(),
            spent: Default::default(),
            mapped: HashMap::new(),
        }
    }
}

impl<R: crate::runtime::Runtime, T> Finder<R, T> {
    /// What process `pid` (started at `start`) is to the runtime, looked
    /// at again when due; `found` makes the reader's entry of a process
    /// found.
    pub fn get(
        &mut self,
        pid: u32,
        start: u64,
        mappings: &Mappings,
        found: impl FnOnce(Arc<R::Process>) -> T,
    ) -> Option<&mut T> {
        let key = (pid, start);
        let again = match self.procs.get_mut(&key) {
            Some(Entry::Found(_)) => self
                .mapped
                .get_mut(&key)
                .is_some_and(|m| m.due(pid, mappings)),
            entry => Entry::due(entry, pid, mappings),
        };
        if again {
            let entry = self.look(pid, mappings, found);
            let known = matches!(self.procs.get(&key), Some(Entry::Found(_)));
            if let (Entry::Found(_), Some(space)) = (&entry, mappings.space(pid, None)) {
                self.mapped
                    .insert(key, NoRuntime::new(space.mappings.len()));
            }
            // A process found before keeps what was found then unless
            // found again.
            if !known || matches!(entry, Entry::Found(_)) {
                self.procs.insert(key, entry);
            }
        }
        match self.procs.get_mut(&(pid, start)) {
            Some(Entry::Found(t)) => Some(t),
            _ => None,
        }
    }

    fn look(
        &mut self,
        pid: u32,
        mappings: &Mappings,
        found: impl FnOnce(Arc<R::Process>) -> T,
    ) -> Entry<T> {
        use crate::runtime::tracker::Found;
        let Some(maps) = crate::unwind::procs::tracked_mappings(mappings, pid) else {
            return Entry::Native;
        };
        let mem = crate::runtime::memory::Pages::new(crate::runtime::memory::ProcessMemory { pid });
        let started = std::time::Instant::now();
        let detected = R::detect(&mut self.detector, pid, &maps, &mem);
        let took = started.elapsed();
        let entry = match detected {
            Found::Yes(p) => {
                let p = Arc::new(p);
                if let Ok(mut r) = self.registry.lock() {
                    r.insert(pid, p.clone());
                }
                Entry::Found(found(p))
            }
            Found::NotReady => match self.spent.over_budget(pid, took, R::NAME) {
                Some(why) => {
                    crate::runtime::note_unsupported::<R>(&mut self.said, why);
                    Entry::Native
                }
                None => Entry::retry(),
            },
            Found::Unsupported(why) => {
                crate::runtime::note_unsupported::<R>(&mut self.said, why);
                Entry::Native
            }
            Found::No => Entry::NotYet(NoRuntime::new(maps.len())),
        };
        if !matches!(entry, Entry::Retry { .. }) {
            self.spent.forget(pid);
        }
        entry
    }
}

/// Whether a sample taken at `time` (monotonic nanoseconds) and read at
/// `now` is too late for its thread's frames to be read live: later than
/// `max_lag_ns` on a machine of the speed the bounds were measured on,
/// `slowdown` times that on this one.
///
/// The bound is a measure of how far the thread may have run since its
/// sample, and what a thread does in a millisecond depends on the
/// machine: an emulated arm64 guest (QEMU's TCG) runs both the program
/// and the reader some 20-50 times slower, so a fixed wall-clock bound
/// dropped most of its reads while the thread had run no further than
/// on real hardware. What the thread itself ran since the sample would
/// be the exact measure, but the sample does not carry the thread's CPU
/// time (perf events refuse `PERF_SAMPLE_READ` with `inherit` before
/// Linux 6.12, and a per-CPU event counts one CPU's share only), and
/// /proc gives its CPU time now, not then.
pub fn late(time: u64, now: u64, max_lag_ns: u64, slowdown: f64) -> bool {
    now.saturating_sub(time) as f64 > max_lag_ns as f64 * slowdown
}

/// [`late`] now, on this machine: whether a sample taken at `time` is
/// read too late for a runtime whose bound is `max_lag_ns`.
pub fn late_now(time: u64, max_lag_ns: u64) -> bool {
    late(time, crate::procmaps::now(), max_lag_ns, slowdown())
}

/// How many times slower than the machine the lag bounds were measured
/// on this one runs flare's kind of work, at least 1 (a faster machine
/// keeps the bounds) and at most [`MAX_SLOWDOWN`]: measured once, the
/// first time it is asked, by timing a fixed job ([`job`]).
pub fn slowdown() -> f64 {
    static SLOWDOWN: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *SLOWDOWN.get_or_init(|| factor(calibrate(), REFERENCE_NS))
}

/// The most [`slowdown`] says: beyond it the bounds would keep reads of
/// threads that have run on for a long time whatever the machine.
pub const MAX_SLOWDOWN: f64 = 64.0;

/// [`job`]'s time, the least of several runs, on the machine the lag
/// bounds were measured on: an x86-64 cloud VM of 2 cores, beside
/// parallel builds (113-129 µs).
const REFERENCE_NS: u64 = 113_000;

/// Runs of [`job`] timed: the least is the machine's speed, the others
/// were interrupted or shared the core.
const RUNS: usize = 7;

/// The slowdown a job time of `measured_ns` means against
/// `reference_ns`, within 1 and [`MAX_SLOWDOWN`].
fn factor(measured_ns: u64, reference_ns: u64) -> f64 {
    (measured_ns as f64 / reference_ns.max(1) as f64).clamp(1.0, MAX_SLOWDOWN)
}

/// The least time of [`RUNS`] runs of [`job`], in nanoseconds.
fn calibrate() -> u64 {
    let table = chain(TABLE);
    (0..RUNS)
        .map(|_| {
            let started = std::time::Instant::now();
            std::hint::black_box(job(std::hint::black_box(&table)));
            started.elapsed().as_nanos() as u64
        })
        .min()
        .unwrap_or(REFERENCE_NS)
}

/// Entries of [`job`]'s table: 16 KiB, in the first level of cache.
const TABLE: usize = 4096;
/// Steps of [`job`].
const STEPS: usize = 10_000;

/// One cycle through all of `n` slots, in a scrambled order (Sattolo's
/// shuffle, driven by a fixed generator): each slot holds the next's
/// index.
fn chain(n: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % i as u64) as usize);
    }
    let mut next = vec![0u32; n];
    for i in 0..n {
        next[order[i] as usize] = order[(i + 1) % n];
    }
    next
}

/// The timed job: what an interpreter and a frame reader do most, a
/// load that depends on the last one and a call through a table chosen
/// by what was loaded (an interpreter's dispatch; the costliest thing to
/// emulate); [`STEPS`] of them through `table`. Returns a sum so that
/// none of it is left out.
fn job(table: &[u32]) -> u64 {
    fn add(sum: u64, v: u64) -> u64 {
        sum.wrapping_mul(31).wrapping_add(v)
    }
    fn xor(sum: u64, v: u64) -> u64 {
        sum ^ v << 3
    }
    fn rotate(sum: u64, v: u64) -> u64 {
        sum.rotate_left(v as u32 & 63)
    }
    fn sub(sum: u64, v: u64) -> u64 {
        sum.wrapping_sub(v)
    }
    let ops: [fn(u64, u64) -> u64; 4] = std::hint::black_box([add, xor, rotate, sub]);
    let (mut i, mut sum) = (0usize, 0u64);
    for _ in 0..STEPS {
        let next = table[i] as usize;
        sum = ops[next & 3](sum, next as u64);
        i = next;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_late_past_the_bound_scaled_by_the_slowdown() {
        let ms = 1_000_000;
        assert!(!late(10 * ms, 12 * ms, 2 * ms, 1.0));
        assert!(late(10 * ms, 12 * ms + 1, 2 * ms, 1.0));
        // Twenty times slower: 40 ms is what 2 ms is on the reference.
        assert!(!late(10 * ms, 50 * ms, 2 * ms, 20.0));
        assert!(late(10 * ms, 51 * ms, 2 * ms, 20.0));
        // Read before the sample's time (clocks of two CPUs): not late.
        assert!(!late(10 * ms, 9 * ms, 2 * ms, 1.0));
    }

    #[test]
    fn the_slowdown_is_never_below_one_nor_above_its_cap() {
        assert_eq!(factor(30_000, 60_000), 1.0);
        assert_eq!(factor(60_000, 60_000), 1.0);
        assert_eq!(factor(1_200_000, 60_000), 20.0);
        assert_eq!(factor(u64::MAX, 60_000), MAX_SLOWDOWN);
        assert_eq!(factor(60_000, 0), MAX_SLOWDOWN);
    }

    #[test]
    fn the_job_walks_one_cycle_through_every_slot() {
        let table = chain(TABLE);
        let (mut i, mut seen) = (0usize, vec![false; TABLE]);
        for _ in 0..TABLE {
            assert!(!seen[i], "slot {i} twice");
            seen[i] = true;
            i = table[i] as usize;
        }
        assert_eq!(i, 0);
        // Deterministic: the same sum on every machine.
        assert_eq!(job(&table), job(&chain(TABLE)));
    }

    /// The measured speed of this machine, for REFERENCE_NS (`cargo test
    /// --release calibration -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn calibration() {
        for _ in 0..5 {
            println!("job: {} ns, slowdown {}", calibrate(), slowdown());
        }
    }
}
