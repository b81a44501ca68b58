#!/usr/bin/env bash
# Installs the Debian packages flare needs to build (and, with --test, to
# run its tests; with --vm, to run them in virtual machines; with --arm64,
# to build for arm64 on an x86-64 machine), when missing. The options
# combine (scripts/vmtest passes --vm --arm64 for arm64 kernels). Safe to
# run again: it does nothing, and says nothing, when everything is there.
set -euo pipefail

test=0 vm=0 arm64=0
for arg in "$@"; do
    case "$arg" in
        --test) test=1 ;;
        --vm) vm=1 ;;
        --arm64) arm64=1 ;;
        *) echo "usage: scripts/deps.sh [--test] [--vm] [--arm64]" >&2; exit 2 ;;
    esac
done
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"

packages=(clang llvm libelf-dev zlib1g-dev pkg-config make gcc systemtap-sdt-dev)
# The tests open flare's files in the tools people use: go tool pprof for
# pprof profiles, headless Chromium for flame graph SVGs.
if [ $test = 1 ]; then
    # libc6-dbg: libc's debug file, whose local functions the symbol
    # tests expect to see named.
    # python3.11: Debian's own CPython, whose Python frames the tests
    # read (pyenv's builds are tested too where present), and its
    # libpython for a C program that embeds it.
    # default-jdk-headless: OpenJDK 17, whose Java frames the tests read.
    # nodejs: runs the Firefox Profiler's own loader (profiler-cli, below)
    # on flare's Firefox Profiler files.
    # gcc-aarch64-linux-gnu (with its libc, libc6-dev-arm64-cross): the
    # unwind-table tests build an arm64 program and read its rules.
    # patchelf: scripts/runtimes runs Debian sid's CPython 3.14 and 3.15
    # through sid's loader (fetched below).
    # libatomic1: the official Node.js 26 build links it (the Node tests
    # run 20-26 from scripts/runtimes).
    # ruby3.1: Debian 12's Ruby, whose frames tests/ruby_frames.rs reads
    # (3.3 and 3.4 come from scripts/runtimes).
    packages+=(golang-go chromium chromium-driver libc6-dbg python3.11 libpython3.11-dev default-jdk-headless nodejs
        gcc-aarch64-linux-gnu libc6-dev-arm64-cross patchelf libatomic1 ruby3.1)
fi
# scripts/vmtest boots other kernels in QEMU with a busybox initramfs:
# x86-64 ones, and arm64 ones (qemu-system-arm has qemu-system-aarch64).
# g++ and rustc build the C++ and Rust workload variants that
# tests/unwind_profile.rs would build in the guests (the guests have no
# compiler); rustc comes with cargo.
# python3.11: Debian's CPython, copied into the x86-64 guests for
# tests/python_frames.rs.
if [ $vm = 1 ]; then
    packages+=(qemu-system-x86 qemu-system-arm busybox-static cpio g++ python3.11)
fi
# The arm64 build (cargo build --target aarch64-unknown-linux-gnu): the
# cross compiler (also the linker, .cargo/config.toml) and binutils,
# arm64 libelf and zlib (linked in statically), libc and the SDT header
# for the workloads, g++ for the C++ workload variant (scripts/vmtest).
# The :arm64 packages need arm64 added to dpkg's architectures.
arm64_packages=(gcc-aarch64-linux-gnu g++-aarch64-linux-gnu binutils-aarch64-linux-gnu
    libc6-dev:arm64 libelf-dev:arm64 zlib1g-dev:arm64 systemtap-sdt-dev:arm64)
update=0
if [ $arm64 = 1 ]; then
    packages+=("${arm64_packages[@]}")
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        echo "flare: adding arm64 to dpkg's architectures" >&2
        $sudo_cmd dpkg --add-architecture arm64
        # apt knows no :arm64 package until its lists are read again.
        update=1
    fi
fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] || [ $update = 1 ]; then
    $sudo_cmd apt-get update -qq
fi
# QEMU's packages must all be of one version. Some machines carry a newer
# qemu-utils (from backports) than any qemu-system their sources offer,
# which breaks the install; qemu-utils then follows the system emulator
# to the version the sources have (flare's VMs use no qemu-img).
apt_extra=()
if [ $vm = 1 ] && [ ${#missing[@]} -gt 0 ]; then
    utils=$(dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null || true)
    common=$(apt-cache policy qemu-system-common 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [ -n "$utils" ] && [ -n "$common" ] && [ "$common" != "(none)" ] && [ "$utils" != "$common" ]; then
        echo "flare: qemu-utils $utils does not match qemu-system $common; installing qemu-utils $common" >&2
        missing+=("qemu-utils=$common")
        apt_extra+=(--allow-downgrades)
    fi
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "flare: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${apt_extra[@]}" "${missing[@]}" >/dev/null
fi
# Rust's arm64 standard library, from rustup (as the toolchain itself).
if [ $arm64 = 1 ] && ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
    command -v rustup >/dev/null || {
        echo "flare: the arm64 build needs rustup (https://rustup.rs) for the aarch64-unknown-linux-gnu target" >&2
        exit 1
    }
    echo "flare: adding the Rust target aarch64-unknown-linux-gnu" >&2
    rustup target add aarch64-unknown-linux-gnu >&2
fi
# The Firefox Profiler's command-line client (its profile loading and
# processing code, bundled; MPL-2.0, from the npm registry): the tests
# load flare's .json.gz files with it. It asks for node 24 but runs on
# Debian 12's node 18+.
PROFILER_CLI_VERSION=0.10.0
if [ $test = 1 ] && ! profiler-cli --version 2>/dev/null | grep -qx "$PROFILER_CLI_VERSION"; then
    command -v npm >/dev/null || {
        DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq npm >/dev/null
    }
    echo "flare: installing @firefox-devtools/profiler-cli@$PROFILER_CLI_VERSION" >&2
    $sudo_cmd npm install -g --no-audit --no-fund --loglevel=error "@firefox-devtools/profiler-cli@$PROFILER_CLI_VERSION" >/dev/null
fi
# CPython 3.14 and 3.15 from Debian sid's packages, OpenJDK 8, 11, 21
# and 25 from Debian sid's, 11's and 13's, and Ruby 3.3 and 3.4 from sid's
# and experimental's, into scripts/runtimes' cache (outside the
# clone, kept across runs): fetched here once, before the tests that run
# them start side by side.
if [ $test = 1 ]; then
    for v in 3.14 3.15; do
        "$(dirname "$0")/runtimes" python "$v" >/dev/null
    done
    for v in 8 11 21 25; do
        "$(dirname "$0")/runtimes" java "$v" >/dev/null
    done
    for v in 3.3 3.4; do
        "$(dirname "$0")/runtimes" ruby "$v" >/dev/null
    done
fi
