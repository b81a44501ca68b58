//! Real BPF tests of `flare profile`'s namespace and cgroup features:
//! --cgroupmap and --mntnsmap with pinned maps the test creates, and `-p`
//! given a PID as seen inside a child PID namespace.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::bpf::{flare, require_bpf, serial, workload};
use common::session::{parse_text, Flare, Workload};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

/// A bpffs mount private to one test, unmounted on drop.
struct BpfFs(PathBuf);

impl BpfFs {
    fn new(name: &str) -> Self {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bpffs-{name}"));
        fs::create_dir_all(&dir).unwrap();
        let _ = Command::new("umount")
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status();
        let ok = Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(ok.success(), "mounting bpffs at {}", dir.display());
        BpfFs(dir)
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Pins a hash map (u64 -> u64) holding `keys` at `path`.
fn pin_set(path: &Path, keys: &[u64]) -> MapHandle {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    let mut map = MapHandle::create(MapType::Hash, Some("flare_test"), 8, 8, 16, &opts).unwrap();
    for k in keys {
        map.update(&k.to_ne_bytes(), &1u64.to_ne_bytes(), MapFlags::ANY)
            .unwrap();
    }
    map.pin(path).unwrap();
    map
}

fn pids_in(out: &str) -> Vec<u32> {
    parse_text(out).iter().map(|e| e.pid).collect()
}

#[test]
fn cgroupmap_keeps_only_listed_cgroups() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let root = Path::new("/sys/fs/cgroup/unified");
    let root = if root.join("cgroup.procs").exists() {
        root
    } else {
        Path::new("/sys/fs/cgroup")
    };
    let cg = root.join(format!("flare-test-{}", std::process::id()));
    fs::create_dir_all(&cg).expect("creating a cgroup v2 group");
    let id = fs::metadata(&cg).unwrap().ino();
    let bpffs = BpfFs::new("cgroup");
    let path = bpffs.0.join("cgset");
    let _map = pin_set(&path, &[id]);

    let mut w = Workload::start("twofuncs", &["1", "25"]);
    fs::write(cg.join("cgroup.procs"), w.pid.to_string())
        .expect("moving the workload into the cgroup");
    let f = Flare::start(
        &[
            "profile",
            "-F",
            "199",
            "--cgroupmap",
            path.to_str().unwrap(),
        ],
        2,
    );
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
    let _ = fs::remove_dir(&cg);
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
