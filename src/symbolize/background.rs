//! A symbolizer on its own thread, so that the slow part of symbolizing —
//! parsing kallsyms and the target's binaries — happens while samples are
//! still being collected, not after the user pressed Ctrl-C.

use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::{self, JoinHandle};

use super::{Options, RawSample, Symbolizer};
use crate::procmaps::Mappings;
use crate::profile::Sample;

/// A symbolizer thread that can resolve any number of batches.
pub struct Background {
    requests: Option<Sender<Vec<RawSample>>>,
    results: Receiver<Vec<Sample>>,
    thread: Option<JoinHandle<()>>,
}

impl Background {
    /// Starts the thread and has it warm up for the kernel (when `kernel`)
    /// and for the processes in `pids`.
    pub fn start(options: Options, kernel: bool, pids: Vec<u32>) -> Self {
        Self::with_mappings(options, Mappings::on_demand(), kernel, pids)
    }

    /// [`Background::start`] with processes' mappings from `mappings`
    /// (a [`crate::procmaps::Tracker`]'s, which knows exited processes).
    pub fn with_mappings(
        options: Options,
        mappings: Mappings,
        kernel: bool,
        pids: Vec<u32>,
    ) -> Self {
        let (req_tx, req_rx) = mpsc::channel::<Vec<RawSample>>();
        let (res_tx, res_rx) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("flare-symbolize".into())
            .spawn(move || {
                let mut symbolizer = Symbolizer::with_mappings(options, mappings);
                symbolizer.warm(kernel, &pids);
                for raw in req_rx {
                    if res_tx.send(symbolizer.resolve(raw)).is_err() {
                        break;
                    }
                }
            })
            .ok();
        Background {
            requests: Some(req_tx),
            results: res_rx,
            thread,
        }
    }

    /// Resolves one batch (waiting for the warm-up if it is still going).
    /// Should the thread be gone, the batch is resolved here.
    pub fn resolve(&self, raw: Vec<RawSample>) -> Vec<Sample> {
        let Some(tx) = &self.requests else {
            return Symbolizer::new(Options::default()).resolve(raw);
        };
        match tx.send(raw) {
            Ok(()) => self.results.recv().unwrap_or_default(),
            Err(mpsc::SendError(raw)) => Symbolizer::new(Options::default()).resolve(raw),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.requests.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
