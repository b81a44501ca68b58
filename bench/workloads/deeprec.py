"""Deep Python stacks for bench/deep.py: <module> -> main -> recurse x
DEPTH -> spin, one thread; prints "ready" at the leaf, spins there for
SECONDS, then returns through every level (work after each call, so each
level is a frame of its own until the end).

usage: python3 deeprec.py DEPTH SECONDS
"""

import sys
import time


def spin(seconds):
    print("ready", flush=True)
    end = time.monotonic() + seconds
    x = 1
    while time.monotonic() < end:
        for _ in range(10000):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return x


def recurse(depth, seconds):
    if depth <= 1:
        r = spin(seconds)
    else:
        r = recurse(depth - 1, seconds)
    return r + 1


def main():
    depth, seconds = int(sys.argv[1]), float(sys.argv[2])
    sys.setrecursionlimit(depth + 100)
    recurse(depth, seconds)


main()
