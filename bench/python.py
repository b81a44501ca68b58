#!/usr/bin/env python3
"""flare's Python frames beside py-spy, in one run, on the same workload.

The workload is tests/workloads/pyservice.py (main -> serve -> handle ->
parse_request | render_page, pure Python, one thread) under pyenv's
CPython 3.12 unless --python says otherwise. Three parts:

1. One workload process per run, profiled by flare (`profile -p PID -f`)
   and by py-spy (`record -p PID -f raw`; its default, which stops the
   target for each sample, and --nonblocking) at 99 and 997 Hz, against
   the workload alone; medians of --rounds rounds, tools taken in turn.
   Per tool:
   - slowdown: work done in a fixed time (the workload's serve loop runs
     --seconds of wall time), alone divided by under the tool, i.e. the
     ratio of wall times for a fixed amount of work. Work is counted as
     handle() calls: each makes three time.thread_time() calls, real
     clock_gettime syscalls (the thread CPU clock has no vDSO path),
     counted by `perf stat -e syscalls:sys_enter_clock_gettime -p PID`,
     which costs every run the same;
   - the profiler's CPU: over the workload's window (% of one CPU; from
     /proc/PID/task/*/schedstat, /proc/PID/stat's utime+stime in ns), and
     from start to exit (getrusage of the child: attach, tables, names
     and output included);
   - samples per second of the window, and each leaf's share: samples
     whose stack holds parse_request / render_page among those holding
     serve, against the program's own accounting in the same run (its
     `share` lines over its `cpu` line, thread CPU clocks).
2. In-kernel time per sample (kernel.bpf_stats_enabled set for the
   measurement, restored after): flare -p at 997 Hz with and without
   `--python off` on the same workload, run_time_ns / run_cnt of its
   perf_event program from /proc/PID/fdinfo. Where flare rejects
   `--python off`, the native-only runs take the workload out of flare's
   py_procs map instead (bpftool map delete), which is what the flag
   does in the kernel: the map stays empty.
3. 20 workloads at once (each run through a symbolic link pysvcNN to the
   interpreter, so that the folded stacks' comm tells them apart), flare
   system-wide at 99 Hz: how many have the whole Python chain
   <module>;main;serve;handle in their stacks, the share of their samples
   that do, flare's CPU, and the slowdown as handle() calls per CPU second
   of the 20 (their `cpu` lines: with 20 processes on the CPUs, work in a
   fixed time follows whatever else the machine runs), against the 20
   alone before and after. py-spy attaches to one process per instance:
   20 py-spys, their summed CPU, beside it.

usage: bench/python.py [--python PATH] [--rounds N] [--seconds S] [--many-seconds S]
                       [--py-spy PATH] [--no-py-spy]       (as root)
py-spy is installed with pip in a venv under $XDG_CACHE_HOME (or /tmp)
unless --py-spy gives one; if pip cannot get it, py-spy is skipped with a
note. bpftool: `apt-get install bpftool` (Debian 12).
"""

import argparse
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

from benchlib import HandleCounter, cpu_ns, end_workload, own_figures, perf_fds, sampling_prog_stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLARE = os.environ.get("FLARE", os.path.join(ROOT, "target", "release", "flare"))
WORKLOAD = os.path.join(ROOT, "tests", "workloads", "pyservice.py")
NCPU = os.cpu_count() or 1
LEAVES = ("parse_request", "render_page")
CHAIN = re.compile(r"(^|;)<module> \([^;]*\);main \([^;]*\);serve \([^;]*\);handle \([^;]*\)(;|$)")
MANY = 20


def default_python():
    found = sorted(glob.glob("/root/.pyenv/versions/3.12.*/bin/python3.12"),
                   key=lambda p: [int(x) for x in re.findall(r"\d+", p.split("/versions/")[1].split("/")[0])])
    return found[-1] if found else shutil.which("python3.12")


def find_py_spy(args):
    if args.no_py_spy:
        return None, "py-spy: skipped (--no-py-spy)"
    if args.py_spy:
        return args.py_spy, None
    venv = os.path.join(os.environ.get("XDG_CACHE_HOME") or "/tmp", "flare-bench-py-spy")
    exe = os.path.join(venv, "bin", "py-spy")
    if not os.path.exists(exe):
        print(f"installing py-spy in {venv} ...", file=sys.stderr)
        try:
            subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True)
            subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "py-spy"],
                           check=True, capture_output=True, timeout=300)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
            err = getattr(e, "stderr", b"") or b""
            last = err.decode(errors="replace").strip().splitlines()[-1:] or [str(e)]
            return None, f"py-spy: skipped, pip could not install it (no network?): {last[0]}"
    return exe, None


class Workload:
    """tests/workloads/pyservice.py: started, ready, waiting for "go"."""

    def __init__(self, python, seconds, alias=None):
        # alias: a symbolic link to python, run through it so that the
        # process's comm (the folded stacks' first frame) is its name;
        # /proc/PID/comm cannot be written from another process.
        if alias:
            if not os.path.islink(alias):
                os.symlink(python, alias)
            python = alias
        self.p = subprocess.Popen([python, WORKLOAD, str(seconds)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        self.pid = self.p.pid
        tid = self.p.stdout.readline().split()
        ready = self.p.stdout.readline().strip()
        if len(tid) != 2 or tid[0] != "tid" or ready != "ready":
            raise RuntimeError(f"workload did not start: {tid} {ready!r}")

    def go(self):
        self.t0 = time.monotonic()
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def result(self):
        """Reads the program's accounting; returns (wall, {leaf: seconds}, cpu)."""
        shares, cpu = own_figures(self.p.stdout)
        return time.monotonic() - self.t0, shares, cpu

    def end(self):
        end_workload(self.p, 10)


class Profiler:
    """A profiler started, attached and settled; stop() returns its CPU seconds."""

    def __init__(self, kind, cmd, tmp, events=1, settle=0.5):
        self.log = os.path.join(tmp, f"{kind}.log")
        self.kind = kind
        with open(self.log, "w") as log:
            self.p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        t0 = time.monotonic()
        while not self.attached(events):
            if self.p.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited ({self.p.returncode}): {self.tail()}")
            if time.monotonic() - t0 > 60:
                self.p.kill()
                raise RuntimeError(f"{cmd[0]} did not attach in 60 s")
            time.sleep(0.005)
        time.sleep(settle)

    def attached(self, events):
        if self.kind == "py-spy":
            with open(self.log) as f:
                return "Sampling process" in f.read()
        return perf_fds(self.p.pid) >= events

    def tail(self):
        with open(self.log) as f:
            return " | ".join(f.read().strip().splitlines()[-3:])

    def cpu(self):
        try:
            return cpu_ns(self.p.pid) / 1e9
        except OSError:
            return 0.0

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 120
        while True:
            pid, status, usage = os.wait4(self.p.pid, os.WNOHANG)
            if pid:
                self.p.returncode = os.waitstatus_to_exitcode(status)
                return usage.ru_utime + usage.ru_stime
            if time.monotonic() > deadline:
                self.p.kill()
            time.sleep(0.01)


def folded(path):
    """(stack, count) of a folded file."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                stack, _, n = line.rstrip("\n").rpartition(" ")
                if n.isdigit():
                    out.append((stack, int(n)))
    except OSError:
        pass
    return out


def names(stack):
    return {frame.split(" (")[0] for frame in stack.split(";")}


def shares(path):
    """Samples under serve, and each leaf's count among them."""
    serve, leaf = 0, dict.fromkeys(LEAVES, 0)
    for stack, n in folded(path):
        fs = names(stack)
        if "serve" not in fs:
            continue
        serve += n
        for name in LEAVES:
            if name in fs:
                leaf[name] += n
    return serve, leaf


def tools(hz, py_spy, tmp):
    """name -> (kind, command taking the pid and the output file)."""
    out = {"flare": ("flare", lambda pid, o: [FLARE, "profile", "-F", str(hz), "-p", str(pid), "-f", "-o", o])}
    if py_spy:
        out["py-spy"] = ("py-spy", lambda pid, o: [py_spy, "record", "-r", str(hz), "-p", str(pid),
                                                  "-f", "raw", "-o", o])
        out["py-spy --nonblocking"] = ("py-spy", lambda pid, o: [py_spy, "record", "--nonblocking", "-r", str(hz),
                                                                "-p", str(pid), "-f", "raw", "-o", o])
    return out


def one_run(python, seconds, tmp, kind=None, cmd=None):
    """One workload run, under a profiler or alone."""
    w = Workload(python, seconds)
    prof = None
    out = os.path.join(tmp, "out.folded")
    if os.path.exists(out):
        os.unlink(out)
    try:
        counter = HandleCounter(shutil.which("perf"), "-p", [w.pid], tmp)
        if cmd:
            prof = Profiler(kind, cmd(w.pid, out), tmp)
        c0 = prof.cpu() if prof else 0
        w.go()
        wall, spent, cpu = w.result()
        r = {"wall": wall, "cpu": cpu, "spent": spent, "calls": None}
        if prof:
            r["window_cpu"] = (prof.cpu() - c0) / wall
            r["total_cpu"] = prof.stop()
            prof = None
            r["serve"], r["leaf"] = shares(out)
        r["calls"] = counter.stop()
        return r
    finally:
        if prof:
            prof.stop()
        w.end()


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def part_overhead(args, py_spy, tmp):
    print(f"\n1. One workload process, {args.seconds:g} s of work per run, "
          f"medians of {args.rounds} rounds (tools in turn):")
    print("   slowdown: handle() calls per second alone / under the tool "
          "(= wall time for fixed work, ratio)")
    print("   CPU: the profiler's, % of one CPU over the window / seconds from start to exit")
    print("   shares: samples holding the leaf among those holding serve, pooled over the rounds "
          "(the program's own thread-CPU accounting in the same runs)")
    hdr = (f"   {'Hz':>4} {'tool':<21} {'slowdown':>8} {'CPU window':>10} {'total':>7} "
           f"{'samples/s':>9}  {'parse_request':<17} {'render_page':<17}")
    print(hdr)
    for hz in (99, 997):
        ts = tools(hz, py_spy, tmp)
        runs = {name: [] for name in ["alone"] + list(ts)}
        notes = set()
        for r in range(args.rounds):
            runs["alone"].append(one_run(args.python, args.seconds, tmp))
            order = list(ts.items())
            order = order[r % len(order):] + order[:r % len(order)]
            for name, (kind, cmd) in order:
                try:
                    runs[name].append(dict(one_run(args.python, args.seconds, tmp, kind, cmd), round=r))
                except (RuntimeError, OSError) as e:
                    notes.add(f"{name}: {e}")
        alone = runs["alone"]
        rates = [x["calls"] / x["wall"] for x in alone if x["calls"]]
        busy = med(x["cpu"] / x["wall"] for x in alone)
        if busy < 0.98:
            print(f"   NOTE: the workload alone ran {100 * busy:.0f} % of its wall time: "
                  "other work shares the CPUs, figures are noisy")
        base_rate = med(rates)
        print(f"   {hz:>4} {'alone':<21} {'1.000' if base_rate else 'n/a':>8} {'':>10} {'':>7} {'':>9}  "
              + "".join(f"{'':<6} ({100 * sum(x['spent'][l] for x in alone) / sum(x['cpu'] for x in alone):4.1f} %)  "
                        for l in LEAVES)
              + (f"{base_rate:.0f} calls/s (runs {min(rates):.0f}-{max(rates):.0f})" if base_rate
                 else "(perf missing: no work count)"))
        for name in ts:
            rs = runs[name]
            if not rs:
                continue
            # Per round: the round's workload alone over this run.
            slow = med(alone[x["round"]]["calls"] / alone[x["round"]]["wall"] / (x["calls"] / x["wall"])
                       if x["calls"] and alone[x["round"]]["calls"] else None for x in rs)
            rate = med(x["serve"] / x["wall"] for x in rs)
            cols = ""
            serve = sum(x["serve"] for x in rs)
            for l in LEAVES:
                tool = sum(x["leaf"][l] for x in rs) / serve if serve else None
                prog = sum(x["spent"][l] for x in rs) / sum(x["cpu"] for x in rs)
                cols += f"{100 * tool:4.1f} % ({100 * prog:4.1f} %)  " if tool is not None else f"{'n/a':<17}  "
            print(f"   {hz:>4} {name:<21} {slow if slow else float('nan'):8.3f} "
                  f"{100 * med(x['window_cpu'] for x in rs):8.1f} % {med(x['total_cpu'] for x in rs):6.2f}s "
                  f"{rate:9.0f}  {cols}")
        for n in sorted(notes):
            print(f"   (failed: {n})")


def drop_python(flare_pid, pid):
    """Deletes `pid` from the py_procs map flare `flare_pid` holds: its
    samples walk native frames only, as with --python off (which leaves
    the map empty). True when done."""
    ids = set()
    for fd in os.listdir(f"/proc/{flare_pid}/fdinfo"):
        try:
            with open(f"/proc/{flare_pid}/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith("map_id:"):
                        ids.add(int(line.split(":")[1]))
        except OSError:
            continue
    out = subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True, text=True).stdout
    for m in json.loads(out or "[]"):
        if m.get("id") in ids and m.get("name") == "py_procs":
            key = ["hex"] + [f"{b:02x}" for b in pid.to_bytes(4, sys.byteorder)]
            return subprocess.run(["bpftool", "map", "delete", "id", str(m["id"]), "key"] + key,
                                  capture_output=True).returncode == 0
    return False


def python_frames(path):
    return sum(n for stack, n in folded(path) if re.search(r"\.py:\d+\)", stack))


def part_in_kernel(args, tmp):
    print(f"\n2. In-kernel time per sample, flare -p at 997 Hz, same workload "
          f"({args.seconds:g} s per run, median of {args.rounds}):")
    if not shutil.which("bpftool"):
        print("   skipped: bpftool not installed (apt-get install bpftool)")
        return
    path = "/proc/sys/kernel/bpf_stats_enabled"
    with open(path) as f:
        was = f.read().strip()
    on, off = "Python frames (default)", "native only"
    modes = {on: [], off: []}
    counts = {m: [] for m in modes}
    leaked = {m: 0 for m in modes}
    off_flag = True   # --python off works; else the process is taken out of py_procs
    out = os.path.join(tmp, "k.folded")
    try:
        with open(path, "w") as f:
            f.write("1")
        for r in range(args.rounds):
            order = list(modes)[r % 2:] + list(modes)[:r % 2]
            for mode in order:
                w = Workload(args.python, args.seconds)
                prof = None
                try:
                    cmd = [FLARE, "profile", "-F", "997", "-p", str(w.pid), "-f", "-o", out]
                    if mode == off and off_flag:
                        try:
                            prof = Profiler("flare", cmd + ["--python", "off"], tmp)
                        except RuntimeError as e:
                            if "--python" not in str(e):
                                raise
                            print(f"   NOTE: `flare profile --python off` fails ({str(e).split(': ', 1)[1][:90]});")
                            print("         native only = the same flare with the workload deleted from its "
                                  "py_procs map (bpftool), what --python off leaves empty")
                            off_flag = False
                    if prof is None:
                        prof = Profiler("flare", cmd, tmp)
                        if mode == off and not drop_python(prof.p.pid, w.pid):
                            raise RuntimeError("could not delete the workload from py_procs")
                    w.go()
                    w.result()
                    ns, cnt = sampling_prog_stats(prof.p.pid)
                    prof.stop()
                    prof = None
                    leaked[mode] += python_frames(out) if mode == off else 0
                    if cnt:
                        modes[mode].append(ns / cnt)
                        counts[mode].append(cnt)
                finally:
                    if prof:
                        prof.stop()
                    w.end()
    finally:
        with open(path, "w") as f:
            f.write(was)
    for mode, v in modes.items():
        if v:
            label = mode if mode == on or off_flag else f"{mode} (py_procs entry deleted)"
            print(f"   {label:<40} {med(v):7.0f} ns per sample ({med(counts[mode]):.0f} samples a run)")
    if leaked[off]:
        print(f"   (native-only runs still had {leaked[off]} samples with Python frames)")
    if modes[on] and modes[off]:
        ratio = med(modes[on]) / med(modes[off])
        print(f"   {'ratio':<40} {ratio:7.2f}x native (target <= 2x)")


def part_many(args, py_spy, tmp):
    secs = args.many_seconds
    print(f"\n3. {MANY} workload processes at once, {secs:g} s, 99 Hz (one round; alone before and after):")

    def run(start):
        ws = []
        profs = []
        try:
            for i in range(MANY):
                ws.append(Workload(args.python, secs, alias=os.path.join(tmp, f"pysvc{i:02d}")))
            counter = HandleCounter(shutil.which("perf"), "-p", [w.pid for w in ws], tmp)
            profs = start(ws)
            c0 = [p.cpu() for p in profs]
            for w in ws:
                w.go()
            res = [w.result() for w in ws]
            wall = max(r[0] for r in res)
            window = sum(p.cpu() - c for p, c in zip(profs, c0)) / wall
            total = sum(p.stop() for p in profs)
            profs = []
            calls = counter.stop()
            # Work per CPU second of the 20 (their own thread clocks): the
            # machine's other work takes CPU from them in fixed time.
            return (calls / sum(r[2] for r in res) if calls else None), wall, window, total
        finally:
            for p in profs:
                p.stop()
            for w in ws:
                w.end()

    def chains(per_proc):
        """per_proc: comm -> [(stack, n)]; returns (processes with the chain, share of samples)."""
        have = good = total = 0
        for stacks in per_proc.values():
            g = sum(n for s, n in stacks if CHAIN.search(s))
            have += g > 0
            good += g
            total += sum(n for _, n in stacks)
        return have, (100 * good / total if total else 0)

    # In order: alone, flare, py-spys, alone (the two alone runs averaged).
    alone = [run(lambda ws: [])[0]]
    out = os.path.join(tmp, "many.folded")
    f_calls, _, f_window, f_total = run(lambda ws: [Profiler(
        "flare", [FLARE, "profile", "-F", "99", "-f", "-o", out], tmp, events=NCPU, settle=1.0)])
    per = {}
    for stack, n in folded(out):
        comm = stack.split(";", 1)[0]
        if comm.startswith("pysvc"):
            per.setdefault(comm, []).append((stack, n))
    f_have, f_pct = chains(per)
    if py_spy:
        outs = [os.path.join(tmp, f"many-{i}.txt") for i in range(MANY)]
        s_calls, _, s_window, s_total = run(lambda ws: [Profiler(
            "py-spy", [py_spy, "record", "-r", "99", "-p", str(w.pid), "-f", "raw", "-o", o], tmp + f"/s{i}",
            settle=0) for i, (w, o) in enumerate(zip(ws, outs))])
        s_have, s_pct = chains({o: folded(o) for o in outs})
    alone.append(run(lambda ws: [])[0])
    base = med(alone)

    def work(rate):
        return f"; slowdown {base / rate:.3f}" if base and rate else ""

    if base:
        print(f"   slowdown: handle() calls per CPU second of the {MANY}, alone / under the tool; alone "
              f"{base:.0f} (runs before and after: {alone[0]:.0f}, {alone[1]:.0f})")
    print(f"   flare -F 99 (system-wide, one process): {f_have} of {MANY} with "
          f"<module>;main;serve;handle ({f_pct:.1f} % of their samples); "
          f"CPU {100 * f_window:.1f} % of one CPU over the window, {f_total:.2f} s start to exit{work(f_calls)}")
    if py_spy:
        print(f"   py-spy attaches to one process per instance (no system-wide mode); "
              f"{MANY} py-spys -r 99: {s_have} of {MANY} with the chain ({s_pct:.1f} %); "
              f"summed CPU {100 * s_window:.1f} % of one CPU over the window, "
              f"{s_total:.2f} s start to exit{work(s_calls)}")
    else:
        print("   py-spy: one process per py-spy, no system-wide mode (not installed here)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default=default_python(), help="the CPython to run the workload with")
    # One process's pace differs from the next one's by a few % on the
    # same machine (2-4 % here, alone): five short runs beat three long.
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.5, help="work per run in parts 1 and 2")
    ap.add_argument("--many-seconds", type=float, default=4.0, help="work of part 3")
    ap.add_argument("--py-spy", metavar="PATH")
    ap.add_argument("--no-py-spy", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/python.py: run as root (the profilers need it)")
    if not args.python or not os.path.exists(args.python):
        sys.exit("bench/python.py: no CPython 3.12 found; give one with --python PATH")
    if not os.path.exists(FLARE):
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    py_spy, note = find_py_spy(args)
    version = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True).stdout.strip()
    spy_version = subprocess.run([py_spy, "--version"], capture_output=True, text=True).stdout.strip() if py_spy else ""
    print(f"CPython {version} ({args.python}), {NCPU} CPUs; {spy_version or note}")
    if not shutil.which("perf"):
        print("perf not installed: no work count, so no slowdown figures")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flare-bench-python-") as tmp:
        for i in range(MANY):
            os.mkdir(os.path.join(tmp, f"s{i}"))
        part_overhead(args, py_spy, tmp)
        part_in_kernel(args, tmp)
        part_many(args, py_spy, tmp)
    print(f"\n({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
