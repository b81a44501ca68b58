//! A cgroup of a test's own and the pinned BPF set that names it
//! (`--cgroupmap`): a test that profiles the whole host bounds what it
//! sees to the processes it put there, so that what else runs on the
//! machine (a build beside the suite) cannot move its figures.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

/// A bpffs mount private to one test, unmounted on drop.
pub struct BpfFs(pub PathBuf);

impl BpfFs {
    pub fn new(name: &str) -> Self {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bpffs-{name}"));
        fs::create_dir_all(&dir).expect("a directory for bpffs");
        let _ = Command::new("umount")
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status();
        let ok = Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&dir)
            .status()
            .expect("running mount");
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
pub fn pin_set(path: &Path, keys: &[u64]) -> MapHandle {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    let mut map = MapHandle::create(MapType::Hash, Some("flare_test"), 8, 8, 16, &opts)
        .expect("creating a BPF hash map");
    for k in keys {
        map.update(&k.to_ne_bytes(), &1u64.to_ne_bytes(), MapFlags::ANY)
            .expect("filling the set");
    }
    map.pin(path).expect("pinning the set");
    map
}

/// A cgroup v2 group of this test process, removed on drop (once its
/// processes have left it).
pub struct Cgroup {
    pub path: PathBuf,
}

impl Cgroup {
    /// `flare-test-NAME-PID` under the cgroup v2 root.
    pub fn new(name: &str) -> Self {
        let unified = Path::new("/sys/fs/cgroup/unified");
        let root = match unified.join("cgroup.procs").exists() {
            true => unified,
            false => Path::new("/sys/fs/cgroup"),
        };
        let path = root.join(format!("flare-test-{name}-{}", std::process::id()));
        fs::create_dir_all(&path).expect("creating a cgroup v2 group");
        Cgroup { path }
    }

    /// The id BPF sees for it (its directory's inode).
    pub fn id(&self) -> u64 {
        fs::metadata(&self.path).expect("the cgroup").ino()
    }

    /// Moves process `pid` (all its threads) into it.
    pub fn add(&self, pid: u32) {
        fs::write(self.path.join("cgroup.procs"), pid.to_string())
            .expect("moving a process into the cgroup");
    }

    /// The file a process writes its pid to, to join.
    pub fn procs(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // A process still inside keeps it: try for a while.
        for _ in 0..50 {
            if fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// A cgroup of the test's own and a pinned set holding its id, on a
/// bpffs mount of the test's own: what `--cgroupmap` takes. Dropped in
/// order: the set's handle, the mount, then the group.
pub struct CgroupSet {
    _map: MapHandle,
    _bpffs: BpfFs,
    pub cgroup: Cgroup,
    /// The pinned set's path, for `--cgroupmap`.
    pub path: PathBuf,
}

impl CgroupSet {
    /// `name` names the group and the mount.
    pub fn new(name: &str) -> Self {
        let cgroup = Cgroup::new(name);
        let bpffs = BpfFs::new(name);
        let path = bpffs.0.join("cgset");
        let map = pin_set(&path, &[cgroup.id()]);
        CgroupSet {
            _map: map,
            _bpffs: bpffs,
            cgroup,
            path,
        }
    }

    /// The set's path as an argument.
    pub fn arg(&self) -> &str {
        self.path.to_str().expect("a UTF-8 path")
    }
}
