//! What the agent labels each process with, read from `/proc`: the
//! executable, the cgroup and the container id, pod and systemd unit in
//! it, the service name its environment gives (`service.rs`), and the
//! host name.
//!
//! Labels are read afresh each window for the processes in it (a reused
//! pid gets its new process's labels); a process that has exited by then
//! keeps the labels it had in an earlier window, for a few windows.

use std::collections::HashMap;
use std::ffi::CStr;
use std::fs;
use std::sync::Arc;

use crate::export::{service, ProcessLabels};

/// Windows an exited process's labels are kept for.
const KEEP_WINDOWS: u64 = 6;

/// The machine's host name (`uname -n`), or `localhost`.
pub fn hostname() -> String {
    // SAFETY: utsname is plain old data; uname fills it and we read its
    // NUL-terminated nodename only when uname succeeded.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) == 0 {
            if let Ok(s) = CStr::from_ptr(u.nodename.as_ptr()).to_str() {
                if !s.is_empty() {
                    return s.to_string();
                }
            }
        }
    }
    "localhost".into()
}

/// The cgroup v2 path of a `/proc/PID/cgroup` file (the `0::` line), or
/// failing that the first controller's path.
pub fn cgroup_path(text: &str) -> Option<&str> {
    let mut first = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(_), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" {
            return Some(path);
        }
        first.get_or_insert(path);
    }
    first
}

/// The container id in a cgroup path: the last 64-hex-digit run in it
/// (`docker-ID.scope`, `cri-containerd-ID.scope`, `crio-ID.scope`,
/// `libpod-ID.scope`, `/docker/ID`, `/kubepods/.../ID`).
pub fn container_id(cgroup: &str) -> Option<&str> {
    let b = cgroup.as_bytes();
    let mut end = b.len();
    while end > 0 {
        let mut start = end;
        while start > 0 && b[start - 1].is_ascii_hexdigit() && !b[start - 1].is_ascii_uppercase() {
            start -= 1;
        }
        if end - start == 64 {
            return cgroup.get(start..end);
        }
        end = if start == end { end - 1 } else { start };
    }
    None
}

/// Reads a live process's labels; `None` when it is gone.
pub fn read(pid: u32) -> Option<ProcessLabels> {
    let cgroup_text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let exe = fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| Arc::from(p.to_string_lossy().trim_end_matches(" (deleted)")));
    let cgroup = cgroup_path(&cgroup_text);
    Some(ProcessLabels {
        exe,
        container_id: cgroup.and_then(container_id).map(Arc::from),
        pod_uid: cgroup.and_then(service::pod_uid).map(Arc::from),
        unit: cgroup.and_then(service::systemd_unit).map(Arc::from),
        cgroup: cgroup.map(Arc::from),
        service: service::read_service(pid).map(Arc::from),
    })
}

/// Labels of recent processes.
#[derive(Default)]
pub struct Labeller {
    known: HashMap<u32, (ProcessLabels, u64)>,
    window: u64,
}

impl Labeller {
    /// The labels of `pids` for one window.
    pub fn window(&mut self, pids: impl IntoIterator<Item = u32>) -> HashMap<u32, ProcessLabels> {
        self.window += 1;
        let now = self.window;
        let mut out = HashMap::new();
        for pid in pids {
            if out.contains_key(&pid) {
                continue;
            }
            let labels = match read(pid) {
                Some(l) => l,
                None => match self.known.get(&pid) {
                    Some((l, _)) => l.clone(),
                    None => continue,
                },
            };
            self.known.insert(pid, (labels.clone(), now));
            out.insert(pid, labels);
        }
        self.known
            .retain(|_, (_, seen)| now - *seen <= KEEP_WINDOWS);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_of_the_common_runtimes() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for path in [
            format!("/system.slice/docker-{id}.scope"),
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-{id}.scope"),
            format!("/machine.slice/libpod-{id}.scope/container"),
            format!("/docker/{id}"),
            format!("/kubepods/besteffort/pod0f2e/{id}"),
        ] {
            assert_eq!(container_id(&path), Some(id), "{path}");
        }
        assert_eq!(
            container_id("/user.slice/user-0.slice/session-1.scope"),
            None
        );
        assert_eq!(container_id(&format!("/x/{}", &id[1..])), None);
    }

    #[test]
    fn cgroup_v2_line_wins() {
        assert_eq!(cgroup_path("12:cpu:/a\n0::/b/c\n"), Some("/b/c"));
        assert_eq!(cgroup_path("12:cpu:/a\n"), Some("/a"));
        assert_eq!(cgroup_path(""), None);
    }

    #[test]
    fn own_labels() {
        let me = read(std::process::id()).expect("own /proc entry");
        let exe = std::env::current_exe().unwrap();
        assert_eq!(me.exe.as_deref(), Some(exe.to_str().unwrap()));
        assert!(me.cgroup.is_some());
        assert!(!hostname().is_empty());
    }
}
