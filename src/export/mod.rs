//! Push exporters: each profiling window goes to the servers people run
//! for continuous profiling — Grafana Pyroscope ([`pyroscope`]), Parca
//! ([`parca`]), an OpenTelemetry collector ([`otlp`]) — or to a directory
//! of pprof files ([`dir`]).
//!
//! A [`Window`] is one interval's symbolized [`Profile`] with the labels
//! a server needs to tell processes and hosts apart. Each destination
//! implements [`Destination`]: it encodes a window into a [`Payload`] (the
//! request body and the times it covers) and delivers payloads. A
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
pub mod sink;
pub mod spool;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::profile::Profile;

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
}

/// One interval of profiling, ready to be sent.
#[derive(Clone, Debug)]
pub struct Window {
    /// The symbolized samples; `meta.duration` is the window's length.
    pub profile: Profile,
    /// When the window began and ended (wall clock).
    pub start: SystemTime,
    pub end: SystemTime,
    /// The machine's host name.
    pub host: String,
    /// Labels of the processes in the samples, by pid.
    pub processes: HashMap<u32, ProcessLabels>,
}

/// Nanoseconds since the Unix epoch.
pub fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64)
}

/// An encoded window: what a destination sends, and the times it covers
/// (kept apart from the body because some protocols put them in the URL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    pub start_ns: u64,
    pub end_ns: u64,
    pub body: Vec<u8>,
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
/// retrying, any other answer is a rejection.
pub fn http_status(what: &str, status: u16, body: &str) -> Result<(), DeliveryError> {
    let body = body.trim();
    let body = &body[..body.floor_char_boundary_compat(200)];
    let msg = || format!("{what}: HTTP {status} {body}");
    match status {
        200..=299 => Ok(()),
        408 | 429 | 500..=599 => Err(DeliveryError::Retry(msg())),
        _ => Err(DeliveryError::Rejected(msg())),
    }
}

/// `str::floor_char_boundary` for the crate's minimum Rust version.
trait FloorBoundary {
    fn floor_char_boundary_compat(&self, max: usize) -> usize;
}

impl FloorBoundary for str {
    fn floor_char_boundary_compat(&self, max: usize) -> usize {
        if max >= self.len() {
            return self.len();
        }
        (0..=max)
            .rev()
            .find(|&i| self.is_char_boundary(i))
            .unwrap_or(0)
    }
}

/// A push destination.
pub trait Destination: Send {
    /// A short name for messages and the spool (`pyroscope http://...`).
    fn name(&self) -> String;
    /// Turns a window into what [`Destination::deliver`] sends.
    fn encode(&mut self, window: &Window) -> std::io::Result<Payload>;
    /// Sends one payload.
    fn deliver(&mut self, payload: &Payload) -> Result<(), DeliveryError>;
}

#[cfg(test)]
mod tests;
