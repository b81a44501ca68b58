#!/bin/bash
# Runs inside a scripts/vmtest guest (FLARE_VMTEST_RUN): the in-kernel
# time of flare profile's sampling program per sample, for each --unwind
# mode, on the nofp workload (-O2 -fomit-frame-pointer, one thread that
# spins under func_a and func_b). Prints one line per mode:
#   @@cost MODE RUN_TIME_NS RUN_COUNT
# over 5 seconds once the program runs, read from its /proc/PID/fdinfo
# (kernel.bpf_stats_enabled). bench/vmcost.sh boots the kernels and
# compares the lines.
flare=$1
w=/workloads/variants/workload-nofp-c
echo 1 >/proc/sys/kernel/bpf_stats_enabled

# run_time_ns and run_cnt summed over process $1's perf-event programs.
stats() {
    for f in /proc/"$1"/fdinfo/*; do
        awk '/^prog_type:/ { t = $2 } /^run_time_ns:/ { n = $2 } /^run_cnt:/ { c = $2 }
             END { if (t == 7) print n, c }' "$f" 2>/dev/null
    done | awk '{ n += $1; c += $2 } END { print n + 0, c + 0 }'
}

for mode in fp dwarf; do
    mkfifo /tmp/go."$mode"
    "$w" 120 25 </tmp/go."$mode" >/tmp/w.out &
    exec 7>/tmp/go."$mode"
    sleep 0.5
    pid=$(pidof workload-nofp-c)
    echo go >&7
    "$flare" profile -F 997 -p "$pid" --unwind "$mode" -f 100 >/tmp/out."$mode" 2>/tmp/err."$mode" &
    fl=$!
    # Loading (the verifier, unwind tables) takes seconds when emulated:
    # measure from the first sample on.
    for _ in $(seq 600); do
        read -r n c <<<"$(stats "$fl")"
        [ "$c" -gt 0 ] && break
        sleep 0.1
    done
    read -r n0 c0 <<<"$(stats "$fl")"
    sleep 5
    read -r n1 c1 <<<"$(stats "$fl")"
    echo "@@cost $mode $((n1 - n0)) $((c1 - c0))"
    kill -INT "$fl"
    wait "$fl"
    # What flare said, in case it could not run.
    sed "s/^/@@cost-stderr $mode: /" /tmp/err."$mode" | head -n 5
    exec 7>&-
    kill "$pid" 2>/dev/null
    wait 2>/dev/null
done
