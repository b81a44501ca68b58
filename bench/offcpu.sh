#!/usr/bin/env bash
# Overhead of the off-CPU tools on a context-switch-heavy workload: two
# threads ping-ponging a byte over pipes (bench/pingpong.c), timed alone
# and under flare offcputime / offwaketime and libbpf-tools offcputime /
# wakeuptime (system-wide, as each would be used), and under `flare agent`
# with CPU profiles only and with CPU, off-CPU and wall-clock (pushing to
# a directory, 10 s windows; the off-CPU cost a fleet pays for
# --profiles cpu,off-cpu,wall). Runs are interleaved
# and repeated; the median time of each is compared with the workload
# alone, measured in the same run.
#
# usage: bench/offcpu.sh [ROUNDS] [REPEATS]     (as root)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-100000}
repeats=${2:-5}
work=$(mktemp -d)
stats_was=$(sysctl -n kernel.bpf_stats_enabled 2>/dev/null || echo 0)
trap 'rm -rf "$work"; sysctl -q kernel.bpf_stats_enabled="$stats_was" 2>/dev/null || true' EXIT
# The kernel's own count of time spent in BPF programs: a measure of the
# tracers' cost per event that the noise of a shared machine cannot blur.
sysctl -q kernel.bpf_stats_enabled=1 2>/dev/null || echo "no bpf_stats: only wall times" >&2

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
    [flare-agent-cpu]="$flare agent --interval 10 -o $work/agent-cpu"
    [flare-agent-all]="$flare agent --interval 10 --profiles cpu,off-cpu,wall -o $work/agent-all"
)
order=(alone flare-offcputime libbpf-offcputime flare-wakeuptime libbpf-wakeuptime flare-offwaketime
    flare-agent-cpu flare-agent-all)

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
    if [ -n "$pid" ] && command -v bpftool >/dev/null; then
        # Nanoseconds per program run, over the tracer's programs.
        bpftool -j prog show | python3 -c '
import json, os, sys
pid = sys.argv[1]
ids = set()
for fd in os.listdir(f"/proc/{pid}/fdinfo"):
    try:
        for line in open(f"/proc/{pid}/fdinfo/{fd}"):
            if line.startswith("prog_id:"):
                ids.add(int(line.split()[1]))
    except OSError:
        pass
t = n = 0
for p in json.load(sys.stdin):
    if p["id"] in ids:
        t += p.get("run_time_ns", 0); n += p.get("run_cnt", 0)
if n:
    print(t / n)' "$pid" >>"$work/$name.ns" || true
    fi
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
printf '%-20s %10s %8s %12s\n' tracer "median s" "x alone" "ns/BPF run"
for name in "${order[@]}"; do
    [ -n "${tracers[$name]+x}" ] || continue
    m=$(median "$work/$name.times")
    ns=-
    [ -s "$work/$name.ns" ] && ns=$(printf '%.0f' "$(median "$work/$name.ns")")
    printf '%-20s %10.3f %8.2f %12s\n' "$name" "$m" "$(echo "$m / $base" | bc -l)" "$ns"
done
# Overhead ratios: (tool - alone) / (peer - alone), below 1 is cheaper.
ratio() {
    [ -f "$work/$1.times" ] && [ -f "$work/$2.times" ] || return 0
    local a b
    a=$(median "$work/$1.times")
    b=$(median "$work/$2.times")
    printf '%s / %s: wall-time overhead %.2f' "$1" "$2" \
        "$(echo "($a - $base) / ($b - $base)" | bc -l)"
    if [ -s "$work/$1.ns" ] && [ -s "$work/$2.ns" ]; then
        printf ', BPF time per run %.2f' "$(echo "$(median "$work/$1.ns") / $(median "$work/$2.ns")" | bc -l)"
    fi
    echo
}
ratio flare-offcputime libbpf-offcputime
ratio flare-wakeuptime libbpf-wakeuptime
ratio flare-agent-all flare-offcputime
