#!/bin/sh
# wallclock's cost against what it replaces: bench/pingpong.c (two threads
# passing a byte over pipes: about 100,000 blocking reads a second on a
# quiet machine) timed alone, under `flare wallclock`, and under
# `flare offcputime` and `flare profile` run together, each launched with
# -- so that only the workload is traced. Prints the workload's wall and
# CPU seconds for each (median of RUNS) and the CPU cost per blocking read
# over the workload alone: the tracing cost lands on the workload's CPU
# time, while its wall time also moves with how fast idle CPUs wake up
# (a profiler's timer keeps them awake, which can make it faster). Run as
# root from the repository.
set -eu
rounds=${ROUNDS:-200000}
runs=${RUNS:-3}
flare=${FLARE:-target/release/flare}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -pthread -o "$work/pingpong.bin" bench/pingpong.c
# Both threads on one CPU: every wakeup is a local switch. Across CPUs,
# wakeups cost an interrupt to an idle CPU, and their price (large in a
# VM) changes with whatever else keeps CPUs awake, a profiler included.
printf '#!/bin/sh\nexec taskset -c 0 "%s" "$@"\n' "$work/pingpong.bin" >"$work/pingpong"
chmod +x "$work/pingpong"
median() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
alone() { "$work/pingpong" "$rounds" cpu; }
# With -o, stdout carries the header and then the workload's own line.
wall() { "$flare" wallclock -o "$work/w.folded" -- "$work/pingpong" "$rounds" cpu 2>/dev/null | tail -n 1; }
both() {
    "$flare" profile -o "$work/p.folded" >/dev/null 2>&1 &
    p=$!
    sleep 1
    "$flare" offcputime -o "$work/o.folded" -- "$work/pingpong" "$rounds" cpu 2>/dev/null | tail -n 1
    kill -INT $p
    wait $p || true
}
base=
for name in alone wall both; do
    for _ in $(seq "$runs"); do $name; done >"$work/$name.times"
    w=$(cut -d' ' -f1 "$work/$name.times" | median)
    c=$(cut -d' ' -f2 "$work/$name.times" | median)
    [ -z "$base" ] && base=$c
    per=$(echo "($c - $base) * 1000000000 / (2 * $rounds)" | bc)
    printf '%-6s wall %8.3f s   CPU %8.3f s   %+5d ns of CPU per blocking read\n' "$name:" "$w" "$c" "$per"
done
