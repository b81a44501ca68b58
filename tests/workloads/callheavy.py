"""Call-heavy Python (tests/python_frames.rs): work() spins SECONDS of the
thread's own CPU time in short calls that enter and leave the eval loop
from C many times a millisecond (sorted's key, a generator under sum, a
function under map), as real programs do. Every sample of the thread
after "go" is under main -> work.

usage: callheavy.py SECONDS
Protocol on stdio: "ready", wait for a line, work, "cpu S", stay alive
until stdin closes.
"""

import sys
import time


def key(x):
    return -x


def gen(n):
    for i in range(n):
        yield key(i)


def work(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        sorted(range(200), key=key)
        sum(gen(200))
        list(map(key, range(200)))


def main():
    seconds = float(sys.argv[1])
    print("ready", flush=True)
    sys.stdin.readline()
    work(seconds)
    print(f"cpu {time.process_time():.6f}", flush=True)
    sys.stdin.read()


main()
