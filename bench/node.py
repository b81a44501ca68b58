#!/usr/bin/env python3
"""flare's JavaScript (Node.js) frames beside V8's own profiler, on the same workload.

The workload is tests/workloads/nodeservice.js in cpu mode: one thread,
main -> serve -> handle -> parseRequest (calling mix) | renderPage
(calling emit, which TurboFan inlines), each leaf timed with the
process's CPU clock, under the default V8 flags (TurboFan) and the
official Node 20 build of scripts/runtimes unless --node-bin says
otherwise. Each run starts its own node, which serves --warm seconds (2:
the JIT's tiers settle) before "ready", unmeasured, then, after "go",
serves through two windows of --seconds (5) each: one alone and one under
the profiler (started and settled before its window), in an order that
alternates by round. Pairing the windows in one process matters: node
processes of the same program differed in pace by 15 % and more in some
runs here (3-6 % in others), more than a profiler costs; the alone
windows' range across processes is printed beside. Three parts:

1. Slowdown at 99 and 997 Hz, --rounds (3) rounds, one process per tool
   and round, the tools' order rotating by round, medians of the rounds:
   - flare: `flare profile -F HZ -p PID -f -o FILE`, attached (its perf
     events open) and settled 0.5 s before its window;
   - V8's profiler: the CpuProfiler that `node --cpu-prof
     --cpu-prof-interval US` runs (US = 1e6 / HZ), in-process: a thread
     (v8:ProfEvntProc) signals the main thread, whose handler records the
     stack. --cpu-prof drives it over an in-process inspector session
     (Profiler.enable, setSamplingInterval, start; stop at exit); here
     the same calls come over the inspector's WebSocket (`node
     --inspect=127.0.0.1:0`, both windows) so that the profiler runs in
     one window of the process only; settled 0.5 s before it.
   Per tool:
   - slowdown: handle() calls per second in the alone window / in the
     profiled one, same process (the ratio of wall times for fixed work).
     handle() makes three process.cpuUsage() calls, getrusage syscalls,
     counted on the main thread by `perf stat -e
     syscalls:sys_enter_getrusage -t TID` in every window, which costs
     every window the same;
   - node's CPU in each window (all its threads, % of one CPU, from
     /proc/PID/task/*/schedstat): its main thread runs flat out, so what
     rises is its other threads (V8's sampler thread); flare's in-kernel
     sampling is charged to the thread it interrupts: slowdown only;
   - the profiler's CPU over its window: flare's process / V8's sampler
     thread (its signal handler runs on node's main thread: in the
     slowdown); flare's from start to exit too (getrusage: attach,
     tables, names and output included), and the time to attach (flare)
     or to start (Profiler.start's reply: V8 logs the code it has).
2. Shares, in the same windows: the samples under the script's main
   (flare: from attached to stopped, its settling included, its folded
   stacks holding no time; V8: its samples timed inside the window, its
   timestamps being CLOCK_MONOTONIC µs like Python's, and their rate),
   the share of them naming serve (V8's profiler started once serve's
   loop runs code compiled on stack replacement names that code main:
   seen in the rounds whose profiled window comes second) and naming a
   leaf, and each leaf's share of the samples naming one (flare: its
   folded stacks; V8: the profile's nodes and samples), pooled over
   the rounds, against the program's own clock (its `share` lines over
   its whole serve, both windows; the leaves' sum as 100 %). V8 names no
   function TurboFan inlined (handle's and serve's optimized code hold
   the leaves), so a second V8 row counts by source line: a node under
   main naming no leaf adds each of its positionTicks (V8's per-line
   sample counts, inlined functions' lines included) to the leaf whose
   function (parseRequest or mix, renderPage or emit) holds the line;
   the ticks carry no time: the whole profile, settling included.
3. In-kernel time per sample (kernel.bpf_stats_enabled set for the
   measurement, restored after): flare -p at 997 Hz with JavaScript
   frames (the default) and with `--node off` (native frames only), in
   turn on one process per round (order alternating), --kernel-seconds
   (3) each, on each Node build of --kernel-nodes (20, 22, 24, 26 where
   scripts/runtimes has them; 24 on reads V8's dispatch table):
   run_time_ns / run_cnt of flare's perf_event program from
   /proc/PID/fdinfo (benchlib), medians of --rounds.
Progress goes to stderr, window by window (with the machine's other
work in CPUs: /proc/stat's busy time less node's and flare's); markdown
tables of the three parts to stdout at the end. About 5 minutes.

usage: bench/node.py [--flare PATH] [--node-bin PATH] [--rounds N] [--seconds S] [--warm S]
                     [--kernel-nodes 20,22,24,26] [--kernel-seconds S] [--perf PATH]   (as root)
Node builds: `scripts/runtimes node N` (cached in $FLARE_RUNTIME_CACHE,
default /var/cache/flare-runtimes). Without perf (`apt-get install
linux-perf`) there is no work count: no slowdowns.
"""

import argparse
import base64
import glob
import json
import os
import platform
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from benchlib import log, note, print_notes
from benchlib import (HandleCounter, Profiler, cpu_ns, end_workload, machine_busy, own_figures,
                      sampling_prog_stats)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD = os.path.join(ROOT, "tests", "workloads", "nodeservice.js")
CACHE = os.environ.get("FLARE_RUNTIME_CACHE", "/var/cache/flare-runtimes")
NCPU = os.cpu_count() or 1
LEAVES = ("parseRequest", "renderPage")
# The functions each leaf calls (TurboFan inlines them).
LEAF_OF = {"parseRequest": "parseRequest", "mix": "parseRequest", "renderPage": "renderPage", "emit": "renderPage"}
# handle()'s process.cpuUsage() calls, three per call.
GETRUSAGE = "syscalls:sys_enter_getrusage"
# The thread of V8's CPU profiler that signals the sampled thread.
SAMPLER = "v8:ProfEvnt"
V8 = "V8 profiler"
SETTLE = 0.5
# serve runs this long past the two windows: attach, settle and stop.
SLACK = 2.5
def node_build(major):
    """The official Node `major` build scripts/runtimes cached, or None."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    found = sorted(glob.glob(os.path.join(CACHE, f"node{major}-*-{arch}", "bin", "node")),
                   key=lambda p: [int(x) for x in re.findall(r"\d+", p.split(f"node{major}-")[1].split("-")[0])])
    return found[-1] if found else None


def node_version(node):
    return subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()


class Inspector:
    """A client of node's inspector: the Chrome DevTools protocol over a
    WebSocket (RFC 6455, text frames), enough for the Profiler domain."""

    def __init__(self, url, timeout=60):
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        if not m:
            raise RuntimeError(f"not an inspector URL: {url!r}")
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        self.s = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.read(1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError(f"the inspector refused the WebSocket: {head[:80]!r}")
        self.id = 0

    def read(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.s.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise RuntimeError("the inspector closed the connection")
            buf += chunk
        return bytes(buf)

    def send(self, text):
        data = text.encode()
        n = len(data)
        if n < 126:
            head = struct.pack(">BB", 0x81, 0x80 | n)
        elif n < 1 << 16:
            head = struct.pack(">BBH", 0x81, 0x80 | 126, n)
        else:
            head = struct.pack(">BBQ", 0x81, 0x80 | 127, n)
        mask = os.urandom(4)   # a client's frames are masked
        self.s.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def receive(self):
        msg = b""
        while True:
            b0, b1 = self.read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self.read(8))[0]
            mask = self.read(4) if b1 & 0x80 else None
            data = self.read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            op = b0 & 0x0F
            if op == 8:
                raise RuntimeError("the inspector closed the WebSocket")
            if op in (0, 1, 2):
                msg += data
                if b0 & 0x80:
                    return json.loads(msg)

    def call(self, method, **params):
        """Sends a command; returns its result (events in between are dropped)."""
        self.id += 1
        self.send(json.dumps({"id": self.id, "method": method, "params": params}))
        while True:
            m = self.receive()
            if m.get("id") == self.id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})

    def close(self):
        try:
            self.s.sendall(struct.pack(">BB", 0x88, 0x80) + os.urandom(4))
        except OSError:
            pass
        self.s.close()


class Workload:
    """nodeservice.js cpu: started, warmed up, ready, waiting for "go"."""

    def __init__(self, node, serve, warm, tmp, flags=()):
        self.err = os.path.join(tmp, "node.err")
        with open(self.err, "w") as err:
            self.p = subprocess.Popen([node, *flags, WORKLOAD, "cpu", f"{serve:g}", f"{warm:g}"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        self.pid = self.p.pid
        tid = self.p.stdout.readline().split()
        ready = self.p.stdout.readline().strip()
        if len(tid) != 2 or tid[0] != "tid" or ready != "ready":
            self.end()
            raise RuntimeError(f"workload did not start: {tid} {ready!r}")
        self.tid = int(tid[1])

    def inspector_url(self):
        """The WebSocket node --inspect listens on (it says so on stderr at start)."""
        with open(self.err) as f:
            for line in f:
                if line.startswith("Debugger listening on "):
                    return line.split()[-1]
        raise RuntimeError("node printed no inspector URL")

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def result(self):
        """The program's accounting: ({leaf: seconds}, cpu seconds, time of its end)."""
        spent, cpu = own_figures(self.p.stdout)
        return spent, cpu, time.monotonic()

    def end(self):
        end_workload(self.p, 20)


def folded(path):
    """(frames, count) of a folded file."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                stack, _, n = line.rstrip("\n").rpartition(" ")
                if n.isdigit():
                    out.append((stack.split(";"), int(n)))
    except OSError:
        pass
    return out


def tally(stacks):
    """Samples under the script's main, and of those naming serve and
    each leaf."""
    t = {"main": 0, "serve": 0, **dict.fromkeys(LEAVES, 0)}
    for frames, n in stacks:
        fs = set(frames)
        if "main" not in fs:
            continue
        t["main"] += n
        for name in ("serve",) + LEAVES:
            if name in fs:
                t[name] += n
    return t


def source_functions(path):
    """{line (1-based): the top-level function whose body holds it} of a
    script whose functions start with `function NAME(` and end with `}`
    at the start of a line."""
    out, name = {}, None
    with open(path) as f:
        for i, line in enumerate(f, 1):
            m = re.match(r"function (\w+)\(", line)
            if m:
                name = m.group(1)
            if name:
                out[i] = name
            if line.startswith("}"):
                name = None
    return out


def v8_profile(prof, t0, t1):
    """A V8 CPU profile's (Profiler.stop's, a .cpuprofile's) tally of its
    samples taken between monotonic times t0 and t1 (s), and its tally by
    source line (see the header), whole profile."""
    nodes = {n["id"]: n for n in prof["nodes"]}
    parent = {c: n["id"] for n in prof["nodes"] for c in n.get("children", ())}
    names = {}

    def chain(i):
        if i not in names:
            p = parent.get(i)
            names[i] = (chain(p) if p is not None else []) + [nodes[i]["callFrame"]["functionName"]]
        return names[i]

    stacks = []
    t = prof["startTime"]
    for i, dt in zip(prof["samples"], prof["timeDeltas"]):
        t += dt
        if t0 * 1e6 <= t <= t1 * 1e6:
            stacks.append((chain(i), 1))
    at = source_functions(WORKLOAD)
    by_line = {"main": 0, "serve": 0, **dict.fromkeys(LEAVES, 0)}
    for i, n in nodes.items():
        fs = chain(i)
        if "main" not in fs or not n.get("hitCount"):
            continue
        by_line["main"] += n["hitCount"]
        by_line["serve"] += n["hitCount"] if "serve" in fs else 0
        named = [l for l in LEAVES if l in fs]
        if named:
            by_line[named[0]] += n["hitCount"]
            continue
        for tick in n.get("positionTicks", ()):
            leaf = LEAF_OF.get(at.get(tick["line"]))
            if leaf:
                by_line[leaf] += tick["ticks"]
    return tally(stacks), by_line


def window(args, w, tmp, seconds, prof_cpu=lambda: 0.0):
    """`seconds` of the workload's serve, its handle() calls counted;
    `prof_cpu` gives the profiler's CPU seconds so far."""
    counter = HandleCounter(args.perf, "-t", [w.tid], tmp, note, event=GETRUSAGE, per=3)
    p0, c0, m0, t0 = prof_cpu(), cpu_ns(w.pid), machine_busy(), time.monotonic()
    time.sleep(seconds)
    calls = counter.stop()
    t1 = time.monotonic()
    p1, c1, m1 = prof_cpu(), cpu_ns(w.pid), machine_busy()
    span = t1 - t0
    node = (c1 - c0) / 1e9
    # The machine's other work, node's left out (flare's: by the caller).
    return {"rate": calls / span if calls else None, "t0": t0, "t1": t1,
            "node": node / span, "prof": (p1 - p0) / span, "others": max(0.0, (m1 - m0) - node) / span}


def one_run(args, tool, hz, tmp, tool_first):
    """One workload process: a window alone and one under `tool`."""
    flags = ["--inspect=127.0.0.1:0"] if tool == V8 else []
    out = os.path.join(tmp, "out.folded")
    if os.path.exists(out):
        os.unlink(out)
    w = Workload(args.node_bin, 2 * args.seconds + SLACK, args.warm, tmp, flags)
    prof = ins = None
    r = {"tool": tool}
    try:
        if tool == V8:
            ins = Inspector(w.inspector_url())
        w.go()
        for which in (["tool", "alone"] if tool_first else ["alone", "tool"]):
            if which == "alone":
                r["alone"] = window(args, w, tmp, args.seconds)
            elif tool == "flare":
                prof = Profiler("flare", [args.flare, "profile", "-F", str(hz), "-p", str(w.pid),
                                          "-f", "-o", out], tmp, settle=SETTLE)
                r["attach"] = prof.attach
                win = r["tool"] = window(args, w, tmp, args.seconds, prof.cpu)
                win["others"] = max(0.0, win["others"] - win["prof"])
                r["total_cpu"] = prof.stop()
                prof = None
                r["stacks"] = tally(folded(out))
            else:
                t0 = time.monotonic()
                ins.call("Profiler.enable")
                ins.call("Profiler.setSamplingInterval", interval=round(1e6 / hz))
                ins.call("Profiler.start")
                r["attach"] = time.monotonic() - t0
                time.sleep(SETTLE)
                win = r["tool"] = window(args, w, tmp, args.seconds, lambda: cpu_ns(w.pid, SAMPLER) / 1e9)
                profile = ins.call("Profiler.stop")["profile"]
                ins.call("Profiler.disable")
                r["stacks"], r["by_line"] = v8_profile(profile, win["t0"], win["t1"])
        r["spent"], r["cpu"], t_end = w.result()
        if t_end < max(r["alone"]["t1"], r["tool"]["t1"]):
            note(f"serve ended inside a window ({tool}): attach and stop took longer than {SLACK} s")
    finally:
        if prof:
            prof.stop()
        if ins:
            ins.close()
        w.end()
    return r


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec, unit="", none="n/a"):
    return f"{x:{spec}}{unit}" if x is not None else none


def pct(a, b):
    return f"{100 * a / b:.1f} %" if b else "n/a"


def leaf_shares(t):
    return ", ".join(f"{l} {pct(t[l], t[LEAVES[0]] + t[LEAVES[1]])}" for l in LEAVES)


def part_overhead(args, tmp):
    log(f"\n1-2. Slowdown and shares: {args.rounds} rounds at 99 and 997 Hz, a process per tool and round, "
        f"{args.warm:g} s warm-up, then {args.seconds:g} s alone and {args.seconds:g} s under the tool")
    tools = ["flare", V8]
    results = {}
    for hz in (99, 997):
        runs = {t: [] for t in tools}
        for r in range(args.rounds):
            for tool in tools[r % len(tools):] + tools[:r % len(tools)]:
                try:
                    x = one_run(args, tool, hz, tmp, tool_first=r % 2 == 1)
                except (RuntimeError, OSError) as e:
                    note(f"{hz} Hz {tool}, round {r + 1}: {e}")
                    continue
                runs[tool].append(x)
                a, t = x["alone"], x["tool"]
                log(f"   {hz:>3} Hz round {r + 1} {tool:<11} alone {fmt(a['rate'], '.0f')}/s (node "
                    f"{100 * a['node']:.0f} %, other load {a['others']:.2f}), under it {fmt(t['rate'], '.0f')}/s "
                    f"(node {100 * t['node']:.0f} %, other load {t['others']:.2f}, profiler {100 * t['prof']:.1f} %); "
                    f"{x['stacks']['main']} samples under main, {pct(x['stacks']['serve'], x['stacks']['main'])} "
                    f"naming serve, {leaf_shares(x['stacks'])}"
                    + (f"; by line {leaf_shares(x['by_line'])}" if "by_line" in x else ""))
        results[hz] = runs
    return results


def report_overhead(args, results):
    print(f"\n## 1. Slowdown ({args.version}, default flags; per process: {args.warm:g} s warm-up, then "
          f"{args.seconds:g} s alone and {args.seconds:g} s under the tool; medians of {args.rounds} rounds)\n")
    print("handle() calls per second of each window (alone: the range across the processes in parentheses); "
          "slowdown = alone / under the tool in the same process (the rounds' range in parentheses). "
          "node CPU: all its threads, % of one CPU, alone → under the tool. Profiler CPU in its window: "
          f"flare's process / V8's sampler thread ({SAMPLER}…; its signal handler runs on node's main "
          "thread: in the slowdown). Attach: flare's perf events open / V8's Profiler.start answered.\n")
    print("| Hz | tool | alone /s | under the tool /s | slowdown | node CPU | profiler CPU in window | "
          "profiler CPU start to exit | attach |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for hz, runs in results.items():
        for tool, rs in runs.items():
            if not rs:
                continue
            alone = [x["alone"]["rate"] for x in rs if x["alone"]["rate"]]
            under = med(x["tool"]["rate"] for x in rs)
            each = [x["alone"]["rate"] / x["tool"]["rate"] for x in rs
                    if x["alone"]["rate"] and x["tool"]["rate"]]
            slow = med(each)
            spread = f" ({min(each):.3f}–{max(each):.3f})" if len(each) > 1 else ""
            a_spread = f" ({min(alone):.0f}–{max(alone):.0f})" if len(alone) > 1 else ""
            total = med(x.get("total_cpu") for x in rs)
            print(f"| {hz} | {tool} | {fmt(med(alone), '.0f')}{a_spread} | {fmt(under, '.0f')} "
                  f"| {fmt(slow, '.3f')}{spread} "
                  f"| {100 * med(x['alone']['node'] for x in rs):.1f} → {100 * med(x['tool']['node'] for x in rs):.1f} % "
                  f"| {100 * med(x['tool']['prof'] for x in rs):.2f} % "
                  f"| {fmt(total, '.2f', ' s', 'in node')} "
                  f"| {fmt(med(x.get('attach') for x in rs), '.3f', ' s')} |")
    wins = [w for runs in results.values() for rs in runs.values() for x in rs for w in (x["alone"], x["tool"])]
    if wins:
        busy = [w["node"] for w in wins]
        others = [w["others"] for w in wins]
        print(f"\nnode on CPU over all windows: median {100 * med(busy):.0f} %, min {100 * min(busy):.0f} %. "
              f"The machine's other work (not node nor flare): median {med(others):.2f} CPUs, "
              f"max {max(others):.2f} of {NCPU}.")
        if med(others) > 0.3 or max(others) > 0.5:
            print("Other work shared the CPUs: slowdowns are noisy at the level of a few %.")


def report_shares(args, results):
    print(f"\n## 2. Shares (the profiled windows, pooled over {args.rounds} rounds)\n")
    print("under main: the samples holding the script's main (flare: from attached to stopped, its settling "
          "included, its folded stacks holding no time; V8: its samples timed inside the window, and their "
          "rate; flare's is the frequency times node's main thread's share of the CPU). serve named, leaf "
          "named: of those, the share holding serve, parseRequest or renderPage as a frame (V8's profiler started "
          "once serve's loop runs code compiled on stack replacement names that code main). Leaf shares: of the "
          "samples naming a leaf; "
          "the program's own clock over its whole serve (the leaves' sum as 100 %) in parentheses. V8 "
          "names no function TurboFan inlined; \"by line\" adds the source lines V8 counts per node "
          "(positionTicks) in parseRequest or mix, renderPage or emit (whole profile).\n")
    print("| Hz | tool | under main | serve named | leaf named | parseRequest (program) | renderPage (program) |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for hz, runs in results.items():
        for tool, label, key in (("flare", "flare", "stacks"), (V8, V8, "stacks"),
                                 (V8, f"{V8}, by line", "by_line")):
            rs = runs.get(tool)
            if not rs:
                continue
            s = {k: sum(x[key][k] for x in rs) for k in ("main", "serve") + LEAVES}
            named = s[LEAVES[0]] + s[LEAVES[1]]
            prog = {l: sum(x["spent"].get(l, 0) for x in rs) for l in LEAVES}
            both = sum(prog.values())
            # Per second of the window: V8's samples are timed; flare's
            # folded stacks are not (they span its settling and stop too).
            rate = med(x[key]["main"] / (x["tool"]["t1"] - x["tool"]["t0"]) for x in rs) \
                if tool == V8 and key == "stacks" else None
            cols = " | ".join(f"{pct(s[l], named)} ({pct(prog[l], both)})" for l in LEAVES)
            per_s = f" ({rate:.0f}/s)" if rate else ""
            print(f"| {hz} | {label} | {s['main']}{per_s} | {pct(s['serve'], s['main'])} | {pct(named, s['main'])} "
                  f"| {cols} |")


def part_in_kernel(args, builds, tmp):
    log(f"\n3. In-kernel time per sample, flare -p at 997 Hz, JavaScript frames / --node off in turn, "
        f"a process per round, {args.rounds} rounds, {args.kernel_seconds:g} s each way")
    path = "/proc/sys/kernel/bpf_stats_enabled"
    try:
        with open(path) as f:
            was = f.read().strip()
    except OSError as e:
        note(f"in-kernel part skipped: {e}")
        return None
    on, off = "JavaScript frames", "--node off"
    res = {}
    out = os.path.join(tmp, "k.folded")
    try:
        with open(path, "w") as f:
            f.write("1")
        for version, node in builds:
            d = res[version] = {m: {"ns": [], "cnt": [], "main": 0, "total": 0} for m in (on, off)}
            for r in range(args.rounds):
                w = None
                try:
                    w = Workload(node, 2 * args.kernel_seconds + SLACK, args.warm, tmp)
                    w.go()
                    for mode in ([on, off] if r % 2 == 0 else [off, on]):
                        cmd = [args.flare, "profile", "-F", "997", "-p", str(w.pid), "-f", "-o", out]
                        prof = Profiler("flare", cmd + (["--node", "off"] if mode == off else []), tmp,
                                        settle=SETTLE)
                        try:
                            time.sleep(args.kernel_seconds)
                            ns, cnt = sampling_prog_stats(prof.p.pid)
                        finally:
                            prof.stop()
                        stacks = folded(out)
                        d[mode]["main"] += tally(stacks)["main"]
                        d[mode]["total"] += sum(n for _, n in stacks)
                        if cnt:
                            d[mode]["ns"].append(ns / cnt)
                            d[mode]["cnt"].append(cnt)
                        log(f"   {version} round {r + 1} {mode:<18} "
                            f"{ns / cnt if cnt else float('nan'):6.0f} ns x {cnt}")
                    w.result()
                except (RuntimeError, OSError) as e:
                    note(f"in-kernel, {version}, round {r + 1}: {e}")
                finally:
                    if w:
                        w.end()
    finally:
        with open(path, "w") as f:
            f.write(was)
    return res


def report_in_kernel(res):
    print("\n## 3. In-kernel time per sample, flare's perf_event program (997 Hz, -p, both ways on one process)\n")
    if not res:
        print("skipped (see the notes)")
        return
    print("run_time_ns / run_cnt, median of the rounds; samples per window (median); under main: the "
          "share of the profile's samples holding the script's main, pooled (--node off: none expected).\n")
    print("| Node | JavaScript frames (default) | --node off | ratio | samples per window | "
          "under main: default / --node off |")
    print("|---|---:|---:|---:|---:|---:|")
    for version, d in res.items():
        js, native = d["JavaScript frames"], d["--node off"]
        a, b = med(js["ns"]), med(native["ns"])
        print(f"| {version} | {fmt(a, '.0f', ' ns')} | {fmt(b, '.0f', ' ns')} "
              f"| {fmt(a / b if a and b else None, '.2f', 'x')} | {fmt(med(js['cnt']), '.0f')} "
              f"| {pct(js['main'], js['total'])} / {pct(native['main'], native['total'])} |")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__, usage=argparse.SUPPRESS,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flare", default=os.environ.get("FLARE", os.path.join(ROOT, "target", "release", "flare")),
                    help="default: $FLARE, else target/release/flare")
    ap.add_argument("--node-bin", default=node_build(20) or shutil.which("node"),
                    help="the node of parts 1 and 2 (default: scripts/runtimes' Node 20)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="each window of parts 1 and 2")
    ap.add_argument("--warm", type=float, default=2.0, help="serve before the windows (unmeasured, unprofiled)")
    ap.add_argument("--kernel-nodes", default="20,22,24,26",
                    help="Node majors of part 3 (scripts/runtimes' builds; those missing are skipped)")
    ap.add_argument("--kernel-seconds", type=float, default=3.0, help="each window of part 3")
    ap.add_argument("--perf", default=shutil.which("perf"), help="perf, for the work count")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/node.py: run as root (flare needs it)")
    if not os.path.exists(args.flare):
        sys.exit(f"bench/node.py: no flare at {args.flare} (cargo build --release, or --flare PATH)")
    if not args.node_bin or not os.path.exists(args.node_bin):
        sys.exit("bench/node.py: no Node 20 found (scripts/runtimes node 20); give one with --node-bin PATH")
    if not args.perf:
        note("perf not found (apt-get install linux-perf): no work count, no slowdowns")
    args.version = f"Node {node_version(args.node_bin).lstrip('v')}"
    builds = []
    for major in args.kernel_nodes.split(","):
        node = node_build(major.strip())
        if node:
            builds.append((f"Node {node_version(node).lstrip('v')}", node))
        else:
            note(f"part 3: no Node {major} build (scripts/runtimes node {major}): skipped")
    fv = subprocess.run([args.flare, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"# bench/node.py\n\n{args.version} ({args.node_bin}); {fv}; {NCPU} CPUs; "
          f"kernel {os.uname().release}; load average {loadavg()} at the start")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flare-bench-node-") as tmp:
        results = part_overhead(args, tmp)
        kernel = part_in_kernel(args, builds, tmp)
    report_overhead(args, results)
    report_shares(args, results)
    report_in_kernel(kernel)
    print_notes()
    print(f"\n({time.monotonic() - t0:.0f} s; load average {loadavg()} at the end)")


if __name__ == "__main__":
    main()
