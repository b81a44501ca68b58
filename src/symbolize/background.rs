//! A symbolizer on its own thread, so that the slow part of symbolizing —
//! parsing kallsyms and the target's binaries — happens while samples are
//! still being collected, not after the user pressed Ctrl-C.
//!
//! The warm-up runs at idle priority (`SCHED_IDLE`): it only takes CPU the
//! profiled workload leaves free, so flare does not slow down what it
//! measures. Once results are wanted, the thread is put ahead of the
//! workload (nice -10) so that stop-to-output does not wait on a busy
//! machine. Between, it can be handed samples to learn from
//! ([`Background::learn`]): their runtime frames are named while their
//! processes still live, by a thread of their own at normal priority,
//! as a process may exit long before an idle warm-up is done (a JVM's
//! compiler threads keep every CPU busy while it runs).

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use super::{runtime, Options, RawSample, Symbolizer};
use crate::procmaps::Mappings;
use crate::profile::Sample;

/// A symbolizer thread that can resolve any number of batches, and a
/// thread that names runtime frames while their processes live.
pub struct Background {
    /// Samples to name and send back.
    requests: Option<Sender<Vec<RawSample>>>,
    results: Receiver<Vec<Sample>>,
    thread: Option<JoinHandle<()>>,
    priority: Arc<Mutex<Priority>>,
    /// Samples whose runtime frames to name now; nothing comes back.
    learn: Option<Sender<Vec<RawSample>>>,
    learner: Option<JoinHandle<()>>,
}

/// Whether the thread may still idle: shared so that lowering and raising
/// its priority cannot cross.
#[derive(Default)]
struct Priority {
    /// The thread's kernel id, once it runs at idle priority.
    idle_tid: Option<i32>,
    /// The thread's kernel id, once it runs.
    tid: Option<i32>,
    /// Results are wanted: no more idling.
    wanted: bool,
}

/// Sets the scheduling policy of thread `tid` (0: the calling thread).
/// Failure only means the warm-up competes with the workload as before.
fn set_policy(tid: i32, policy: libc::c_int) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads the parameter struct we pass and
    // acts on a thread of this process (or the caller); it has no other
    // effect on memory.
    let _ = unsafe { libc::sched_setscheduler(tid, policy, &param) };
}

/// The nice value of the thread once results are wanted: the user is
/// waiting for them, and on a machine kept busy by the workload a thread
/// at the workload's own priority would finish its warm-up at the pace
/// of one runnable task among many.
const WANTED_NICE: libc::c_int = -10;

/// Puts thread `tid` back to normal scheduling, ahead of the workload
/// (where allowed: raising priority needs CAP_SYS_NICE).
fn hurry(tid: i32) {
    set_policy(tid, libc::SCHED_OTHER);
    // SAFETY: setpriority takes no pointers; on Linux PRIO_PROCESS with a
    // thread id sets that thread's nice value.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, WANTED_NICE) };
}

impl Background {
    /// Starts the thread and has it warm up for the kernel (when `kernel`)
    /// and for the processes in `pids`.
    pub fn start(options: Options, kernel: bool, pids: Vec<u32>) -> Self {
        Self::with_mappings(options, Mappings::on_demand(), kernel, pids, Vec::new())
    }

    /// [`Background::start`] with processes' mappings from `mappings`
    /// (a [`crate::procmaps::Tracker`]'s, which knows exited processes)
    /// and a collector's `namers` of runtime frames.
    pub fn with_mappings(
        options: Options,
        mappings: Mappings,
        kernel: bool,
        pids: Vec<u32>,
        namers: crate::collect::Namers,
    ) -> Self {
        let (req_tx, req_rx) = mpsc::channel::<Vec<RawSample>>();
        let (res_tx, res_rx) = mpsc::channel();
        let (learn_tx, learn_rx) = mpsc::channel::<Vec<RawSample>>();
        let priority = Arc::new(Mutex::new(Priority::default()));
        let own = Arc::clone(&priority);
        let shared: runtime::Shared = Arc::default();
        runtime::lock(&shared).set(namers);
        let runtimes = Arc::clone(&shared);
        let learner = thread::Builder::new()
            .name("flare-learn".into())
            .spawn(move || {
                for raw in learn_rx {
                    runtime::lock(&runtimes).learn_samples(&raw);
                }
            })
            .ok();
        let thread = thread::Builder::new()
            .name("flare-symbolize".into())
            .spawn(move || {
                {
                    let mut p = own.lock().unwrap_or_else(|e| e.into_inner());
                    // SAFETY: gettid has no preconditions.
                    p.tid = Some(unsafe { libc::gettid() });
                    if p.wanted {
                        hurry(0);
                    } else {
                        set_policy(0, libc::SCHED_IDLE);
                        // SAFETY: gettid has no preconditions.
                        p.idle_tid = Some(unsafe { libc::gettid() });
                    }
                }
                let mut symbolizer = Symbolizer::with_mappings(options, mappings);
                symbolizer.share_runtimes(shared);
                symbolizer.warm(kernel, &pids);
                {
                    let mut p = own.lock().unwrap_or_else(|e| e.into_inner());
                    if p.idle_tid.take().is_some() {
                        set_policy(0, libc::SCHED_OTHER);
                    }
                }
                for raw in req_rx {
                    if res_tx.send(symbolizer.resolve(raw)).is_err() {
                        break;
                    }
                }
            })
            .ok();
        Background {
            requests: Some(req_tx),
            results: res_rx,
            thread,
            priority,
            learn: learner.as_ref().map(|_| learn_tx),
            learner,
        }
    }

    /// Resolves one batch (waiting for the warm-up if it is still going).
    /// Should the thread be gone, the batch is resolved here.
    pub fn resolve(&self, raw: Vec<RawSample>) -> Vec<Sample> {
        let Some(tx) = &self.requests else {
            return Symbolizer::new(Options::default()).resolve(raw);
        };
        // The rest of the warm-up, if any, is now on the way to output.
        {
            let mut p = self.priority.lock().unwrap_or_else(|e| e.into_inner());
            if !p.wanted {
                p.wanted = true;
                p.idle_tid = None;
                if let Some(tid) = p.tid {
                    hurry(tid);
                }
            }
        }
        match tx.send(raw) {
            Ok(()) => self.results.recv().unwrap_or_default(),
            Err(mpsc::SendError(raw)) => Symbolizer::new(Options::default()).resolve(raw),
        }
    }

    /// Has the runtime frames of `raw` named now, while their processes
    /// live, without waiting (see [`Symbolizer::learn`]).
    pub fn learn(&self, raw: Vec<RawSample>) {
        if let Some(tx) = &self.learn {
            let _ = tx.send(raw);
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.requests.take();
        self.learn.take();
        for t in [self.thread.take(), self.learner.take()]
            .into_iter()
            .flatten()
        {
            let _ = t.join();
        }
    }
}
