//! One destination on its own thread, so that collection never waits for
//! a network. [`Sender::submit`] encodes a window into the destination's
//! bounded [`Spool`] on the caller's thread (the only queue there is, so
//! memory stays within the spool's bound however slow the server: nothing
//! waits outside it while a push is in hand), and the thread delivers the
//! spool's windows oldest first, without holding the spool meanwhile.
//!
//! A failed delivery is retried with exponential backoff (doubling from
//! [`Options::backoff_min`] to [`Options::backoff_max`]); windows that
//! arrive meanwhile join the spool behind it, so none is lost while the
//! spool's bound holds and order is kept. A server's definite refusal
//! (HTTP 4xx or a redirect, a gRPC invalid argument) drops that window,
//! with a message, instead of blocking every later one.
//!
//! [`Sender::finish`] delivers what is left before a deadline whatever
//! the server does: each push then gets at most the time left, and a push
//! that still does not return (one begun before the deadline was set) is
//! abandoned at the deadline, its window counted as left. A disk spool
//! keeps what could not be sent for the next run.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::spool::Spool;
use super::{DeliveryError, Destination, Encode, Window};

/// Retry timing and the timeout of one push.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// The most one push may take (`--push-timeout`).
    pub timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
        }
    }
}

/// Backoff between tries once the sender is finishing.
const FINISH_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(2));

/// How long past the deadline [`Sender::finish`] waits for the thread to
/// stop before it leaves it behind.
const GRACE: Duration = Duration::from_millis(500);

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
    /// Windows whose spool file could not be read back.
    pub lost: u64,
    /// The last failure, if any (escaped server text included).
    pub error: Option<String>,
}

impl Report {
    /// True when every window handed over was delivered.
    pub fn all_delivered(&self) -> bool {
        self.delivered > 0 && self.dropped + self.rejected + self.left + self.lost == 0
    }
}

/// What the caller and the thread share.
struct Shared {
    state: Mutex<State>,
    /// Signalled on a new window, on finish, and when the thread ends.
    wake: Condvar,
}

struct State {
    spool: Spool,
    /// Set by finish: deliver what is left until then.
    deadline: Option<Instant>,
    report: Report,
    /// The thread has ended.
    done: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running sender.
pub struct Sender {
    name: String,
    encoder: Box<dyn Encode>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The disk spool is failing: windows are kept in memory.
    spilling: bool,
    /// The destination's format carries each sample's time.
    keeps_time: bool,
}

impl Sender {
    /// Starts the thread for `dest`, queueing in `spool`.
    pub fn start(
        dest: Box<dyn Destination>,
        spool: Spool,
        options: Options,
    ) -> std::io::Result<Self> {
        let name = dest.name();
        let keeps_time = dest.keeps_time();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                spool,
                deadline: None,
                report: Report {
                    name: name.clone(),
                    ..Default::default()
                },
                done: false,
            }),
            wake: Condvar::new(),
        });
        let encoder = dest.encoder();
        let worker = Worker {
            dest,
            shared: Arc::clone(&shared),
            options,
            backoff: options.backoff_min,
            next_try: Instant::now(),
            failing: None,
            finishing: false,
            failed_finishing: false,
        };
        let thread = thread::Builder::new()
            .name("flare-send".into())
            .spawn(move || worker.run())?;
        Ok(Sender {
            name,
            encoder,
            shared,
            thread: Some(thread),
            spilling: false,
            keeps_time,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// True when the destination's format carries each sample's time.
    pub fn keeps_time(&self) -> bool {
        self.keeps_time
    }

    /// Encodes a window into the spool; never waits for the network.
    pub fn submit(&mut self, window: &Window) {
        let payload = match self.encoder.encode(window) {
            Ok(p) => p,
            Err(e) => {
                crate::notes::note(format!("flare: {}: cannot encode a window: {e}", self.name));
                return;
            }
        };
        let (error, dropped, disk) = {
            let mut state = self.shared.lock();
            let before = state.spool.dropped;
            let error = state.spool.push(payload);
            let disk = state.spool.is_disk();
            (error, state.spool.dropped.saturating_sub(before), disk)
        };
        self.shared.wake.notify_all();
        match error {
            Some(e) if !self.spilling => {
                self.spilling = true;
                crate::notes::note(format!(
                    "flare: {}: cannot write to the spool directory ({e}); keeping windows \
                     in memory (same bound) until it can",
                    self.name
                ));
            }
            None if self.spilling && disk => {
                self.spilling = false;
                crate::notes::note(format!("flare: {}: spooling on disk again", self.name));
            }
            _ => {}
        }
        if dropped > 0 {
            crate::notes::note(format!(
                "flare: {}: spool full, dropped the {dropped} oldest window(s)",
                self.name
            ));
        }
    }

    /// Asks the thread to deliver what is queued until `deadline` and
    /// stop; returns at once.
    pub fn stop(&self, deadline: Instant) {
        let mut state = self.shared.lock();
        if state.deadline.is_none_or(|d| deadline < d) {
            state.deadline = Some(deadline);
        }
        drop(state);
        self.shared.wake.notify_all();
    }

    /// Waits for the thread to stop (at most until a little past
    /// `deadline`, when a push still in hand is abandoned) and reports.
    pub fn wait(mut self, deadline: Instant) -> Report {
        let give_up = deadline.checked_add(GRACE).unwrap_or(deadline);
        let mut state = self.shared.lock();
        while !state.done {
            let now = Instant::now();
            if now >= give_up {
                break;
            }
            state = match self.shared.wake.wait_timeout(state, give_up - now) {
                Ok((s, _)) => s,
                Err(e) => e.into_inner().0,
            };
        }
        let mut report = state.report.clone();
        report.dropped = state.spool.dropped;
        report.lost = state.spool.lost;
        report.left = state.spool.len() as u64;
        if !state.done {
            report.error = Some(format!("{}: no answer by the deadline", self.name));
        }
        let done = state.done;
        drop(state);
        // A thread still in a push is left behind; it ends with the process.
        if let Some(t) = self.thread.take().filter(|_| done) {
            let _ = t.join();
        }
        report
    }

    /// Delivers what is queued, trying until `timeout` has passed, and
    /// stops the thread.
    pub fn finish(self, timeout: Duration) -> Report {
        let deadline = after(timeout);
        self.stop(deadline);
        self.wait(deadline)
    }
}

/// A sender dropped without [`Sender::finish`] still tries its windows
/// for a few seconds, on its own.
impl Drop for Sender {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop(after(Duration::from_secs(5)));
        }
    }
}

struct Worker {
    dest: Box<dyn Destination>,
    shared: Arc<Shared>,
    options: Options,
    backoff: Duration,
    next_try: Instant,
    /// The error of the outage under way, reported once.
    failing: Option<String>,
    /// The deadline has been seen.
    finishing: bool,
    /// A push failed since then.
    failed_finishing: bool,
}

impl Worker {
    fn run(mut self) {
        loop {
            let mut state = self.shared.lock();
            let now = Instant::now();
            if let Some(deadline) = state.deadline {
                if !self.finishing {
                    self.finishing = true;
                    self.backoff = FINISH_BACKOFF.0;
                    self.next_try = now;
                }
                // A disk spool keeps the rest for the next run.
                let kept = self.failed_finishing && state.spool.all_on_disk();
                if state.spool.is_empty() || now >= deadline || kept {
                    break;
                }
            }
            if state.spool.is_empty() || now < self.next_try {
                let until = match (state.spool.is_empty(), state.deadline) {
                    (true, None) => None,
                    (true, Some(d)) => Some(d),
                    (false, d) => Some(d.map_or(self.next_try, |d| d.min(self.next_try))),
                };
                // The guard comes back only to be dropped: the loop locks
                // anew.
                match until {
                    None => drop(self.shared.wake.wait(state)),
                    Some(u) => drop(
                        self.shared
                            .wake
                            .wait_timeout(state, u.saturating_duration_since(now)),
                    ),
                }
                continue;
            }
            let Some((seq, payload)) = state.spool.front() else {
                continue;
            };
            let timeout = match state.deadline {
                Some(d) => self.options.timeout.min(d.saturating_duration_since(now)),
                None => self.options.timeout,
            };
            drop(state);
            let result = self.dest.deliver(&payload, timeout);
            drop(payload);
            if let Some(message) = self.settle(seq, result) {
                crate::notes::note(format!("flare: {message}"));
            }
        }
        self.shared.lock().done = true;
        self.shared.wake.notify_all();
    }

    /// Records what became of window `seq`; returns what to say.
    fn settle(&mut self, seq: u64, result: Result<(), DeliveryError>) -> Option<String> {
        let mut state = self.shared.lock();
        match result {
            Ok(()) => {
                state.spool.remove(seq);
                state.report.delivered += 1;
                self.backoff = self.backoff_min();
                self.failing.take().map(|_| {
                    format!(
                        "{}: delivering again ({} window(s) queued)",
                        state.report.name,
                        state.spool.len()
                    )
                })
            }
            Err(DeliveryError::Rejected(m)) => {
                state.spool.remove(seq);
                state.report.rejected += 1;
                state.report.error = Some(m.clone());
                Some(m)
            }
            Err(DeliveryError::Retry(m)) => {
                state.report.error = Some(m.clone());
                self.next_try = after(self.backoff);
                self.backoff = (self.backoff * 2).min(self.backoff_max());
                self.failed_finishing = self.finishing;
                let first = self.failing.is_none();
                self.failing = Some(m.clone());
                first.then(|| format!("{m}; windows are queued meanwhile"))
            }
        }
    }

    fn backoff_min(&self) -> Duration {
        if self.finishing {
            FINISH_BACKOFF.0
        } else {
            self.options.backoff_min
        }
    }

    fn backoff_max(&self) -> Duration {
        if self.finishing {
            FINISH_BACKOFF.1
        } else {
            self.options.backoff_max
        }
    }
}

/// The instant `d` from now; a day from now where `d` reaches past what
/// the clock can hold (no deadline of flare's is longer).
pub fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(86_400))
}
