//! The set of destinations a run pushes to, as plain configuration, and
//! the senders that serve them.

use std::path::PathBuf;

use super::auth::{Connection, Credentials};
use super::sender::{Options, Sender};
use super::spool::Spool;
use super::{dir::Dir, otlp::Otlp, parca::Parca, pyroscope::Pyroscope, Destination};

/// Where to push, and how.
#[derive(Clone, Debug, Default)]
pub struct PushConfig {
    /// Pyroscope base URLs.
    pub pyroscope: Vec<String>,
    /// OTLP/HTTP collector base URLs.
    pub otlp: Vec<String>,
    /// Parca addresses (`host:port` or `https://host:port`).
    pub parca: Vec<String>,
    /// A directory for one pprof file per window, and how many to keep.
    pub dir: Option<(PathBuf, usize)>,
    /// The application (Pyroscope) or service (OTLP) name.
    pub app_name: String,
    /// Spool on disk here (one subdirectory per destination); in memory
    /// when `None`.
    pub spool_dir: Option<PathBuf>,
    /// Bound of each destination's spool.
    pub spool_max_bytes: u64,
    pub credentials: Credentials,
    pub connection: Connection,
    pub retry: Options,
}

impl PushConfig {
    /// True when no destination is given.
    pub fn is_empty(&self) -> bool {
        self.pyroscope.is_empty()
            && self.otlp.is_empty()
            && self.parca.is_empty()
            && self.dir.is_none()
    }

    /// The destinations, ready to send (nothing is contacted yet).
    pub fn destinations(&self, host: &str) -> Result<Vec<Box<dyn Destination>>, String> {
        let mut out: Vec<Box<dyn Destination>> = Vec::new();
        let mut conn = self.connection.clone();
        if conn.ca_pem.is_none() {
            conn.ca_pem = self.credentials.ca_pem()?;
        }
        for url in &self.pyroscope {
            check_url("--pyroscope", url)?;
            out.push(Box::new(Pyroscope::new(
                url,
                &self.app_name,
                host,
                self.credentials.pyroscope_headers(),
                &conn,
            )));
        }
        for url in &self.otlp {
            check_url("--otlp", url)?;
            out.push(Box::new(Otlp::new(
                url,
                &self.app_name,
                self.credentials.otlp_headers(),
                &conn,
            )));
        }
        for addr in &self.parca {
            let token = self.credentials.parca_token().map(str::to_string);
            out.push(Box::new(Parca::new(addr, host, token, &conn)?));
        }
        if let Some((path, keep)) = &self.dir {
            let d = Dir::new(path, *keep)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            out.push(Box::new(d));
        }
        Ok(out)
    }

    /// A sender per destination, each with its spool.
    pub fn senders(&self, host: &str) -> Result<Vec<Sender>, String> {
        let mut out = Vec::new();
        for dest in self.destinations(host)? {
            let name = dest.name();
            let spool = match &self.spool_dir {
                Some(dir) => {
                    let path = dir.join(spool_key(&name));
                    Spool::disk(&path, self.spool_max_bytes)
                        .map_err(|e| format!("spool {}: {e}", path.display()))?
                }
                None => Spool::memory(self.spool_max_bytes),
            };
            let options = Options {
                timeout: self.connection.timeout,
                ..self.retry
            };
            out.push(
                Sender::start(dest, spool, options)
                    .map_err(|e| format!("starting the sender for {name}: {e}"))?,
            );
        }
        Ok(out)
    }
}

/// A URL must name its scheme: `http://` or `https://`.
fn check_url(option: &str, url: &str) -> Result<(), String> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(format!(
            "{option} {url}: give a URL starting with http:// or https://"
        ))
    }
}

/// A directory name for a destination's spool.
pub fn spool_key(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
