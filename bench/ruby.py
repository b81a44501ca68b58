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
Progress goes to stderr; a markdown table to stdout at the end. About
40 s a round per Ruby at the defaults.

usage: bench/ruby.py [--flare PATH] [--rbspy PATH] [--rubies 3.1,3.3] [--hz 99,997] [--rounds N]
                     [--seconds S]   (as root)
rbspy: `cargo install rbspy --locked --root /var/cache/flare-bench/rbspy`
(the default --rbspy is its bin/rbspy there, else rbspy on PATH); without
it, rbspy is skipped with a note. Ruby 3.3: `scripts/runtimes ruby 3.3`.
"""

import argparse
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
    """rbservice.rb cpu: started, ready, waiting for "go"."""

    def __init__(self, ruby, seconds):
        self.p = subprocess.Popen([ruby, WORKLOAD, "cpu", f"{seconds:g}"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
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
        """The program's accounting: (wall, {leaf: seconds}, cpu, handle() calls)."""
        other = {}
        spent, cpu = own_figures(self.p.stdout, other)
        calls = int(other["handled"][0]) if "handled" in other else None
        return time.monotonic() - self.t0, spent, cpu, calls

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


def one_run(args, ruby, tmp, name=None, tool=None):
    """One workload run, alone or under a profiler."""
    w = Workload(ruby, args.seconds)
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
        wall, spent, cpu, calls = w.result()
        r = {"wall": wall, "cpu": cpu, "spent": spent, "calls": calls}
        if prof:
            r["window_cpu"] = (cpu_ns(prof.p.pid) - c0) / 1e9 / wall
            p, prof = prof, None
            r["total_cpu"] = p.stop()
            if p.p.returncode not in (0, -2, 130):
                raise RuntimeError(f"{name} exited {p.p.returncode}: {p.tail()}")
            r["serve"], r["leaf"] = shares(out)
        return r
    finally:
        if prof and prof.p.poll() is None:
            prof.stop()
        w.end()


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
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/ruby.py: run as root (flare and rbspy --pid need it)")
    if not os.path.exists(args.flare):
        sys.exit(f"bench/ruby.py: no flare at {args.flare} (cargo build --release, or --flare PATH)")
    if not args.rbspy or not os.path.exists(args.rbspy):
        args.rbspy = None
        note(f"rbspy not found (cargo install rbspy --locked --root {os.path.dirname(os.path.dirname(RBSPY_CACHE))}): "
             "skipped")
    rubies = []
    for v in args.rubies.split(","):
        ruby = ruby_of(v.strip())
        if ruby:
            rubies.append((f"Ruby {ruby_version(ruby)}", ruby))
        else:
            note(f"no Ruby {v} (scripts/runtimes ruby {v}): skipped")
    fv = subprocess.run([args.flare, "--version"], capture_output=True, text=True).stdout.strip()
    rv = subprocess.run([args.rbspy, "--version"], capture_output=True, text=True).stdout.strip() \
        if args.rbspy else "no rbspy"
    print(f"# bench/ruby.py\n\n{fv}; {rv}; {os.cpu_count()} CPUs; kernel {os.uname().release}; "
          f"{args.rounds} rounds of {args.seconds:g} s runs; load average {loadavg()} at the start")
    t0 = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="flare-bench-ruby-") as tmp:
        for label, ruby in rubies:
            log(f"\n{label} ({ruby})")
            results.append((label, ruby, *measure(args, ruby, label, tmp)))
    print("\nslowdown: handle() calls alone / under the tool, same round (median); CPU: the profiler's; "
          "shares: samples naming the leaf among those naming serve, pooled, the program's own "
          "thread-CPU figures in parentheses; off: the larger gap of the two, in points.")
    for label, ruby, alone, res in results:
        report(args, f"{label} ({ruby})", alone, res)
    print_notes()
    print(f"\n({time.monotonic() - t0:.0f} s; load average {loadavg()} at the end)")


if __name__ == "__main__":
    main()
