#!/usr/bin/env python3
"""Cost of `flare agent` on a busy machine, pushing to a local receiver.

Runs livestacks (many distinct stacks, one thread per CPU: every CPU busy)
and `flare agent -F 19` on all CPUs with 10 s windows (--interval) pushing
to a Pyroscope-style receiver on loopback (this script, http.server), for
--seconds. Reports:
  - the agent's CPU time as % of one core (utime+stime from /proc, over
    the whole run, start-up included, and over the steady part);
  - its RSS after the first window, at the end and the peak (sampled every
    second from /proc/PID/status);
  - per-window push latency: arrival at the receiver minus the window's
    end (pprof time_nanos + duration_nanos), i.e. encoding + queueing +
    HTTP, median and max.

With --profiles LIST given more than once (e.g. --profiles cpu --profiles
cpu,off-cpu,wall), one agent per list runs in turn on the same load, a
report for each; with --together, all of them at once, each pushing to a
receiver of its own: the same load for each, minute by minute.

--baseline PATH runs a second agent beside each one, from another flare
binary (say, a copy of the last commit's), with the same options and its
own receiver: a change's figures against the build before it, measured on
the same load in the same minutes.

--load runtimes swaps livestacks for real programs in real runtimes, each
in a loop for the whole run: pylint --jobs=1 linting astroid (pyenv's
CPython 3.12, the venv bench/deep.py makes), javac compiling java.util,
java.lang and java.io (OpenJDK 17, the sources bench/deep.py fetches)
and the TypeScript compiler on Node type-checking its own API
(typescript.d.ts, `npm install typescript@5` in the cache once). A
runtime missing here is said and left out.

--load services runs the same three programs as long-lived services: each
repeats its work inside one process (pylint's Run, javac through
javax.tools, tsc's createProgram), as a fleet's services run, where
--load runtimes starts a new process for each run: the agent's cost
without the naming of every new process's functions.

usage: bench/agent.py [--seconds N] [--interval S] [--hz F] [--profiles LIST]..
                      [--together] [--load livestacks|runtimes|services]
                      [--baseline PATH]
       (as root, after cargo build --release)
"""

import argparse
import gzip
import http.server
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLARE = os.path.join(ROOT, "target", "release", "flare")
NCPU = os.cpu_count() or 1
TICK = os.sysconf("SC_CLK_TCK")


def varint(b, i):
    n = shift = 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return n, i


def window_end_ns(body):
    """time_nanos (field 9) + duration_nanos (field 10) of a pprof body."""
    b = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
    i, fields = 0, {}
    while i < len(b):
        key, i = varint(b, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(b, i)
            fields[field] = v
        elif wire == 2:
            n, i = varint(b, i)
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError("unexpected wire type %d" % wire)
    return fields.get(9, 0) + fields.get(10, 0)


def receiver():
    """A Pyroscope-style receiver on loopback: (its URL, the list of its
    arrivals as (arrival ns, window end ns, body bytes))."""
    arrivals = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            now = time.time_ns()
            arrivals.append((now, window_end_ns(body), len(body)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return "http://127.0.0.1:%d" % server.server_address[1], arrivals


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Agent:
    """One running agent and what is watched of it."""

    def __init__(self, a, profiles, binary=FLARE):
        self.profiles, self.binary = profiles, binary
        url, self.arrivals = receiver()
        self.p = subprocess.Popen([binary, "agent", "-F", str(a.hz), "--interval", str(a.interval),
                                   "--profiles", profiles, "--pyroscope", url],
                                  stderr=subprocess.PIPE, text=True)
        self.t0 = time.monotonic()
        self.rss, self.steady = [], None

    def poll(self, a):
        """Once a second: its RSS, and its CPU when the first window is past."""
        self.rss.append(rss_kib(self.p.pid))
        if self.steady is None and time.monotonic() - self.t0 >= a.interval + 1:
            self.steady = (time.monotonic(), cpu_ticks(self.p.pid), len(self.rss))

    def stop_and_report(self, a, load):
        end_ticks, end_t = cpu_ticks(self.p.pid), time.monotonic()
        self.p.send_signal(signal.SIGTERM)
        _, err = self.p.communicate(timeout=60)
        wall = end_t - self.t0
        print("flare agent -F %d --profiles %s, %g s windows, %d CPUs busy (%s), %d s%s"
              % (a.hz, self.profiles, a.interval, NCPU, load, a.seconds,
                 "" if self.binary == FLARE else " [baseline: %s]" % self.binary))
        steady = self.steady
        print("  CPU: %.2f %% of one core over the run; %.2f %% after the first window"
              % (100.0 * end_ticks / TICK / wall,
                 100.0 * (end_ticks - steady[1]) / TICK / (end_t - steady[0])))
        after = self.rss[steady[2]:]
        print("  RSS: %.1f MiB after the first window, %.1f MiB at the end, peak %.1f MiB"
              % (after[0] / 1024, after[-1] / 1024, max(after) / 1024))
        lat = [(arr - end) / 1e6 for arr, end, _ in self.arrivals if end]
        sizes = [n for _, _, n in self.arrivals]
        if lat:
            print("  push latency (window end to arrival): median %.1f ms, max %.1f ms over %d pushes;"
                  " body median %d bytes" % (statistics.median(lat), max(lat), len(lat),
                                             statistics.median(sizes)))
        for line in err.splitlines():
            if "delivered" in line or "renewed" in line:
                print("  " + line.strip())


def run_agents(a, lists, load):
    """Agents for `lists` at once, for a.seconds; a report for each."""
    binaries = [FLARE] + ([a.baseline] if a.baseline else [])
    agents = [Agent(a, profiles, b) for profiles in lists for b in binaries]
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < a.seconds:
            time.sleep(1)
            for agent in agents:
                agent.poll(a)
    finally:
        for agent in agents:
            if agent.steady is None:
                agent.p.kill()
    for agent in agents:
        agent.stop_and_report(a, load)


def loop(cmd, cwd=None, env=None):
    """`cmd` run again and again until killed (a process group of its own)."""
    script = "while :; do \"$@\" >/dev/null 2>&1; done"
    return subprocess.Popen(["sh", "-c", script, "loop"] + cmd, cwd=cwd, env=env,
                            start_new_session=True)


def javac_args(deep, tmp, tool, classes):
    """javac's arguments compiling java.util, java.lang and java.io (the
    sources bench/deep.py fetches) into tmp/classes; None, said, without
    `tool` on the PATH or without the sources."""
    sources = deep.java_sources() if shutil.which(tool) else None
    if not sources:
        deep.note("no %s or no JDK sources: Java left out" % tool)
        return None
    module, listing = sources
    classes = os.path.join(tmp, classes)
    os.makedirs(classes)
    return ["--patch-module", "java.base=" + module, "-d", classes, "-nowarn", "-proc:none",
            "-implicit:none", "-Xlint:none", "-XDignore.symbol.file", "@" + listing]


def typescript(deep):
    """The typescript@5 package's directory, installed with npm in the
    bench cache once; None without it (and no npm)."""
    tsc_dir = os.path.join(deep.CACHE, "tsc")
    ts_lib = os.path.join(tsc_dir, "node_modules", "typescript")
    if not os.path.exists(os.path.join(ts_lib, "bin", "tsc")) and shutil.which("npm"):
        os.makedirs(tsc_dir, exist_ok=True)
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "typescript@5"],
                       cwd=tsc_dir, capture_output=True)
    return ts_lib if os.path.exists(os.path.join(ts_lib, "bin", "tsc")) else None


def runtime_loads(tmp):
    """The real programs of --load runtimes, each looping: their Popens."""
    import deep   # bench/deep.py: its pylint venv and JDK sources
    loads = []
    venv = deep.pylint_venv()
    if venv:
        target = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                                 "import astroid, os; print(os.path.dirname(astroid.__file__))"],
                                capture_output=True, text=True, check=True).stdout.strip()
        loads.append(loop([os.path.join(venv, "bin", "pylint"), "--jobs=1", "--persistent=n",
                           "--exit-zero", "--score=n", target]))
    else:
        deep.note("no pylint venv: Python left out")
    args = javac_args(deep, tmp, "javac", "classes")
    if args:
        loads.append(loop(["javac"] + args))
    ts_lib = typescript(deep)
    if ts_lib and shutil.which("node"):
        api = os.path.join(ts_lib, "lib", "typescript.d.ts")
        loads.append(loop(["node", os.path.join(ts_lib, "bin", "tsc"), "--noEmit", "--target",
                           "es2022", api]))
    else:
        deep.note("no node or no typescript package: Node left out")
    return loads


def service_loads(tmp):
    """The programs of --load runtimes run as long-lived services: the same
    work (pylint, javac, tsc) repeated inside one process each, as a fleet's
    services run, instead of a new process each time. Their Popens."""
    import deep
    loads = []
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    venv = deep.pylint_venv()
    if venv:
        py = os.path.join(venv, "bin", "python")
        script = ("import os, astroid\n"
                  "from pylint.lint import Run\n"
                  "target = os.path.dirname(astroid.__file__)\n"
                  "while True:\n"
                  "    astroid.MANAGER.clear_cache()\n"
                  "    Run(['--jobs=1', '--persistent=n', '--exit-zero', '--score=n', target], exit=False)\n")
        loads.append(subprocess.Popen([py, "-c", script], **quiet))
    else:
        deep.note("no pylint venv: Python left out")
    args = javac_args(deep, tmp, "java", "service-classes")
    if args:
        source = os.path.join(tmp, "CompileLoop.java")
        with open(source, "w") as f:
            f.write("public class CompileLoop {\n"
                    "  public static void main(String[] args) {\n"
                    "    var javac = javax.tools.ToolProvider.getSystemJavaCompiler();\n"
                    "    while (true) javac.run(null, null, null, args);\n"
                    "  }\n"
                    "}\n")
        loads.append(subprocess.Popen(["java", source] + args, **quiet))
    ts_lib = typescript(deep)
    if ts_lib and shutil.which("node"):
        api = os.path.join(ts_lib, "lib", "typescript.d.ts")
        script = ("const ts = require(%r);\n"
                  "for (;;) ts.getPreEmitDiagnostics(ts.createProgram([%r],"
                  " {noEmit: true, target: ts.ScriptTarget.ES2022}));\n") % (ts_lib, api)
        loads.append(subprocess.Popen(["node", "-e", script], **quiet))
    else:
        deep.note("no node or no typescript package: Node left out")
    return loads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--hz", type=int, default=19)
    ap.add_argument("--profiles", action="append")
    ap.add_argument("--together", action="store_true")
    ap.add_argument("--load", choices=["livestacks", "runtimes", "services"], default="livestacks")
    ap.add_argument("--baseline", help="another flare binary, run beside each agent")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    runs = a.profiles or ["cpu"]
    with tempfile.TemporaryDirectory() as tmp:
        if a.load == "runtimes":
            loads = runtime_loads(tmp)
            load_name = "pylint, javac and tsc in loops"
        elif a.load == "services":
            loads = service_loads(tmp)
            load_name = "pylint, javac and tsc repeated in one process each"
        else:
            work = os.path.join(tmp, "livestacks")
            subprocess.run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", work,
                            os.path.join(ROOT, "bench", "workloads", "livestacks.c")], check=True)
            loads = [subprocess.Popen([work, str(len(runs) * (a.seconds + 60) + 30), str(NCPU)],
                                      stdout=subprocess.DEVNULL, start_new_session=True)]
            load_name = "livestacks"
        time.sleep(1 if a.load == "livestacks" else 5)
        try:
            if a.together:
                run_agents(a, runs, load_name)
            else:
                for profiles in runs:
                    run_agents(a, [profiles], load_name)
        finally:
            for load in loads:
                os.killpg(load.pid, signal.SIGKILL)
                load.wait()


if __name__ == "__main__":
    main()
