"""Helpers the bench scripts share (imported from their own directory)."""

import os
import signal
import subprocess
import sys
import time

# What a run could not measure (a peer missing, a combination refused),
# each said once as it happens and listed again at the end.
NOTES = []


def note(msg):
    if msg not in NOTES:
        NOTES.append(msg)
        print(f"NOTE: {msg}", file=sys.stderr, flush=True)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def print_notes():
    if NOTES:
        print("\nNotes:\n" + "\n".join(f"- {n}" for n in NOTES))


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
    """The workloads' handle() calls, counted as their syscalls `event`
    (by default clock_gettime: three thread-CPU-clock reads per call;
    `per` of them per call) by `perf stat` attached with `target` ("-p"
    processes, "-t" threads) to `ids`. Without perf (None) or when it
    fails (`on_fail` told), stop() gives None."""

    def __init__(self, perf, target, ids, tmp, on_fail=None,
                 event="syscalls:sys_enter_clock_gettime", per=3):
        self.out = os.path.join(tmp, "perf-stat.txt")
        self.event, self.per = event, per
        self.p = None
        if not perf:
            return
        self.p = subprocess.Popen([perf, "stat", "-x,", "-e", event,
                                   target, ",".join(map(str, ids)), "-o", self.out],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.monotonic()
        while perf_fds(self.p.pid) < len(ids) and time.monotonic() - t0 < 10:
            if self.p.poll() is not None:
                if on_fail:
                    on_fail(f"perf stat -e {event} failed: no work count")
                self.p = None
                return
            time.sleep(0.002)

    def stop(self):
        """handle() calls counted, or None."""
        if self.p is None:
            return None
        self.p.send_signal(signal.SIGINT)
        self.p.wait()
        name = self.event.split(":")[-1]
        try:
            with open(self.out) as f:
                for line in f:
                    parts = line.strip().split(",")
                    if len(parts) > 2 and name in parts[2] and parts[0].isdigit():
                        return int(parts[0]) / self.per
        except OSError:
            pass
        return None


def own_figures(pipe, other=None):
    """A workload's own accounting, read from its output up to its `cpu`
    line: ({leaf: seconds} of its `share` lines, cpu seconds); its other
    lines go to the dict `other` if given (first word: the rest's words)."""
    shares = {}
    while True:
        words = pipe.readline().split()
        if not words:
            raise RuntimeError("workload ended early")
        if words[0] == "share":
            shares[words[1]] = float(words[2])
        elif words[0] == "cpu":
            return shares, float(words[1])
        elif other is not None:
            other[words[0]] = words[1:]


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


def schedstat_ns(path):
    """The first field of a schedstat file (CPU time on the CPU, ns), 0
    when it cannot be read."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def cpu_ns(pid, comm=None):
    """CPU time of a process's live threads, ns (/proc/PID/task/*/schedstat:
    up to date, where /proc/PID/stat counts clock ticks); with `comm`,
    only the threads whose name starts with it."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    total = 0
    for t in tids:
        if comm:
            try:
                with open(f"/proc/{pid}/task/{t}/comm") as f:
                    if not f.read().startswith(comm):
                        continue
            except OSError:
                continue
        total += schedstat_ns(f"/proc/{pid}/task/{t}/schedstat")
    return total


def machine_busy():
    """CPU seconds the whole machine has spent busy (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


class Profiler:
    """A profiler started (its output in `tmp`/NAME.log), attached (its
    perf events all open: their count steady for 0.1 s; or, for one that
    opens none, `ready(self)` true) and settled."""

    def __init__(self, name, cmd, tmp, settle=0.5, ready=None):
        self.name = name
        self.log = os.path.join(tmp, f"{name}.log")
        with open(self.log, "w") as log_f:
            self.p = subprocess.Popen(cmd, stdout=log_f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        t0 = time.monotonic()
        last, since = 0, t0
        while True:
            now = time.monotonic()
            if ready:
                if ready(self):
                    break
            else:
                n = perf_fds(self.p.pid)
                if n != last:
                    last, since = n, now
                elif n and now - since > 0.1:
                    break
            if self.p.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited ({self.p.returncode}): {self.tail()}")
            if now - t0 > 60:
                self.p.kill()
                self.p.wait()
                raise RuntimeError(f"{cmd[0]} did not attach in 60 s")
            time.sleep(0.002)
        self.attach = time.monotonic() - t0
        time.sleep(settle)

    def tail(self):
        with open(self.log) as f:
            return " | ".join(f.read().strip().splitlines()[-3:])

    def cpu(self):
        """Its CPU seconds so far (live threads)."""
        return cpu_ns(self.p.pid) / 1e9

    def stop(self, timeout=120):
        """Stops it (SIGINT: it writes its output); returns its CPU
        seconds from start to exit (getrusage)."""
        self.p.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(self.p.pid, os.WNOHANG)
            if pid:
                self.p.returncode = os.waitstatus_to_exitcode(status)
                return usage.ru_utime + usage.ru_stime
            if time.monotonic() > deadline:
                self.p.kill()
                deadline = time.monotonic() + 10
            time.sleep(0.01)
