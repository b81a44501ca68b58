#!/usr/bin/env bash
# The in-kernel cost of a sample on arm64 beside x86-64, both emulated
# (QEMU TCG): boots Debian's 6.1 kernel of each architecture with
# scripts/vmtest (no tests, FLARE_VMTEST_RUN=bench/vmcost-guest.sh) and
# prints, for --unwind fp (the kernel's frame-pointer walk) and --unwind
# dwarf (flare's BPF unwinder), the sampling program's run time per
# sample in each guest and their ratio. Emulation makes the absolute
# figures meaningless; the ratio tells how much more arm64's code paths
# cost under the same emulator.
#
#   bench/vmcost.sh [X86_KERNEL ARM64_KERNEL]   (default: 6.1 arm64-6.1)
set -euo pipefail
cd "$(dirname "$0")/.."
x86=${1:-6.1} arm=${2:-arm64-6.1}
FLARE_VMTEST_ACCEL=tcg FLARE_VMTEST_TESTS=none FLARE_VMTEST_RUN=bench/vmcost-guest.sh \
    scripts/vmtest "$x86" "$arm" >&2
cost() { # KERNEL MODE -> "ns_per_run runs"
    awk -v m="$2" '$1 == "@@cost" && $2 == m && $4 > 0 { printf "%.0f %d\n", $3 / $4, $4 }' \
        "target/vmtest/$1.log"
}
printf '%-6s %16s %16s %8s\n' mode "x86-64 ns/sample" "arm64 ns/sample" ratio
for mode in fp dwarf; do
    read -r a na <<<"$(cost "$x86" "$mode")"
    read -r b nb <<<"$(cost "$arm" "$mode")"
    awk -v m="$mode" -v a="$a" -v b="$b" -v na="$na" -v nb="$nb" \
        'BEGIN { printf "%-6s %10d (%4d) %10d (%4d) %7.2fx\n", m, a, na, b, nb, b / a }'
done
