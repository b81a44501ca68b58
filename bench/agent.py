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
report for each.

usage: bench/agent.py [--seconds N] [--interval S] [--hz F] [--profiles LIST]..
       (as root, after cargo build --release)
"""

import argparse
import gzip
import http.server
import os
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


ARRIVALS = []


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        now = time.time_ns()
        ARRIVALS.append((now, window_end_ns(body), len(body)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


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


def run_agent(a, url, profiles):
    """One agent run of a.seconds; prints its report."""
    ARRIVALS.clear()
    agent = subprocess.Popen([FLARE, "agent", "-F", str(a.hz), "--interval", str(a.interval),
                              "--profiles", profiles, "--pyroscope", url],
                             stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    rss, steady = [], None
    while time.monotonic() - t0 < a.seconds:
        time.sleep(1)
        rss.append(rss_kib(agent.pid))
        if steady is None and time.monotonic() - t0 >= a.interval + 1:
            steady = (time.monotonic(), cpu_ticks(agent.pid), len(rss))
    end_ticks, end_t = cpu_ticks(agent.pid), time.monotonic()
    agent.send_signal(signal.SIGTERM)
    _, err = agent.communicate(timeout=60)
    wall = end_t - t0
    print("flare agent -F %d --profiles %s, %g s windows, %d CPUs busy (livestacks), %d s"
          % (a.hz, profiles, a.interval, NCPU, a.seconds))
    print("  CPU: %.2f %% of one core over the run; %.2f %% after the first window"
          % (100.0 * end_ticks / TICK / wall,
             100.0 * (end_ticks - steady[1]) / TICK / (end_t - steady[0])))
    after = rss[steady[2]:]
    print("  RSS: %.1f MiB after the first window, %.1f MiB at the end, peak %.1f MiB"
          % (after[0] / 1024, after[-1] / 1024, max(after) / 1024))
    lat = [(arr - end) / 1e6 for arr, end, _ in ARRIVALS if end]
    sizes = [n for _, _, n in ARRIVALS]
    if lat:
        print("  push latency (window end to arrival): median %.1f ms, max %.1f ms over %d windows; body median %d bytes"
              % (statistics.median(lat), max(lat), len(lat), statistics.median(sizes)))
    for line in err.splitlines():
        if "delivered" in line:
            print("  " + line.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--hz", type=int, default=19)
    ap.add_argument("--profiles", action="append")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % server.server_address[1]
    runs = a.profiles or ["cpu"]
    with tempfile.TemporaryDirectory() as tmp:
        work = os.path.join(tmp, "livestacks")
        subprocess.run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", work,
                        os.path.join(ROOT, "bench", "workloads", "livestacks.c")], check=True)
        load = subprocess.Popen([work, str(len(runs) * (a.seconds + 60) + 30), str(NCPU)],
                                stdout=subprocess.DEVNULL)
        time.sleep(1)
        try:
            for profiles in runs:
                run_agent(a, url, profiles)
        finally:
            load.kill()
            load.wait()


if __name__ == "__main__":
    main()
