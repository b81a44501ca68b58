"""Helpers the bench scripts share (imported from their own directory)."""

import os
import signal
import subprocess
import time


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


class HandleCounter:
    """The workloads' handle() calls, counted as their clock_gettime
    syscalls (three thread-CPU-clock reads per call) by `perf stat`
    attached with `target` ("-p" processes, "-t" threads) to `ids`. Without
    perf (None) or when it fails (`on_fail` told), stop() gives None."""

    def __init__(self, perf, target, ids, tmp, on_fail=None):
        self.out = os.path.join(tmp, "perf-stat.txt")
        self.p = None
        if not perf:
            return
        self.p = subprocess.Popen([perf, "stat", "-x,", "-e", "syscalls:sys_enter_clock_gettime",
                                   target, ",".join(map(str, ids)), "-o", self.out],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.monotonic()
        while perf_fds(self.p.pid) < len(ids) and time.monotonic() - t0 < 10:
            if self.p.poll() is not None:
                if on_fail:
                    on_fail("perf stat -e syscalls:sys_enter_clock_gettime failed: no work count")
                self.p = None
                return
            time.sleep(0.002)

    def stop(self):
        """handle() calls counted, or None."""
        if self.p is None:
            return None
        self.p.send_signal(signal.SIGINT)
        self.p.wait()
        try:
            with open(self.out) as f:
                for line in f:
                    parts = line.strip().split(",")
                    if len(parts) > 2 and "clock_gettime" in parts[2] and parts[0].isdigit():
                        return int(parts[0]) / 3
        except OSError:
            pass
        return None


def own_figures(pipe):
    """A workload's own accounting, read from its output up to its `cpu`
    line: ({leaf: seconds} of its `share` lines, cpu seconds)."""
    shares = {}
    while True:
        words = pipe.readline().split()
        if not words:
            raise RuntimeError("workload ended early")
        if words[0] == "share":
            shares[words[1]] = float(words[2])
        elif words[0] == "cpu":
            return shares, float(words[1])


def end_workload(p, timeout):
    """Closes a workload's stdin (its cue to finish) and waits for it,
    killing it after `timeout` seconds."""
    try:
        p.stdin.close()
    except OSError:
        pass
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
