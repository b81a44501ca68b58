#!/usr/bin/env python3
"""Deep user stacks: flare's cost per sample and how whole its stacks come out, beside peers.

1. cost: bench/workloads/deeprec.c (gcc -O2, with and without frame
   pointers), two single-threaded processes main -> recurse x DEPTH -> spin.
   Per build and DEPTH, one workload run: flare `profile -F 997 -p A,B -f`
   (--unwind auto, the default, and fp) and `perf record -F 997 --call-graph
   fp -p A,B` (kernel.perf_event_max_stack=1024 while it runs) in turn, a
   window of --seconds each, the workload alone before, between and after.
   Per profiler: flare's us/sample (run_time_ns / run_cnt of its perf_event
   program, kernel.bpf_stats_enabled=1); the slowdown of the workload's own
   spin iterations per wall second and per CPU second of its workers
   (schedstat, interrupts included: the cost in their context, steady while
   other work shares the CPUs) against the alone windows either side; the
   profiler's CPU seconds; flare's peak RSS (wait4); the share of samples
   holding `main` and marked `[truncated]`, the deepest stack. Then the same
   depths in CPython 3.12 (pyenv) and OpenJDK 17 (deeprec.py, DeepRec.java),
   flare only; last a default `flare profile` (all CPUs): its BPF maps'
   memlock (/proc/PID/fdinfo, names from bpftool) and peak RSS.
2. python: pylint --jobs=1 linting astroid's source (PyPI, in the venv
   /var/cache/flare-bench/venv-pylint made with pyenv's 3.12), sampled by
   flare (`profile -F 99 -p PID -f`) and py-spy (`record -r 99 -f raw -p
   PID`) together. Entry: `<module>` of the pylint script (then run_pylint),
   the outermost Python frame of every whole stack. `--python 3.14|3.15`
   runs the venv's pylint (pure Python) under Debian sid's CPython from
   scripts/runtimes as `-m pylint` (entry: `<module>` of its __main__.py). Samples without Python
   frames are the interpreter's start and finalization.
3. java: javac compiling java.util, java.lang and java.io of the JDK's
   src.zip (openjdk-17-source, `apt-get download`ed into the cache when
   the JDK's own is missing) with Flight Recorder on (settings=profile,
   10 ms; stackdepth=2048) and flare `profile -F 99 -p PID -f`, Java main
   thread only (JFR "main", flare comm javac). Entry: javac's Main.main.
4. ab (only with --before FLARE): the cost part's per-sample time, this
   flare against FLARE, at --depths, both builds, --unwind auto: one
   workload per build and depth, then --rounds pairs of --seconds windows,
   each pair's order alternating (AB, BA, ...); the mean us/sample of each
   and the mean paired difference with its 95 % interval (t distribution),
   which a window-to-window drift of the machine does not widen.
Runtime tables: samples, those without Python/Java frames, the share
reaching the entry (of all, of those with frames), the deepest and median
stack in Python/Java frames (flare's: `f (file:LINE)`, `pkg.Class.m(types)`).

usage: bench/deep.py [--part cost|python|java|ab|all] [--rounds N] [--seconds S]
                     [--depths 16,128,512,1024] [--before FLARE] [--perf-events]
                     (as root)
--perf-events: the python and java parts' flare samples as without root.
--before FLARE runs that binary (e.g. `git worktree add /tmp/b COMMIT`,
built there) in turn in the cost part's native windows, as "before".
Peers that are missing (perf, py-spy, JFR, bpftool) are skipped with a note.
"""

import argparse
import collections
import contextlib
import errno
import glob
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

from benchlib import perf_fds, sampling_prog_stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLARE = os.path.join(ROOT, "target", "release", "flare")
WORKLOADS = os.path.join(ROOT, "bench", "workloads")
CACHE = "/var/cache/flare-bench"
PY_FRAME = re.compile(r" \([^()]*:\d+\)$")                               # func (dir/file.py:LINE)
JAVA_FRAME = re.compile(r"^[\w$/]+(\.[\w$/]+)*\.[\w$<>]+\([^()]*\)$")     # pkg.Class.method(types)
JAVAC_MAIN = "com.sun.tools.javac.Main.main("


def note(msg):
    print(f"note: {msg}", flush=True)


def progress(msg):
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def sysctl(name, value):
    """Sets a sysctl for a `with` block, restoring it after. Writes are
    retried for 30 s while the kernel says busy (perf_event_max_stack is
    while callchain buffers are in use: perf call graphs, BPF stack maps)."""
    path = "/proc/sys/" + name.replace(".", "/")

    def write(v):
        for _ in range(150):
            try:
                with open(path, "w") as f:
                    f.write(v)
                return True
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise
            time.sleep(0.2)
        return False
    with open(path) as f:
        old = f.read().strip()
    ok = write(value) or note(f"{name} busy: left at {old}")
    try:
        yield
    finally:
        if ok and not write(old):
            note(f"could not restore {name} to {old} (busy): do it by hand")


class Tally:
    """Samples; how many are whole (reach what the caller asks), cut
    (flare's `[truncated]`), without frames of the kind counted; depths."""

    def __init__(self):
        self.samples = self.whole = self.cut = self.empty = 0
        self.depths = collections.Counter()

    def add(self, whole, depth, n=1, cut=False):
        self.samples += n
        self.whole += n if whole else 0
        self.cut += n if cut else 0
        self.empty += n if depth == 0 else 0
        self.depths[depth] += n

    def merge(self, other):
        for k in ("samples", "whole", "cut", "empty"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.depths.update(other.depths)

    def pct(self, n, of_framed=False):
        total = self.samples - (self.empty if of_framed else 0)
        return 100 * n / total if total else 0.0

    def deepest(self):
        return max(self.depths, default=0)

    def median(self):
        return statistics.median_low(self.depths.elements()) if self.samples else 0


def start(cmd, tmp, out=None, events=1, settle=0.5, env=None):
    """Starts a profiler (stdout to the file `out`, `env` added to its
    environment), waits until it holds `events` perf events, then `settle`
    seconds more."""
    err = open(os.path.join(tmp, "profiler.err"), "w")
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=err,
                         stdout=open(out, "w") if out else subprocess.DEVNULL,
                         env=dict(os.environ, **(env or {})))
    t0 = time.monotonic()
    while perf_fds(p.pid) < events:
        if os.waitpid(p.pid, os.WNOHANG)[0] or time.monotonic() - t0 > 120:
            with open(err.name) as f:
                raise RuntimeError(f"{' '.join(cmd[:3])} did not attach: {f.read()[-500:]}")
        time.sleep(0.005)
    time.sleep(settle)
    return p


def finish(p, grace=0.0, timeout=600):
    """Lets `p` exit by itself for `grace` seconds, then SIGINT; reaps it
    (SIGKILL after `timeout`). Returns (peak RSS MiB, CPU seconds) from wait4."""
    deadline, signalled = time.monotonic() + grace, False
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_maxrss / 1024, ru.ru_utime + ru.ru_stime
        if time.monotonic() > deadline:
            os.kill(p.pid, signal.SIGKILL if signalled else signal.SIGINT)
            deadline, signalled = time.monotonic() + timeout, True
        time.sleep(0.02)


def folded(path):
    """(comm, frames root first, count) of each line of a folded file (an
    empty stack, as py-spy writes them, gives comm "" and no frames)."""
    with open(path, errors="replace") as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if n.isdigit():
                frames = stack.split(";") if stack else [""]
                yield frames[0], frames[1:], int(n)


def tally_folded(t, path, is_frame, entry, comm=None, has_comm=True):
    """Adds a folded file's samples (of thread name `comm`; all if None) to
    Tally t: depth in frames that pass is_frame, whole if one passes entry."""
    for c, frames, n in folded(path):
        if comm is None or c == comm:
            rt = [f for f in ([] if has_comm else [c]) + frames if f and is_frame(f)]
            t.add(any(entry(f) for f in rt), len(rt), n, truncated(frames))


def truncated(frames):
    """Whether flare marked the stack cut at its root end: `[truncated]`,
    or `[truncated: N more frames]`."""
    return any(f.startswith("[truncated") for f in frames)


def is_java(frame):
    return "::" not in frame and JAVA_FRAME.match(frame) is not None


def perf_tally(perf, data, comm):
    """Tally of perf script's samples of `comm`: whole = a `main` frame."""
    t = Tally()
    p = subprocess.Popen([perf, "script", "-i", data, "--comm", comm, "-F", "comm,ip,sym",
                          "--max-stack", "4096"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, errors="replace")
    depth, has_main, inside = 0, False, False
    for line in p.stdout:
        if not line.strip():
            if inside:
                t.add(has_main, depth)
            depth, has_main, inside = 0, False, False
        elif line[0] in " \t":
            parts = line.split()
            depth += 1
            has_main |= len(parts) > 1 and parts[1].split("+")[0] == "main"
        else:
            inside = True
    if inside:
        t.add(has_main, depth)
    p.wait()
    return t


def find_perf():
    """perf (Debian's wrapper, or a versioned perf_X.Y) that runs here, or None."""
    runs = lambda exe: exe and subprocess.run([exe, "--version"], capture_output=True).returncode == 0
    return next(filter(runs, [shutil.which("perf")] + sorted(glob.glob("/usr/bin/perf_*"))[::-1]), None)


def pyenv_python():
    """pyenv's newest CPython 3.12, or None."""
    root = os.path.expanduser("~/.pyenv")
    with contextlib.suppress(OSError):
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip() or root
    found = sorted(glob.glob(f"{root}/versions/3.12.*/bin/python3"),
                   key=lambda p: [int(x) for x in re.findall(r"\d+", p.split("/versions/")[1])[:3]])
    return found[-1] if found else None


class DeepRec:
    """bench/workloads/deeprec.c running: its two workers' pids and spin count."""

    def __init__(self, exe, depth):
        self.p = subprocess.Popen([exe, str(depth)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pids = self.p.stdout.readline().split()[1:]

    def mark(self):
        """(spin iterations, seconds, the workers' CPU ns: schedstat's run time,
        interrupts they took included, as without CONFIG_IRQ_TIME_ACCOUNTING)."""
        self.p.stdin.write("\n")
        self.p.stdin.flush()
        n, t = self.p.stdout.readline().split()
        cpu = 0
        for pid in self.pids:
            with open(f"/proc/{pid}/schedstat") as f:
                cpu += int(f.read().split()[0])
        return int(n), float(t), cpu

    def rate(self, seconds):
        """Spin iterations per wall second and per CPU second of the workers
        over a window of `seconds`."""
        (n0, t0, c0), _, (n1, t1, c1) = self.mark(), time.sleep(seconds), self.mark()
        return (n1 - n0) / (t1 - t0), (n1 - n0) / (c1 - c0) * 1e9

    def end(self):
        self.p.stdin.close()   # its cue to stop the workers and exit
        self.p.wait()


def cost_native(args, tmp, perf):
    builds = {}
    for build, flag in (("fp", "-fno-omit-frame-pointer"), ("nofp", "-fomit-frame-pointer")):
        builds[build] = os.path.join(tmp, f"deeprec-{build}")
        subprocess.run(["gcc", "-O2", flag, "-g", "-o", builds[build],
                        os.path.join(WORKLOADS, "deeprec.c")], check=True)
    names = ["flare auto", "flare fp"] + (["before auto", "before fp"] if args.before else []) \
        + (["perf fp"] if perf else [])
    if not perf:
        note("perf not found (apt-get install linux-perf): perf skipped")
    res = collections.defaultdict(lambda: {"us": [], "slow": [], "slowcpu": [], "cpu": [], "rss": [],
                                                "tally": Tally()})
    out, data = os.path.join(tmp, "out.folded"), os.path.join(tmp, "perf.data")
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for depth in args.depths:
            for build, exe in builds.items():
                progress(f"cost: round {r + 1}, {build} depth {depth}")
                w, comm = DeepRec(exe, depth), os.path.basename(exe)[:15]
                alone = [w.rate(args.seconds)]
                for name in order:
                    is_perf = name == "perf fp"
                    if is_perf:
                        cmd = [perf, "record", "-F", "997", "--call-graph", "fp", "-p", ",".join(w.pids),
                               "-o", data]
                    else:
                        binary = args.before if name.startswith("before") else FLARE
                        cmd = [binary, "profile", "-F", "997", "-p", ",".join(w.pids), "-f",
                               "--unwind", name.split()[1]]
                    max_stack = sysctl("kernel.perf_event_max_stack", "1024") if is_perf else None
                    with max_stack or contextlib.nullcontext():
                        p = start(cmd, tmp, out, events=2)
                        rate = w.rate(args.seconds)
                        ns, runs = sampling_prog_stats(p.pid)
                        rss, cpu = finish(p)
                    alone.append(w.rate(args.seconds))
                    v = res[(build, depth, name)]
                    for i, k in enumerate(("slow", "slowcpu")):
                        v[k].append(100 * (1 - rate[i] / statistics.mean(a[i] for a in alone[-2:])))
                    v["cpu"].append(cpu)
                    if is_perf:
                        v["tally"].merge(perf_tally(perf, data, comm))
                        continue
                    v["us"].append(ns / runs / 1000 if runs else float("nan"))
                    v["rss"].append(rss)
                    for c, frames, n in folded(out):
                        if c == comm:
                            is_cut = truncated(frames)
                            v["tally"].add("main" in frames, len(frames) - is_cut, n, is_cut)
                w.end()
    print(f"\ncost: C workload (2 processes, main -> recurse x DEPTH -> spin), 997 Hz, "
          f"{args.seconds:g} s windows, {args.rounds} round(s), medians of rounds")
    print(f"{'build':5} {'depth':>5} {'profiler':10} {'us/sample':>9} {'slow/wall':>9} {'slow/CPU':>8} "
          f"{'CPU s':>6} {'RSS MiB':>7} {'samples':>7} {'with main':>9} {'[truncated]':>11} {'deepest':>7}")
    med = lambda xs, fmt: format(statistics.median(xs), fmt) if xs else "-"
    for depth in args.depths:
        for build in builds:
            for name in names:
                v = res[(build, depth, name)]
                t = v["tally"]
                marked = f"{t.pct(t.cut):10.1f}%" if name != "perf fp" else f"{'-':>11}"
                print(f"{build:5} {depth:5} {name:10} {med(v['us'], '.2f'):>9} {med(v['slow'], '.1f'):>8}% "
                      f"{med(v['slowcpu'], '.1f'):>7}% {med(v['cpu'], '.2f'):>6} {med(v['rss'], '.0f'):>7} "
                      f"{t.samples:7} {t.pct(t.whole):8.1f}% {marked} {t.deepest():7}")
    print("slow/wall: spin iterations per second; slow/CPU: per CPU second of the workers (the cost\n"
          "in their context, steady while other work shares the CPUs); CPU s: the profiler's own.\n"
          "flare runs with kernel.perf_event_max_stack as found (its --unwind fp is held to it);\n"
          "perf with 1024")


def cost_runtimes(args, tmp):
    runtimes = {}   # runtime: (command, entry test, frame test, comm or None)
    python = pyenv_python()
    if python:
        runtimes["python"] = ([python, os.path.join(WORKLOADS, "deeprec.py")],
                              lambda f: f.startswith("<module> (") and "deeprec.py:" in f,
                              lambda f: PY_FRAME.search(f) is not None, None)
    else:
        note("pyenv's CPython 3.12 not found: Python workload skipped")
    if shutil.which("javac") and shutil.which("java"):
        classes = os.path.join(tmp, "classes")
        subprocess.run(["javac", "-d", classes, os.path.join(WORKLOADS, "DeepRec.java")], check=True)
        runtimes["java"] = (["java", "-cp", classes, "DeepRec"], lambda f: f.startswith("DeepRec.main("),
                            is_java, "java")
    else:
        note("java/javac not found: Java workload skipped")
    rows = []
    for runtime, (cmd, entry, is_rt, comm) in runtimes.items():
        for depth in args.depths:
            progress(f"cost: {runtime} depth {depth}")
            us, t = [], Tally()
            for _ in range(args.rounds):
                ws = [subprocess.Popen(cmd + [str(depth), str(args.seconds + 60)],
                                       stdout=subprocess.PIPE, text=True) for _ in range(2)]
                for w in ws:
                    w.stdout.readline()       # "ready": at the leaf
                out = os.path.join(tmp, "rt.folded")
                p = start([FLARE, "profile", "-F", "997", "-p", ",".join(str(w.pid) for w in ws), "-f"],
                          tmp, out, events=2, settle=1.0)
                time.sleep(args.seconds)
                ns, runs = sampling_prog_stats(p.pid)
                finish(p)
                for w in ws:
                    w.kill()
                    w.wait()
                us.append(ns / runs / 1000 if runs else float("nan"))
                tally_folded(t, out, is_rt, entry, comm)
            rows.append((runtime, depth, statistics.median(us), t))
    if rows:
        print(f"\ncost: runtimes (2 processes, entry -> recurse x DEPTH -> spin), flare -F 997, "
              f"{args.seconds:g} s, {args.rounds} round(s)")
        print(f"{'runtime':7} {'depth':>5} {'us/sample':>9} {'samples':>7} {'reach entry':>11} "
              f"{'[truncated]':>11} {'deepest':>7} {'median':>6}   (depths in Python/Java frames)")
        for runtime, depth, us, t in rows:
            print(f"{runtime:7} {depth:5} {us:9.2f} {t.samples:7} {t.pct(t.whole):10.1f}% "
                  f"{t.pct(t.cut):10.1f}% {t.deepest():7} {t.median():6}")


def cost_memory(args, tmp):
    for label, binary in [("flare", FLARE)] + ([("before", args.before)] if args.before else []):
        memory_of(args, tmp, label, binary)


def memory_of(args, tmp, label, binary):
    progress(f"cost: default {label} profile, memory")
    p = start([binary, "profile"], tmp, os.path.join(tmp, "default.txt"), events=os.cpu_count() or 1,
              settle=1.0)
    time.sleep(args.seconds)
    maps = {}
    for fd in os.listdir(f"/proc/{p.pid}/fdinfo"):
        with contextlib.suppress(OSError):
            with open(f"/proc/{p.pid}/fdinfo/{fd}") as f:
                info = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
            if "map_id" in info:
                maps[int(info["map_id"])] = (int(info.get("map_type", "0")), int(info.get("memlock", "0")))
    names, bpftool = {}, shutil.which("bpftool") or shutil.which("/usr/sbin/bpftool")
    if bpftool:
        shown = subprocess.run([bpftool, "-j", "map", "show"], capture_output=True, text=True).stdout
        names = {m["id"]: (m.get("name", ""), m.get("type", "")) for m in json.loads(shown or "[]")}
    rss, cpu = finish(p)
    print(f"\ncost: default `flare profile` ({label}; all CPUs) for {args.seconds:g} s: peak RSS {rss:.0f} MiB, "
          f"CPU {cpu:.2f} s, BPF maps {sum(m[1] for m in maps.values()) / 2**20:.1f} MiB (memlock) "
          f"in {len(maps)} maps")
    if not bpftool:
        note("bpftool not installed (apt-get install bpftool): maps unnamed")
    for mid, (mtype, mem) in sorted(maps.items(), key=lambda kv: -kv[1][1]):
        if mem >= 64 << 10:
            name, kind = names.get(mid, (f"map {mid}", f"type {mtype}"))
            print(f"  {name:16} {kind:>16} {mem / 2**20:8.2f} MiB")
    print("  (maps under 64 KiB not listed)")


def part_cost(args, tmp):
    with sysctl("kernel.bpf_stats_enabled", "1"):
        cost_native(args, tmp, find_perf())
        cost_runtimes(args, tmp)
    cost_memory(args, tmp)


# Two-sided 95 % quantiles of Student's t by degrees of freedom (1-30).
T95 = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13,
       2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04]


def part_ab(args, tmp):
    if not args.before:
        sys.exit("--part ab needs --before FLARE")
    builds = {}
    for build, flag in (("fp", "-fno-omit-frame-pointer"), ("nofp", "-fomit-frame-pointer")):
        builds[build] = os.path.join(tmp, f"deeprec-{build}")
        subprocess.run(["gcc", "-O2", flag, "-g", "-o", builds[build],
                        os.path.join(WORKLOADS, "deeprec.c")], check=True)
    out = os.path.join(tmp, "out.folded")
    rows = []
    with sysctl("kernel.bpf_stats_enabled", "1"):
        for depth in args.depths:
            for build, exe in builds.items():
                w = DeepRec(exe, depth)
                us = {"after": [], "before": []}
                for r in range(args.rounds):
                    progress(f"ab: {build} depth {depth}, pair {r + 1}")
                    order = ["after", "before"] if r % 2 == 0 else ["before", "after"]
                    for name in order:
                        binary = FLARE if name == "after" else args.before
                        p = start([binary, "profile", "-F", "997", "-p", ",".join(w.pids), "-f"],
                                  tmp, out, events=2)
                        ns0, runs0 = sampling_prog_stats(p.pid)
                        time.sleep(args.seconds)
                        ns1, runs1 = sampling_prog_stats(p.pid)
                        finish(p)
                        us[name].append((ns1 - ns0) / (runs1 - runs0) / 1000 if runs1 > runs0
                                        else float("nan"))
                w.end()
                diffs = [a - b for a, b in zip(us["after"], us["before"])]
                n = len(diffs)
                half = (T95[min(n - 1, 30) - 1] * statistics.stdev(diffs) / n ** 0.5) if n > 1 else float("nan")
                rows.append((build, depth, statistics.mean(us["before"]), statistics.mean(us["after"]),
                             statistics.mean(diffs), half))
    print(f"\nab: us/sample, {args.before} (before) against {FLARE} (after), --unwind auto, 997 Hz, "
          f"{args.rounds} pairs of {args.seconds:g} s windows per row, order alternating")
    print(f"{'build':5} {'depth':>5} {'before':>7} {'after':>7} {'after-before':>12} {'95 % interval':>14}")
    for build, depth, b, a, d, h in rows:
        print(f"{build:5} {depth:5} {b:7.2f} {a:7.2f} {d:+12.2f} {f'{d - h:+.2f}..{d + h:+.2f}':>14}")


def table(tallies, kind):
    print(f"{'tool':7} {'samples':>7} {'no ' + kind + ' frame':>16} {'reach entry':>11} {'of framed':>9} "
          f"{'[truncated]':>11} {'deepest':>7} {'median':>6}   (depths in {kind} frames)")
    for name, t in tallies.items():
        marked = f"{t.pct(t.cut):10.1f}%" if name == "flare" else f"{'-':>11}"
        print(f"{name:7} {t.samples:7} {t.empty:16} {t.pct(t.whole):10.1f}% {t.pct(t.whole, True):8.1f}% "
              f"{marked} {t.deepest():7} {t.median():6}")


def pylint_venv():
    """The venv with pylint and py-spy (made once), or None with a note."""
    venv = os.path.join(CACHE, "venv-pylint")
    if all(os.path.exists(os.path.join(venv, "bin", x)) for x in ("pylint", "py-spy")):
        return venv
    python = pyenv_python()
    if not python:
        note("pyenv's CPython 3.12 not found: python part skipped")
        return None
    progress(f"python: installing pylint and py-spy in {venv}")
    try:
        subprocess.run([python, "-m", "venv", venv], check=True, capture_output=True)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "pylint", "py-spy"],
                       check=True, capture_output=True)
    except subprocess.CalledProcessError as e:
        note(f"pip could not install pylint and py-spy ({e.stderr.decode()[-300:]}): python part skipped")
        return None
    return venv


def no_root_env(args):
    """flare's environment for the runtime parts: with --perf-events, the
    test switch that samples with perf events as without root."""
    return {"FLARE_TEST_PERF_EVENTS": "1"} if args.perf_events else {}


def pylint_command(args, venv):
    """(command before pylint's arguments, environment) for --python: the
    venv's own pylint (pyenv's 3.12), or Debian sid's 3.14/3.15 from
    scripts/runtimes running the venv's pylint (pure Python) as `-m pylint`."""
    if args.python == "3.12":
        return [os.path.join(venv, "bin", "pylint")], None
    python = subprocess.run([os.path.join(ROOT, "scripts", "runtimes"), "python", args.python],
                            capture_output=True, text=True, check=True).stdout.strip()
    site = glob.glob(os.path.join(venv, "lib", "python3.*", "site-packages"))[0]
    return [python, "-m", "pylint"], dict(os.environ, PYTHONPATH=site)


def part_python(args, tmp):
    venv = pylint_venv()
    if not venv:
        return
    target = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                             "import astroid, os; print(os.path.dirname(astroid.__file__))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    command, lint_env = pylint_command(args, venv)
    # `<module>` of the pylint script, or of pylint/__main__.py under -m.
    entry = lambda f: f.startswith("<module> (") and re.search(
        r"((^|/)pylint|pylint/__main__\.py):\d+\)$", f[10:]) is not None
    tallies, walls = {"flare": Tally(), "py-spy": Tally()}, []
    fout, sout = os.path.join(tmp, "pylint.folded"), os.path.join(tmp, "pylint.pyspy")
    for r in range(args.rounds):
        progress(f"python: round {r + 1}, pylint {target}")
        t0 = time.monotonic()
        lint = subprocess.Popen(command + ["--jobs=1", "--persistent=n", "--exit-zero", "--score=n", target],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=lint_env)
        time.sleep(1.0)   # past the interpreter's start, so that py-spy finds it
        fl = start([FLARE, "profile", "-F", "99", "-p", str(lint.pid), "-f"], tmp, fout, settle=0,
                   env=no_root_env(args))
        spy = subprocess.Popen([os.path.join(venv, "bin", "py-spy"), "record", "-r", "99", "-f", "raw",
                                "-o", sout, "-p", str(lint.pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        lint.wait()
        walls.append(time.monotonic() - t0)
        finish(spy, grace=30)
        finish(fl, grace=3)
        tally_folded(tallies["flare"], fout, PY_FRAME.search, entry)
        tally_folded(tallies["py-spy"], sout, bool, entry, has_comm=False)   # raw: no comm
    files = sum(len([f for f in fs if f.endswith(".py")]) for _, _, fs in os.walk(target))
    print(f"\npython: pylint --jobs=1 on astroid ({files} files), CPython {args.python}, "
          f"{statistics.median(walls):.1f} s a run, "
          f"99 Hz, {args.rounds} round(s); entry: `<module>` of the pylint script (then run_pylint)")
    table(tallies, "Python")


def java_sources():
    """(java.base source dir, list file) of java.util, java.lang and java.io, or None."""
    zips = [z for z in glob.glob("/usr/lib/jvm/java-17-openjdk-*/lib/src.zip") if os.path.exists(z)]
    deb_dir = os.path.join(CACHE, "jdk-src")
    if not zips and not glob.glob(f"{deb_dir}/usr/lib/jvm/openjdk-17/lib/src.zip"):
        progress(f"java: fetching openjdk-17-source (apt-get download) into {CACHE}")
        subprocess.run(["apt-get", "download", "openjdk-17-source"], cwd=CACHE, capture_output=True)
        debs = glob.glob(os.path.join(CACHE, "openjdk-17-source_*.deb"))
        if not debs:
            return None
        subprocess.run(["dpkg-deb", "-x", debs[-1], deb_dir], check=True)
    zips = zips or glob.glob(f"{deb_dir}/usr/lib/jvm/openjdk-17/lib/src.zip")
    src, listing = os.path.join(CACHE, "javasrc"), os.path.join(CACHE, "javasrc.files")
    if not os.path.exists(listing):
        with zipfile.ZipFile(zips[0]) as z:
            names = [n for n in z.namelist() if n.endswith(".java") and
                     n.startswith(("java.base/java/util/", "java.base/java/lang/", "java.base/java/io/"))]
            z.extractall(src, names)
        with open(listing, "w") as f:
            f.write("".join(os.path.join(src, n) + "\n" for n in names))
    return os.path.join(src, "java.base"), listing


def jfr_tally(jfr, path):
    """Tally of the ExecutionSamples of thread "main": whole = reaches javac's Main.main."""
    t = Tally()
    p = subprocess.Popen([jfr, "print", "--events", "jdk.ExecutionSample", "--stack-depth", "2048", path],
                         stdout=subprocess.PIPE, text=True, errors="replace")
    thread, frames, inside = None, [], False
    for line in p.stdout:
        s = line.strip()
        if s.startswith("sampledThread ="):
            thread = s.split('"')[1] if '"' in s else s
        elif s == "stackTrace = [":
            inside, frames = True, []
        elif inside and s == "]":
            inside = False
            if thread == "main":
                t.add(any(f.startswith(JAVAC_MAIN) for f in frames), len(frames))
        elif inside and s and s != "...":
            frames.append(s)
    p.wait()
    return t


def part_java(args, tmp):
    javac, jfr = shutil.which("javac"), shutil.which("jfr")
    if not javac:
        note("javac not found (apt-get install openjdk-17-jdk-headless): java part skipped")
        return
    sources = java_sources()
    if not sources:
        note("no JDK sources (openjdk-17-source could not be downloaded): java part skipped")
        return
    module, listing = sources
    with open(listing) as f:
        nfiles = sum(1 for _ in f)
    tallies, walls = {"flare": Tally(), "JFR": Tally()}, []
    if not jfr:
        note("jfr not found: JFR skipped")
        del tallies["JFR"]
    rec, out = os.path.join(tmp, "javac.jfr"), os.path.join(tmp, "javac.folded")
    for r in range(args.rounds):
        progress(f"java: round {r + 1}, javac of {nfiles} files")
        classes = tempfile.mkdtemp(dir=tmp)
        t0 = time.monotonic()
        jc = subprocess.Popen([javac, f"-J-XX:StartFlightRecording=filename={rec},settings=profile",
                               "-J-XX:FlightRecorderOptions=stackdepth=2048",
                               "--patch-module", f"java.base={module}", "-d", classes, "-nowarn",
                               "-proc:none", "-implicit:none", "-Xlint:none", "-XDignore.symbol.file",
                               "@" + listing], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fl = start([FLARE, "profile", "-F", "99", "-p", str(jc.pid), "-f"], tmp, out, settle=0,
                   env=no_root_env(args))
        jc.wait()
        walls.append(time.monotonic() - t0)
        finish(fl, grace=3)
        shutil.rmtree(classes, ignore_errors=True)
        # comm javac: the Java main thread (and the launcher's, idle)
        tally_folded(tallies["flare"], out, is_java, lambda f: f.startswith(JAVAC_MAIN), "javac")
        if jfr and os.path.exists(rec):
            tallies["JFR"].merge(jfr_tally(jfr, rec))
    print(f"\njava: javac of java.util, java.lang, java.io ({nfiles} files), "
          f"{statistics.median(walls):.1f} s a run with JFR on, 99 Hz / 10 ms, {args.rounds} round(s); "
          f"entry: {JAVAC_MAIN[:-1]}")
    table(tallies, "Java")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["cost", "python", "java", "ab", "all"], default="all")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of each part (default 1)")
    ap.add_argument("--python", choices=["3.12", "3.14", "3.15"], default="3.12",
                    help="the python part's CPython: pyenv's 3.12 (default), or Debian sid's "
                         "3.14/3.15 (scripts/runtimes)")
    ap.add_argument("--seconds", type=float, default=5, help="each cost window (default 5)")
    ap.add_argument("--depths", default="16,128,512,1024", help="recursion depths of the cost part")
    ap.add_argument("--perf-events", action="store_true",
                    help="python and java parts: flare samples with perf events, as without root")
    ap.add_argument("--before", metavar="FLARE",
                    help="another flare binary (an older commit's) the cost part runs in turn beside")
    args = ap.parse_args()
    args.depths = [int(d) for d in args.depths.split(",")]
    if os.geteuid() != 0:
        sys.exit("run as root")
    if not os.path.exists(FLARE):
        sys.exit(f"{FLARE} not built")
    os.makedirs(CACHE, exist_ok=True)
    print(f"flare: {FLARE}, built {time.strftime('%Y-%m-%d %H:%M', time.localtime(os.path.getmtime(FLARE)))}")
    tmp = tempfile.mkdtemp(prefix="flare-deep-bench-")
    try:
        for part, run in (("cost", part_cost), ("python", part_python), ("java", part_java),
                          ("ab", part_ab)):
            if args.part == part or (args.part == "all" and part != "ab"):
                t0 = time.monotonic()
                run(args, tmp)
                print(f"({part}: {time.monotonic() - t0:.0f} s)", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
