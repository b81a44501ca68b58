#!/usr/bin/env bash
# Output formats against their peers, measured in the same run:
#   - `flare top` on folded stacks vs `go tool pprof -top` on the pprof file
#     flare wrote from the same profile (same data, two readers);
#   - the size of each file one `flare profile` run writes;
#   - `flare flamegraph` and `flare top` on a large synthetic folded file.
# Needs root (for the profile) and golang-go (scripts/deps.sh).
# usage: bench/formats.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
cargo build --release --locked -q
flare=target/release/flare
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

gcc -O1 -g -fno-omit-frame-pointer -fno-inline -pthread -o "$work/twofuncs" tests/workloads/twofuncs.c
# The workload starts working on its "go" line and exits when stdin closes.
(echo go; sleep $((secs + 3))) | "$work/twofuncs" $((secs + 2)) 25 2 >/dev/null &
wl=$!
sleep 0.2
$flare profile -F 499 -o "$work/p.folded" -o "$work/p.pb.gz" -o "$work/p.json" -o "$work/p.svg" "$secs" 2>/dev/null
kill $wl 2>/dev/null || true
wait 2>/dev/null || true

# Best of N wall-clock seconds of a command.
best() {
    local n=$1 best=""; shift
    for _ in $(seq "$n"); do
        local t0 t1
        t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N)
        best=$(python3 -c "b='$best'; t=$t1-$t0; print(t if not b else min(float(b), t))")
    done
    echo "$best"
}

echo "== one system-wide run ($secs s at 499 Hz): $(wc -l < "$work/p.folded") distinct stacks"
for f in p.folded p.pb.gz p.json p.svg; do
    printf '  %-9s %9d bytes\n' "$f" "$(stat -c %s "$work/$f")"
done
t_flare=$(best 5 $flare top "$work/p.folded")
t_pprof=$(best 5 env HOME="$work" go tool pprof -top -symbolize=none "$work/p.pb.gz")
python3 -c "print(f'  top table: flare top {$t_flare*1e3:.1f} ms, go tool pprof -top {$t_pprof*1e3:.1f} ms, ratio flare/pprof {$t_flare/$t_pprof:.2f}')"

echo "== synthetic: 50000 stacks, depth up to 40"
python3 - "$work/big.folded" <<'PY'
import random, sys
random.seed(1)
with open(sys.argv[1], "w") as f:
    for i in range(50000):
        depth = random.randint(5, 40)
        frames = ["proc"] + [f"fn_{random.randint(0, 400)}" for _ in range(depth)]
        f.write(";".join(frames) + f" {random.randint(1, 100)}\n")
PY
t_fg=$(best 3 $flare flamegraph "$work/big.folded" -o "$work/big.svg")
t_top=$(best 3 $flare top "$work/big.folded")
python3 -c "print(f'  flare flamegraph {$t_fg:.2f} s ({$(stat -c %s "$work/big.svg")/1e6:.1f} MB SVG), flare top {$t_top:.2f} s')"
