#!/usr/bin/env bash
# Cost of naming short-lived processes (issue 11), beside perf and
# profile-bee (probee) where installed.
#
# 1. Fork storm: N processes of tests/workloads/forkstorm.c, each burning
#    MS ms of CPU, timed alone and under a system-wide profile (flare
#    profile at 99 Hz, perf record -a -g at 99 Hz, probee at 99 Hz); runs
#    interleaved and repeated, medians compared with the storm alone.
# 2. Many processes of one binary: 200 processes of
#    tests/workloads/shortlived.c burning CPU at nice 19, a 3-second
#    system-wide profile: time
#    from the stop signal to the output being written, and peak RSS.
#
# usage: bench/symbols.sh [N] [MS] [REPEATS]     (as root)
set -euo pipefail
cd "$(dirname "$0")/.."

n=${1:-200}
ms=${2:-10}
repeats=${3:-5}
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

cc="gcc -O1 -g -fno-omit-frame-pointer -fno-inline -pthread"
$cc -o "$work/forkstorm" tests/workloads/forkstorm.c
$cc -o "$work/shortlived" tests/workloads/shortlived.c
cargo build --release --quiet
flare=$PWD/target/release/flare
probee=$(command -v probee || true)

# Runs the storm under "$@" (nothing: alone); prints the storm's seconds.
storm_under() {
    local tracer=()
    if [ $# -gt 0 ]; then
        "$@" >"$work/out" 2>"$work/err" &
        tracer=($!)
        sleep 2
    fi
    local t0 t1
    t0=$(date +%s.%N)
    "$work/forkstorm" "$n" "$ms" >/dev/null
    t1=$(date +%s.%N)
    if [ ${#tracer[@]} -gt 0 ]; then
        kill -INT "${tracer[0]}"
        wait "${tracer[0]}" || true
        [ "$1" = "$flare" ] && cp "$work/out" "$work/flare.out"
    fi
    echo "$t1 - $t0" | bc -l
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A runs
names=(alone flare flare-fp perf)
[ -n "$probee" ] && names+=(probee)
for ((r = 0; r < repeats; r++)); do
    runs[alone]+="$(storm_under) "
    runs[flare]+="$(storm_under "$flare" profile -F 99 -f) "
    runs[flare-fp]+="$(storm_under "$flare" profile --unwind fp -F 99 -f) "
    runs[perf]+="$(storm_under perf record -a -g -F 99 -o "$work/perf.data" -q) "
    [ -n "$probee" ] && runs[probee]+="$(storm_under "$probee" --frequency 99 --time 0 -o "$work/probee.folded") "
done
echo "fork storm: $n processes x $ms ms, median of $repeats (seconds, change vs alone)"
base=$(tr ' ' '\n' <<<"${runs[alone]}" | grep . | median)
for name in "${names[@]}"; do
    m=$(tr ' ' '\n' <<<"${runs[$name]}" | grep . | median)
    printf '  %-8s %.3f  %+.1f %%\n' "$name" "$m" "$(echo "($m / $base - 1) * 100" | bc -l)"
done
echo "  flare's share of storm samples naming storm_burn:"
grep '^stormchild' "$work/flare.out" 2>/dev/null | awk '{n=$NF; t+=n; if ($0 ~ /storm_burn/) s+=n} END {if (t) printf "    %d of %d (%.1f %%)\n", s, t, 100*s/t}' || true

# 2. 200 live processes of one binary, at the lowest priority so that they
# use the CPU the profilers leave (stop-to-output measures the profiler,
# not its share of a saturated machine).
for ((i = 0; i < 200; i++)); do
    echo go | nice -n 19 "$work/shortlived" burn 30 stay >/dev/null &
    pids+=($!)
done
sleep 1
# Runs "$@" for 3 s, stops it; prints seconds from the stop signal to the
# output file being in place ("-" for a tool that writes none), to exit,
# and the peak RSS (KiB), on one line. $out_file: the file "$@" renames
# into place when its output is done (empty: the tool has none such).
stop_once() {
    [ -z "$out_file" ] || rm -f "$out_file"
    /usr/bin/time -f '%M' -o "$work/rss" "$@" >/dev/null 2>&1 &
    local p=$!
    sleep 3
    local t0 t_out=- t1
    t0=$(date +%s%N)
    pkill -INT -P "$p" || true
    if [ -n "$out_file" ]; then
        # Written atomically (renamed into place) once the output is done.
        while [ ! -e "$out_file" ] && kill -0 "$p" 2>/dev/null; do sleep 0.002; done
        t_out=$(($(date +%s%N) - t0))
    fi
    wait "$p" || true
    t1=$(($(date +%s%N) - t0))
    echo "$t_out $t1 $(tail -1 "$work/rss")"
}
# Medians and ranges over $repeats runs: stop to output, stop to exit, and
# the peak RSS.
stop_and_rss() {
    local runs=()
    for ((r = 0; r < repeats; r++)); do runs+=("$(stop_once "$@")"); done
    local col s
    for col in 1 2; do
        s=$(printf '%s\n' "${runs[@]}" | awk -v c=$col '$c != "-" {printf "%.3f\n", $c / 1e9}' | sort -g)
        [ -n "$s" ] && printf '%s %.3f s (%.3f-%.3f), ' "$([ $col = 1 ] && echo output || echo exit)" \
            "$(median <<<"$s")" "$(head -1 <<<"$s")" "$(tail -1 <<<"$s")"
    done
    printf '%d MiB' "$(printf '%s\n' "${runs[@]}" | awk '$3 > m {m = $3} END {print int(m / 1024)}')"
}
echo "200 processes of one binary, 3 s system-wide at 99 Hz: from the stop signal to the output written and to exit, median of $repeats (range), peak RSS"
out_file=$work/flare.folded
echo "  flare:  $(stop_and_rss "$flare" profile -F 99 -o "$out_file")"
# perf writes perf.data as it goes, and profile-bee may too: exit only.
out_file=
echo "  perf:   $(stop_and_rss perf record -a -g -F 99 -o "$work/perf.data" -q) (record only; perf report afterwards is extra)"
[ -n "$probee" ] && echo "  probee: $(stop_and_rss "$probee" --frequency 99 --time 0 -o "$work/probee.folded")"
true
