//! Compiles every `bpf/<tool>.bpf.c` with clang and generates its libbpf-rs
//! skeleton (`$OUT_DIR/<tool>.skel.rs`). Only the committed `bpf/vmlinux.h`
//! and libbpf's own headers (vendored by libbpf-sys) are needed: no kernel
//! headers on the build machine.

use std::env;
use std::ffi::OsStr;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// The BPF programs, one per tool family, each with a shared `<tool>.h`.
const PROGRAMS: &[&str] = &["profile", "stackcount", "offcpu", "wallclock"];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets the target arch");
    let target_arch = match arch.as_str() {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        "riscv64" => "riscv",
        "powerpc64" => "powerpc",
        "s390x" => "s390",
        other => other,
    };
    let arch_define = format!("-D__TARGET_ARCH_{target_arch}");
    println!("cargo:rerun-if-changed=bpf/vmlinux.h");
    println!("cargo:rerun-if-changed=bpf/common.h");
    println!("cargo:rerun-if-changed=bpf/flare.bpf.h");
    println!("cargo:rerun-if-changed=bpf/unwind.h");
    println!("cargo:rerun-if-changed=bpf/unwind_types.h");
    println!("cargo:rerun-if-changed=bpf/linux/errno.h");
    for name in PROGRAMS {
        let src = format!("bpf/{name}.bpf.c");
        println!("cargo:rerun-if-changed={src}");
        println!("cargo:rerun-if-changed=bpf/{name}.h");
        SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{name}.bpf.o")))
            .clang_args([
                OsStr::new("-Ibpf"),
                OsStr::new(&arch_define),
                OsStr::new("-Wall"),
                OsStr::new("-Wno-unused-function"),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {src} failed: {e:#}"));
    }
}
