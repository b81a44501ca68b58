#!/usr/bin/env python3
"""Cost and completeness of `--unwind` beside its peers, in one run.

The workload (bench/workloads/deepnofp.c, -O2 -fomit-frame-pointer) keeps
2 CPUs busy with a fixed amount of work 12 calls deep, half of it called
back from libc's qsort. Each profiler samples all CPUs at 997 Hz while the
workload runs: flare --unwind dwarf, flare --unwind fp, perf record
--call-graph dwarf, profile-bee --dwarf (probee). Reported per profiler,
as medians of --rounds rounds taken in turn: the workload's wall time and
CPU time as a slowdown over the workload alone, and the share of the
workload's samples whose stack is complete (thread start, worker, all 12
level() frames, work). Then the unwind tables of every process on this
machine, build times and cache loads (examples/unwind_tables.rs), and
flare's time from start to attached with a warm cache.

usage: bench/unwind.py [--rounds N] [--work N]   (as root)
Peers that are not installed are skipped with a note.
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import perf_fds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLARE = os.path.join(ROOT, "target", "release", "flare")
TABLES = os.path.join(ROOT, "target", "release", "examples", "unwind_tables")
NCPU = os.cpu_count() or 1
DEPTH = 12
HZ = "997"


def start(cmd, events, out):
    """Starts a profiler writing to `out`; returns it and its seconds to attach."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    # A profiler that keeps no perf event descriptors (profile-bee) says
    # on standard output when it is attached.
    def attached():
        if isinstance(events, str):
            with open(out.name) as f:
                return events in f.read()
        return perf_fds(p.pid) >= events
    while not attached():
        if p.poll() is not None:
            raise RuntimeError(f"{cmd} exited ({p.returncode}) before attaching")
        if time.monotonic() - t0 > 120:
            p.kill()
            raise RuntimeError(f"{cmd} did not attach")
        time.sleep(0.001)
    took = time.monotonic() - t0
    time.sleep(0.5)
    return p, took


def stop(p):
    p.send_signal(signal.SIGINT)
    p.wait(timeout=300)


def run_workload(exe, work):
    """Starts the work; returns the process (alive until its stdin closes),
    its wall time and its CPU time."""
    p = subprocess.Popen([exe, str(work), "2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    wall, cpu = (float(x) for x in p.stdout.readline().split())
    return p, wall, cpu


def end(p):
    p.stdin.close()
    p.wait()


def complete(frames):
    """frames: root first, without the comm."""
    try:
        i = frames.index("worker")
    except ValueError:
        return False
    rest = frames[i + 1:]
    return i <= 2 and rest[:DEPTH] == ["level"] * DEPTH and rest[DEPTH:DEPTH + 1] == ["work"]


def folded_completeness(text, comm):
    total = good = 0
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if not n.isdigit() or frames[0] != comm:
            continue
        total += int(n)
        if complete(frames[1:]):
            good += int(n)
    return good, total


def perf_completeness(data, comm):
    out = subprocess.run(["perf", "script", "-i", data, "--comm", comm, "-F", "comm,ip,sym"],
                         capture_output=True, text=True).stdout
    total = good = 0
    frames = []
    for line in out.splitlines() + [""]:
        if line.strip() == "":
            if frames:
                total += 1
                good += complete([f.split("+")[0] for f in reversed(frames)])
            frames = []
        elif line.startswith("\t") or line.startswith(" "):
            parts = line.split()
            frames.append(parts[1] if len(parts) > 1 else "[unknown]")
    return good, total


def profilers(tmp):
    folded = os.path.join(tmp, "out.folded")
    ps = [
        ("flare --unwind dwarf", [FLARE, "profile", "-F", HZ, "-f", "--unwind", "dwarf"], NCPU, "folded"),
        ("flare --unwind fp", [FLARE, "profile", "-F", HZ, "-f", "--unwind", "fp"], NCPU, "folded"),
    ]
    if shutil.which("perf"):
        ps.append(("perf --call-graph dwarf", ["perf", "record", "-F", HZ, "-a", "-g", "--call-graph",
                                               "dwarf", "-o", os.path.join(tmp, "perf.data")], NCPU, "perf"))
        # The workload keeps 32 KiB on the stack below its callers: more
        # than perf copies by default (8 KiB), within its maximum.
        ps.append(("perf --call-graph dwarf,65528", ["perf", "record", "-F", HZ, "-a", "-g", "--call-graph",
                                                     "dwarf,65528", "-o", os.path.join(tmp, "perf.data")],
                   NCPU, "perf"))
    else:
        print("perf not installed: skipped")
    probee = shutil.which("probee") or os.path.expanduser("~/.cargo/bin/probee")
    if os.path.exists(probee):
        ps.append(("profile-bee --dwarf", [probee, "--dwarf", "--frequency", HZ, "--time", "0", "-o", folded],
                   "Waiting for Ctrl-C", "probee"))
    else:
        print("profile-bee (probee) not installed: skipped "
              "(cargo install --locked profile-bee --no-default-features)")
    return ps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", type=int, default=1500)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    tmp = tempfile.mkdtemp(prefix="flare-unwind-bench-")
    exe = os.path.join(tmp, "deepnofp")
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-g", "-pthread", "-o", exe,
                    os.path.join(ROOT, "bench", "workloads", "deepnofp.c")], check=True)
    comm = "deepnofp"
    ps = profilers(tmp)
    alone, results = [], {name: {"wall": [], "cpu": [], "good": 0, "total": 0} for name, *_ in ps}
    for r in range(args.rounds):
        w, wall, cpu = run_workload(exe, args.work)
        end(w)
        alone.append((wall, cpu))
        for name, cmd, events, kind in ps:
            outpath = os.path.join(tmp, "stdout")
            with open(outpath, "w") as out:
                p, _ = start(cmd, events, out)
                w, wall, cpu = run_workload(exe, args.work)
                stop(p)
            if kind == "perf":
                good, total = perf_completeness(os.path.join(tmp, "perf.data"), comm)
            end(w)
            res = results[name]
            res["wall"].append(wall)
            res["cpu"].append(cpu)
            if kind == "folded":
                good, total = folded_completeness(open(outpath).read(), comm)
            elif kind == "probee":
                good, total = folded_completeness(open(os.path.join(tmp, "out.folded")).read(), comm)
            res["good"] += good
            res["total"] += total
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    wall0 = statistics.median(w for w, _ in alone)
    cpu0 = statistics.median(c for _, c in alone)
    print(f"workload alone: wall {wall0:.2f} s, CPU {cpu0:.2f} s (median of {args.rounds})")
    print(f"{'profiler':26} {'wall slowdown':>14} {'CPU slowdown':>13} {'complete stacks':>22}")
    for name, *_ in ps:
        res = results[name]
        w = 100 * (statistics.median(res["wall"]) / wall0 - 1)
        c = 100 * (statistics.median(res["cpu"]) / cpu0 - 1)
        pct = 100 * res["good"] / res["total"] if res["total"] else 0
        print(f"{name:26} {w:13.1f}% {c:12.1f}% {pct:8.1f}% of {res['total']:7}")

    if os.path.exists(TABLES):
        print("\nunwind tables of every process on this machine (examples/unwind_tables.rs):")
        print(subprocess.run([TABLES, FLARE], capture_output=True, text=True).stdout, end="")
    else:
        print("\n(cargo build --release --example unwind_tables for the table figures)")

    # Start to attached, system-wide and -p, with a warm cache.
    cache = os.path.join(tmp, "cache")
    env = dict(os.environ, FLARE_CACHE_DIR=cache)
    target = subprocess.Popen([exe, "100000", "1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    for label, cmd, events in [("system-wide", [FLARE, "profile", "-F", HZ], NCPU),
                               ("-p PID", [FLARE, "profile", "-F", HZ, "-p", str(target.pid)], 1)]:
        times = []
        for i in range(4):
            t0 = time.monotonic()
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while perf_fds(p.pid) < events and p.poll() is None:
                time.sleep(0.0005)
            times.append(time.monotonic() - t0)
            time.sleep(1.5 if i == 0 else 0.3)   # the first run fills the cache
            stop(p)
        print(f"start to attached, {label}: cold {1e3 * times[0]:.0f} ms, "
              f"warm {1e3 * statistics.median(times[1:]):.0f} ms")
    target.kill()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
