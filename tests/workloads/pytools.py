"""Python workloads for flare's other tools, one per mode (argv[1]).

Runs on CPython 3.6 and later. Speaks the tests/workloads protocol: "tid
N I" per worker, "ready", waits for a line, works, prints "cpu S" (then
"exit" mode exits at once, the others wait for stdin to close).
- sleep: napper() sleeps 50 times 20 ms (time.sleep, off the CPU).
- socket: reader() waits 50 times for a socket read that a writer thread
  answers after 20 ms (off the CPU in recv).
- calls: left() calls os.getppid() 300 times, right() 200 times.
- threads: one thread runs alpha() (pure Python), another hasher()
  (hashlib, native code under its Python caller), for argv[2] seconds.
- exit: burn() runs argv[2] seconds, then the process exits.
"""

import hashlib
import os
import socket
import sys
import threading
import time


def napper():
    for _ in range(50):
        time.sleep(0.02)


def reader():
    mine, theirs = socket.socketpair()

    def writer():
        for _ in range(50):
            time.sleep(0.02)
            theirs.sendall(b"x")

    t = threading.Thread(target=writer)
    t.start()
    for _ in range(50):
        mine.recv(1)
    t.join()


def native_id():
    """The thread's kernel id: threading.get_native_id() from 3.8, the
    task /proc/thread-self names before."""
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    return int(os.readlink("/proc/thread-self").rsplit("/", 1)[1])


def left():
    for _ in range(300):
        os.getppid()


def right():
    for _ in range(200):
        os.getppid()


def alpha(seconds):
    end = time.monotonic() + seconds
    total = 0
    while time.monotonic() < end:
        for i in range(1000):
            total += i % 3
    return total


def hasher(seconds):
    data = bytes(1 << 20)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        hashlib.sha256(data).digest()


def burn(seconds):
    return alpha(seconds)


def worker(index, fn, seconds, started):
    # One string, one write: two threads' lines must not interleave.
    sys.stdout.write(f"tid {native_id()} {index}\n")
    sys.stdout.flush()
    started.release()
    go.wait()
    fn(seconds)


go = threading.Event()


def main():
    mode = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    threads = []
    if mode == "threads":
        started = threading.Semaphore(0)
        for i, fn in enumerate((alpha, hasher)):
            t = threading.Thread(target=worker, args=(i, fn, seconds, started))
            t.start()
            threads.append(t)
        for _ in threads:
            started.acquire()
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.process_time()
    if mode == "sleep":
        napper()
    elif mode == "socket":
        reader()
    elif mode == "calls":
        left()
        right()
    elif mode == "threads":
        go.set()
        for t in threads:
            t.join()
    elif mode == "exit":
        burn(seconds)
    print("cpu", time.process_time() - start, flush=True)
    if mode == "exit":
        os._exit(0)
    sys.stdin.read()


main()
