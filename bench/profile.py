#!/usr/bin/env python3
"""Overhead and speed of `flare profile` beside its peers, in one run.

Measures, on the same fixed CPU-bound workload (bench/workloads/spin.c, one
thread per CPU): its wall time alone and under flare, perf record,
bpftrace and profile-bee sampling all CPUs at 999 Hz, each printed as a
ratio to the workload alone (median of several rounds, profilers taken in
turn within each round). Then flare's time from start to attached, time
from stop to output written for a workload with 10,000+ distinct stacks,
and peak RSS. Last, the cost to an unrelated process of a profiler aimed
at another (idle) process at 4999 Hz: flare -p (task-bound events) against
bpftrace's profile probe with a pid predicate (per-CPU events).

usage: bench/profile.py [--rounds N] [--iterations N] [--hz HZ] [--system-wide-only]
                        [--in-kernel-only | --own-costs-only] [--baseline FLARE]   (as root)
--in-kernel-only measures only the BPF run time per sample, on a user-mode
workload (spin.c) and a kernel-mode one (syscalls.c); --baseline adds
another flare binary (e.g. built from an earlier commit) beside this one.
--own-costs-only measures only flare's own costs (start to attached, stop
to output, peak RSS; medians of --rounds), beside --baseline if given.
--hz sets the system-wide frequency (999 by default); the run also shows the
floor every timer-driven profiler pays: an empty bpftrace probe at the
same frequency.
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

from benchlib import perf_fds, sampling_prog_stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLARE = os.environ.get("FLARE", os.path.join(ROOT, "target", "release", "flare"))
NCPU = os.cpu_count() or 1


def build(name, tmp):
    out = os.path.join(tmp, name)
    subprocess.run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", out,
                    os.path.join(ROOT, "bench", "workloads", name + ".c")], check=True)
    return out


def start_profiler(cmd, events, timeout=60.0):
    """Starts a profiler; returns (process, seconds until it held `events` perf events)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    if events == 0:
        # A profiler that keeps no perf-event descriptors open (it holds
        # them through BPF links): give it a fixed time to attach.
        time.sleep(2.0)
        if p.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited ({p.returncode}) before attaching")
        return p, time.monotonic() - t0
    while perf_fds(p.pid) < events:
        if p.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited ({p.returncode}) before attaching")
        if time.monotonic() - t0 > timeout:
            p.kill()
            raise RuntimeError(f"{cmd[0]} did not attach in {timeout} s")
        time.sleep(0.001)
    # Let perf events settle (bpftrace attaches its program after opening).
    time.sleep(0.3)
    return p, time.monotonic() - t0


def stop(p):
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def timed(cmd):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True)
    return time.monotonic() - t0


def peers(freq, pid=None):
    """The profilers to compare: name -> (command, perf events it opens)."""
    out = {}
    if pid is None:
        out["flare"] = ([FLARE, "profile", "-F", str(freq), "-f"], NCPU)
        out["flare --unwind fp"] = ([FLARE, "profile", "--unwind", "fp", "-F", str(freq), "-f"], NCPU)
        if shutil.which("perf"):
            out["perf record -g"] = (["perf", "record", "-F", str(freq), "-a", "-g", "-o", "/tmp/flare-bench-perf.data", "-q"], NCPU)
        if shutil.which("bpftrace"):
            out["bpftrace"] = (["bpftrace", "-e", f"profile:hz:{freq} {{ @[kstack, ustack, comm] = count(); }}"], NCPU)
            out["timer floor (empty)"] = (["bpftrace", "-e", f"profile:hz:{freq} {{ }}"], NCPU)
        probee = shutil.which("probee") or os.path.expanduser("~/.cargo/bin/probee")
        if os.path.exists(probee):
            out["profile-bee"] = ([probee, "--frequency", str(freq), "--time", "0", "-o", "/tmp/flare-bench-probee.folded"], 0)
    else:
        out["flare -p"] = ([FLARE, "profile", "-F", str(freq), "-f", "-p", str(pid)], 1)
        if shutil.which("bpftrace"):
            out["bpftrace /pid/"] = (["bpftrace", "-e", f"profile:hz:{freq} /pid == {pid}/ {{ @[kstack, ustack] = count(); }}"], NCPU)
        out["flare (all CPUs)"] = ([FLARE, "profile", "-F", str(freq), "-f"], NCPU)
    return out


def overhead(workload, rounds, profilers):
    times = {"alone": []}
    for name in profilers:
        times[name] = []
    notes = []
    for _ in range(rounds):
        times["alone"].append(timed(workload))
        for name, (cmd, events) in profilers.items():
            try:
                p, _ = start_profiler(cmd, events)
            except (RuntimeError, OSError) as e:
                notes.append(f"{name}: {e}")
                continue
            times[name].append(timed(workload))
            stop(p)
    base = statistics.median(times["alone"])
    print(f"  {'workload alone':<22} {base:7.3f} s   1.000")
    for name, t in times.items():
        if name == "alone" or not t:
            continue
        m = statistics.median(t)
        print(f"  {name:<22} {m:7.3f} s   {m / base:.3f}")
    for n in sorted(set(notes)):
        print(f"  (skipped {n})")


def bpf_cost(workload, profilers):
    """Time the kernel spends in each profiler's BPF programs per sample
    (kernel.bpf_stats_enabled): the part of the slowdown that run-to-run
    noise cannot hide. Profilers without BPF programs are left out."""
    try:
        with open("/proc/sys/kernel/bpf_stats_enabled") as f:
            was = f.read().strip()
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write("1")
    except OSError as e:
        print(f"  (skipped: cannot enable BPF statistics: {e})")
        return {}
    costs = {}
    w = subprocess.Popen(workload, stdout=subprocess.DEVNULL)
    try:
        for name, (cmd, events) in profilers.items():
            try:
                p, _ = start_profiler(cmd, events)
            except (RuntimeError, OSError):
                continue
            time.sleep(3)
            run_ns, runs = sampling_prog_stats(p.pid)
            stop(p)
            if runs:
                costs[name] = run_ns / runs / 1000
                print(f"  {name:<22} {costs[name]:7.2f} us per sample ({runs} samples)")
    finally:
        w.kill()
        w.wait()
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write(was)
    return costs


def in_kernel(tmp, spin, args):
    """BPF run time per sample of flare (and --baseline), in user-mode and
    kernel-mode work: several rounds each, profilers taken in turn."""
    syscalls = build("syscalls", tmp)
    profs = {}
    for tag, binary in [("", FLARE)] + ([(" (baseline)", args.baseline)] if args.baseline else []):
        for mode in ["auto", "fp"]:
            profs[f"flare --unwind {mode}{tag}"] = (
                [binary, "profile", "--unwind", mode, "-F", str(args.hz), "-f"], NCPU)
    # Long enough that every profiler of a round samples it busy.
    for name, work in [("user mode (spin.c)", [spin, str(args.iterations * 100), str(NCPU)]),
                       ("kernel mode (syscalls.c)", [syscalls, "100000000", str(NCPU)])]:
        per = {p: [] for p in profs}
        for r in range(args.rounds):
            print(f"\nIn-kernel cost at {args.hz} Hz, {name}, round {r + 1}:")
            # Taken in turn, in another order each round.
            order = list(profs.items())
            order = order[r % len(order):] + order[:r % len(order)]
            for p, cost in bpf_cost(work, dict(order)).items():
                per[p].append(cost)
        print(f"\nMedians over {args.rounds} rounds, {name}:")
        for p, costs in per.items():
            if costs:
                print(f"  {p:<32} {statistics.median(costs):6.2f} us per sample")


def stop_to_output(tmp, manystacks, binary=FLARE):
    w = subprocess.Popen([manystacks, "8", str(NCPU)])
    out_path = os.path.join(tmp, "many.folded")
    with open(out_path, "w") as out:
        t0 = time.monotonic()
        p = subprocess.Popen([binary, "profile", "-F", "4999", "-f"], stdout=out, stderr=subprocess.DEVNULL)
        while perf_fds(p.pid) < NCPU:
            time.sleep(0.001)
        attach = time.monotonic() - t0
        time.sleep(5)
        t1 = time.monotonic()
        p.send_signal(signal.SIGINT)
        _, status, usage = os.wait4(p.pid, 0)
        done = time.monotonic() - t1
    w.wait()
    with open(out_path) as f:
        stacks = sum(1 for _ in f)
    return attach, done, stacks, usage.ru_maxrss / 1024.0


def own_costs(tmp, manystacks, args):
    """flare's own costs (and --baseline's), taken in turn, medians."""
    binaries = [("flare", FLARE)] + ([("baseline", args.baseline)] if args.baseline else [])
    runs = {name: [] for name, _ in binaries}
    # The workload's first run in a fresh directory records half the
    # stacks of later ones (cold caches): one run is thrown away.
    stop_to_output(tmp, manystacks, binaries[-1][1])
    for r in range(args.rounds):
        for name, binary in binaries[r % len(binaries):] + binaries[:r % len(binaries)]:
            runs[name].append(stop_to_output(tmp, manystacks, binary))
    print(f"flare's own costs (4999 Hz, all CPUs, manystacks workload; median of {args.rounds}):")
    for name, rs in runs.items():
        med = lambda i: statistics.median(r[i] for r in rs)
        print(f"  {name:<9} start to attached {med(0) * 1000:7.1f} ms, stop to output "
              f"{med(1) * 1000:7.1f} ms for {med(2):.0f} stacks, peak RSS {med(3):6.1f} MB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=400000)
    ap.add_argument("--hz", type=int, default=999)
    ap.add_argument("--system-wide-only", action="store_true")
    ap.add_argument("--in-kernel-only", action="store_true")
    ap.add_argument("--own-costs-only", action="store_true")
    ap.add_argument("--baseline", metavar="FLARE")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/profile.py: run as root (the profilers need it)")
    if not os.path.exists(FLARE):
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        spin = build("spin", tmp)
        manystacks = build("manystacks", tmp)
        work_all = [spin, str(args.iterations), str(NCPU)]
        if args.in_kernel_only:
            in_kernel(tmp, spin, args)
            return
        if args.own_costs_only:
            own_costs(tmp, manystacks, args)
            return
        print(f"System-wide at {args.hz} Hz, {NCPU} CPUs busy (median of {args.rounds}; ratio to the workload alone):")
        overhead(work_all, args.rounds, peers(args.hz))
        print(f"\nIn-kernel cost at {args.hz} Hz (BPF program run time per sample, same workload):")
        bpf_cost([spin, str(args.iterations * 10), str(NCPU)], peers(args.hz))
        if args.system_wide_only:
            return

        print("\nflare's own costs (4999 Hz, all CPUs, manystacks workload):")
        attach, done, stacks, rss = stop_to_output(tmp, manystacks)
        print(f"  start to attached      {attach * 1000:7.1f} ms")
        print(f"  stop to output written {done * 1000:7.1f} ms for {stacks} distinct stacks")
        print(f"  peak RSS               {rss:7.1f} MB")

        idle = subprocess.Popen(["sleep", "100000"])
        try:
            print(f"\nAn unrelated CPU-bound process while profiling an idle PID at 4999 Hz (ratio to alone):")
            overhead([spin, str(args.iterations), "1"], args.rounds, peers(4999, pid=idle.pid))
        finally:
            idle.kill()


if __name__ == "__main__":
    main()
