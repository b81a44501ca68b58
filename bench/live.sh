#!/usr/bin/env bash
# Cost of the live view (issue 6): the CPU that `flare profile --serve`
# spends in user space (reading the maps every second, symbolizing through
# its caches, aggregating, answering the page's poll) while profiling a
# workload with thousands of distinct stacks, against the same run without
# --serve and against `perf top -g`, the closest peer live view. All are
# measured in this run, on the same workload, as CPU seconds from /proc over
# a steady window after a warm-up.
#
# usage: bench/live.sh            (as root; HZ, SECS, WARM, STACKS may be set)
set -euo pipefail
cd "$(dirname "$0")/.."

HZ=${HZ:-4999}
SECS=${SECS:-20}
WARM=${WARM:-5}
STACKS=${STACKS:-65536}  # --stack-storage-size: room for the workload's stacks
FLARE=${FLARE:-target/release/flare}
OUT=target/bench
mkdir -p "$OUT"

[ "$(id -u)" -eq 0 ] || { echo "bench/live.sh: run as root" >&2; exit 1; }
[ -x "$FLARE" ] || cargo build --release --quiet
gcc -O1 -g -fno-omit-frame-pointer -fno-inline -fno-optimize-sibling-calls -pthread \
    -o "$OUT/livestacks" bench/workloads/livestacks.c

ticks() { # utime + stime of a whole process, in clock ticks
    awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}
hz=$(getconf CLK_TCK)

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# run NAME CMD...: starts the workload, then CMD with WPID in its args,
# and prints the CPU share of one CPU CMD used in the steady window.
declare -A cost
run() {
    local name=$1; shift
    "$OUT/livestacks" $((WARM + SECS + 10)) 2 &
    local wpid=$!
    local args=("${@//WPID/$wpid}")
    "${args[@]}" >/dev/null 2>"$OUT/live-$name.err" &
    local ppid=$!
    sleep "$WARM"
    local t0 c0 t1 c1
    c0=$(ticks "$ppid"); t0=$(date +%s.%N)
    if [ "$name" = serve ]; then
        # The page: one poll of the whole-run snapshot per second.
        local port end=$(( $(date +%s) + SECS ))
        port=$(grep -o '127.0.0.1:[0-9]*' "$OUT/live-serve.err" | head -1 | cut -d: -f2)
        while [ "$(date +%s)" -lt "$end" ]; do
            curl -s "http://127.0.0.1:$port/api/profile" -o "$OUT/live-snapshot.json" || true
            sleep 1
        done
        curl -s "http://127.0.0.1:$port/api/profile?last=1" -o "$OUT/live-last1.json" || true
    else
        sleep "$SECS"
    fi
    c1=$(ticks "$ppid"); t1=$(date +%s.%N)
    kill -INT "$ppid" 2>/dev/null || true
    wait "$ppid" 2>/dev/null || true
    kill "$wpid" 2>/dev/null || true
    wait "$wpid" 2>/dev/null || true
    cost[$name]=$(awk -v c=$((c1 - c0)) -v hz="$hz" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%.3f", 100 * c / hz / (t1 - t0) }')
    printf '%-34s %6s %% of one CPU\n' "$name" "${cost[$name]}"
}

port=$(free_port)
echo "livestacks (2 threads, 65,536 call chains), sampled at $HZ Hz; steady window ${SECS} s after ${WARM} s"
run plain "$FLARE" profile -F "$HZ" -p WPID --stack-storage-size "$STACKS"
run serve "$FLARE" profile -F "$HZ" -p WPID --stack-storage-size "$STACKS" --serve ":$port"
run perf-top perf top -g -F "$HZ" -p WPID --stdio -d 1

python3 - "$OUT/live-snapshot.json" "$OUT/live-last1.json" <<'PY'
import json, sys
whole = json.load(open(sys.argv[1]))
last = json.load(open(sys.argv[2]))
print(f"distinct stacks: {whole['stacks']} in the whole run, {last['stacks']} in the last interval "
      f"({last['total']} samples/s); {whole['lost']['stacks']} stacks lost; "
      f"snapshot of {len(open(sys.argv[1]).read())} bytes")
PY
awk -v s="${cost[serve]}" -v p="${cost[plain]}" -v t="${cost[perf-top]}" 'BEGIN {
    printf "live view adds %.3f %% of one CPU (target: under 2 %%)\n", s - p
    if (t > 0) printf "ratio flare --serve / perf top -g: %.3f\n", s / t
}'
