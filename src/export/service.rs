//! What a process's owners call it, for a fleet to find its profiles by:
//! the service name from its environment (`OTEL_SERVICE_NAME`, or
//! `service.name` in `OTEL_RESOURCE_ATTRIBUTES`, as OpenTelemetry's SDKs
//! read them), and the Kubernetes pod and systemd unit its cgroup path
//! names.
//!
//! Everything here comes from other users' processes: the environment is
//! read at most [`MAX_ENVIRON`] bytes into it, values are cut and cleaned
//! as names are ([`clean_name_within`]), and nothing is kept from a read
//! that fails. The environment is the one the process was started with:
//! a variable it sets later is not in `/proc/PID/environ`.

use std::fs::File;
use std::io::Read;

use crate::profile::clean_name_within;

/// How far into a process's environment the service name is looked for.
pub const MAX_ENVIRON: u64 = 256 * 1024;

/// The longest service name, unit or pod id kept, in bytes.
pub const MAX_VALUE: usize = 256;

/// The service name of process `pid`, if its environment gives one.
pub fn read_service(pid: u32) -> Option<String> {
    let file = File::open(format!("/proc/{pid}/environ")).ok()?;
    let mut raw = Vec::new();
    file.take(MAX_ENVIRON).read_to_end(&mut raw).ok()?;
    service_in_environ(&raw)
}

/// The service name in an environment block (`KEY=VALUE` entries, each
/// ended by a NUL): `OTEL_SERVICE_NAME` first, else `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`, as the SDKs rank them.
pub fn service_in_environ(environ: &[u8]) -> Option<String> {
    let mut from_attributes = None;
    for entry in environ.split(|&b| b == 0) {
        if let Some(v) = entry.strip_prefix(b"OTEL_SERVICE_NAME=") {
            if let Some(name) = value(v) {
                return Some(name);
            }
        } else if let Some(v) = entry.strip_prefix(b"OTEL_RESOURCE_ATTRIBUTES=") {
            from_attributes = from_attributes.or_else(|| service_in_attributes(v));
        }
    }
    from_attributes
}

/// `service.name` in a resource attribute list (`k=v,k2=v2`, values
/// percent-encoded as W3C Baggage encodes them).
fn service_in_attributes(list: &[u8]) -> Option<String> {
    list.split(|&b| b == b',').find_map(|pair| {
        let at = pair.iter().position(|&b| b == b'=')?;
        let (key, v) = (pair[..at].trim_ascii(), &pair[at + 1..]);
        (key == b"service.name").then(|| value(&percent_decoded(v.trim_ascii())))?
    })
}

/// `%XX` escapes decoded; a broken one kept as it is.
fn percent_decoded(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        let hex = v
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (v[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// A value as labels show it: UTF-8 (lossily), cleaned and cut; `None`
/// when nothing is left.
fn value(v: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(v);
    let text = text.trim();
    (!text.is_empty()).then(|| clean_name_within(text, MAX_VALUE).into_owned())
}

/// The Kubernetes pod's uid in a cgroup path: `pod<UID>` as the
/// kubelet's cgroupfs driver names it (`/kubepods/burstable/pod<UID>/…`),
/// or `…-pod<UID>.slice` with `_` for `-` as its systemd driver does.
pub fn pod_uid(cgroup: &str) -> Option<String> {
    cgroup.rsplit('/').find_map(|part| {
        let part = part.strip_suffix(".slice").unwrap_or(part);
        let start = part.rfind("pod")?;
        let before = &part[..start];
        if !(before.is_empty() || before.ends_with('-')) {
            return None;
        }
        let uid = part[start + 3..].replace('_', "-");
        is_uuid(&uid).then_some(uid)
    })
}

/// Whether `s` is a UUID in its usual text form (8-4-4-4-12 hex digits).
fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The systemd unit a cgroup path names: its deepest `.service` or
/// `.scope` part (`nginx.service`, `session-3.scope`, a container's
/// `docker-….scope`).
pub fn systemd_unit(cgroup: &str) -> Option<String> {
    cgroup
        .rsplit('/')
        .find(|p| {
            let stem = p
                .strip_suffix(".service")
                .or_else(|| p.strip_suffix(".scope"));
            stem.is_some_and(|s| !s.is_empty())
        })
        .map(|p| clean_name_within(p, MAX_VALUE).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_name_variable_wins_over_the_attributes() {
        let env =
            b"PATH=/bin\0OTEL_RESOURCE_ATTRIBUTES=service.name=attrs\0OTEL_SERVICE_NAME=checkout\0";
        assert_eq!(service_in_environ(env).as_deref(), Some("checkout"));
        let env = b"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=prod, service.name = cart%20api ,x=1\0";
        assert_eq!(service_in_environ(env).as_deref(), Some("cart api"));
        // An empty variable is no name: the attributes still count.
        let env = b"OTEL_SERVICE_NAME=\0OTEL_RESOURCE_ATTRIBUTES=service.name=cart\0";
        assert_eq!(service_in_environ(env).as_deref(), Some("cart"));
        assert_eq!(service_in_environ(b"HOME=/root\0"), None);
        assert_eq!(service_in_environ(b""), None);
        // A value cut off by the read's end is still a value.
        assert_eq!(
            service_in_environ(b"OTEL_SERVICE_NAME=che").as_deref(),
            Some("che")
        );
    }

    #[test]
    fn hostile_values_are_cleaned_and_cut() {
        let env = b"OTEL_SERVICE_NAME=a\x1b[31m\xe2\x80\xaeb\0";
        assert_eq!(service_in_environ(env).as_deref(), Some("a?[31m?b"));
        let long = format!("OTEL_SERVICE_NAME={}\0", "x".repeat(10_000));
        let name = service_in_environ(long.as_bytes()).expect("a name");
        assert!(name.len() <= MAX_VALUE + 3, "{}", name.len());
        assert_eq!(percent_decoded(b"a%2"), b"a%2");
        assert_eq!(percent_decoded(b"%zz%41"), b"%zzA");
    }

    #[test]
    fn pod_uids_of_both_kubelet_drivers() {
        let uid = "0f2e5a7c-1b2d-4e3f-8a9b-0c1d2e3f4a5b";
        let systemd = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-ab.scope",
            uid.replace('-', "_")
        );
        assert_eq!(pod_uid(&systemd).as_deref(), Some(uid));
        let guaranteed = format!(
            "/kubepods.slice/kubepods-pod{}.slice/crio-ab.scope",
            uid.replace('-', "_")
        );
        assert_eq!(pod_uid(&guaranteed).as_deref(), Some(uid));
        let cgroupfs = format!("/kubepods/besteffort/pod{uid}/0123abcd");
        assert_eq!(pod_uid(&cgroupfs).as_deref(), Some(uid));
        assert_eq!(pod_uid("/system.slice/nginx.service"), None);
        assert_eq!(pod_uid("/kubepods.slice/kubepods-podnotauid.slice"), None);
        assert_eq!(pod_uid(&format!("/x/ipod{uid}")), None);
    }

    #[test]
    fn units_are_the_deepest_service_or_scope() {
        assert_eq!(
            systemd_unit("/system.slice/nginx.service").as_deref(),
            Some("nginx.service")
        );
        assert_eq!(
            systemd_unit("/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service")
                .as_deref(),
            Some("foo.service")
        );
        assert_eq!(
            systemd_unit("/user.slice/user-0.slice/session-3.scope").as_deref(),
            Some("session-3.scope")
        );
        assert_eq!(systemd_unit("/kubepods/besteffort/pod1/abc"), None);
        assert_eq!(systemd_unit("/"), None);
    }

    #[test]
    fn a_live_process_environment_is_read() {
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .env("OTEL_SERVICE_NAME", "flare-test-svc")
            .spawn()
            .expect("starting sleep");
        // spawn may return while the child's exec is still setting up its
        // new memory (vfork's parent resumes before the environment's
        // place is recorded): /proc/PID/environ is empty for a moment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut got = read_service(child.id());
        while got.is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            got = read_service(child.id());
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(got.as_deref(), Some("flare-test-svc"));
        assert_eq!(read_service(u32::MAX), None);
    }
}
