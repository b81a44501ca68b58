"""A pure-Python service with a known call chain and its own CPU accounting.

Speaks the tests/workloads protocol: prints "tid N" and "ready", waits for
a line, runs main -> serve -> handle -> parse_request | render_page for
the seconds given (argv[1]), prints "share NAME SECONDS" for each of the
two leaves as its own thread CPU clock measured them (time.thread_time
around each call), "cpu S" (the thread's CPU over the whole run), then
waits for stdin to close. Works on CPython 3.6 and later.
"""

import functools
import os
import random
import sys
import threading
import time

SPENT = {"parse_request": 0.0, "render_page": 0.0}

# The thread's CPU clock: time.thread_time from 3.7, the same clock read
# through clock_gettime before (a C call either way: no Python frame).
thread_time = getattr(time, "thread_time", None) or functools.partial(
    time.clock_gettime, time.CLOCK_THREAD_CPUTIME_ID
)


def native_id():
    """The thread's kernel id: threading.get_native_id() from 3.8, the
    task /proc/thread-self names before."""
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    return int(os.readlink("/proc/thread-self").rsplit("/", 1)[1])


def parse_request(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def render_page(n):
    parts = []
    for i in range(n):
        parts.append(str(i))
    size = len("".join(parts))
    # Freed here, in this frame: left to the return, the list's 1000
    # strings would be freed after the frame is popped (3.11+), which is
    # the caller's time for a profiler and this function's by its clock.
    del parts
    return size


# Work sizes vary from call to call (a fixed sequence): a loop of
# constant period beside a sampling period near a multiple of it would
# alias, and the samples would favour one function by luck of phase.
SIZES = random.Random(1)


def handle():
    # The sizes are drawn outside the clocked calls: randrange is handle's
    # own time to a profiler, not the leaves'. The calls are long (1-3 ms)
    # beside the clock's own cost (a system call for each thread_time,
    # part of it inside each measured interval): at a fifth of these
    # sizes, the clock moved a leaf's share by up to 2 points.
    parse_size = SIZES.randrange(7500, 22500)
    render_size = SIZES.randrange(2500, 7500)
    t0 = thread_time()
    parse_request(parse_size)
    t1 = thread_time()
    render_page(render_size)
    t2 = thread_time()
    SPENT["parse_request"] += t1 - t0
    SPENT["render_page"] += t2 - t1


def serve(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        handle()


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    print("tid", native_id(), flush=True)
    print("ready", flush=True)
    sys.stdin.readline()
    start = thread_time()
    serve(seconds)
    total = thread_time() - start
    for name, spent in SPENT.items():
        print("share", name, spent, flush=True)
    print("cpu", total, flush=True)
    sys.stdin.read()


main()
