//! A loopback HTTP server that misbehaves on purpose, for the agent's
//! tests against an adversary: it hangs, answers slowly (one byte a
//! second), redirects, or answers an error whose text carries terminal
//! escape sequences. Plain `TcpListener`, one thread per connection, so
//! that a hanging connection holds nothing else up.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// What the server does with each request, once it has read it whole.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// Never answers (the connection stays open).
    Hang,
    /// Answers 200, one byte of the response a second.
    Trickle,
    /// Answers `302 Found` with `Location: <to>`.
    Redirect(String),
    /// Answers `status` with `body`.
    Answer(u16, Vec<u8>),
}

/// A running misbehaving server; stops accepting when dropped.
pub struct BadServer {
    pub port: u16,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl BadServer {
    pub fn start(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the bad server");
        let port = listener.local_addr().expect("its address").port();
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (n, s) = (Arc::clone(&requests), Arc::clone(&stop));
        thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (n, s, b) = (Arc::clone(&n), Arc::clone(&s), behaviour.clone());
                thread::spawn(move || serve(conn, &b, &n, &s));
            }
        });
        BadServer {
            port,
            requests,
            stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Requests read whole so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for BadServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Serves one connection's requests until it closes.
fn serve(conn: TcpStream, behaviour: &Behaviour, count: &AtomicUsize, stop: &AtomicBool) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut input = BufReader::new(conn);
    loop {
        // The request line and headers, then the body by its length.
        let mut length = 0usize;
        let mut first = true;
        loop {
            let mut line = String::new();
            match input.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = line.trim_end();
            if line.is_empty() && !first {
                break;
            }
            first = false;
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if input.read_exact(&mut body).is_err() {
            return;
        }
        count.fetch_add(1, Ordering::SeqCst);
        let answer = |status: u16, extra: &str, body: &[u8]| {
            let mut r = format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n{extra}\r\n",
                body.len()
            )
            .into_bytes();
            r.extend_from_slice(body);
            r
        };
        let sent = match behaviour {
            Behaviour::Hang => {
                while !stop.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(100));
                }
                return;
            }
            Behaviour::Trickle => {
                for b in answer(200, "", b"") {
                    if stop.load(Ordering::SeqCst) || out.write_all(&[b]).is_err() {
                        return;
                    }
                    thread::sleep(Duration::from_secs(1));
                }
                Ok(())
            }
            Behaviour::Redirect(to) => {
                out.write_all(&answer(302, &format!("Location: {to}\r\n"), b""))
            }
            Behaviour::Answer(status, body) => out.write_all(&answer(*status, "", body)),
        };
        if sent.is_err() {
            return;
        }
    }
}
