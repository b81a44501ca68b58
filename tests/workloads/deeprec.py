"""Deep Python recursion with known truth (tests/deep_stacks.rs).

main() recurses DEPTH levels through level(), then spins SECONDS of the
thread's own CPU time in leaf(): every sample of leaf holds main and
DEPTH + 1 level() frames.

usage: deeprec.py DEPTH SECONDS
Protocol on stdio: "ready", wait for a line, work, "cpu S", stay alive
until stdin closes.
"""

import sys
import time


def leaf(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(2000):
            x += i
    return x


def level(n, seconds):
    if n == 0:
        return leaf(seconds)
    return level(n - 1, seconds) + 1


def main():
    depth, seconds = int(sys.argv[1]), float(sys.argv[2])
    sys.setrecursionlimit(depth + 100)
    print("ready", flush=True)
    sys.stdin.readline()
    level(depth, seconds)
    print(f"cpu {time.process_time():.6f}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
