//! A minimal WebDriver client for chromedriver driving headless Chromium:
//! plain HTTP/1.1 over a TCP socket and JSON, enough to open a page, run
//! scripts, click, type and take screenshots in end-to-end tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The browser and its driver, as Debian packages them.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// True when the browser test can run; otherwise skips, or fails under
/// `FLARE_REQUIRE_BPF=1` (CI installs both with scripts/deps.sh).
pub fn require_browser() -> bool {
    if Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists() {
        return true;
    }
    let why = "chromium and chromium-driver are not installed (scripts/deps.sh installs them)";
    if std::env::var("FLARE_REQUIRE_BPF").as_deref() == Ok("1") {
        panic!("the browser test is required (FLARE_REQUIRE_BPF=1) but cannot run: {why}");
    }
    eprintln!("skipping browser test: {why}");
    false
}

/// One HTTP request; returns the status and body.
pub fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    http_as(&format!("127.0.0.1:{port}"), port, method, path, body)
}

/// One HTTP request to loopback claiming to be for `host`.
pub fn http_as(
    host: &str,
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connecting");
    s.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("sending request");
    // Read the header, then exactly the body: the server may keep the
    // connection open whatever we ask.
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    let split = loop {
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let n = s.read(&mut buf).expect("reading response");
        assert!(n > 0, "connection closed before the HTTP header ended");
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("HTTP status");
    let length = head.lines().find_map(|l| {
        l.strip_prefix("content-length:")
            .and_then(|v| v.trim().parse::<usize>().ok())
    });
    let chunked = head.contains("transfer-encoding: chunked");
    let mut content = raw[split + 4..].to_vec();
    loop {
        let done = match length {
            Some(len) => content.len() >= len,
            None if chunked => content.windows(5).any(|w| w == b"0\r\n\r\n"),
            None => false,
        };
        if done {
            break;
        }
        let n = s.read(&mut buf).expect("reading response body");
        if n == 0 {
            break;
        }
        content.extend_from_slice(&buf[..n]);
    }
    if chunked {
        content = dechunk(&content);
    }
    (status, String::from_utf8_lossy(&content).into_owned())
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_str = String::from_utf8_lossy(&data[..eol]);
        let size = usize::from_str_radix(size_str.split(';').next().unwrap_or("0").trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            return out;
        }
        data = &data[eol + 2..];
        out.extend_from_slice(&data[..size.min(data.len())]);
        data = &data[(size + 2).min(data.len())..];
    }
}

/// Polls `f` every 100 ms until it returns `Some`, failing after `limit`.
pub fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("finding a free port")
}

/// A chromedriver process with one headless Chromium session.
pub struct Browser {
    driver: Driver,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

/// Kills chromedriver (and with it Chromium) on drop, also when starting
/// the session fails.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    pub fn start() -> Browser {
        let port = free_port();
        let mut driver = Driver(
            Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("starting chromedriver"),
        );
        wait_for("chromedriver", Duration::from_secs(20), || {
            if let Ok(Some(status)) = driver.0.try_wait() {
                panic!("chromedriver exited: {status}");
            }
            TcpStream::connect(("127.0.0.1", port)).ok()?;
            let (code, body) = http(port, "GET", "/status", None);
            (code == 200 && body.contains("\"ready\":true")).then_some(())
        });
        let profile = tempfile::tempdir().expect("browser profile dir");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--disable-quic",
                    "--disable-dev-shm-usage", "--window-size=1400,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ]
            }
        }}});
        let (code, body) = http(port, "POST", "/session", Some(&caps.to_string()));
        if code != 200 {
            panic!("chromedriver could not start Chromium ({code}): {body}");
        }
        let v: Value = serde_json::from_str(&body).expect("session JSON");
        let session = v["value"]["sessionId"]
            .as_str()
            .expect("session id")
            .to_string();
        Browser {
            driver,
            port,
            session,
            _profile: profile,
        }
    }

    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let body = (method == "POST").then(|| body.to_string());
        let (code, text) = http(self.port, method, &path, body.as_deref());
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(code, 200, "WebDriver {method} {path}: {text}");
        v["value"].clone()
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", json!({ "url": url }));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    pub fn exec(&self, script: &str, args: Value) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            json!({ "script": script, "args": args }),
        )
    }

    /// Runs asynchronous `script`, which calls `arguments[arguments.length
    /// - 1]` with its result.
    pub fn exec_async(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/async",
            json!({ "script": script, "args": [] }),
        )
    }

    /// The first element matching a CSS selector.
    pub fn find(&self, css: &str) -> String {
        let v = self.call(
            "POST",
            "/element",
            json!({ "using": "css selector", "value": css }),
        );
        v[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_string()
    }

    pub fn click(&self, element: &str) {
        self.call("POST", &format!("/element/{element}/click"), json!({}));
    }

    /// Finds the element `css` selects and clicks it. The live page redraws
    /// its graph every interval, so an element found a moment ago may be
    /// gone by the click: then it is found again (a few times at most).
    #[allow(dead_code)] // Not every test binary clicks redrawn elements.
    pub fn click_css(&self, css: &str) {
        for _ in 0..5 {
            let element = self.find(css);
            let path = format!("/session/{}/element/{element}/click", self.session);
            let (code, text) = http(self.port, "POST", &path, Some("{}"));
            if code == 200 {
                return;
            }
            assert!(
                text.contains("stale element reference"),
                "WebDriver click on {css}: {text}"
            );
        }
        panic!("{css} was redrawn under every click");
    }

    pub fn type_into(&self, element: &str, text: &str) {
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            json!({ "text": text }),
        );
    }

    /// A PNG of the viewport.
    pub fn screenshot(&self) -> Vec<u8> {
        let v = self.call("GET", "/screenshot", Value::Null);
        base64_decode(v.as_str().expect("screenshot data"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let path = format!("/session/{}", self.session);
        let _ = std::panic::catch_unwind(|| http(self.port, "DELETE", &path, None));
        // The driver itself goes with `self.driver`.
    }
}

/// Standard base64, as WebDriver encodes screenshots.
pub fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let digits: Vec<u32> = s.bytes().filter_map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &d)| n | d << (18 - 6 * i));
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len().saturating_sub(1)]);
    }
    out
}

/// Reads lines from `r` until one contains `needle`; returns that line.
pub fn read_until(r: &mut impl BufRead, needle: &str) -> String {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = r.read_line(&mut line).expect("reading output");
        assert!(n > 0, "output ended before '{needle}':\n{seen}");
        if line.contains(needle) {
            return line;
        }
        seen.push_str(&line);
    }
}

/// A line reader over a child's pipe.
pub fn lines<R: Read>(r: R) -> BufReader<R> {
    BufReader::new(r)
}
