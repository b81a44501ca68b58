#!/usr/bin/env bash
# Installs the Debian packages flare needs to build (and, with --test, to
# run its tests; with --vm, to run them in virtual machines), when
# missing. Safe to run again: it does nothing when everything is there.
set -euo pipefail

packages=(clang llvm libelf-dev zlib1g-dev pkg-config make gcc systemtap-sdt-dev)
# The tests open flare's files in the tools people use: go tool pprof for
# pprof profiles, headless Chromium for flame graph SVGs.
if [ "${1:-}" = "--test" ]; then
    # libc6-dbg: libc's debug file, whose local functions the symbol
    # tests expect to see named.
    # python3.11: Debian's own CPython, whose Python frames the tests
    # read (pyenv's builds are tested too where present), and its
    # libpython for a C program that embeds it.
    # default-jdk-headless: OpenJDK 17, whose Java frames the tests read.
    packages+=(golang-go chromium chromium-driver libc6-dbg python3.11 libpython3.11-dev default-jdk-headless)
fi
# scripts/vmtest boots other kernels in QEMU with a busybox initramfs.
if [ "${1:-}" = "--vm" ]; then
    packages+=(qemu-system-x86 busybox-static cpio)
fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "flare: installing ${missing[*]}" >&2
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
