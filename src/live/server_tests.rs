//! The server's routes, and its bounds under clients that misbehave.

use super::*;

#[test]
fn routes_are_a_fixed_list() {
    assert_eq!(route(&Method::GET, ""), Ok(Route::Page));
    assert!(matches!(
        route(&Method::GET, "api/profile?last=10&pid=42"),
        Ok(Route::Snapshot(
            Selection {
                last: Some(d),
                pid: Some(42)
            },
            _
        )) if d == Duration::from_secs(10)
    ));
    assert_eq!(route(&Method::GET, "../etc/passwd").unwrap_err().0, 404);
    assert_eq!(route(&Method::GET, "flare.js/../x").unwrap_err().0, 404);
    assert_eq!(route(&Method::POST, "api/profile").unwrap_err().0, 405);
    assert_eq!(route(&Method::GET, "api/profile?pid=x").unwrap_err().0, 400);
    assert_eq!(route(&Method::GET, "api/profile?min=2").unwrap_err().0, 400);
    assert!(matches!(
        route(&Method::GET, "download/flare.svg?last=0"),
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
fn time_queries_are_parsed_strictly() {
    let q = |url: &str| route(&Method::GET, url);
    match q("api/timeline?slice=20&pid=7&tid=8&search=a+b%2Fc") {
        Ok(Route::Timeline(t)) => {
            assert_eq!(t.slice_ms, 20);
            assert_eq!((t.pid, t.tid), (Some(7), Some(8)));
            assert_eq!(t.search.as_deref(), Some("a b/c"));
        }
        other => panic!("{other:?}"),
    }
    match q("api/range?from=1200&to=1700&compare=1") {
        Ok(Route::Range(t, _)) => {
            assert_eq!(
                (t.from_ms, t.to_ms, t.compare),
                (Some(1200), Some(1700), true)
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        q("download/flare.folded?from=1&to=2&tid=3"),
        Ok(Route::RangeDownload(
            TimeQuery { tid: Some(3), .. },
            Format::Folded
        ))
    ));
    assert!(matches!(
        q("download/flare.svg?tid=3"),
        Ok(Route::RangeDownload(..))
    ));
    for bad in [
        "api/timeline?slice=0",
        "api/timeline?slice=3600001",
        "api/timeline?slice=x",
        "api/timeline?from=-1",
        "api/timeline?from=+5",
        "api/timeline?to=1e3",
        "api/timeline?from=1000000000001",
        "api/timeline?tid=x",
        "api/timeline?search=%zz",
        "api/timeline?search=%ff",
        "api/timeline?search=%4",
        "api/range?from=5&to=5",
        "api/range?from=6&to=5",
        "api/range?from=5",
        "api/range",
        "api/range?from=1&to=2&compare=yes",
        "download/flare.folded?from=1",
    ] {
        assert_eq!(q(bad).map(|_| ()).unwrap_err().0, 400, "{bad}");
    }
    match q("api/timeline?search=caf%C3%A9") {
        Ok(Route::Timeline(t)) => assert_eq!(t.search.as_deref(), Some("café")),
        other => panic!("{other:?}"),
    }
    let long = format!("api/timeline?search={}", "x".repeat(MAX_SEARCH + 1));
    assert_eq!(q(&long).unwrap_err().0, 400);
    let fits = format!("api/timeline?search={}", "x".repeat(MAX_SEARCH));
    assert!(q(&fits).is_ok());
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

// ---- A running server and clients that misbehave ----

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;

use crate::live::window::Limits;
use crate::profile::{Kind, Lost, Meta};

/// A server over one interval of `stacks` distinct stacks with long names
/// (so a download is larger than loopback's socket buffers).
fn serving(stacks: usize) -> Server {
    let mut store = Store::new(
        Meta::new(Kind::Cpu, "cpu-clock"),
        Limits {
            keep: Duration::from_secs(60),
            max_stacks: stacks + 10,
            ..Limits::default()
        },
    );
    let pad = "x".repeat(400);
    let samples: Vec<_> = (0..stacks)
        .map(|i| {
            let leaf = format!("leaf_{i}_{pad}");
            crate::live::tests::sample(10, "app", &[&leaf, "main"], 1)
        })
        .collect();
    store.push(&samples, Lost::default(), Duration::from_secs(1));
    let addr = "127.0.0.1:0".parse().expect("an address");
    Server::start(addr, Arc::new(Mutex::new(store))).expect("starting the server")
}

fn connect(server: &Server) -> TcpStream {
    let s = TcpStream::connect(server.addr()).expect("connecting");
    s.set_read_timeout(Some(Duration::from_secs(20))).ok();
    s
}

/// The status of one GET of `path`, or None if the server closed first.
fn get(server: &Server, path: &str) -> Option<u16> {
    let mut s = connect(server);
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

fn token_path(server: &Server, rest: &str) -> String {
    format!("/{}/{rest}", server.token)
}

#[test]
fn the_url_token_guards_every_route() {
    let server = serving(1);
    assert!(server.url().ends_with(&token_path(&server, "")));
    assert_eq!(server.token.len(), 32);
    assert_eq!(get(&server, &token_path(&server, "")), Some(200));
    assert_eq!(get(&server, &token_path(&server, "api/profile")), Some(200));
    assert_eq!(
        get(&server, &token_path(&server, "flare-time.js")),
        Some(200)
    );
    // A run without times: the timeline says so, ranges have nothing.
    assert_eq!(
        get(&server, &token_path(&server, "api/timeline")),
        Some(200)
    );
    assert_eq!(
        get(&server, &token_path(&server, "api/range?from=0&to=10")),
        Some(404)
    );
    assert_eq!(get(&server, "/api/timeline"), Some(404));
    assert_eq!(get(&server, "/"), Some(404));
    assert_eq!(get(&server, "/api/profile"), Some(404));
    assert_eq!(get(&server, "/download/flare.folded"), Some(404));
    let mut wrong = server.token.clone().into_bytes();
    wrong[31] = if wrong[31] == b'0' { b'1' } else { b'0' };
    let wrong = String::from_utf8(wrong).expect("hex");
    assert_eq!(get(&server, &format!("/{wrong}/")), Some(404));
    // Two servers draw two tokens.
    assert_ne!(serving(1).token, server.token);
}

/// Finding 3: 10,000 idle connections made 9,959 threads and refused
/// everyone for the rest of the run.
#[test]
fn an_idle_flood_is_bounded_and_others_are_still_answered() {
    let server = serving(1);
    let flood: Vec<TcpStream> = (0..500).map(|_| connect(&server)).collect();
    assert_eq!(get(&server, &token_path(&server, "")), Some(200));
    // The silent ones past the cap are closed, oldest first.
    let open = || {
        flood
            .iter()
            .filter(|s| {
                s.set_nonblocking(true).ok();
                let open =
                    matches!(s.peek(&mut [0u8; 1]), Err(e) if e.kind() == ErrorKind::WouldBlock);
                s.set_nonblocking(false).ok();
                open
            })
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut left = open();
    while left > MAX_CONNECTIONS && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left = open();
    }
    assert!(left <= MAX_CONNECTIONS, "{left} idle connections kept open");
}

/// Finding 3: one 300 MB unterminated header grew flare by 300 MB.
#[test]
fn an_endless_header_is_cut_off() {
    let server = serving(1);
    let mut s = connect(&server);
    s.set_write_timeout(Some(Duration::from_secs(20))).ok();
    let chunk = vec![b'a'; 64 * 1024];
    let mut sent = 0usize;
    let refused = write!(s, "GET / HTTP/1.1\r\nX-Long: ").is_err()
        || loop {
            if s.write_all(&chunk).is_err() {
                break true;
            }
            sent += chunk.len();
            if sent >= 256 << 20 {
                break false;
            }
        };
    // What loopback's socket buffers hold, at most, before the close.
    assert!(refused, "the server read {} MiB of one header", sent >> 20);
    assert!(sent < 32 << 20, "{} MiB sent before the close", sent >> 20);
}

/// Sends pipelined downloads of the whole profile and never reads.
fn stuck_client(server: &Server) -> TcpStream {
    let mut s = connect(server);
    let path = token_path(server, "download/flare.folded");
    for _ in 0..20 {
        let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    }
    s
}

/// Finding 3: a client that pipelined 20 downloads and never read froze
/// the page for everyone.
#[test]
fn a_client_that_never_reads_stalls_nobody() {
    let server = serving(40_000);
    let stuck = stuck_client(&server);
    // Give the server time to start writing the stuck client's answer.
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        assert_eq!(get(&server, &token_path(&server, "api/profile")), Some(200));
    }
    drop(stuck);
}

/// Finding 3: a stuck client made flare deaf to SIGINT and SIGTERM, whose
/// handling ends by dropping the server.
#[test]
fn dropping_the_server_closes_stuck_clients() {
    let server = serving(40_000);
    let stuck = stuck_client(&server);
    std::thread::sleep(Duration::from_millis(300));
    let (done, dropped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(server);
        let _ = done.send(());
    });
    assert!(
        dropped.recv_timeout(Duration::from_secs(20)).is_ok(),
        "the server did not stop"
    );
    drop(stuck);
}

#[test]
fn token_comparison() {
    assert_eq!(after_token("/abc/x?y", "/abc/"), Some("x?y"));
    assert_eq!(after_token("/abd/x", "/abc/"), None);
    assert_eq!(after_token("/ab", "/abc/"), None);
    assert_eq!(after_token("/abc/", "/abc/"), Some(""));
}
