//! Grafana Pyroscope's ingest API: `POST URL/ingest?name=APP{labels}&
//! from=&until=&format=pprof` with the window's gzipped pprof as the body.
//!
//! The application is the window's service, where its processes name one
//! (their `OTEL_SERVICE_NAME`), else `--app-name`; the name carries the
//! host (`APP{hostname=...}`); the
//! per-process labels (`pid`, `comm`, `exe`, `cgroup`, `container_id`,
//! and `service_name`, `pod_uid`, `systemd_unit` where a process has
//! them) are pprof sample labels, which Pyroscope keeps as labels of
//! their own.

use std::time::Duration;

use super::auth::{Connection, Headers};
use super::pprof::Encoder;
use super::{DeliveryError, Destination, Encode, Payload};

/// A Pyroscope server.
pub struct Pyroscope {
    url: String,
    app: String,
    host: String,
    agent: ureq::Agent,
    headers: Headers,
}

/// A label value as Pyroscope's name syntax allows it (no braces, commas,
/// quotes or equals signs).
fn label_value(s: &str) -> String {
    s.chars()
        .map(|c| {
            if "{}=,\"".contains(c) || c.is_whitespace() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

impl Pyroscope {
    /// `base` is the server's URL (`http://host:4040`); `app` the
    /// application name the profiles are stored under, `host` the
    /// machine's name.
    pub fn new(base: &str, app: &str, host: &str, headers: Headers, conn: &Connection) -> Self {
        let base = base.trim_end_matches('/');
        let url = if base.ends_with("/ingest") {
            base.to_string()
        } else {
            format!("{base}/ingest")
        };
        Pyroscope {
            url,
            app: app.to_string(),
            host: host.to_string(),
            agent: super::auth::http_agent(conn),
            headers,
        }
    }

    /// The `name` parameter of a window of `service` (else of
    /// `--app-name`'s application) and the host label.
    pub fn name(&self, service: Option<&str>) -> String {
        let app = service.map_or_else(|| self.app.clone(), label_value);
        format!("{app}{{hostname={}}}", label_value(&self.host))
    }
}

impl Destination for Pyroscope {
    fn name(&self) -> String {
        format!("pyroscope {}", self.url)
    }

    fn encoder(&self) -> Box<dyn Encode> {
        Box::new(Encoder::new())
    }

    fn deliver(&mut self, payload: &Payload, timeout: Duration) -> Result<(), DeliveryError> {
        let from = payload.start_ns / 1_000_000_000;
        // Pyroscope wants whole seconds and until > from.
        let until = (payload.end_ns / 1_000_000_000).max(from + 1);
        let mut req = self
            .agent
            .post(&self.url)
            .query("name", Pyroscope::name(self, payload.service.as_deref()))
            .query("from", from.to_string())
            .query("until", until.to_string())
            .query("format", "pprof")
            .query("spyName", "flare")
            .header("Content-Type", "application/octet-stream");
        for (k, v) in self.headers.iter() {
            req = req.header(k, v);
        }
        super::auth::send(req, &payload.body, timeout, &Destination::name(self))
    }
}
