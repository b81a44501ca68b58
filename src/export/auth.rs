//! Credentials and HTTP plumbing shared by the exporters.
//!
//! Secrets never come from the command line, where `ps` shows them to
//! every user: they are read from environment variables, or from a file
//! (`KEY=VALUE` lines, `#` comments) whose values override the
//! environment's. The keys:
//!
//! | key | used for |
//! |---|---|
//! | `FLARE_PYROSCOPE_TOKEN` | `Authorization: Bearer` to Pyroscope |
//! | `FLARE_PYROSCOPE_USER`, `FLARE_PYROSCOPE_PASSWORD` | HTTP basic auth to Pyroscope (Grafana Cloud) |
//! | `FLARE_PYROSCOPE_TENANT` | `X-Scope-OrgID` (multi-tenant Pyroscope) |
//! | `FLARE_OTLP_HEADERS` (else `OTEL_EXPORTER_OTLP_HEADERS`) | `k=v,k2=v2` headers to the OTLP collector |
//! | `FLARE_PARCA_TOKEN` | `authorization: Bearer` metadata to Parca |
//! | `FLARE_CA_FILE` | PEM file of CA certificates to trust instead of the bundled roots |
//!
//! TLS is rustls (no OpenSSL), with Mozilla's roots bundled.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::DeliveryError;

/// Every credential key flare reads.
pub const KEYS: &[&str] = &[
    "FLARE_PYROSCOPE_TOKEN",
    "FLARE_PYROSCOPE_USER",
    "FLARE_PYROSCOPE_PASSWORD",
    "FLARE_PYROSCOPE_TENANT",
    "FLARE_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "FLARE_PARCA_TOKEN",
    "FLARE_CA_FILE",
];

/// Credentials by key.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    values: HashMap<String, String>,
}

impl Credentials {
    /// From the environment, then `file` (whose values win).
    pub fn load(file: Option<&Path>) -> Result<Self, String> {
        let mut values: HashMap<String, String> = KEYS
            .iter()
            .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
            .collect();
        if let Some(path) = file {
            let text = fs::read_to_string(path)
                .map_err(|e| format!("cannot read credentials file {}: {e}", path.display()))?;
            values.extend(parse_file(&text).map_err(|line| {
                format!(
                    "credentials file {} line {line}: expected KEY=VALUE",
                    path.display()
                )
            })?);
        }
        Ok(Credentials { values })
    }

    /// Credentials from explicit pairs (tests, library users).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Credentials {
            values: pairs
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .get(key)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// The headers to send to Pyroscope.
    pub fn pyroscope_headers(&self) -> Headers {
        let mut h = Headers::default();
        if let Some(t) = self.get("FLARE_PYROSCOPE_TOKEN") {
            h.push("Authorization", &format!("Bearer {t}"));
        } else if let Some(u) = self.get("FLARE_PYROSCOPE_USER") {
            let p = self.get("FLARE_PYROSCOPE_PASSWORD").unwrap_or("");
            h.push(
                "Authorization",
                &format!("Basic {}", base64(format!("{u}:{p}").as_bytes())),
            );
        }
        if let Some(t) = self.get("FLARE_PYROSCOPE_TENANT") {
            h.push("X-Scope-OrgID", t);
        }
        h
    }

    /// The headers to send to the OTLP collector.
    pub fn otlp_headers(&self) -> Headers {
        let mut h = Headers::default();
        let list = self
            .get("FLARE_OTLP_HEADERS")
            .or_else(|| self.get("OTEL_EXPORTER_OTLP_HEADERS"))
            .unwrap_or("");
        for pair in list.split(',') {
            if let Some((k, v)) = pair.split_once('=') {
                h.push(k.trim(), &percent_decode(v.trim()));
            }
        }
        h
    }

    /// The bearer token for Parca.
    pub fn parca_token(&self) -> Option<&str> {
        self.get("FLARE_PARCA_TOKEN")
    }

    /// The CA certificates to trust, when a file is named.
    pub fn ca_pem(&self) -> Result<Option<Arc<Vec<u8>>>, String> {
        let Some(path) = self.get("FLARE_CA_FILE") else {
            return Ok(None);
        };
        fs::read(path)
            .map(|b| Some(Arc::new(b)))
            .map_err(|e| format!("cannot read FLARE_CA_FILE {path}: {e}"))
    }
}

/// `KEY=VALUE` lines; blank lines and `#` comments are skipped, values may
/// be quoted. The error is the 1-based number of a malformed line.
fn parse_file(text: &str) -> Result<Vec<(String, String)>, usize> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let (k, v) = line.split_once('=').ok_or(i + 1)?;
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(v);
        out.push((k.trim().to_string(), v.to_string()));
    }
    Ok(out)
}

/// `%XX` escapes, as OTEL_EXPORTER_OTLP_HEADERS values may hold them.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(x) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(x);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Standard base64 with padding (HTTP basic auth).
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Extra request headers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    pub fn push(&mut self, key: &str, value: &str) {
        self.0.push((key.to_string(), value.to_string()));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// How to connect: request timeout and the CA certificates to trust.
#[derive(Clone, Debug)]
pub struct Connection {
    pub timeout: Duration,
    /// PEM CA certificates replacing the bundled roots.
    pub ca_pem: Option<Arc<Vec<u8>>>,
}

impl Default for Connection {
    fn default() -> Self {
        Connection {
            timeout: Duration::from_secs(10),
            ca_pem: None,
        }
    }
}

/// An HTTP client for one destination: HTTP errors are answers (not
/// `Err`), every request is bounded by the timeout, and redirects are
/// answers too (followed, a POST would reach another server, or become a
/// GET that "succeeds" without delivering anything).
pub fn http_agent(conn: &Connection) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .timeout_global(Some(conn.timeout))
        .max_redirects(0)
        .http_status_as_error(false)
        .user_agent(concat!("flare/", env!("CARGO_PKG_VERSION")));
    if let Some(pem) = &conn.ca_pem {
        let certs: Vec<_> = ureq::tls::parse_pem(pem)
            .filter_map(|item| match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)))
                .build(),
        );
    }
    config.build().into()
}

/// Sends `body`, giving up after `timeout`, and classifies the answer.
pub fn send(
    req: ureq::RequestBuilder<ureq::typestate::WithBody>,
    body: &[u8],
    timeout: Duration,
    what: &str,
) -> Result<(), DeliveryError> {
    let req = req.config().timeout_global(Some(timeout)).build();
    match req.send(body) {
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            let text = if (200..300).contains(&status) {
                String::new()
            } else if (300..400).contains(&status) {
                let to = resp.headers().get("location");
                to.map_or("(no Location)".into(), |v| {
                    String::from_utf8_lossy(v.as_bytes()).into_owned()
                })
            } else {
                resp.body_mut()
                    .with_config()
                    .limit(4096)
                    .read_to_string()
                    .unwrap_or_default()
            };
            super::http_status(what, status, &text)
        }
        Err(e) => Err(DeliveryError::Retry(format!(
            "{what}: {}",
            super::server_text(&e.to_string())
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o, "{i}");
        }
    }

    #[test]
    fn credentials_file_and_headers() {
        let pairs = parse_file("# c\nexport FLARE_PYROSCOPE_USER=\"u\"\n\nFLARE_PYROSCOPE_PASSWORD='p w'\nFLARE_OTLP_HEADERS=a=1, b=x%20y\n").unwrap();
        let c = Credentials::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let h: Vec<_> = c.pyroscope_headers().0;
        assert_eq!(
            h,
            vec![(
                "Authorization".into(),
                format!("Basic {}", base64(b"u:p w"))
            )]
        );
        let o: Vec<_> = c.otlp_headers().0;
        assert_eq!(
            o,
            vec![("a".into(), "1".into()), ("b".into(), "x y".into())]
        );
        assert_eq!(parse_file("x\nNOEQUALS"), Err(1));
    }
}
