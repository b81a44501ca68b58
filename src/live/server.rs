//! The live view's HTTP server: the page, its script and style, a JSON
//! snapshot and downloads, all from memory.
//!
//! It is read-only by construction: only `GET` and `HEAD` are answered,
//! routes are a fixed list (no request names a file), and every answer is
//! computed from the [`Store`]. When bound to loopback it also refuses
//! requests whose `Host` is not a loopback name, so a web page elsewhere
//! cannot read it through DNS rebinding. A small synchronous server on one
//! thread is plenty for one or a few browser tabs polling once a second.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tiny_http::{Header, Method, Request, Response, Server as Http};

use super::{download, snapshot_json, Format, Selection, Store, DEFAULT_MIN_SHARE};
use crate::error::{Error, Result};

const PAGE: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/flare.js");
const STYLE: &str = include_str!("page/flare.css");

/// A running server; dropping it stops the server thread.
pub struct Server {
    http: Arc<Http>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` and serves `store` from a background thread.
    pub fn start(addr: SocketAddr, store: Arc<Mutex<Store>>) -> Result<Self> {
        let http = Http::http(addr).map_err(|e| Error::Io {
            what: format!("cannot serve the live view on {addr} (is the port in use? give another with --serve ADDR:PORT)"),
            source: std::io::Error::other(e.to_string()),
        })?;
        let addr = http
            .server_addr()
            .to_ip()
            .ok_or_else(|| Error::Unsupported("the live view needs a TCP address".into()))?;
        let http = Arc::new(http);
        let serving = Arc::clone(&http);
        let thread = std::thread::Builder::new()
            .name("flare-serve".into())
            .spawn(move || {
                let mut cache = SnapshotCache::default();
                for request in serving.incoming_requests() {
                    handle(request, &store, addr, &mut cache);
                }
            })
            .map_err(|source| Error::Io {
                what: "starting the live view's server thread".into(),
                source,
            })?;
        Ok(Server {
            http,
            addr,
            thread: Some(thread),
        })
    }

    /// The address actually bound (with the port picked, if 0 was given).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to open.
    pub fn url(&self) -> String {
        let host = if self.addr.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else if self.addr.is_ipv6() {
            format!("[{}]", self.addr.ip())
        } else {
            self.addr.ip().to_string()
        };
        format!("http://{host}:{}/", self.addr.port())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.http.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The last snapshot served: tabs polling between two updates, or
/// several tabs on one view, get it without rebuilding the tree.
#[derive(Default)]
struct SnapshotCache {
    key: Option<(u64, Selection, u64)>,
    json: Vec<u8>,
}

/// What a request asks for.
#[derive(Debug, PartialEq)]
enum Route {
    Page,
    Script,
    Style,
    Snapshot(Selection, f64),
    Download(Selection, Format),
}

/// A request that cannot be answered: status and one line of reason.
type Refusal = (u16, String);

fn parse_query(query: &str) -> std::result::Result<(Selection, f64), Refusal> {
    let mut sel = Selection::default();
    let mut min_share = DEFAULT_MIN_SHARE;
    let bad = |k: &str, v: &str| (400, format!("bad value '{v}' for '{k}'"));
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "last" if v.is_empty() || v == "0" => sel.last = None,
            "last" => {
                let secs: u64 = v.parse().map_err(|_| bad(k, v))?;
                sel.last = Some(Duration::from_secs(secs));
            }
            "pid" if v.is_empty() => sel.pid = None,
            "pid" => sel.pid = Some(v.parse().map_err(|_| bad(k, v))?),
            "min" => {
                let m: f64 = v.parse().map_err(|_| bad(k, v))?;
                if !(0.0..=1.0).contains(&m) {
                    return Err(bad(k, v));
                }
                min_share = m;
            }
            // Cache busters and the like.
            _ => {}
        }
    }
    Ok((sel, min_share))
}

fn route(method: &Method, url: &str) -> std::result::Result<Route, Refusal> {
    if !matches!(method, Method::Get | Method::Head) {
        return Err((405, "the live view is read-only: GET only".into()));
    }
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let (sel, min) = parse_query(query)?;
    Ok(match path {
        "/" | "/index.html" => Route::Page,
        "/flare.js" => Route::Script,
        "/flare.css" => Route::Style,
        "/api/profile" => Route::Snapshot(sel, min),
        "/download/flare.folded" => Route::Download(sel, Format::Folded),
        "/download/flare.svg" => Route::Download(sel, Format::Svg),
        "/download/flare.pb.gz" => Route::Download(sel, Format::Pprof),
        _ => return Err((404, format!("no such page: {path}"))),
    })
}

/// True if `host` (a Host header) names the loopback interface.
fn loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn respond(
    request: Request,
    status: u16,
    content_type: &str,
    body: Vec<u8>,
    extra: Option<Header>,
) {
    let mut r = Response::from_data(body).with_status_code(status);
    let headers = [
        header("Content-Type", content_type),
        header("Cache-Control", "no-store"),
        header("X-Content-Type-Options", "nosniff"),
        header("Referrer-Policy", "no-referrer"),
        header(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'",
        ),
        extra,
    ];
    for h in headers.into_iter().flatten() {
        r.add_header(h);
    }
    // A browser that went away mid-answer is not an error worth reporting.
    let _ = request.respond(r);
}

fn handle(request: Request, store: &Mutex<Store>, bound: SocketAddr, cache: &mut SnapshotCache) {
    if bound.ip().is_loopback() {
        let host = request
            .headers()
            .iter()
            .find(|h| h.field.equiv("Host"))
            .map(|h| h.value.as_str().to_string())
            .unwrap_or_default();
        if !loopback_host(&host) {
            let msg = format!("refused: Host '{host}' is not loopback\n");
            return respond(
                request,
                403,
                "text/plain; charset=utf-8",
                msg.into_bytes(),
                None,
            );
        }
    }
    let route = match route(request.method(), request.url()) {
        Ok(r) => r,
        Err((status, msg)) => {
            return respond(
                request,
                status,
                "text/plain; charset=utf-8",
                format!("{msg}\n").into_bytes(),
                None,
            )
        }
    };
    match route {
        Route::Page => respond(request, 200, "text/html; charset=utf-8", PAGE.into(), None),
        Route::Script => respond(
            request,
            200,
            "text/javascript; charset=utf-8",
            SCRIPT.into(),
            None,
        ),
        Route::Style => respond(request, 200, "text/css; charset=utf-8", STYLE.into(), None),
        Route::Snapshot(sel, min) => {
            {
                let store = store.lock().unwrap_or_else(|e| e.into_inner());
                let key = Some((store.seq(), sel, min.to_bits()));
                if cache.key != key {
                    cache.json = snapshot_json(&store, sel, min).into_bytes();
                    cache.key = key;
                }
            }
            respond(request, 200, "application/json", cache.json.clone(), None)
        }
        Route::Download(sel, format) => {
            let result = {
                let store = store.lock().unwrap_or_else(|e| e.into_inner());
                download(&store, sel, format)
            };
            match result {
                Ok(d) => {
                    let disposition = header(
                        "Content-Disposition",
                        &format!("attachment; filename=\"{}\"", d.file_name),
                    );
                    respond(request, 200, d.content_type, d.body, disposition)
                }
                Err(e) => respond(
                    request,
                    501,
                    "text/plain; charset=utf-8",
                    format!("{e}\n").into_bytes(),
                    None,
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_a_fixed_list() {
        assert_eq!(route(&Method::Get, "/"), Ok(Route::Page));
        assert!(matches!(
            route(&Method::Get, "/api/profile?last=10&pid=42"),
            Ok(Route::Snapshot(
                Selection {
                    last: Some(d),
                    pid: Some(42)
                },
                _
            )) if d == Duration::from_secs(10)
        ));
        assert_eq!(route(&Method::Get, "/../etc/passwd").unwrap_err().0, 404);
        assert_eq!(route(&Method::Get, "/flare.js/../x").unwrap_err().0, 404);
        assert_eq!(route(&Method::Post, "/api/profile").unwrap_err().0, 405);
        assert_eq!(
            route(&Method::Get, "/api/profile?pid=x").unwrap_err().0,
            400
        );
        assert_eq!(
            route(&Method::Get, "/api/profile?min=2").unwrap_err().0,
            400
        );
        assert!(matches!(
            route(&Method::Get, "/download/flare.svg?last=0"),
            Ok(Route::Download(
                Selection {
                    last: None,
                    pid: None
                },
                Format::Svg
            ))
        ));
    }

    #[test]
    fn loopback_hosts() {
        for h in [
            "127.0.0.1:8080",
            "localhost:1",
            "[::1]:80",
            "LOCALHOST",
            "127.1.2.3:9",
        ] {
            assert!(loopback_host(h), "{h}");
        }
        for h in ["evil.example:8080", "10.0.0.1:80", "", "[fe80::1]:80"] {
            assert!(!loopback_host(h), "{h}");
        }
    }
}
