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
//! processes still live.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use super::{Options, RawSample, Symbolizer};
use crate::procmaps::Mappings;
use crate::profile::Sample;

/// What the thread is asked.
enum Request {
    /// Name these samples and send them back.
    Resolve(Vec<RawSample>),
    /// Name the runtime frames of these samples now; nothing comes back.
    Learn(Vec<RawSample>),
}

/// A symbolizer thread that can resolve any number of batches.
pub struct Background {
    requests: Option<Sender<Request>>,
    results: Receiver<Vec<Sample>>,
    thread: Option<JoinHandle<()>>,
    priority: Arc<Mutex<Priority>>,
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
        let (req_tx, req_rx) = mpsc::channel::<Request>();
        let (res_tx, res_rx) = mpsc::channel();
        let priority = Arc::new(Mutex::new(Priority::default()));
        let own = Arc::clone(&priority);
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
                symbolizer.set_namers(namers);
                symbolizer.warm(kernel, &pids);
                {
                    let mut p = own.lock().unwrap_or_else(|e| e.into_inner());
                    if p.idle_tid.take().is_some() {
                        set_policy(0, libc::SCHED_OTHER);
                    }
                }
                for request in req_rx {
                    match request {
                        Request::Learn(raw) => symbolizer.learn(&raw),
                        Request::Resolve(raw) => {
                            if res_tx.send(symbolizer.resolve(raw)).is_err() {
                                break;
                            }
                        }
                    }
                }
            })
            .ok();
        Background {
            requests: Some(req_tx),
            results: res_rx,
            thread,
            priority,
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
        match tx.send(Request::Resolve(raw)) {
            Ok(()) => self.results.recv().unwrap_or_default(),
            Err(mpsc::SendError(Request::Resolve(raw) | Request::Learn(raw))) => {
                Symbolizer::new(Options::default()).resolve(raw)
            }
        }
    }

    /// Has the runtime frames of `raw` named now, while their processes
    /// live, without waiting (see [`Symbolizer::learn`]).
    pub fn learn(&self, raw: Vec<RawSample>) {
        if let Some(tx) = &self.requests {
            let _ = tx.send(Request::Learn(raw));
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.requests.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
