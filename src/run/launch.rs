//! The launched command (`-- CMD`) as the pipeline sees it: a sink that
//! lets the command run once everything is attached and the header is
//! out, and stops the run when the command exits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;

use flare::launch::{Launch, Running};
use flare::pipeline::Sink;
use flare::profile::Meta;

/// Releases a held command at `begin`, and reports its exit on `stop`.
pub struct CommandSink {
    held: Option<Launch>,
    running: Option<Running>,
    waiter: Option<JoinHandle<u8>>,
    stop: Sender<()>,
}

impl CommandSink {
    pub fn new(launch: Launch, stop: Sender<()>) -> Self {
        CommandSink {
            held: Some(launch),
            running: None,
            waiter: None,
            stop,
        }
    }

    /// After the run: waits for the command (forwarding SIGINT first when
    /// flare was interrupted and the command still runs) and gives its
    /// exit code as a shell would.
    pub fn finish(mut self, interrupted: &AtomicBool) -> u8 {
        let Some(waiter) = self.waiter.take() else {
            return 1;
        };
        if !waiter.is_finished() && interrupted.load(Ordering::SeqCst) {
            if let Some(r) = &self.running {
                r.signal(libc::SIGINT);
            }
        }
        waiter.join().unwrap_or(1)
    }
}

impl Sink for CommandSink {
    fn begin(&mut self, _meta: &Meta, _header: &str, _notes: &[String]) -> flare::Result<()> {
        let Some(launch) = self.held.take() else {
            return Ok(());
        };
        let running = launch.release()?;
        let stop = self.stop.clone();
        self.waiter = Some(std::thread::spawn(move || {
            let code = running.wait();
            let _ = stop.send(());
            code
        }));
        self.running = Some(running);
        Ok(())
    }
}

/// How often a launched command's samples are read and symbolized.
pub const SYMBOLIZE_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// A flag set by the stop handler, shared with the command's sink.
pub type Interrupted = Arc<AtomicBool>;
