//! Compiles every `bpf/<tool>.bpf.c` with clang and generates its libbpf-rs
//! skeleton (`$OUT_DIR/<tool>.skel.rs`), and `$OUT_DIR/skels.rs`, the
//! module of each (`crate::bpf::skel::<tool>`): a new program is found by
//! its file name, listed nowhere. Only the committed `bpf/<arch>/vmlinux.h`
//! (the target's: x86 or arm64, chosen by `-Ibpf/<arch>`) and
//! libbpf's own headers (vendored by libbpf-sys) are needed: no kernel
//! headers on the build machine.

use std::env;
use std::ffi::OsStr;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// The BPF programs, one per tool family (each `bpf/<tool>.bpf.c`, with a
/// `<tool>.h` shared with the Rust side), in name order.
fn programs() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("bpf")
        .expect("reading bpf/")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".bpf.c")?.to_string())
        })
        .collect();
    names.sort();
    names
}

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
    let arch_include = format!("-Ibpf/{target_arch}");
    if !std::path::Path::new(&format!("bpf/{target_arch}/vmlinux.h")).exists() {
        panic!("flare's BPF programs are built for x86-64 and arm64, not {arch} (no bpf/{target_arch}/vmlinux.h)");
    }
    // The whole directory: any header a program includes, now or later
    // (cargo looks at every file below it).
    println!("cargo:rerun-if-changed=bpf");
    let programs = programs();
    let mut modules = String::new();
    for name in &programs {
        modules.push_str(&format!(
            "pub mod {name} {{\n    include!(concat!(env!(\"OUT_DIR\"), \"/{name}.skel.rs\"));\n}}\n"
        ));
    }
    std::fs::write(out.join("skels.rs"), modules).expect("writing skels.rs");
    for name in &programs {
        let src = format!("bpf/{name}.bpf.c");
        let args = |extra: &'static str| {
            [
                OsStr::new("-Ibpf"),
                OsStr::new(&arch_include),
                OsStr::new(&arch_define),
                OsStr::new("-Wall"),
                OsStr::new("-Wno-unused-function"),
                OsStr::new(extra),
            ]
        };
        let fp_obj = out.join(format!("{name}_fp.bpf.o"));
        SkeletonBuilder::new()
            .source(&src)
            .obj(&fp_obj)
            .clang_args(args("-DFLARE_FP_ONLY"))
            .build()
            .unwrap_or_else(|e| panic!("building {src} (frame pointers only) failed: {e:#}"));
        let skel = out.join(format!("{name}.skel.rs"));
        SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{name}.bpf.o")))
            .clang_args(args("-DFLARE_FULL"))
            .build_and_generate(&skel)
            .unwrap_or_else(|e| panic!("building {src} failed: {e:#}"));
        offer_fp_build(&skel, &fp_obj);
    }
}

/// Makes the skeleton open the frame-pointer build of its object when
/// `crate::bpf::variant` says so (kernels without bpf_loop or callback
/// functions, and `--unwind fp`): both builds have the same maps,
/// programs and globals, which a unit test checks.
fn offer_fp_build(skel: &std::path::Path, fp_obj: &std::path::Path) {
    const OPEN: &str = "ObjectSkeletonConfigBuilder::new(&DATA)";
    let text = std::fs::read_to_string(skel).expect("reading the generated skeleton");
    assert_eq!(
        text.matches(OPEN).count(),
        1,
        "libbpf-cargo's skeleton changed: {} no longer opens its object with `{OPEN}`",
        skel.display()
    );
    let fp = fp_obj.to_str().expect("OUT_DIR is UTF-8");
    let text = text.replace(
        OPEN,
        &format!("ObjectSkeletonConfigBuilder::new(crate::bpf::variant::pick(&DATA, include_bytes!({fp:?})))"),
    );
    std::fs::write(skel, text).expect("writing the skeleton");
}
