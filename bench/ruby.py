#!/usr/bin/env python3
"""flare's Ruby frames beside rbspy, in one run, on the same workload.

The workload is tests/workloads/rbservice.rb in cpu mode: one thread,
main -> serve -> handle -> parse_request (calling mix in a block) |
render_page, each leaf timed with the thread's CPU clock, on Debian's
Ruby 3.1 (/usr/bin/ruby3.1) and on scripts/runtimes' Ruby 3.3 where it
is cached. Each run starts its own ruby, which serves --seconds (4) of
wall time after "go", alone or under one profiler attached and settled
(0.5 s) before it; --rounds (3) rounds, tools in turn within a round (the
order rotating by round), medians of the rounds. The tools, at each rate
of --hz (99, rbspy's default rate, and 997):
- flare: `flare profile -F HZ -p PID -f -o FILE` (folded stacks);
- rbspy: `rbspy record --pid PID --rate HZ --format collapsed --file
  FILE --raw-file RAW --silent` (--silent: no summary printed every
  second), in its default mode, which stops the target while it reads
  each sample, and with --nonblocking. It opens no perf event: it counts
  as attached once it says it is recording (or after 1 s).
Per tool:
- slowdown: handle() calls in the round's run alone / under the tool
  (the program's "handled N calls" line; both serve the same wall time,
  so this is the ratio of wall times for a fixed amount of work);
- the profiler's CPU: % of one CPU over the window
  (/proc/PID/task/*/schedstat), and seconds from start to exit
  (getrusage of the child: attach, symbols and output included);
- samples per second of the window, and each leaf's share: samples whose
  stack names parse_request / render_page among those naming serve,
  pooled over the rounds, against the program's own accounting in the
  same runs (its `share` lines over its `cpu` line); "off": the largest
  gap of the two leaves, in points.
Then a real program: Debian's rubocop (`apt-get install rubocop`, on
Ruby 3.1) linting part of its own sources (--rubocop: lib/rubocop/cop/mixin,
70 files) with `--cache false`, through bench/workloads/rubocop.rb, which
loads rubocop, waits for "go" and times the lint itself. The same tools at
99 Hz, in turn each round after a run alone: the slowdown (lint wall time
under the tool / alone, same round), the profiler's CPU, its samples with
Ruby frames (flare's on the CPU, rbspy's on and off it), the share of
them whose outermost Ruby frame is the driver's <main> (whole), the
deepest; then of the samples in the lint (naming RuboCop::CLI#run), the
--top (10) methods by rbspy's self share (method and file, without class
or line: rbspy names no class), each tool's self share (innermost Ruby
frame) and inclusive share (anywhere in the stack).
Progress goes to stderr; a markdown table to stdout at the end. About
40 s a round per Ruby at the defaults, and 30 s a round of rubocop.

usage: bench/ruby.py [--flare PATH] [--rbspy PATH] [--rubies 3.1,3.3] [--hz 99,997] [--rounds N]
                     [--seconds S] [--programs rbservice,rubocop] [--rubocop TREE] [--top N]
                     (as root)
rbspy: `cargo install rbspy --locked --root /var/cache/flare-bench/rbspy`
(the default --rbspy is its bin/rbspy there, else rbspy on PATH); without
it, rbspy is skipped with a note. Ruby 3.3: `scripts/runtimes ruby 3.3`.
"""

import argparse
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import log, note, print_notes
from benchlib import Profiler, cpu_ns, end_workload, own_figures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD = os.path.join(ROOT, "tests", "workloads", "rbservice.rb")
RBSPY_CACHE = "/var/cache/flare-bench/rbspy/bin/rbspy"
LEAVES = ("parse_request", "render_page")
SETTLE = 0.5
# rubocop: Debian's (on its Ruby 3.1), linting part of its own sources.
RUBOCOP_RUBY = "/usr/bin/ruby3.1"
RUBOCOP_DRIVER = os.path.join(ROOT, "bench", "workloads", "rubocop.rb")
RUBOCOP_TREE = "/usr/share/rubygems-integration/all/gems/rubocop-1.39.0/lib/rubocop/cop/mixin"
RUBOCOP_HZ = 99
# RuboCop::CLI#run, as ruby_frames() names it: the lint.
LINT = ("run", "cli.rb")

def ruby_of(version):
    """The ruby of `version` (3.1: Debian's; others: scripts/runtimes'), or None."""
    if version == "3.1" and os.path.exists("/usr/bin/ruby3.1"):
        return "/usr/bin/ruby3.1"
    r = subprocess.run([os.path.join(ROOT, "scripts", "runtimes"), "ruby", version],
                       capture_output=True, text=True)
    path = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else ""
    return path if os.path.exists(path) else None


def ruby_version(ruby):
    return subprocess.run([ruby, "-e", "print RUBY_VERSION"], capture_output=True, text=True).stdout.strip()


class Workload:
    """rbservice.rb cpu (or `cmd`): started, ready, waiting for "go"."""

    def __init__(self, ruby, seconds, cmd=None):
        cmd = cmd or [ruby, WORKLOAD, "cpu", f"{seconds:g}"]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  cwd=tempfile.gettempdir())
        self.pid = self.p.pid
        ready = self.p.stdout.readline().strip()
        if ready != "ready":
            self.end()
            raise RuntimeError(f"workload did not start: {ready!r}")

    def go(self):
        self.t0 = time.monotonic()
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def result(self):
        """The program's accounting: (wall, {leaf: seconds}, cpu, handle() calls);
        its own "wall" line, where it prints one, for the wall."""
        other = {}
        spent, cpu = own_figures(self.p.stdout, other)
        calls = int(other["handled"][0]) if "handled" in other else None
        wall = float(other["wall"][0]) if "wall" in other else time.monotonic() - self.t0
        return wall, spent, cpu, calls

    def end(self):
        end_workload(self.p, 10)


def rbspy_recording(prof):
    """rbspy has attached: its log says so, or a second has passed."""
    with open(prof.log) as f:
        text = f.read()
    return "is recording" in text or time.monotonic() - prof.t_start > 1.0


class Tool(Profiler):
    """benchlib's Profiler, timed from its start (for rbspy's readiness)."""

    def __init__(self, name, cmd, tmp, ready=None):
        self.t_start = time.monotonic()
        super().__init__(name, cmd, tmp, settle=SETTLE, ready=ready)
        if self.p.poll() is not None:
            raise RuntimeError(f"{name} exited ({self.p.returncode}): {self.tail()}")

    def stop(self):
        """Its CPU seconds, start to exit; an error if it ended before."""
        if self.p.poll() is not None:
            raise RuntimeError(f"{self.name} exited early ({self.p.returncode}): {self.tail()}")
        return super().stop()


def names(stack):
    """The methods a folded stack names, without class or place: flare's
    `Object#parse_request (rbservice.rb:30)`, rbspy's `parse_request -
    /path/rbservice.rb:30`; `block in parse_request` names parse_request."""
    out = set()
    for frame in stack.split(";"):
        label = frame.split(" (")[0].split(" - ")[0].strip()
        out.add(re.split(r"[#. ]", label)[-1])
    return out


def shares(path):
    """Samples naming serve, and each leaf's count among them."""
    serve, leaf = 0, dict.fromkeys(LEAVES, 0)
    try:
        with open(path) as f:
            for line in f:
                stack, _, n = line.rstrip("\n").rpartition(" ")
                if not n.isdigit():
                    continue
                fs = names(stack)
                if "serve" not in fs:
                    continue
                serve += int(n)
                for name in LEAVES:
                    if name in fs:
                        leaf[name] += int(n)
    except OSError:
        pass
    return serve, leaf


def tools(args, hz):
    """name -> (command taking the pid and the output file, readiness or None)."""
    out = {"flare": (lambda pid, o: [args.flare, "profile", "-F", str(hz), "-p", str(pid), "-f", "-o", o], None)}
    if args.rbspy:
        def rbspy(*flags):
            return (lambda pid, o: [args.rbspy, "record", "--pid", str(pid), "--rate", str(hz), *flags,
                                    "--format", "collapsed", "--file", o, "--raw-file", o + ".raw.gz",
                                    "--silent"], rbspy_recording)
        out["rbspy"] = rbspy()
        out["rbspy --nonblocking"] = rbspy("--nonblocking")
    return out


def profiled(w, tmp, name, tool, figures, read):
    """Runs the started workload `w`, under `tool` (cmd, ready) if given:
    `figures(result)` makes the run's dict from w.result(), and
    `read(folded path)` adds the profile's own figures to it."""
    prof = None
    out = os.path.join(tmp, "out.folded")
    for f in (out, out + ".raw.gz"):
        if os.path.exists(f):
            os.unlink(f)
    try:
        if tool:
            cmd, ready = tool
            prof = Tool(name, cmd(w.pid, out), tmp, ready)
        c0 = cpu_ns(prof.p.pid) if prof else 0
        w.go()
        r = figures(w.result())
        if prof:
            r["window_cpu"] = (cpu_ns(prof.p.pid) - c0) / 1e9 / r["wall"]
            p, prof = prof, None
            r["total_cpu"] = p.stop()
            if p.p.returncode not in (0, -2, 130):
                raise RuntimeError(f"{name} exited {p.p.returncode}: {p.tail()}")
            r.update(read(out))
        return r
    finally:
        if prof and prof.p.poll() is None:
            prof.stop()
        w.end()


def one_run(args, ruby, tmp, name=None, tool=None):
    """One workload run, alone or under a profiler."""
    def figures(res):
        wall, spent, cpu, calls = res
        return {"wall": wall, "cpu": cpu, "spent": spent, "calls": calls}

    def read(out):
        serve, leaf = shares(out)
        return {"serve": serve, "leaf": leaf}

    return profiled(Workload(ruby, args.seconds), tmp, name, tool, figures, read)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def measure(args, ruby, label, tmp):
    """{hz: {tool: [runs]}}, and the runs alone (one per round)."""
    rates = [int(h) for h in args.hz.split(",")]
    alone, res, failed = [], {hz: {} for hz in rates}, set()
    for r in range(args.rounds):
        x = one_run(args, ruby, tmp)
        alone.append(x)
        log(f"   {label} round {r + 1} {'alone':<12} {x['calls']} calls, {x['cpu'] / x['wall']:.2f} CPU")
        order = [(hz, name, tool) for hz in rates for name, tool in tools(args, hz).items()]
        order = order[r % len(order):] + order[:r % len(order)]
        for hz, name, tool in order:
            if (hz, name) in failed:
                continue
            try:
                x = dict(one_run(args, ruby, tmp, name, tool), round=r)
            except (RuntimeError, OSError) as e:
                # Once is enough: the rounds after would fail the same way.
                failed.add((hz, name))
                note(f"{label}, {name} at {hz} Hz, round {r + 1} (not tried again): {e}")
                continue
            res[hz].setdefault(name, []).append(x)
            log(f"   {label} round {r + 1} {name:<19} {hz:>3} Hz {x['calls']} calls, "
                f"{100 * x['window_cpu']:.1f} % CPU, {x['serve']} samples in serve")
    return alone, res


def pct(a, b):
    return f"{100 * a / b:.1f} %" if b else "n/a"


def report(args, label, alone, res):
    print(f"\n## {label}\n")
    rates = [x["calls"] / args.seconds for x in alone if x["calls"]]
    busy = med(x["cpu"] / x["wall"] for x in alone)
    print(f"Alone: {med(rates):.0f} handle() calls/s (runs {min(rates):.0f}-{max(rates):.0f}), "
          f"on the CPU {100 * busy:.0f} % of its wall time. Program's own shares (pooled): "
          + ", ".join(f"{l} {pct(sum(x['spent'][l] for x in alone), sum(x['cpu'] for x in alone))}"
                      for l in LEAVES) + ".\n")
    print("| Hz | tool | slowdown | CPU in window | CPU start to exit | samples/s | "
          "parse_request (program) | render_page (program) | off |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for hz, by_tool in res.items():
        for name, rs in by_tool.items():
            slow = med(alone[x["round"]]["calls"] / x["calls"] if x["calls"] and alone[x["round"]]["calls"]
                       else None for x in rs)
            serve = sum(x["serve"] for x in rs)
            cols, off = [], 0.0
            for l in LEAVES:
                prog = sum(x["spent"][l] for x in rs) / sum(x["cpu"] for x in rs)
                if serve:
                    tool = sum(x["leaf"][l] for x in rs) / serve
                    off = max(off, abs(tool - prog) * 100)
                    cols.append(f"{100 * tool:.1f} % ({100 * prog:.1f} %)")
                else:
                    cols.append(f"n/a ({100 * prog:.1f} %)")
            rate = med(x["serve"] / x["wall"] for x in rs)
            print(f"| {hz} | {name} | {slow:.3f} | {100 * med(x['window_cpu'] for x in rs):.1f} % "
                  f"| {med(x['total_cpu'] for x in rs):.2f} s | {rate:.0f} | {cols[0]} | {cols[1]} "
                  f"| {f'{off:.1f} pt' if serve else 'n/a'} |")


def ruby_frames(stack):
    """A folded stack's Ruby methods, root first, as (method, file) without
    class or line: flare's `RuboCop::Cop::Base#on_send (cop/base.rb:123)`,
    rbspy's `on_send - /usr/.../cop/base.rb:123` both give ("on_send",
    "base.rb"); `block in X` and `block (2 levels) in X` are kept as such.
    Frames without a Ruby file (C functions, native frames) are left out."""
    out = []
    for frame in stack.split(";"):
        m = re.match(r"^(.*?)(?: \((\S+\.rb):\d+\)| - (\S+\.rb):\d+)$", frame)
        if not m:
            continue
        label, path = m.group(1), m.group(2) or m.group(3)
        block = re.match(r"^(block (?:\(\d+ levels\) )?in )(.*)$", label)
        prefix, label = (block.group(1), block.group(2)) if block else ("", label)
        out.append((prefix + re.split(r"[#.]", label)[-1], os.path.basename(path)))
    return out


def method_shares(path):
    """A folded file's samples with Ruby frames ("ruby"), those whose
    outermost is the driver's <main> ("whole"), the deepest in Ruby frames;
    and of the samples inside the lint (naming RuboCop::CLI#run: not the
    driver waiting before and after, which rbspy samples off the CPU too,
    flare not) their count ("lint") and per (method, file) those where it
    is the innermost Ruby frame ("own": self) and anywhere ("incl")."""
    r = {"ruby": 0, "whole": 0, "deepest": 0, "lint": 0,
         "own": collections.Counter(), "incl": collections.Counter()}
    try:
        with open(path) as f:
            for line in f:
                stack, _, n = line.rstrip("\n").rpartition(" ")
                frames = ruby_frames(stack) if n.isdigit() else []
                if not frames:
                    continue
                n = int(n)
                r["ruby"] += n
                r["whole"] += n if frames[0] == ("<main>", "rubocop.rb") else 0
                r["deepest"] = max(r["deepest"], len(frames))
                if LINT not in frames:
                    continue
                r["lint"] += n
                r["own"][frames[-1]] += n
                for m in set(frames):
                    r["incl"][m] += n
    except OSError:
        pass
    return r


def rubocop_run(args, tmp, name=None, tool=None):
    """One rubocop lint (bench/workloads/rubocop.rb), alone or under a
    profiler: its own wall and CPU, and the profiler's figures."""
    cmd = [RUBOCOP_RUBY, RUBOCOP_DRIVER, "--cache", "false", "--format", "progress",
           "-o", os.devnull, args.rubocop]
    w = Workload(RUBOCOP_RUBY, 0, cmd)
    return profiled(w, tmp, name, tool,
                    lambda res: {"wall": res[0], "cpu": res[2]},
                    lambda out: {"methods": method_shares(out)})


def measure_rubocop(args, tmp):
    """rubocop's runs: alone (one per round) and {tool: [runs]} at 99 Hz."""
    alone, res, failed = [], {}, set()
    for r in range(args.rounds):
        x = rubocop_run(args, tmp)
        alone.append(x)
        log(f"   rubocop round {r + 1} {'alone':<19} {x['wall']:.2f} s, {x['cpu']:.2f} s CPU")
        order = list(tools(args, RUBOCOP_HZ).items())
        order = order[r % len(order):] + order[:r % len(order)]
        for name, tool in order:
            if name in failed:
                continue
            try:
                x = dict(rubocop_run(args, tmp, name, tool), round=r)
            except (RuntimeError, OSError) as e:
                failed.add(name)
                note(f"rubocop, {name}, round {r + 1} (not tried again): {e}")
                continue
            res.setdefault(name, []).append(x)
            log(f"   rubocop round {r + 1} {name:<19} {x['wall']:.2f} s, "
                f"{100 * x['window_cpu']:.1f} % CPU, {x['methods']['lint']} samples in the lint")
    return alone, res


def report_rubocop(args, alone, res):
    print(f"\n## rubocop ({RUBOCOP_RUBY}, {RUBOCOP_HZ} Hz)\n")
    print(f"`rubocop --cache false {args.rubocop}`, loaded before the profiler attaches; alone "
          f"{med(x['wall'] for x in alone):.2f} s wall, {med(x['cpu'] for x in alone):.2f} s CPU "
          f"(runs {min(x['wall'] for x in alone):.2f}-{max(x['wall'] for x in alone):.2f} s).\n")
    print("slowdown: the lint's wall time under the tool / alone, same round (median); its CPU "
          "likewise (flare's BPF walk is charged to it, rbspy's pauses are not); CPU: the profiler's.\n")
    print("| tool | slowdown | its CPU | CPU in window | CPU start to exit | samples with Ruby frames | "
          "from <main> | deepest | in the lint |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    pooled = {}
    for name, rs in res.items():
        slow = med(x["wall"] / alone[x["round"]]["wall"] for x in rs)
        t = {k: sum(x["methods"][k] for x in rs) for k in ("ruby", "whole", "lint")}
        own, incl = collections.Counter(), collections.Counter()
        for x in rs:
            own.update(x["methods"]["own"])
            incl.update(x["methods"]["incl"])
        pooled[name] = (t["lint"], own, incl)
        cpu = med(x["cpu"] / alone[x["round"]]["cpu"] for x in rs)
        print(f"| {name} | {slow:.3f} | {cpu:.3f} | {100 * med(x['window_cpu'] for x in rs):.1f} % | "
              f"{med(x['total_cpu'] for x in rs):.2f} s | {t['ruby']} | {pct(t['whole'], t['ruby'])} | "
              f"{max(x['methods']['deepest'] for x in rs)} | {t['lint']} |")
    names = list(pooled)
    if not names:
        return
    # The top methods by self share of the first peer (rbspy where it ran),
    # each tool's self and inclusive shares of its samples in the lint.
    ref = next((n for n in names if n != "flare"), names[0])
    top = [m for m, _ in pooled[ref][1].most_common(args.top)]
    print(f"\nTop {len(top)} methods by {ref}'s self share; self / inclusive, % of each tool's "
          "samples in the lint:\n")
    print("| method (file) | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    gaps = {n: [0.0, 0.0] for n in names}
    for m in top:
        cols = []
        for n in names:
            total, own, incl = pooled[n]
            a, b = (100 * own[m] / total, 100 * incl[m] / total) if total else (0, 0)
            ra, rb = ((100 * pooled[ref][1][m] / pooled[ref][0], 100 * pooled[ref][2][m] / pooled[ref][0])
                      if pooled[ref][0] else (0, 0))
            gaps[n][0] = max(gaps[n][0], abs(a - ra))
            gaps[n][1] = max(gaps[n][1], abs(b - rb))
            cols.append(f"{a:.1f} / {b:.1f}")
        print(f"| {m[0]} ({m[1]}) | " + " | ".join(cols) + " |")
    print("\nLargest gap to " + ref + " over these (self / inclusive, points): "
          + ", ".join(f"{n} {g[0]:.1f} / {g[1]:.1f}" for n, g in gaps.items() if n != ref) + ".")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__, usage=argparse.SUPPRESS,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flare", default=os.environ.get("FLARE", os.path.join(ROOT, "target", "release", "flare")),
                    help="default: $FLARE, else target/release/flare")
    ap.add_argument("--rbspy", default=RBSPY_CACHE if os.path.exists(RBSPY_CACHE) else shutil.which("rbspy"),
                    help=f"default: {RBSPY_CACHE}, else rbspy on PATH")
    ap.add_argument("--rubies", default="3.1,3.3", help="Ruby versions (those missing are skipped)")
    ap.add_argument("--hz", default="99,997", help="sampling rates (rbspy's default is 99)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="each run's serve (wall time)")
    ap.add_argument("--programs", default="rbservice,rubocop", help="rbservice, rubocop or both")
    ap.add_argument("--rubocop", default=RUBOCOP_TREE, help="the tree rubocop lints")
    ap.add_argument("--top", type=int, default=10, help="rubocop's methods compared")
    args = ap.parse_args()
    programs = args.programs.split(",")
    if "rubocop" in programs and not (os.path.exists(RUBOCOP_RUBY) and os.path.exists(args.rubocop)):
        programs.remove("rubocop")
        note(f"no rubocop on {RUBOCOP_RUBY} or no {args.rubocop} (apt-get install rubocop): skipped")
    if "rbservice" not in programs:
        args.rubies = ""
    if os.geteuid() != 0:
        sys.exit("bench/ruby.py: run as root (flare and rbspy --pid need it)")
    if not os.path.exists(args.flare):
        sys.exit(f"bench/ruby.py: no flare at {args.flare} (cargo build --release, or --flare PATH)")
    if not args.rbspy or not os.path.exists(args.rbspy):
        args.rbspy = None
        note(f"rbspy not found (cargo install rbspy --locked --root {os.path.dirname(os.path.dirname(RBSPY_CACHE))}): "
             "skipped")
    rubies = []
    for v in filter(None, args.rubies.split(",")):
        ruby = ruby_of(v.strip())
        if ruby:
            rubies.append((f"Ruby {ruby_version(ruby)}", ruby))
        else:
            note(f"no Ruby {v} (scripts/runtimes ruby {v}): skipped")
    fv = subprocess.run([args.flare, "--version"], capture_output=True, text=True).stdout.strip()
    rv = subprocess.run([args.rbspy, "--version"], capture_output=True, text=True).stdout.strip() \
        if args.rbspy else "no rbspy"
    print(f"# bench/ruby.py\n\n{fv}; {rv}; {os.cpu_count()} CPUs; kernel {os.uname().release}; "
          f"{args.rounds} rounds{f' of {args.seconds:g} s runs' if rubies else ''}; "
          f"load average {loadavg()} at the start")
    t0 = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="flare-bench-ruby-") as tmp:
        for label, ruby in rubies:
            log(f"\n{label} ({ruby})")
            results.append((label, ruby, *measure(args, ruby, label, tmp)))
        if "rubocop" in programs:
            log(f"\nrubocop ({args.rubocop})")
            rubocop = measure_rubocop(args, tmp)
    if results:
        print("\nslowdown: handle() calls alone / under the tool, same round (median); CPU: the profiler's; "
              "shares: samples naming the leaf among those naming serve, pooled, the program's own "
              "thread-CPU figures in parentheses; off: the larger gap of the two, in points.")
    for label, ruby, alone, res in results:
        report(args, f"{label} ({ruby})", alone, res)
    if "rubocop" in programs:
        report_rubocop(args, *rubocop)
    print_notes()
    print(f"\n({time.monotonic() - t0:.0f} s; load average {loadavg()} at the end)")


if __name__ == "__main__":
    main()
