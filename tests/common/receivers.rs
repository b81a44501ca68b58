//! Loopback receivers for the push tests: a small HTTP server that keeps
//! every request (Pyroscope's ingest and OTLP/HTTP), and a Parca
//! profile store speaking gRPC (tonic) that keeps every `WriteRaw`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use flare::export::parca_proto::{WriteRawRequest, WriteRawResponse, WRITE_RAW_PATH};
use flare::output::pprof::proto;
use prost::Message;
use tonic::codegen::{http, BoxFuture, Service};

/// One request as received.
#[derive(Clone, Debug)]
pub struct Request {
    pub path: String,
    pub query: HashMap<String, String>,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

/// A free loopback port (bound and released: a receiver started on it
/// later is the test's "server coming back").
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(x) => {
                        out.push(x);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An HTTP server on loopback that answers 200 and keeps every request.
pub struct HttpReceiver {
    pub port: u16,
    server: Arc<tiny_http::Server>,
    got: Arc<Mutex<Vec<Request>>>,
    thread: Option<JoinHandle<()>>,
}

impl HttpReceiver {
    /// Listens on `port` (0: any free port).
    pub fn start(port: u16) -> Self {
        let server = Arc::new(
            tiny_http::Server::http(("127.0.0.1", port)).expect("binding the HTTP receiver"),
        );
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let got: Arc<Mutex<Vec<Request>>> = Arc::default();
        let (s, g) = (Arc::clone(&server), Arc::clone(&got));
        let thread = thread::spawn(move || {
            for mut req in s.incoming_requests() {
                let mut body = Vec::new();
                let _ = req.as_reader().read_to_end(&mut body);
                let (path, query) = req.url().split_once('?').unwrap_or((req.url(), ""));
                let query = query
                    .split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (percent_decode(k), percent_decode(v)))
                    .collect();
                let headers = req
                    .headers()
                    .iter()
                    .map(|h| {
                        (
                            h.field.as_str().as_str().to_ascii_lowercase(),
                            h.value.to_string(),
                        )
                    })
                    .collect();
                g.lock().unwrap().push(Request {
                    path: path.to_string(),
                    query,
                    headers,
                    body,
                });
                let _ = req.respond(tiny_http::Response::empty(200));
            }
        });
        HttpReceiver {
            port,
            server,
            got,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.got.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived (panics after `limit`).
    pub fn wait_for(&self, n: usize, limit: Duration) -> Vec<Request> {
        wait(limit, || {
            let r = self.requests();
            (r.len() >= n).then_some(r)
        })
        .unwrap_or_else(|| {
            panic!(
                "{} of {n} requests arrived at {}",
                self.requests().len(),
                self.url()
            )
        })
    }
}

impl Drop for HttpReceiver {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls `f` until it returns something or `limit` passes.
pub fn wait<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// A pprof body, gzipped or not.
pub fn decode_pprof(body: &[u8]) -> proto::Profile {
    let raw = if body.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(body)
            .read_to_end(&mut out)
            .expect("gunzip pprof");
        out
    } else {
        body.to_vec()
    };
    proto::Profile::decode(raw.as_slice()).expect("a pprof profile")
}

/// A sample of a pprof profile, resolved: function names leaf first, the
/// labels (numbers as text) and the first value.
#[derive(Debug)]
pub struct Resolved {
    pub functions: Vec<String>,
    pub labels: HashMap<String, String>,
    pub value: i64,
}

pub fn resolve(p: &proto::Profile) -> Vec<Resolved> {
    let s = |i: i64| p.string_table[i as usize].clone();
    let functions: HashMap<u64, String> = p.function.iter().map(|f| (f.id, s(f.name))).collect();
    let locations: HashMap<u64, &proto::Location> = p.location.iter().map(|l| (l.id, l)).collect();
    p.sample
        .iter()
        .map(|x| Resolved {
            functions: x
                .location_id
                .iter()
                .flat_map(|l| {
                    locations[l]
                        .line
                        .iter()
                        .map(|line| functions[&line.function_id].clone())
                })
                .collect(),
            labels: x
                .label
                .iter()
                .map(|l| {
                    (
                        s(l.key),
                        if l.str != 0 {
                            s(l.str)
                        } else {
                            l.num.to_string()
                        },
                    )
                })
                .collect(),
            value: x.value.first().copied().unwrap_or(0),
        })
        .collect()
}

/// Parca's profile store, over gRPC on loopback.
pub struct ParcaReceiver {
    pub addr: SocketAddr,
    got: Arc<Mutex<Vec<WriteRawRequest>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Clone)]
struct Store(Arc<Mutex<Vec<WriteRawRequest>>>);

impl tonic::server::NamedService for Store {
    const NAME: &'static str = "parca.profilestore.v1alpha1.ProfileStoreService";
}

struct WriteRaw(Arc<Mutex<Vec<WriteRawRequest>>>);

impl tonic::server::UnaryService<WriteRawRequest> for WriteRaw {
    type Response = WriteRawResponse;
    type Future = BoxFuture<tonic::Response<WriteRawResponse>, tonic::Status>;

    fn call(&mut self, req: tonic::Request<WriteRawRequest>) -> Self::Future {
        let got = Arc::clone(&self.0);
        Box::pin(async move {
            got.lock().unwrap().push(req.into_inner());
            Ok(tonic::Response::new(WriteRawResponse {}))
        })
    }
}

impl Service<http::Request<tonic::body::Body>> for Store {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let got = Arc::clone(&self.0);
        Box::pin(async move {
            if req.uri().path() == WRITE_RAW_PATH {
                let codec = tonic_prost::ProstCodec::<WriteRawResponse, WriteRawRequest>::default();
                let mut grpc = tonic::server::Grpc::new(codec);
                Ok(grpc.unary(WriteRaw(got), req).await)
            } else {
                Ok(tonic::Status::unimplemented("only WriteRaw").into_http())
            }
        })
    }
}

impl ParcaReceiver {
    pub fn start() -> Self {
        let port = free_port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let got: Arc<Mutex<Vec<WriteRawRequest>>> = Arc::default();
        let store = Store(Arc::clone(&got));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            rt.block_on(async move {
                tonic::transport::Server::builder()
                    .add_service(store)
                    .serve_with_shutdown(addr, async {
                        let _ = rx.await;
                    })
                    .await
                    .expect("serving the Parca receiver");
            });
        });
        // Ready once it accepts connections.
        wait(Duration::from_secs(10), || {
            std::net::TcpStream::connect(addr).ok()
        })
        .expect("the Parca receiver listens");
        ParcaReceiver {
            addr,
            got,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    pub fn requests(&self) -> Vec<WriteRawRequest> {
        self.got.lock().unwrap().clone()
    }

    pub fn wait_for(&self, n: usize, limit: Duration) -> Vec<WriteRawRequest> {
        wait(limit, || {
            let r = self.requests();
            (r.len() >= n).then_some(r)
        })
        .unwrap_or_else(|| panic!("{} of {n} WriteRaw calls arrived", self.requests().len()))
    }
}

impl Drop for ParcaReceiver {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
