#!/usr/bin/env python3
"""flare's Java (HotSpot) frames beside perf, in one run, on the same workload.

The workload is tests/workloads/Service.java (compiled with javac into a
temporary directory), run as `java -cp DIR Service cpu SECONDS`: one
thread, main -> serve -> handle -> parseRequest (calling mix) |
renderPage (calling emit, which the JIT inlines), timing each leaf with
the thread's CPU clock. Each run starts its own JVM and sends "go"; serve
then runs --warmup seconds (2) unprofiled, an explicit JIT warm-up (the
work rate is flat after about 1 s: handle, parseRequest and renderPage
are C2-compiled), then two windows of --seconds (6) each on the same JVM:
one alone and one under the profiler (attached and settled before its
window starts), in an order that alternates by round. Pairing the
windows on one JVM matters: two JVMs of the same program differ by up to
~10 % in pace (their JIT decisions and code layout differ), more than
the profilers cost. serve runs on a little past the windows; the
program's own figures come at its end. Three parts:

1. At 99 and 997 Hz, --rounds (3) rounds, tools taken in turn (the order
   rotating by round), medians of the rounds:
   - flare: `flare profile -F HZ -p PID -f -o FILE` on a plain JVM;
   - perf: `perf record -g -F HZ -p PID` on a JVM started with
     -XX:+PreserveFramePointer, then, after the windows, `jcmd PID
     Compiler.perfmap` (the JIT code as it stands at the end: the most
     complete map one can write) and `perf script`, which names JIT
     frames from /tmp/perf-PID.map. This is the best perf does on JDK 17
     without an agent: interpreted frames stay `Interpreter` and methods
     the JIT inlined are folded into their caller.
   Per tool:
   - slowdown: work done in the alone window / in the profiled one, on
     the same JVM (the ratio of wall times for fixed work). Work is
     handle() calls: each makes three ThreadMXBean.getCurrentThreadCpuTime()
     calls, real clock_gettime(CLOCK_THREAD_CPUTIME_ID) syscalls (no
     vDSO path for a thread CPU clock; System.nanoTime takes the vDSO),
     counted on the worker thread alone by `perf stat -e
     syscalls:sys_enter_clock_gettime -t TID` in every window, which
     costs every window the same. The alone windows of the +PFP JVMs are
     perf's baseline; against the plain JVMs' alone windows (across
     JVMs, so noisier) they give the flag's own cost, and perf's rate
     against them the whole price of perf (restart with the flag, then
     sample);
   - the profiler's CPU: over its window (% of one CPU, from
     /proc/PID/task/*/schedstat; perf record drains its ring buffers
     only when they fill, so its window figure can be ~0 and its work
     lands at exit) and from start to exit (getrusage of the child:
     attach, tables, names and output included); for perf also the CPU
     of jcmd and perf script after it ("post");
   - stacks of the worker thread, pooled over the rounds (perf: its tid;
     flare: its comm `java`, the one on-CPU thread of the JVM without a
     name of its own): the share of its samples under Service.handle,
     and of those the share holding Service.main;Service.serve;
     Service.handle, and the share naming the leaf (Service.parseRequest
     or Service.renderPage, inlined or not); of the samples naming a
     leaf, the share holding the whole chain main;serve;handle;leaf; the
     share of worker samples with an unnamed frame ([unknown], a bare
     address) and with an `Interpreter` frame; each leaf's share of the
     worker samples against the program's own accounting in the same
     runs (its `share` lines over its `cpu` line; these cover its whole
     serve, warm-up and alone window included).
2. In-kernel time per sample (kernel.bpf_stats_enabled set for the
   measurement, restored after): one plain JVM per round, flare -p at
   997 Hz with Java frames (the default) and with `--java off` in turn
   on the same JVM (order alternating by round), run_time_ns / run_cnt
   of its perf_event program from /proc/PID/fdinfo (benchlib).
3. Markdown tables of 1 and 2 at the end, and flare's figures beside
   perf's from the same run.

usage: bench/java.py [--flare PATH] [--rounds N] [--seconds S] [--warmup S]
                     [--perf PATH]                   (as root)
java, javac and jcmd come from PATH (OpenJDK 17 tested). Without perf
there is no work count (no slowdowns) and no perf runs; without jcmd perf
runs without a map (its JIT frames unnamed). On Debian 12: `apt-get
install linux-perf openjdk-17-jdk-headless`. Other load on the machine
shows in the per-window lines (stderr) and is summed up under table 1.
"""

import argparse
import glob
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import log, note, print_notes
from benchlib import Profiler as BaseProfiler
from benchlib import (HandleCounter, end_workload, machine_busy, own_figures, sampling_prog_stats,
                      schedstat_ns)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "tests", "workloads", "Service.java")
NCPU = os.cpu_count() or 1
LEAVES = ("Service.parseRequest", "Service.renderPage")
CHAIN = ("Service.main", "Service.serve", "Service.handle")
# A Java method's name, from flare's `pkg.Class.method(types)` or a perf
# map's `RetType pkg.Class.method(types)`; C++ (`A::b(...)`) and C names
# have no dot before their parenthesis.
JNAME = re.compile(r"^(?:\S+ )?([\w$]+(?:\.[\w$<>]+)+)\(")
UNNAMED = re.compile(r"^(\[unknown\]|(0x)?[0-9a-fA-F]{6,}|.*\+0x[0-9a-fA-F]+)$")
# serve runs this long past warm-up + window: attach, settle and stop.
SLACK = 2.5
def find_perf(arg):
    """A perf that runs (Debian's /usr/bin/perf may be a wrapper that
    finds no perf_VERSION for this kernel), or None."""
    cands = [arg] if arg else [shutil.which("perf")] + sorted(glob.glob("/usr/bin/perf_*"), reverse=True)
    for c in cands:
        if not c:
            continue
        try:
            r = subprocess.run([c, "--version"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0 and r.stdout.startswith("perf version"):
            return c, r.stdout.strip()
    return None, None


def wait_rusage(p, timeout=300):
    """Waits for Popen `p`; returns its CPU seconds (getrusage)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            p.kill()
            deadline = time.monotonic() + 10
        time.sleep(0.01)


class JVM:
    """tests/workloads/Service.java in cpu mode: started, ready, waiting for "go"."""

    def __init__(self, java, classes, serve_seconds, pfp):
        cmd = [java] + (["-XX:+PreserveFramePointer"] if pfp else []) + \
              ["-cp", classes, "Service", "cpu", f"{serve_seconds:.3f}"]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = self.p.pid
        self.serve = serve_seconds
        self.map = f"/tmp/perf-{self.pid}.map"
        # A map at this pid before any jcmd is another (dead) process's:
        # perf script and flare would read it as this JVM's.
        if os.path.lexists(self.map):
            note(f"removed a stale {self.map} (left by an earlier process with this pid)")
            os.unlink(self.map)
        tid = self.p.stdout.readline().split()
        ready = self.p.stdout.readline().strip()
        if len(tid) != 2 or tid[0] != "tid" or ready != "ready":
            self.end()
            raise RuntimeError(f"workload did not start: {tid} {ready!r}")
        self.tid = int(tid[1])
        with open(f"/proc/{self.pid}/task/{self.tid}/comm") as f:
            self.comm = f.read().strip()

    def go(self):
        self.t_go = time.monotonic()
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def thread_cpu(self):
        return schedstat_ns(f"/proc/{self.pid}/task/{self.tid}/schedstat") / 1e9

    def result(self):
        """The program's accounting: ({leaf: seconds}, cpu seconds, time of its end)."""
        shares, cpu = own_figures(self.p.stdout)
        return {"Service." + k: v for k, v in shares.items()}, cpu, time.monotonic()

    def end(self):
        end_workload(self.p, 15)
        if os.path.isfile(self.map) and not os.path.islink(self.map):
            os.unlink(self.map)


class Profiler(BaseProfiler):
    """benchlib's Profiler, whose stop also says how it exited when it
    did not end on SIGINT."""

    def stop(self):
        """Stops it (SIGINT: it writes its output); its CPU seconds, start to exit."""
        self.p.send_signal(signal.SIGINT)
        cpu = wait_rusage(self.p)
        if self.p.returncode not in (0, -signal.SIGINT, 130):
            note(f"{self.name} exited {self.p.returncode}: {self.tail()}")
        return cpu


def java_name(frame):
    m = JNAME.match(frame)
    return m.group(1) if m else frame


def stacks_flare(path, comm):
    """[(frames root first, count)] of the worker thread (the folded
    stacks' first frame is the thread's comm), and the other threads' total."""
    out, others = [], 0
    try:
        with open(path) as f:
            for line in f:
                stack, _, n = line.rstrip("\n").rpartition(" ")
                if not n.isdigit():
                    continue
                frames = stack.split(";")
                if frames[0] == comm:
                    out.append((frames[1:], int(n)))
                else:
                    others += int(n)
    except OSError:
        pass
    return out, others


def stacks_perf(text, tid):
    """[(frames root first, 1)] of thread `tid` from `perf script -F tid,ip,sym`."""
    out, others = [], 0
    cur = None

    def flush():
        nonlocal others
        if cur is not None:
            if cur[0] == tid:
                out.append((cur[1][::-1], 1))
            else:
                others += 1

    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith("\t"):    # a sample's "TID " line, then its frames
            flush()
            try:
                cur = (int(line.split()[0]), [])
            except ValueError:
                cur = None
            continue
        if cur is not None:
            parts = line.strip().split(None, 1)
            cur[1].append(parts[1] if len(parts) > 1 else "[unknown]")
    flush()
    return out, others


def measure(stacks):
    """Completeness counts of the worker thread's samples."""
    m = dict(total=0, handle=0, handle_chain=0, leaf=0, chain=0, unnamed=0, interp=0,
             **{l: 0 for l in LEAVES})
    for frames, n in stacks:
        names = [java_name(f) for f in frames]
        m["total"] += n
        if any(UNNAMED.match(f) for f in frames):
            m["unnamed"] += n
        if "Interpreter" in frames:
            m["interp"] += n
        if "Service.handle" in names:
            m["handle"] += n
            if any(tuple(names[i:i + 3]) == CHAIN for i in range(len(names) - 2)):
                m["handle_chain"] += n
        held = [l for l in LEAVES if l in names]
        for l in held:
            m[l] += n
        if held:
            m["leaf"] += n
            if any(tuple(names[i:i + 3]) == CHAIN and names[i + 3] in LEAVES
                   for i in range(len(names) - 3)):
                m["chain"] += n
    return m


def tool_cmds(env, hz, tmp):
    """name -> (JVM with +PreserveFramePointer?, command taking the pid)."""
    out = {"flare": (False, lambda pid: [env.flare, "profile", "-F", str(hz), "-p", str(pid), "-f",
                                         "-o", os.path.join(tmp, "out.folded")])}
    if env.perf:
        out["perf"] = (True, lambda pid: [env.perf, "record", "-q", "-g", "-F", str(hz), "-p", str(pid),
                                          "-o", os.path.join(tmp, "perf.data")])
    return out


def post_perf(env, jvm, tmp):
    """jcmd's map and perf script; returns (worker stacks, other samples, CPU seconds)."""
    cpu = 0.0
    if env.jcmd:
        p = subprocess.Popen([env.jcmd, str(jvm.pid), "Compiler.perfmap"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        cpu += wait_rusage(p, timeout=60)
        if p.returncode != 0 or not os.path.isfile(jvm.map):
            note(f"jcmd {jvm.pid} Compiler.perfmap failed ({p.returncode}): perf's JIT frames unnamed")
    out = os.path.join(tmp, "perf.script")
    with open(out, "w") as f:
        p = subprocess.Popen([env.perf, "script", "-i", os.path.join(tmp, "perf.data"), "-F", "tid,ip,sym"],
                             stdout=f, stderr=subprocess.DEVNULL)
        cpu += wait_rusage(p)
    with open(out) as f:
        text = f.read()
    if p.returncode != 0 or not text:
        note(f"perf script failed ({p.returncode})")
    stacks, others = stacks_perf(text, jvm.tid)
    return stacks, others, cpu


def window(env, jvm, tmp, prof=None):
    """env.seconds of the JVM's work, counted; under `prof` if given."""
    counter = HandleCounter(env.perf, "-t", [jvm.tid], tmp, note)
    p0 = prof.cpu() if prof else 0
    j0, m0, t0 = jvm.thread_cpu(), machine_busy(), time.monotonic()
    time.sleep(env.seconds)
    calls = counter.stop()
    t1 = time.monotonic()
    j1, m1 = jvm.thread_cpu(), machine_busy()
    pw = prof.cpu() - p0 if prof else 0
    span = t1 - t0
    return {"rate": calls / span if calls else None,
            "busy": (j1 - j0) / span,                    # the worker thread on CPU
            # the machine's other work, in CPUs: the JVM's other threads
            # and everything else (the worker and the profiler left out)
            "others": max(0.0, (m1 - m0) - (j1 - j0) - pw) / span,
            "window_cpu": pw / span if prof else None,
            "end": t1}


def one_run(env, name, pfp, cmd, tmp, tool_first):
    """One JVM, warmed up, a window alone and a window under the tool."""
    jvm = JVM(env.java, env.classes, env.warmup + 2 * env.seconds + SLACK, pfp)
    prof = None
    for f in ("out.folded", "perf.data"):
        if os.path.exists(os.path.join(tmp, f)):
            os.unlink(os.path.join(tmp, f))
    try:
        jvm.go()
        time.sleep(env.warmup)          # the JIT compiles the hot methods, unprofiled
        r = {"name": name}
        for which in (["tool", "alone"] if tool_first else ["alone", "tool"]):
            if which == "alone":
                r["alone"] = window(env, jvm, tmp)
                continue
            prof = Profiler(name, cmd(jvm.pid), tmp)
            r["tool"] = window(env, jvm, tmp, prof)
            r["attach"] = prof.attach
            r["total_cpu"] = prof.stop()
            prof = None
        spent, cpu, t_end = jvm.result()
        if t_end < max(r["alone"]["end"], r["tool"]["end"]):
            note(f"serve ended inside a window ({name}): attach and stop took longer than {SLACK} s")
        r["spent"], r["cpu"] = spent, cpu
        if name == "flare":
            stacks, r["other_samples"] = stacks_flare(os.path.join(tmp, "out.folded"), jvm.comm)
        else:
            stacks, r["other_samples"], r["post_cpu"] = post_perf(env, jvm, tmp)
        r["stacks"] = measure(stacks)
        return r
    finally:
        if prof:
            prof.stop()
        jvm.end()


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec, unit="", none="n/a"):
    return f"{x:{spec}}{unit}" if x is not None else none


def part_overhead(env, tmp):
    log(f"\n1. Overhead and stacks: {env.rounds} rounds at each rate, a JVM per run, "
        f"{env.warmup:g} s warm-up, then {env.seconds:g} s alone and {env.seconds:g} s under the tool")
    results = {}
    for hz in (99, 997):
        ts = tool_cmds(env, hz, tmp)
        runs = {name: [] for name in ts}
        for r in range(env.rounds):
            order = list(ts.items())
            order = order[r % len(order):] + order[:r % len(order)]
            for name, (pfp, cmd) in order:
                try:
                    x = one_run(env, name, pfp, cmd, tmp, tool_first=r % 2 == 1)
                except (RuntimeError, OSError) as e:
                    note(f"{hz} Hz {name}, round {r + 1}: {e}")
                    continue
                x["round"] = r
                runs[name].append(x)
                a, t, s = x["alone"], x["tool"], x["stacks"]
                log(f"   {hz:>3} Hz round {r + 1} {name:<5}{' +PFP' if pfp else '     '} "
                    f"alone {fmt(a['rate'], '.0f')}/s (on CPU {100 * a['busy']:.0f} %, other load "
                    f"{a['others']:.2f}), under it {fmt(t['rate'], '.0f')}/s (on CPU {100 * t['busy']:.0f} %, "
                    f"other load {t['others']:.2f}); {s['total']} worker samples, "
                    f"{s['handle_chain']}/{s['handle']} main;serve;handle, {s['leaf']} naming a leaf, "
                    f"{s['unnamed']} unnamed")
        results[hz] = runs
    return results


def pct(a, b):
    return f"{100 * a / b:.1f} %" if b else "n/a"


def report_overhead(env, results):
    print(f"\n## 1. Overhead (per JVM: {env.warmup:g} s JIT warm-up, then {env.seconds:g} s alone and "
          f"{env.seconds:g} s under the tool; medians of {env.rounds} rounds)\n")
    print("handle() calls per second of each window; slowdown = alone / under the tool on the same JVM "
          "(1.000 = none; the rounds' range in parentheses). perf's JVMs run with -XX:+PreserveFramePointer (PFP); \"vs plain\" = the "
          "plain JVMs' alone rate / the rate under perf (across JVMs: the flag's cost and perf's).\n")
    print("| Hz | tool | JVM | alone /s | under the tool /s | slowdown | vs plain | "
          "CPU in window (% of 1 CPU) | CPU start to exit | post (jcmd + perf script) | attach |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    summary = {}
    pfp_cost = {}
    for hz, runs in results.items():
        plain = med(x["alone"]["rate"] for x in runs.get("flare", []))
        for name, rs in runs.items():
            if not rs:
                continue
            alone = med(x["alone"]["rate"] for x in rs)
            under = med(x["tool"]["rate"] for x in rs)
            each = [x["alone"]["rate"] / x["tool"]["rate"] for x in rs
                    if x["alone"]["rate"] and x["tool"]["rate"]]
            slow = med(each)
            spread = f" ({min(each):.3f}–{max(each):.3f})" if len(each) > 1 else ""
            vs_plain = plain / under if plain and under else None
            if name == "perf" and plain and alone:
                pfp_cost[hz] = plain / alone
            d = summary[(hz, name)] = dict(
                slow=slow, plain=vs_plain,
                window=med(x["tool"]["window_cpu"] for x in rs),
                total=med(x["total_cpu"] for x in rs),
                post=med(x.get("post_cpu") for x in rs),
                attach=med(x["attach"] for x in rs))
            pfp = name == "perf"
            print(f"| {hz} | {name} | {'+PFP' if pfp else 'plain'} | {fmt(alone, '.0f')} | {fmt(under, '.0f')} "
                  f"| {fmt(slow, '.3f')}{spread} | {fmt(vs_plain, '.3f')} "
                  f"| {fmt(d['window'] and 100 * d['window'], '.2f', ' %')} | {fmt(d['total'], '.2f', ' s')} "
                  f"| {fmt(d['post'], '.2f', ' s', '')} | {fmt(d['attach'], '.2f', ' s')} |")
    for hz, c in pfp_cost.items():
        print(f"\n{hz} Hz: -XX:+PreserveFramePointer alone vs plain alone (across JVMs): "
              f"plain / PFP rate = {c:.3f} ({'PFP slower' if c > 1 else 'PFP not slower here'}).", end="")
    print()
    wins = [w for runs in results.values() for rs in runs.values() for x in rs for w in (x["alone"], x["tool"])]
    if wins:
        busy = [w["busy"] for w in wins]
        others = [w["others"] for w in wins]
        print(f"\nWorker thread on CPU over all windows: median {100 * med(busy):.0f} %, min "
              f"{100 * min(busy):.0f} %. The machine's other work (the JVM's other threads included, "
              f"not its worker nor the profiler): median {med(others):.2f} CPUs, max {max(others):.2f} "
              f"of {NCPU}.")
        if med(others) > 0.3:
            print("Other work shared the CPUs: slowdowns are noisy at the level of a few %.")
    return summary


def report_stacks(env, results):
    print(f"\n## 2. Stacks of the worker thread (pooled over {env.rounds} rounds)\n")
    print("under handle = share of the worker's samples holding Service.handle; of those: "
          "main;serve;handle = holding Service.main;Service.serve;Service.handle, leaf named = holding "
          "Service.parseRequest or Service.renderPage (the JIT inlines both into handle). "
          "Whole chain = of the samples naming a leaf, the share holding main;serve;handle;leaf. "
          "Unnamed and `Interpreter`: shares of all the worker's samples. Leaf shares: of all the "
          "worker's samples; the program's own (thread CPU clock) in parentheses.\n")
    print("| Hz | tool | worker samples | other threads | under handle | main;serve;handle | leaf named "
          "| whole chain | unnamed frame | `Interpreter` frame | parseRequest (program) | renderPage (program) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    summary = {}
    for hz, runs in results.items():
        for name, rs in runs.items():
            if not rs:
                continue
            s = {k: sum(x["stacks"][k] for x in rs) for k in rs[0]["stacks"]}
            others = sum(x["other_samples"] for x in rs)
            cpu = sum(x["cpu"] for x in rs)
            prog = {l: 100 * sum(x["spent"].get(l, 0) for x in rs) / cpu if cpu else None for l in LEAVES}
            summary[(hz, name)] = s
            cols = " | ".join(f"{pct(s[l], s['total'])} ({fmt(prog[l], '.1f', ' %')})" for l in LEAVES)
            print(f"| {hz} | {name} | {s['total']} | {others} | {pct(s['handle'], s['total'])} "
                  f"| {pct(s['handle_chain'], s['handle'])} | {pct(s['leaf'], s['handle'])} "
                  f"| {pct(s['chain'], s['leaf'])} "
                  f"| {pct(s['unnamed'], s['total'])} | {pct(s['interp'], s['total'])} | {cols} |")
    return summary


def part_in_kernel(env, tmp):
    log(f"\n2. In-kernel time per sample, flare -p at 997 Hz, Java frames on / --java off "
        f"on the same JVM ({env.rounds} JVMs, {env.seconds:g} s each way)")
    path = "/proc/sys/kernel/bpf_stats_enabled"
    on, off = "Java frames (default)", "--java off"
    modes = {on: [], off: []}
    counts = {m: [] for m in modes}
    java_left = 0
    try:
        with open(path) as f:
            was = f.read().strip()
    except OSError as e:
        note(f"in-kernel part skipped: {e}")
        return None
    out = os.path.join(tmp, "k.folded")
    try:
        with open(path, "w") as f:
            f.write("1")
        for r in range(env.rounds):
            order = [on, off] if r % 2 == 0 else [off, on]
            jvm = JVM(env.java, env.classes, env.warmup + 2 * (env.seconds + SLACK), False)
            try:
                jvm.go()
                time.sleep(env.warmup)
                for mode in order:
                    cmd = [env.flare, "profile", "-F", "997", "-p", str(jvm.pid), "-f", "-o", out]
                    if mode == off:
                        cmd += ["--java", "off"]
                    prof = Profiler("flare", cmd, tmp)
                    try:
                        time.sleep(env.seconds)
                        ns, cnt = sampling_prog_stats(prof.p.pid)
                    finally:
                        prof.stop()
                    if mode == off:
                        java_left += sum(n for frames, n in stacks_flare(out, jvm.comm)[0]
                                         if any(java_name(f).startswith("Service.") for f in frames))
                    if cnt:
                        modes[mode].append(ns / cnt)
                        counts[mode].append(cnt)
                    log(f"   round {r + 1} {mode:<22} {ns / cnt if cnt else float('nan'):7.0f} ns "
                        f"x {cnt} runs")
                jvm.result()
            finally:
                jvm.end()
    except (RuntimeError, OSError) as e:
        note(f"in-kernel part: {e}")
    finally:
        with open(path, "w") as f:
            f.write(was)
    return modes, counts, java_left


def report_in_kernel(res):
    print("\n## 3. In-kernel time per sample, flare's perf_event program (997 Hz, -p, same JVM)\n")
    if not res:
        print("skipped (see the notes)")
        return None
    modes, counts, java_left = res
    print("| flare | ns per run (median) | runs per window (median) |")
    print("|---|---:|---:|")
    for mode, v in modes.items():
        print(f"| {mode} | {fmt(med(v), '.0f')} | {fmt(med(counts[mode]), '.0f')} |")
    ratio = None
    if modes[list(modes)[0]] and modes[list(modes)[1]]:
        a, b = (med(v) for v in modes.values())
        ratio = a / b
        print(f"| ratio | {ratio:.2f}x native only | |")
    if java_left:
        print(f"\n(the --java off runs still had {java_left} samples with Service frames)")
    return ratio


def report_peers(ov, st, ratio):
    print("\n## 4. flare beside perf, same run\n")
    print("| Hz | slowdown, same JVM: flare / perf | vs plain JVM: flare / perf "
          "| CPU start to exit: flare / perf (record + post) | main;serve;handle: flare / perf "
          "| leaf named: flare / perf | unnamed: flare / perf |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for hz in (99, 997):
        f, p = ov.get((hz, "flare")), ov.get((hz, "perf"))
        fs, ps = st.get((hz, "flare")), st.get((hz, "perf"))
        if not (f and p and fs and ps):
            continue
        tot_p = (p["total"] or 0) + (p["post"] or 0)
        ratio_cpu = f"{f['total'] / tot_p:.2f}x" if f["total"] is not None and tot_p else "n/a"
        print(f"| {hz} | {fmt(f['slow'], '.3f')} / {fmt(p['slow'], '.3f')} "
              f"| {fmt(f['plain'], '.3f')} / {fmt(p['plain'], '.3f')} "
              f"| {fmt(f['total'], '.2f', ' s')} / {fmt(p['total'], '.2f', ' s')} + {fmt(p['post'], '.2f', ' s')} "
              f"({ratio_cpu}) "
              f"| {pct(fs['handle_chain'], fs['handle'])} / {pct(ps['handle_chain'], ps['handle'])} "
              f"| {pct(fs['leaf'], fs['handle'])} / {pct(ps['leaf'], ps['handle'])} "
              f"| {pct(fs['unnamed'], fs['total'])} / {pct(ps['unnamed'], ps['total'])} |")
    if ratio:
        print(f"\nIn-kernel cost of walking Java frames: {ratio:.2f}x flare's native-only walk per sample.")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flare", default=os.path.join(ROOT, "target", "release", "flare"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0, help="measured window of each run")
    ap.add_argument("--warmup", type=float, default=2.0, help="serve unprofiled before attaching (JIT)")
    ap.add_argument("--perf", metavar="PATH")
    env = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/java.py: run as root (the profilers need it)")
    if not os.path.exists(env.flare):
        sys.exit(f"bench/java.py: no flare at {env.flare} (cargo build --release, or --flare PATH)")
    env.java, javac = shutil.which("java"), shutil.which("javac")
    if not env.java or not javac:
        sys.exit("bench/java.py: java and javac not on PATH (apt-get install openjdk-17-jdk-headless)")
    env.jcmd = shutil.which("jcmd")
    if not env.jcmd:
        note("jcmd not on PATH: perf runs without a map, its JIT frames unnamed")
    env.perf, perf_version = find_perf(env.perf)
    if not env.perf:
        note("perf not found (apt-get install linux-perf): no work count (no slowdowns) and no perf runs")
    jv = subprocess.run([env.java, "-version"], capture_output=True, text=True).stderr.splitlines()
    fv = subprocess.run([env.flare, "--version"], capture_output=True, text=True).stdout.strip()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"# bench/java.py\n\n{jv[0] if jv else 'java'}; {fv}; {perf_version or 'no perf'}; "
          f"{NCPU} CPUs; kernel {os.uname().release}; load average {load} at the start")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flare-bench-java-") as tmp:
        env.classes = os.path.join(tmp, "classes")
        subprocess.run([javac, "-d", env.classes, SOURCE], check=True)
        results = part_overhead(env, tmp)
        kernel = part_in_kernel(env, tmp)
    ov = report_overhead(env, results)
    st = report_stacks(env, results)
    ratio = report_in_kernel(kernel)
    report_peers(ov, st, ratio)
    print_notes()
    print(f"\n({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
