//! The live view's HTTP server: the page, its scripts and style, a JSON
//! snapshot, the timeline and time ranges' snapshots, and downloads, all
//! from memory.
//!
//! It is read-only by construction: only `GET` and `HEAD` are answered,
//! routes are a fixed list under a random token (no request names a file,
//! and another local user who does not know the printed URL reads
//! nothing), and every answer is computed from the [`Store`]. When bound
//! to loopback it also refuses requests whose `Host` is not a loopback
//! name, so a web page elsewhere cannot read it through DNS rebinding.
//!
//! Time answers are bounded too: a timeline has at most
//! [`super::timeview::MAX_SLICES`] slices, every answer reads at most the
//! store's capped events, and each is cached until the next interval.
//!
//! It is bounded whatever clients do: at most [`MAX_CONNECTIONS`] at once
//! (a new one closes the oldest that has not sent its request), a request head of at most [`MAX_HEAD`]
//! bytes read within [`HEAD_TIMEOUT`], one request per connection, and
//! each connection closed after [`CONNECTION_TIMEOUT`] whether or not its
//! client reads. Connections are tasks on one thread of their own, so a
//! client that never reads stalls neither the other clients nor the
//! profile, and dropping the [`Server`] cancels them all.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, HOST};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::oneshot;

#[cfg(test)]
use super::query::MAX_SEARCH;
use super::query::{check_range, parse_query, Refusal};
use super::timeview::range_profile;
use super::{
    download, range_json, snapshot_json, timeline_json, write_download, Format, Selection, Store,
    TimeQuery,
};
use crate::error::{Error, Result};

const PAGE: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/flare.js");
const TIME_SCRIPT: &str = include_str!("page/flare-time.js");
const STYLE: &str = include_str!("page/flare.css");

/// Connections served at once; past it the oldest silent one is closed.
pub const MAX_CONNECTIONS: usize = 64;
/// The longest request line and headers read (hyper's smallest buffer is
/// 8 KiB); a longer head is answered 431.
pub const MAX_HEAD: usize = 16 * 1024;
/// Time a client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a connection lives, reading and writing included.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// A running server; dropping it stops the server thread and closes every
/// connection.
pub struct Server {
    addr: SocketAddr,
    token: String,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// What every connection's task shares.
struct Context {
    store: Arc<Mutex<Store>>,
    bound: SocketAddr,
    /// `/TOKEN/`: the prefix of every route.
    prefix: String,
    cache: Mutex<SnapshotCache>,
    /// The last time view served (timeline or range), by its route.
    time_cache: Mutex<TimeCache>,
}

impl Server {
    /// Binds `addr` and serves `store` from a background thread.
    pub fn start(addr: SocketAddr, store: Arc<Mutex<Store>>) -> Result<Self> {
        let in_use = |source| {
            Error::Io {
            what: format!("cannot serve the live view on {addr} (is the port in use? give another with --serve ADDR:PORT)"),
            source,
        }
        };
        let listener = TcpListener::bind(addr).map_err(in_use)?;
        listener.set_nonblocking(true).map_err(in_use)?;
        let addr = listener.local_addr().map_err(in_use)?;
        let token = random_token()?;
        let ctx = Arc::new(Context {
            store,
            bound: addr,
            prefix: format!("/{token}/"),
            cache: Mutex::new(SnapshotCache::default()),
            time_cache: Mutex::new((None, Vec::new())),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|source| Error::Io {
                what: "starting the live view's server".into(),
                source,
            })?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("flare-serve".into())
            .spawn(move || {
                runtime.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => {
                            tokio::spawn(accept(l, ctx));
                        }
                        Err(e) => {
                            crate::notes::note(format!("WARNING: the live view cannot serve: {e}"))
                        }
                    }
                    // Until the Server is dropped (its sender with it).
                    let _ = stopped.await;
                });
                // Cancels every connection, however stuck its client is.
                runtime.shutdown_background();
            })
            .map_err(|source| Error::Io {
                what: "starting the live view's server thread".into(),
                source,
            })?;
        Ok(Server {
            addr,
            token,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address actually bound (with the port picked, if 0 was given).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to open, token included.
    pub fn url(&self) -> String {
        let host = if self.addr.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else if self.addr.is_ipv6() {
            format!("[{}]", self.addr.ip())
        } else {
            self.addr.ip().to_string()
        };
        format!("http://{host}:{}/{}/", self.addr.port(), self.token)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// 128 random bits in hex, from the kernel's generator.
fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: the pointer and length describe the writable tail of
        // `bytes`, which getrandom fills at most.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let source = std::io::Error::last_os_error();
            if source.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::Io {
                what: "drawing the live view's URL token".into(),
                source,
            });
        }
        filled += n as usize;
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The connections open, oldest first.
#[derive(Default)]
struct Slots {
    next: u64,
    open: VecDeque<Slot>,
}

struct Slot {
    id: u64,
    /// Set once the request head has been read.
    started: Arc<AtomicBool>,
    /// Dropped to close the connection.
    _close: oneshot::Sender<()>,
}

impl Slots {
    /// Makes room for one more connection: at the cap, the oldest one still
    /// waiting for its request head goes (else the oldest of all), so no
    /// client holds the server by opening connections and staying silent.
    fn admit(&mut self) -> (u64, Arc<AtomicBool>, oneshot::Receiver<()>) {
        if self.open.len() >= MAX_CONNECTIONS {
            let idle = self
                .open
                .iter()
                .position(|s| !s.started.load(Ordering::Relaxed));
            self.open.remove(idle.unwrap_or(0));
        }
        let (close, closed) = oneshot::channel();
        let started = Arc::new(AtomicBool::new(false));
        self.next += 1;
        self.open.push_back(Slot {
            id: self.next,
            started: Arc::clone(&started),
            _close: close,
        });
        (self.next, started, closed)
    }

    fn leave(&mut self, id: u64) {
        self.open.retain(|s| s.id != id);
    }
}

/// Accepts connections for ever, each served on a task of its own.
async fn accept(listener: tokio::net::TcpListener, ctx: Arc<Context>) {
    let slots = Arc::new(Mutex::new(Slots::default()));
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                // Out of descriptors or the like: let connections end.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (id, started, closed) = lock(&slots).admit();
        let ctx = Arc::clone(&ctx);
        let slots = Arc::clone(&slots);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|req: Request<hyper::body::Incoming>| {
                started.store(true, Ordering::Relaxed);
                let answer = handle(&req, &ctx);
                async move { Ok::<_, Infallible>(answer) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = tokio::time::timeout(CONNECTION_TIMEOUT, conn) => {}
                _ = closed => {}
            }
            lock(&slots).leave(id);
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The last snapshot served: tabs polling between two updates, or
/// several tabs on one view, get it without rebuilding the tree.
#[derive(Default)]
struct SnapshotCache {
    key: Option<(u64, Selection, u64)>,
    json: Vec<u8>,
}

/// The last time view served: its key (store sequence, route) and JSON.
type TimeCache = (Option<(u64, String)>, Vec<u8>);

/// What a request asks for.
#[derive(Debug, PartialEq)]
enum Route {
    Page,
    Script,
    TimeScript,
    Style,
    Snapshot(Selection, f64),
    Download(Selection, Format),
    /// Samples per slice over the kept run.
    Timeline(TimeQuery),
    /// The flame graph of a time range.
    Range(TimeQuery, f64),
    RangeDownload(TimeQuery, Format),
}

fn route(method: &Method, url: &str) -> std::result::Result<Route, Refusal> {
    if !matches!(*method, Method::GET | Method::HEAD) {
        return Err((405, "the live view is read-only: GET only".into()));
    }
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let p = parse_query(query)?;
    let (sel, min) = (p.sel, p.min_share);
    let ranged = p.time.from_ms.is_some() || p.time.to_ms.is_some() || p.time.tid.is_some();
    let download = |format| {
        if ranged {
            if p.time.from_ms.is_some() || p.time.to_ms.is_some() {
                check_range(&p.time)?;
            }
            Ok(Route::RangeDownload(p.time.clone(), format))
        } else {
            Ok(Route::Download(sel, format))
        }
    };
    Ok(match path {
        "" | "index.html" => Route::Page,
        "flare.js" => Route::Script,
        "flare-time.js" => Route::TimeScript,
        "flare.css" => Route::Style,
        "api/profile" => Route::Snapshot(sel, min),
        "api/timeline" => Route::Timeline(p.time),
        "api/range" => {
            check_range(&p.time)?;
            Route::Range(p.time, min)
        }
        "download/flare.folded" => download(Format::Folded)?,
        "download/flare.svg" => download(Format::Svg)?,
        "download/flare.pb.gz" => download(Format::Pprof)?,
        _ => return Err((404, format!("no such page: {path}"))),
    })
}

/// The rest of `path_and_query` after the token's prefix, if it starts
/// with it; compared in constant time so timing tells nothing of it.
fn after_token<'a>(path_and_query: &'a str, prefix: &str) -> Option<&'a str> {
    let head = path_and_query.as_bytes().get(..prefix.len())?;
    let differ = head
        .iter()
        .zip(prefix.as_bytes())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    (differ == 0).then(|| &path_and_query[prefix.len()..])
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

type Answer = Response<Full<Bytes>>;

fn respond(status: u16, content_type: &'static str, body: Vec<u8>) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    for (name, value) in [
        ("content-type", content_type),
        ("cache-control", "no-store"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        (
            "content-security-policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'",
        ),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    r
}

fn refuse(status: u16, msg: &str) -> Answer {
    respond(
        status,
        "text/plain; charset=utf-8",
        format!("{msg}\n").into_bytes(),
    )
}

fn handle<B>(request: &Request<B>, ctx: &Context) -> Answer {
    if ctx.bound.ip().is_loopback() {
        let host = request
            .headers()
            .get(HOST)
            .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
            .unwrap_or_default();
        if !loopback_host(&host) {
            let host = host.escape_debug().to_string();
            return refuse(403, &format!("refused: Host '{host}' is not loopback"));
        }
    }
    let url = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let Some(rest) = after_token(url, &ctx.prefix) else {
        return refuse(
            404,
            "no such page: the live view's address has a token, open the URL flare printed",
        );
    };
    let route = match route(request.method(), rest) {
        Ok(r) => r,
        Err((status, msg)) => return refuse(status, &msg),
    };
    match route {
        Route::Page => respond(200, "text/html; charset=utf-8", PAGE.into()),
        Route::Script => respond(200, "text/javascript; charset=utf-8", SCRIPT.into()),
        Route::TimeScript => respond(200, "text/javascript; charset=utf-8", TIME_SCRIPT.into()),
        Route::Style => respond(200, "text/css; charset=utf-8", STYLE.into()),
        Route::Snapshot(sel, min) => {
            let mut cache = lock(&ctx.cache);
            {
                let store = lock(&ctx.store);
                let key = Some((store.seq(), sel, min.to_bits()));
                if cache.key != key {
                    cache.json = snapshot_json(&store, sel, min).into_bytes();
                    cache.key = key;
                }
            }
            respond(200, "application/json", cache.json.clone())
        }
        Route::Timeline(_) | Route::Range(..) => {
            let key = format!("{route:?}");
            let mut cache = lock(&ctx.time_cache);
            let store = lock(&ctx.store);
            let key = Some((store.seq(), key));
            if cache.0 != key {
                let json = match &route {
                    Route::Timeline(q) => Some(timeline_json(&store, q)),
                    Route::Range(q, min) => range_json(&store, q, *min),
                    _ => None,
                };
                let Some(json) = json else {
                    return refuse(404, "this run keeps no sample times");
                };
                *cache = (key, json.into_bytes());
            }
            respond(200, "application/json", cache.1.clone())
        }
        Route::Download(..) | Route::RangeDownload(..) => {
            let result = {
                let store = lock(&ctx.store);
                match &route {
                    Route::Download(sel, format) => Some(download(&store, *sel, *format)),
                    Route::RangeDownload(q, format) => {
                        range_profile(&store, q).map(|p| write_download(p, *format))
                    }
                    _ => None,
                }
            };
            let Some(result) = result else {
                return refuse(404, "this run keeps no sample times");
            };
            match result {
                Ok(d) => {
                    let disposition =
                        HeaderValue::from_str(&format!("attachment; filename=\"{}\"", d.file_name));
                    let mut r = respond(200, d.content_type, d.body);
                    if let Ok(v) = disposition {
                        r.headers_mut().insert("content-disposition", v);
                    }
                    r
                }
                Err(e) => refuse(501, &e.to_string()),
            }
        }
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
