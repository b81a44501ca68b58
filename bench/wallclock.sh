#!/bin/sh
# wallclock's cost against what it replaces: bench/pingpong.c (two threads
# passing a byte over pipes: about 100,000 blocking reads a second on a
# quiet machine) timed alone, under `flare wallclock`, and under
# `flare offcputime` and `flare profile` run together, each launched with
# -- so that only the workload is traced. Prints the workload's seconds
# for each (median of RUNS). Run as root from the repository.
set -eu
rounds=${ROUNDS:-200000}
runs=${RUNS:-3}
flare=${FLARE:-target/release/flare}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -pthread -o "$work/pingpong" bench/pingpong.c
median() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
alone() { "$work/pingpong" "$rounds"; }
# With -o, stdout carries the header and then the workload's own line.
wall() { "$flare" wallclock -o "$work/w.folded" -- "$work/pingpong" "$rounds" 2>/dev/null | tail -n 1; }
both() {
    "$flare" profile -o "$work/p.folded" >/dev/null 2>&1 &
    p=$!
    sleep 1
    "$flare" offcputime -o "$work/o.folded" -- "$work/pingpong" "$rounds" 2>/dev/null | tail -n 1
    kill -INT $p
    wait $p || true
}
for name in alone wall both; do
    for _ in $(seq "$runs"); do $name; done | median | sed "s/^/$name: /"
done
