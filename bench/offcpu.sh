#!/usr/bin/env bash
# Overhead of the off-CPU tools on a context-switch-heavy workload: two
# threads ping-ponging a byte over pipes (bench/pingpong.c), timed alone
# and under flare offcputime / offwaketime and libbpf-tools offcputime /
# wakeuptime (system-wide, as each would be used). Runs are interleaved
# and repeated; the median time of each is compared with the workload
# alone, measured in the same run.
#
# usage: bench/offcpu.sh [ROUNDS] [REPEATS]     (as root)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-100000}
repeats=${2:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

gcc -O2 -pthread -o "$work/pingpong" bench/pingpong.c
cargo build --release --quiet
flare=target/release/flare

declare -A tracers=(
    [alone]=""
    [flare-offcputime]="$flare offcputime -f"
    [flare-offwaketime]="$flare offwaketime -f"
    [flare-wakeuptime]="$flare wakeuptime -f"
    [libbpf-offcputime]="/usr/sbin/offcputime"
    [libbpf-wakeuptime]="/usr/sbin/wakeuptime"
)
order=(alone flare-offcputime libbpf-offcputime flare-wakeuptime libbpf-wakeuptime flare-offwaketime)

for name in "${order[@]}"; do
    cmd=${tracers[$name]}
    if [ -n "$cmd" ] && ! command -v "${cmd%% *}" >/dev/null; then
        echo "skipping $name: ${cmd%% *} not installed (apt-get install libbpf-tools)" >&2
        unset "tracers[$name]"
    fi
done

# One timed run of the workload under tracer NAME.
run_one() {
    local name=$1 cmd=${tracers[$1]} pid=""
    if [ -n "$cmd" ]; then
        $cmd >/dev/null 2>"$work/$name.err" &
        pid=$!
        sleep 2 # loading and attaching
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$name failed to start: $(cat "$work/$name.err")" >&2
            exit 1
        fi
    fi
    "$work/pingpong" "$rounds" >>"$work/$name.times"
    if [ -n "$pid" ]; then
        kill -INT "$pid"
        wait "$pid" || true
    fi
}

for ((r = 1; r <= repeats; r++)); do
    for name in "${order[@]}"; do
        [ -n "${tracers[$name]+x}" ] && run_one "$name"
    done
done

median() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
base=$(median "$work/alone.times")
printf '%-20s %10s %8s\n' tracer "median s" "x alone"
for name in "${order[@]}"; do
    [ -n "${tracers[$name]+x}" ] || continue
    m=$(median "$work/$name.times")
    printf '%-20s %10.3f %8.2f\n' "$name" "$m" "$(echo "$m / $base" | bc -l)"
done
# Overhead ratios: (tool - alone) / (peer - alone), below 1 is cheaper.
ratio() {
    [ -f "$work/$1.times" ] && [ -f "$work/$2.times" ] || return 0
    local a b
    a=$(median "$work/$1.times")
    b=$(median "$work/$2.times")
    printf '%s overhead / %s overhead: %.2f\n' "$1" "$2" \
        "$(echo "($a - $base) / ($b - $base)" | bc -l)"
}
ratio flare-offcputime libbpf-offcputime
ratio flare-wakeuptime libbpf-wakeuptime
