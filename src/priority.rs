//! Putting flare ahead of the workload where it is waited for.
//!
//! On a machine the workload keeps busy, a thread at the workload's own
//! priority waits its turn behind every runnable task: with 200 busy
//! processes, the stop signal reached flare's main thread 10-60 ms late,
//! and reading, naming, writing and tearing down took 0.1-0.4 s. A
//! one-shot run's threads therefore run at nice -10 (where allowed:
//! raising priority needs CAP_SYS_NICE, which root has; otherwise nothing
//! changes). That costs the workload nothing: those threads sleep almost
//! all the time and do the same work either way, only without waiting.
//! The symbolizer's warm-up, the one thread with work to do while the
//! workload runs, stays at idle priority until the run stops.

/// The nice value of flare's threads once output is wanted.
const WANTED_NICE: libc::c_int = -10;

/// Sets thread `tid` (0: the calling thread) to normal scheduling at
/// [`WANTED_NICE`].
pub(crate) fn hurry_thread(tid: i32) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads the parameter struct we pass and
    // acts on a thread of this process (or the caller); it has no other
    // effect on memory.
    let _ = unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) };
    renice_thread(tid);
}

/// Sets thread `tid`'s nice value to [`WANTED_NICE`], leaving its
/// scheduling policy (an idle-priority thread stays one).
fn renice_thread(tid: i32) {
    // SAFETY: setpriority takes no pointers; on Linux PRIO_PROCESS with a
    // thread id sets that thread's nice value.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, WANTED_NICE) };
}

fn each_thread(f: impl Fn(i32)) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    for t in tasks.flatten() {
        if let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
            f(tid);
        }
    }
}

/// Puts every thread of this process at [`WANTED_NICE`] (nice values are
/// per thread on Linux; threads created later inherit their creator's),
/// leaving idle-priority threads idle.
pub fn renice_process() {
    each_thread(renice_thread);
}

/// Puts every thread of this process at normal scheduling and
/// [`WANTED_NICE`]: the user is waiting for all of them.
pub fn hurry_process() {
    each_thread(hurry_thread);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_is_hurried_where_allowed() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            let _ = ready_tx.send(());
            let _ = rx.recv();
            // SAFETY: getpriority takes no pointers; 0 is this thread.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
        });
        let _ = ready_rx.recv();
        hurry_process();
        let _ = tx.send(());
        let nice = other.join().expect("thread");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(nice, WANTED_NICE, "a thread other than the caller");
        }
    }
}
