//! Putting flare ahead of the workload once the user waits for output.
//!
//! While a profile is collected, flare's threads run at the priority they
//! started with (the symbolizer's warm-up even lower), so that flare takes
//! as little as it can from what it measures. Once the run has stopped,
//! the user is waiting: on a machine the workload keeps busy, a thread at
//! the workload's own priority gets the CPU in turn with every runnable
//! task, and reading, naming, writing and tearing down took 0.1-0.4 s with
//! 200 busy processes. From the stop on, every thread of flare runs at
//! nice -10 (where allowed: raising priority needs CAP_SYS_NICE, which
//! root has; otherwise nothing changes).

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
    // SAFETY: setpriority takes no pointers; on Linux PRIO_PROCESS with a
    // thread id sets that thread's nice value.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, WANTED_NICE) };
}

/// Puts every thread of this process at [`WANTED_NICE`] (nice values are
/// per thread on Linux).
pub fn hurry_process() {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    for t in tasks.flatten() {
        if let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
            hurry_thread(tid);
        }
    }
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
