"""Helpers the bench scripts share (imported from their own directory)."""

import os


def perf_fds(pid):
    """How many perf events process `pid` holds open (0 once it is gone):
    a profiler is sampling once it holds as many as it opens."""
    try:
        n = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if "perf_event" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                    n += 1
            except OSError:
                pass
        return n
    except OSError:
        return 0


def sampling_prog_stats(pid):
    """(run_time_ns, run_cnt) summed over the perf_event BPF programs
    (BPF_PROG_TYPE_PERF_EVENT, 7: the sampling programs) process `pid`
    holds, from /proc/PID/fdinfo (counted while
    kernel.bpf_stats_enabled is 1); (0, 0) once it is gone."""
    ns = runs = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return 0, 0
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
        except OSError:
            continue
        if info.get("prog_type", "").strip() == "7":
            ns += int(info.get("run_time_ns", "0"))
            runs += int(info.get("run_cnt", "0"))
    return ns, runs
