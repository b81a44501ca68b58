#!/usr/bin/env python3
"""The live server under hostile local clients (issue 25, finding 3).

Runs `flare profile -F 99 --serve` (system-wide, 60 s at most) and, one at a
time: 10,000 idle connections; one 300 MB header that never ends; a client
that pipelines 20 downloads and never reads. For each it prints flare's
threads and RSS growth and whether an ordinary request is still answered
(within 5 s), and at the end how long flare takes to exit on SIGTERM with
the stuck client still connected.

usage: bench/live_hostile.py [FLARE]   (as root; default target/release/flare)
"""
import os, re, resource, signal, socket, subprocess, sys, time

flare = sys.argv[1] if len(sys.argv) > 1 else "target/release/flare"
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

p = subprocess.Popen([flare, "profile", "-F", "99", "60", "--serve"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
url = None
for line in p.stderr:
    m = re.search(r"(http://127\.0\.0\.1:(\d+)(/\S*))", line)
    if m:
        url, port, base = m.group(1), int(m.group(2)), m.group(3)
        break
if not url:
    sys.exit("no URL printed")


def status():
    return {k: v for k, v in (l.split(":", 1) for l in open(f"/proc/{p.pid}/status"))}


def threads():
    return int(status()["Threads"])


def rss_mb():
    return int(status()["VmRSS"].split()[0]) / 1024


def answered():
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(f"GET {base}api/profile HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        return s.recv(12)[9:12] == b"200"
    except OSError:
        return False


def report(what, t0, r0):
    print(f"{what:<28} threads {t0} -> {threads()}, RSS {r0:.1f} -> {rss_mb():.1f} MB, "
          f"others answered: {answered()}", flush=True)


time.sleep(2)
t0, r0 = threads(), rss_mb()
idle, failed = [], 0
for _ in range(10000):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    except OSError:
        failed += 1
        s.close()
        continue
    idle.append(s)
time.sleep(1)
report(f"{len(idle)} idle connections", t0, r0)
for s in idle:
    s.close()
time.sleep(6)

t0, r0 = threads(), rss_mb()
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(10)
sent = 0
try:
    s.sendall(f"GET {base} HTTP/1.1\r\nX-Long: ".encode())
    chunk = b"a" * (1 << 20)
    while sent < 300 << 20:
        s.sendall(chunk)
        sent += len(chunk)
except OSError:
    pass
report(f"header: {sent >> 20} MiB taken", t0, r0)
s.close()

t0, r0 = threads(), rss_mb()
stuck = socket.socket()
stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
stuck.connect(("127.0.0.1", port))
for _ in range(20):
    stuck.sendall(f"GET {base}download/flare.folded HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
time.sleep(2)
report("non-reading client", t0, r0)

start = time.time()
p.send_signal(signal.SIGTERM)
try:
    p.wait(timeout=60)
    print(f"SIGTERM with the stuck client: exited ({p.returncode}) after {time.time() - start:.2f} s")
except subprocess.TimeoutExpired:
    print("SIGTERM with the stuck client: still running after 60 s")
    p.kill()
stuck.close()
