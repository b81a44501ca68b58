"""Helpers the bench scripts share (imported from their own directory)."""

import os


def perf_fds(pid):
    """How many perf events process `pid` holds open (0 once it is gone):
    a profiler is sampling once it holds as many as it opens."""
    try:
        n = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if "perf_event" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                    n += 1
            except OSError:
                pass
        return n
    except OSError:
        return 0
