#!/usr/bin/env python3
"""`flare profile` without root beside `perf record`, as user nobody.

The same CPU-bound workload built without frame pointers
(bench/workloads/chainnofp.c: fixed work at the bottom of a 12-deep call
chain, -O2 -fomit-frame-pointer) runs alone and under

  flare profile -F 997 -o out.folded -- W       (perf-event mode, 16 KiB stack copies)
  perf record -F 997 -g -- W                     (frame pointers)
  perf record -F 997 --call-graph dwarf -- W     (8 KiB stack copies)

all as user nobody (setpriv). For each: the workload's slowdown, from its
own accounting (process CPU seconds and wall seconds for the same work,
as ratios to the workload alone), and the stop-to-output time: from the
workload's last line to folded stacks on disk — for flare its own exit;
for perf, `perf record`'s exit plus `perf script` piped into a
stackcollapse equivalent (in Python, here). Also the share of samples
with the whole stack (main → 12 × level → work), to show what each walk
sees. Medians of --rounds rounds, configurations taken in turn.

usage: bench/nonroot.py [--rounds N] [--work ROUNDS]   (as root, for setpriv)
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLARE = os.path.join(ROOT, "target", "release", "flare")
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def run_timed(cmd, env):
    """Runs cmd; returns (workload's (wall, cpu), seconds from its line to exit)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL, text=True, env=env)
    figures, seen = None, None
    for line in p.stdout:
        parts = line.split()
        if figures is None and len(parts) == 2:
            try:
                figures = (float(parts[0]), float(parts[1]))
                seen = time.monotonic()
            except ValueError:
                pass
    p.wait()
    end = time.monotonic()
    if figures is None:
        sys.exit(f"no figures from {' '.join(cmd)}")
    return figures, end - seen


def collapse(script_out):
    """perf script output -> folded stacks (comm;root..leaf count)."""
    counts, comm, frames = {}, None, []

    def flush():
        if comm is not None:
            names = [f for f in reversed(frames)]
            key = ";".join([comm] + names)
            counts[key] = counts.get(key, 0) + 1

    for line in script_out.splitlines():
        if not line.strip():
            flush()
            comm, frames = None, []
        elif not line.startswith((" ", "\t")):
            flush()
            comm, frames = line.split()[0], []
        else:
            parts = line.split()
            name = parts[1].split("+")[0] if len(parts) > 1 else "[unknown]"
            frames.append(name)
    flush()
    return counts


def full_share(folded):
    full = total = 0
    for stack, n in folded.items():
        total += n
        if stack.count(";level") == 12 and ";main;" in stack:
            full += n
    return 100.0 * full / max(total, 1)


def read_folded(path):
    out = {}
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            out[stack] = out.get(stack, 0) + int(n)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", type=int, default=3000, help="workload rounds (about 2 s of CPU here)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (the profilers run as nobody through setpriv)")
    tmp = tempfile.mkdtemp(prefix="flare-nonroot-")
    os.chmod(tmp, 0o777)
    w = os.path.join(tmp, "chainnofp")
    subprocess.run(["gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", w,
                    os.path.join(ROOT, "bench", "workloads", "chainnofp.c")], check=True)
    flare = os.path.join(tmp, "flare")
    shutil.copy(FLARE, flare)
    for p in (w, flare):
        os.chmod(p, 0o755)
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))
    work = [w, str(args.work)]
    have_perf = shutil.which("perf") is not None
    configs = {
        "none": lambda d: NOBODY + work,
        "flare": lambda d: NOBODY + [flare, "profile", "-F", "997", "-o", f"{d}/out.folded", "--"] + work,
    }
    if have_perf:
        configs["perf -g"] = lambda d: NOBODY + ["perf", "record", "-q", "-F", "997", "-g", "-o", f"{d}/perf.data", "--"] + work
        configs["perf dwarf"] = lambda d: NOBODY + ["perf", "record", "-q", "-F", "997", "--call-graph", "dwarf", "-o", f"{d}/perf.data", "--"] + work
    else:
        print("perf is not installed: perf rows skipped")
    res = {k: {"wall": [], "cpu": [], "stop": [], "full": []} for k in configs}
    for r in range(args.rounds):
        for name, cmd in configs.items():
            d = tempfile.mkdtemp(dir=tmp)
            os.chmod(d, 0o777)
            (wall, cpu), tail = run_timed(cmd(d), env)
            res[name]["wall"].append(wall)
            res[name]["cpu"].append(cpu)
            if name == "flare":
                res[name]["stop"].append(tail)
                res[name]["full"].append(full_share(read_folded(f"{d}/out.folded")))
            elif name.startswith("perf"):
                t0 = time.monotonic()
                out = subprocess.run(NOBODY + ["perf", "script", "-i", f"{d}/perf.data", "-F", "comm,ip,sym"],
                                     capture_output=True, text=True).stdout
                folded = collapse(out)
                res[name]["stop"].append(tail + time.monotonic() - t0)
                res[name]["full"].append(full_share(folded))
            shutil.rmtree(d, ignore_errors=True)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    base_cpu = statistics.median(res["none"]["cpu"])
    base_wall = statistics.median(res["none"]["wall"])
    print(f"workload alone: {base_cpu:.3f} s CPU, {base_wall:.3f} s wall (median of {args.rounds}); machine: {os.cpu_count()} CPUs, shared")
    print(f"{'as nobody, -F 997':<22}{'CPU ratio':>10}{'wall ratio':>11}{'stop->folded s':>16}{'full stacks %':>15}")
    for name, v in res.items():
        cpu = statistics.median(v["cpu"]) / base_cpu
        wall = statistics.median(v["wall"]) / base_wall
        stop = f"{statistics.median(v['stop']):.3f}" if v["stop"] else "-"
        full = f"{statistics.median(v['full']):.1f}" if v["full"] else "-"
        print(f"{name:<22}{cpu:>10.3f}{wall:>11.3f}{stop:>16}{full:>15}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
