//! Push exporters: each profiling window goes to the servers people run
//! for continuous profiling — Grafana Pyroscope ([`pyroscope`]), Parca
//! ([`parca`]), an OpenTelemetry collector ([`otlp`]) — or to a directory
//! of pprof files ([`dir`]).
//!
//! A [`Window`] is one interval's symbolized [`Profile`] with the labels
//! a server needs to tell processes and hosts apart. Each destination
//! implements [`Destination`]: its [`Encode`]r turns a window into a
//! [`Payload`] (the request body and the times it covers), and it delivers
//! payloads, each within a timeout. A
//! [`sender::Sender`] runs one destination on its own thread behind a
//! bounded [`spool::Spool`] (on disk or in memory), with retries and
//! backoff, so that collection never waits for a network and memory never
//! grows when a server is down. Everything here depends on the model
//! ([`crate::profile`]) and the pprof writer only.

pub mod auth;
pub mod buildid;
pub mod dir;
pub mod labels;
pub mod otlp;
pub mod otlp_proto;
pub mod parca;
pub mod parca_proto;
pub mod pprof;
pub mod push;
pub mod pyroscope;
pub mod sender;
pub mod service;
pub mod sink;
pub mod spool;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::profile::{Kind, Profile};

/// What identifies a process to a server, beyond its pid and name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessLabels {
    /// The executable's path (`/proc/PID/exe`).
    pub exe: Option<Arc<str>>,
    /// The process's cgroup (v2 path, `/proc/PID/cgroup`).
    pub cgroup: Option<Arc<str>>,
    /// The container id found in the cgroup path (Docker, containerd,
    /// CRI-O, Podman), where there is one.
    pub container_id: Option<Arc<str>>,
    /// The service name its environment gives (`OTEL_SERVICE_NAME`, or
    /// `service.name` in `OTEL_RESOURCE_ATTRIBUTES`).
    pub service: Option<Arc<str>>,
    /// The Kubernetes pod's uid its cgroup path names.
    pub pod_uid: Option<Arc<str>>,
    /// The systemd unit its cgroup path names.
    pub unit: Option<Arc<str>>,
}

/// One interval of profiling, ready to be sent.
#[derive(Clone, Debug)]
pub struct Window<'a> {
    /// The symbolized samples; `meta.duration` is the window's length.
    /// Borrowed where one service has them all (no copy of the window).
    pub profile: std::borrow::Cow<'a, Profile>,
    /// When the window began and ended (wall clock).
    pub start: SystemTime,
    pub end: SystemTime,
    /// The machine's host name.
    pub host: String,
    /// Labels of the processes in the samples, by pid.
    pub processes: HashMap<u32, ProcessLabels>,
    /// The service every sample's process names (`None`: processes that
    /// name none, shown under `--app-name`): Pyroscope's application and
    /// OTLP's resource `service.name`.
    pub service: Option<Arc<str>>,
}

/// A short name for profiles of `kind`, as pprof names their sample
/// types: Parca's series (`flare_offcpu`) and the directory's file names
/// (`-offcpu`) hold it.
pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Cpu => "cpu",
        Kind::OffCpu | Kind::OffWake => "offcpu",
        Kind::Wakeup => "wakeup",
        Kind::Count => "events",
        Kind::Wall => "wall",
    }
}

/// Nanoseconds since the Unix epoch.
pub fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64)
}

/// An encoded window: what a destination sends, the times it covers
/// (kept apart from the body because some protocols put them in the
/// URL), the kind of its profile and its service (a directory names
/// files by them, Pyroscope's URL holds the service).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    pub start_ns: u64,
    pub end_ns: u64,
    pub kind: Kind,
    pub service: Option<Arc<str>>,
    pub body: Vec<u8>,
}

impl Payload {
    /// `body`, the encoding of `window`.
    pub fn of(window: &Window, body: Vec<u8>) -> Self {
        Payload {
            start_ns: unix_nanos(window.start),
            end_ns: unix_nanos(window.end),
            kind: window.profile.meta.kind,
            service: window.service.clone(),
            body,
        }
    }
}

/// Why a delivery failed.
#[derive(Debug)]
pub enum DeliveryError {
    /// Worth trying again later: the server is down, overloaded or slow.
    Retry(String),
    /// The server refused this payload for good (a 4xx answer other than
    /// 408 and 429); sending it again would fail the same way.
    Rejected(String),
}

impl fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeliveryError::Retry(m) => write!(f, "{m} (will retry)"),
            DeliveryError::Rejected(m) => write!(f, "{m} (dropped)"),
        }
    }
}

/// Classifies an HTTP status: 2xx is success, 408/429/5xx are worth
/// retrying, a redirect (flare follows none: a POST must not turn into
/// another request elsewhere) and any other answer are rejections.
/// `detail` is the server's text (or a redirect's target), shown escaped.
pub fn http_status(what: &str, status: u16, detail: &str) -> Result<(), DeliveryError> {
    let detail = server_text(detail.trim());
    let msg = || format!("{what}: HTTP {status} {detail}");
    match status {
        200..=299 => Ok(()),
        300..=399 => Err(DeliveryError::Rejected(format!(
            "{what}: HTTP {status} redirect to {detail}: redirects are not followed \
             when pushing; give the URL the server redirects to"
        ))),
        408 | 429 | 500..=599 => Err(DeliveryError::Retry(msg())),
        _ => Err(DeliveryError::Rejected(msg())),
    }
}

/// The most characters of a server's text shown in a message.
const SERVER_TEXT_MAX: usize = 200;

/// A server's text as it may be shown on a terminal: printable ASCII as
/// it is, anything else (control characters, escape sequences, other
/// code points) escaped as Rust does (`\u{1b}`, `\n`), and cut after
/// [`SERVER_TEXT_MAX`] characters.
pub fn server_text(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == SERVER_TEXT_MAX {
            out.push_str("...");
            break;
        }
        if c == ' ' || c.is_ascii_graphic() {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    out
}

/// Turns windows into what a destination sends. It runs where windows
/// are handed over, so that every window is encoded into the bounded
/// spool at once, whatever the destination is doing.
pub trait Encode: Send {
    fn encode(&mut self, window: &Window) -> std::io::Result<Payload>;
}

/// The gzipped pprof of a window: what Pyroscope and the pprof directory
/// take.
impl Encode for pprof::Encoder {
    fn encode(&mut self, window: &Window) -> std::io::Result<Payload> {
        Ok(Payload::of(window, self.encode_gzip(window)?))
    }
}

/// A push destination.
pub trait Destination: Send {
    /// A short name for messages and the spool (`pyroscope http://...`).
    fn name(&self) -> String;
    /// What turns windows into what [`Destination::deliver`] sends.
    fn encoder(&self) -> Box<dyn Encode>;
    /// Sends one payload, giving up after `timeout`.
    fn deliver(&mut self, payload: &Payload, timeout: Duration) -> Result<(), DeliveryError>;
    /// True when the format carries each sample's time (a run pushing to
    /// it keeps times).
    fn keeps_time(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests;
