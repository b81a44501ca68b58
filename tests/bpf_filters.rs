//! Real BPF tests of `flare profile`'s namespace and cgroup features:
//! --cgroupmap and --mntnsmap with pinned maps the test creates, and `-p`
//! given a PID as seen inside a child PID namespace.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::process::Command;

use common::bpf::{flare, require_bpf, serial, workload};
use common::cgroup::{pin_set, BpfFs, CgroupSet};
use common::session::{parse_text, Flare, Workload};

fn pids_in(out: &str) -> Vec<u32> {
    parse_text(out).iter().map(|e| e.pid).collect()
}

#[test]
fn cgroupmap_keeps_only_listed_cgroups() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let set = CgroupSet::new("filters");
    let cg = &set.cgroup;

    let mut w = Workload::start("twofuncs", &["1", "25"]);
    cg.add(w.pid);
    let f = Flare::start(&["profile", "-F", "199", "--cgroupmap", set.arg()], 2);
    w.go();
    w.wait_done();
    let (out, _) = f.stop();
    let pids = pids_in(&out);
    assert!(!pids.is_empty(), "the workload's cgroup is sampled");
    assert!(
        pids.iter().all(|&p| p == w.pid),
        "only the listed cgroup: {pids:?}"
    );
    drop(w);
}

/// The unwind tables a system-wide profile builds (its disk cache's
/// file names: build ids, or file identities) with --cgroupmap, while a
/// process outside the cgroup spins beside one inside: those of the
/// cgroup's process only, as BPF filters before it walks a stack. (The
/// unwinder's start-up scan of every process, now left out with a set,
/// loads from the cache only and builds nothing: this cannot see it.)
#[test]
fn cgroupmap_loads_no_other_process() {
    if !require_bpf() {
        return;
    }
    if common::bpf::kernel_can("unwind") == Some(false) {
        eprintln!("skipping: this kernel walks user stacks by frame pointers, with no tables");
        return;
    }
    let _g = serial();
    let set = CgroupSet::new("unloaded");
    let cg = &set.cgroup;
    let mut w = Workload::start("twofuncs", &["1", "25"]);
    cg.add(w.pid);
    let mut outside = Workload::start("burst", &["0", "1000", "0"]);
    // Every key the cgroup's process may have: its mapped files' build
    // ids or identities, and the vDSO's.
    let mut allowed: Vec<String> = Vec::new();
    for m in flare::unwind::procs::exec_mappings(w.pid).expect("the workload's maps") {
        let flare::unwind::procs::Backing::File(file) = &m.backing else {
            continue;
        };
        let Ok(f) = fs::File::open(file) else {
            continue;
        };
        let meta = f.metadata().expect("metadata");
        let id = flare::elf::FileSource::new(&f)
            .and_then(flare::elf::Elf::parse)
            .and_then(|e| e.build_id());
        allowed.push(flare::unwind::cache::key(id.as_deref(), &meta));
    }
    assert!(allowed.len() >= 2, "the workload's objects: {allowed:?}");
    let cache = tempfile::tempdir().expect("a cache directory");
    let f = Flare::start_with_env(
        &["profile", "-F", "199", "--cgroupmap", set.arg()],
        2,
        &[("FLARE_CACHE_DIR", cache.path().to_str().unwrap())],
    );
    w.go();
    outside.go();
    w.wait_done();
    outside.wait_done();
    let (out, _) = f.stop();
    let pids = pids_in(&out);
    assert!(pids.contains(&w.pid), "the workload is sampled");
    assert!(!pids.contains(&outside.pid), "the process outside is not");
    let mut built: Vec<String> = Vec::new();
    for dir in fs::read_dir(cache.path()).expect("the cache").flatten() {
        if let Ok(files) = fs::read_dir(dir.path()) {
            built.extend(files.flatten().filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".rows").map(str::to_string)
            }));
        }
    }
    assert!(
        !built.is_empty(),
        "no table built at all: is the cache used?"
    );
    let foreign: Vec<&String> = built
        .iter()
        .filter(|k| !k.starts_with("vdso-") && !allowed.contains(k))
        .collect();
    assert!(
        foreign.is_empty(),
        "tables of processes outside the cgroup: {foreign:?} (the workload's: {allowed:?})"
    );
    drop(w);
    drop(outside);
}

#[test]
fn mntnsmap_keeps_only_listed_mount_namespaces() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let bpffs = BpfFs::new("mntns");
    let ours = fs::metadata("/proc/self/ns/mnt").unwrap().ino();
    for (keys, expect) in [(vec![ours], true), (vec![1u64], false)] {
        let path = bpffs.0.join(format!("mntns-{expect}"));
        let _map = pin_set(&path, &keys);
        let mut w = Workload::start("twofuncs", &["1", "25"]);
        let f = Flare::start(
            &["profile", "-F", "199", "--mntnsmap", path.to_str().unwrap()],
            2,
        );
        w.go();
        w.wait_done();
        let (out, _) = f.stop();
        let sampled = pids_in(&out).contains(&w.pid);
        assert_eq!(sampled, expect, "mount namespace {keys:?}:\n{out}");
    }
}

#[test]
fn pinned_map_errors_are_clear() {
    if !require_bpf() {
        return;
    }
    let out = flare()
        .args(["profile", "--cgroupmap", "/nonexistent/map", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--cgroupmap /nonexistent/map: no such file"),
        "{err}"
    );
    let out = flare()
        .args(["profile", "--mntnsmap", "/etc/hostname", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--mntnsmap /etc/hostname: not a pinned BPF map"),
        "{err}"
    );
}

#[test]
fn pid_namespace_pids_are_the_users_pids() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    // flare and the workload both run in a new PID namespace; -p gets the
    // PID as seen there, and the output shows it the same way.
    // The work starts after `delay` s, once flare is attached: longer in
    // emulated guests (scripts/vmtest without KVM), where loading is slow.
    let delay = if std::env::var_os("FLARE_EMULATED").is_some() {
        4
    } else {
        1
    };
    let script = format!(
        "{w} 1.5 25 < <(sleep {delay}; echo go; sleep 6) > /dev/null & pid=$!; echo \"inner $pid\"; {f} profile -F 199 -p $pid {secs}",
        w = workload("twofuncs").display(),
        f = env!("CARGO_BIN_EXE_flare"),
        secs = delay + 3,
    );
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "bash", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (first, rest) = stdout.split_once('\n').unwrap();
    let inner: u32 = first.strip_prefix("inner ").unwrap().parse().unwrap();
    assert!(
        inner < 100,
        "the workload has a small PID in the new namespace: {inner}"
    );
    let entries = parse_text(rest);
    assert!(!entries.is_empty(), "{stdout}");
    assert!(entries.iter().all(|e| e.pid == inner), "{stdout}");
    let a: u64 = entries
        .iter()
        .filter(|e| e.frames.iter().any(|f| f == "func_a"))
        .map(|e| e.count)
        .sum();
    let b: u64 = entries
        .iter()
        .filter(|e| e.frames.iter().any(|f| f == "func_b"))
        .map(|e| e.count)
        .sum();
    assert!(
        a > 0 && b > a,
        "symbolized inside the namespace: func_a {a}, func_b {b}"
    );
}
