//! One destination on its own thread, so that collection never waits for
//! a network: windows are handed over through a channel ([`Sender::
//! submit`] never blocks), encoded on the sender's thread, queued in the
//! destination's bounded [`Spool`] and delivered oldest first.
//!
//! A failed delivery is retried with exponential backoff (doubling from
//! [`Options::backoff_min`] to [`Options::backoff_max`]); windows that
//! arrive meanwhile join the spool behind it, so none is lost while the
//! spool's bound holds and order is kept. A server's definite refusal
//! (HTTP 4xx, a gRPC invalid argument) drops that window, with a message,
//! instead of blocking every later one. [`Sender::finish`] delivers what
//! is left before a deadline; a disk spool keeps what could not be sent
//! for the next run.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::spool::Spool;
use super::{DeliveryError, Destination, Window};

/// Retry timing.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
        }
    }
}

/// What a sender did over its life.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub name: String,
    /// Windows the destination accepted.
    pub delivered: u64,
    /// Windows dropped to keep the spool within its bound.
    pub dropped: u64,
    /// Windows the destination refused for good.
    pub rejected: u64,
    /// Windows not delivered by the end (still in a disk spool, or lost
    /// with a memory one).
    pub left: u64,
}

enum Msg {
    Window(Arc<Window>),
    Finish(Instant),
}

/// A running sender.
pub struct Sender {
    name: String,
    tx: mpsc::Sender<Msg>,
    thread: Option<JoinHandle<Report>>,
}

impl Sender {
    /// Starts the thread for `dest`, queueing in `spool`.
    pub fn start(
        dest: Box<dyn Destination>,
        spool: Spool,
        options: Options,
    ) -> std::io::Result<Self> {
        let name = dest.name();
        let (tx, rx) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("flare-send".into())
            .spawn(move || Worker::new(dest, spool, options).run(rx))?;
        Ok(Sender {
            name,
            tx,
            thread: Some(thread),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Hands a window over; never blocks.
    pub fn submit(&self, window: Arc<Window>) {
        let _ = self.tx.send(Msg::Window(window));
    }

    /// Delivers what is queued, trying until `timeout` has passed, and
    /// stops the thread.
    pub fn finish(mut self, timeout: Duration) -> Report {
        let _ = self.tx.send(Msg::Finish(after(timeout)));
        let name = self.name.clone();
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or(Report {
                name,
                ..Default::default()
            })
    }
}

struct Worker {
    dest: Box<dyn Destination>,
    spool: Spool,
    options: Options,
    backoff: Duration,
    next_try: Instant,
    report: Report,
    /// The error of the outage under way, reported once.
    failing: Option<String>,
}

impl Worker {
    fn new(dest: Box<dyn Destination>, spool: Spool, options: Options) -> Self {
        let report = Report {
            name: dest.name(),
            ..Default::default()
        };
        Worker {
            dest,
            spool,
            options,
            backoff: options.backoff_min,
            next_try: Instant::now(),
            report,
            failing: None,
        }
    }

    fn run(mut self, rx: mpsc::Receiver<Msg>) -> Report {
        loop {
            let msg = if self.spool.is_empty() {
                rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                rx.recv_timeout(self.next_try.saturating_duration_since(Instant::now()))
            };
            match msg {
                Ok(Msg::Window(w)) => self.queue(&w),
                Ok(Msg::Finish(deadline)) => return self.finish(deadline),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return self.finish(after(Duration::from_secs(5)))
                }
            }
            if Instant::now() >= self.next_try {
                if self.drain() {
                    self.backoff = self.options.backoff_min;
                } else {
                    self.next_try = after(self.backoff);
                    self.backoff = (self.backoff * 2).min(self.options.backoff_max);
                }
            }
        }
    }

    fn queue(&mut self, window: &Window) {
        let before = self.spool.dropped;
        match self.dest.encode(window) {
            Ok(p) => {
                if let Err(e) = self.spool.push(p) {
                    eprintln!("flare: {}: cannot spool a window: {e}", self.report.name);
                    self.report.dropped += 1;
                }
            }
            Err(e) => eprintln!("flare: {}: cannot encode a window: {e}", self.report.name),
        }
        let dropped = self.spool.dropped - before;
        if dropped > 0 {
            eprintln!(
                "flare: {}: spool full, dropped the {dropped} oldest window(s)",
                self.report.name
            );
        }
    }

    /// Delivers queued windows, oldest first; false when the destination
    /// failed and the rest must wait.
    fn drain(&mut self) -> bool {
        while let Some(p) = self.spool.front() {
            match self.dest.deliver(&p) {
                Ok(()) => {
                    self.spool.pop();
                    self.report.delivered += 1;
                    if self.failing.take().is_some() {
                        eprintln!(
                            "flare: {}: delivering again ({} window(s) queued)",
                            self.report.name,
                            self.spool.len()
                        );
                    }
                }
                Err(DeliveryError::Rejected(m)) => {
                    eprintln!("flare: {m}");
                    self.spool.pop();
                    self.report.rejected += 1;
                }
                Err(DeliveryError::Retry(m)) => {
                    if self.failing.is_none() {
                        eprintln!("flare: {m}; windows are queued meanwhile");
                    }
                    self.failing = Some(m);
                    return false;
                }
            }
        }
        true
    }

    fn finish(mut self, deadline: Instant) -> Report {
        let mut pause = Duration::from_millis(100);
        while !self.drain() {
            let now = Instant::now();
            // A disk spool keeps the rest for the next run.
            if self.is_disk() || now >= deadline {
                break;
            }
            thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_secs(2));
        }
        self.report.dropped += self.spool.dropped;
        self.report.left = self.spool.len() as u64;
        self.report
    }

    fn is_disk(&self) -> bool {
        self.spool.is_disk()
    }
}

/// The instant `d` from now; a day from now where `d` reaches past what
/// the clock can hold (no deadline of flare's is longer).
fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(86_400))
}
