#!/usr/bin/env python3
"""Cost of keeping each sample's time (issue 24), in one run.

flare counts stacks in the kernel unless an output needs to know when:
then every sample goes through a BPF ring buffer and is folded in user
space. This measures, on the same workload with thousands of distinct
stacks (bench/workloads/livestacks.c, one thread per CPU), `flare profile`
sampling all CPUs at --hz (997) in three ways:

  count   -f to /dev/null: counting in the kernel (no times)
  file    -o NAME.json.gz: times kept, the Firefox Profiler's file written
  serve   --serve: times kept, the live page's store and timeline

and prints for each the BPF run time per sample (kernel.bpf_stats_enabled),
flare's CPU seconds (user + system, from wait4) per second of profiling,
its peak RSS, and timed/count ratios. With --serve-secs (600 for the
issue's 10 minutes) it then runs --serve that long and prints its RSS
every minute. Last, file sizes against samply's for the same workload
and duration (`samply record -r HZ`; skipped with a note when samply is
not installed: `cargo install --locked samply`).

usage: bench/timed.py [--secs S] [--hz HZ] [--serve-secs S]   (as root)
--secs 0 with --serve-secs runs only the long --serve.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import sampling_prog_stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLARE = os.environ.get("FLARE", os.path.join(ROOT, "target", "release", "flare"))
NCPU = os.cpu_count() or 1


def build(tmp):
    out = os.path.join(tmp, "livestacks")
    subprocess.run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-fno-inline",
                    "-fno-optimize-sibling-calls", "-pthread", "-o", out,
                    os.path.join(ROOT, "bench", "workloads", "livestacks.c")], check=True)
    return out


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_flare(args, secs, work, every=None):
    """Runs flare with `args` for `secs` beside the workload; returns
    (BPF ns per sample, samples, CPU seconds, peak RSS MiB, RSS trail)."""
    w = subprocess.Popen([work, str(secs + 15), str(NCPU)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        p = subprocess.Popen([FLARE, "profile", *args, str(secs)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        stats = (0, 0)
        trail = []
        t0 = time.monotonic()
        next_mark = every
        while True:
            # wait4 (not poll) so that flare's rusage is ours to read.
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            s = sampling_prog_stats(p.pid)
            if s[1] >= stats[1]:
                stats = s
            if every and time.monotonic() - t0 >= next_mark:
                trail.append((round(time.monotonic() - t0), rss_kib(p.pid) / 1024))
                next_mark += every
            time.sleep(0.2)
        code = os.waitstatus_to_exitcode(status)
        p.returncode = code
        if code != 0:
            raise RuntimeError(f"flare {' '.join(args)} exited with {code}")
        ns, runs = stats
        return (ns / max(runs, 1), runs, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, trail)
    finally:
        w.kill()
        w.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--secs", type=int, default=30)
    ap.add_argument("--hz", type=int, default=997)
    ap.add_argument("--serve-secs", type=int, default=0)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/timed.py: run as root")
    with open("/proc/sys/kernel/bpf_stats_enabled") as f:
        was = f.read().strip()
    with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
        f.write("1")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = build(tmp)
            hz = str(a.hz)
            out = os.path.join(tmp, "flare.json.gz")
            modes = [
                ("count", ["-F", hz, "-f"]),
                ("file", ["-F", hz, "-o", out]),
                ("serve", ["-F", hz, "--serve", "127.0.0.1:0"]),
            ]
            if a.secs == 0:
                modes = []
            else:
                print(f"flare profile, all {NCPU} CPUs at {a.hz} Hz, {a.secs} s, livestacks.c")
                print(f"{'mode':6} {'BPF ns/sample':>14} {'samples':>9} {'CPU s/s':>8} {'peak RSS MiB':>13}")
            got = {}
            for name, args in modes:
                ns, runs, cpu, rss, _ = run_flare(args, a.secs, work)
                got[name] = (ns, cpu, rss)
                print(f"{name:6} {ns:14.0f} {runs:9d} {cpu / a.secs:8.4f} {rss:13.1f}")
            for name in ("file", "serve") if modes else ():
                base = got["count"]
                ns, cpu, rss = got[name]
                print(f"{name}/count: BPF per sample {ns / base[0]:.2f}x, CPU {cpu / max(base[1], 1e-9):.2f}x, "
                      f"peak RSS {rss / base[2]:.2f}x")
            if modes:
                print(f"Firefox Profiler file: {os.path.getsize(out) / 1024:.0f} KiB for {a.secs} s")

            if a.serve_secs:
                _, _, cpu, rss, trail = run_flare(["-F", hz, "--serve", "127.0.0.1:0"], a.serve_secs,
                                                  work, every=60)
                print(f"--serve for {a.serve_secs} s: CPU {cpu / a.serve_secs:.4f} s/s, peak RSS {rss:.1f} MiB")
                print("  RSS by minute (MiB): " + ", ".join(f"{t}s {m:.1f}" for t, m in trail))

            if not modes:
                return
            samply = shutil.which("samply") or os.path.expanduser("~/.cargo/bin/samply")
            secs = min(a.secs, 10)
            mine = os.path.join(tmp, "mine.json.gz")
            subprocess.run([FLARE, "profile", "-F", hz, "-o", mine, "--", work, str(secs), "2"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            print(f"files for livestacks {secs} s, 2 threads, {a.hz} Hz:")
            print(f"  flare -o x.json.gz: {os.path.getsize(mine) / 1024:.0f} KiB")
            if os.access(samply, os.X_OK):
                theirs = os.path.join(tmp, "samply.json.gz")
                subprocess.run([samply, "record", "--save-only", "-r", hz, "-o", theirs, "--", work,
                                str(secs), "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               check=True)
                size = os.path.getsize(theirs)
                print(f"  samply record:      {size / 1024:.0f} KiB "
                      f"(flare/samply {os.path.getsize(mine) / size:.2f})")
            else:
                print("  samply: not installed (cargo install --locked samply), skipped")
    finally:
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write(was)


if __name__ == "__main__":
    main()
