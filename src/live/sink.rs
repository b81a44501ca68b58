//! The live view as a pipeline sink: the web server starts with the run,
//! every interval's profile goes into the windowed [`Store`] the page
//! reads, and the server stops when the run ends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::server::Server;
use super::{Options, Store};
use crate::error::Result;
use crate::pipeline::{Sink, Times};
use crate::profile::{Meta, Profile};

/// Serves the live flame graph while the run lasts.
pub struct LiveSink {
    options: Options,
    store: Option<Arc<Mutex<Store>>>,
    server: Option<Server>,
}

impl LiveSink {
    pub fn new(options: Options) -> Self {
        LiveSink {
            options,
            store: None,
            server: None,
        }
    }

    /// The server's address, once started.
    pub fn url(&self) -> Option<String> {
        self.server.as_ref().map(|s| s.url())
    }
}

impl Sink for LiveSink {
    /// The page's timeline and ranges are drawn from the intervals.
    fn times(&self) -> Times {
        Times {
            updates: true,
            reports: false,
        }
    }

    fn begin(&mut self, meta: &Meta, _header: &str, _notes: &[String]) -> Result<()> {
        let store = Arc::new(Mutex::new(Store::new(meta.clone(), self.options.limits)));
        let server = Server::start(self.options.bind, Arc::clone(&store))?;
        if !server.addr().ip().is_loopback() {
            crate::notes::note(format!(
                "WARNING: serving on {}: anyone who can reach this address sees the names and stacks of the profiled processes.",
                server.addr()
            ));
        }
        crate::notes::note(format!(
            "Live flame graph at {} (updated every {:.1} s)",
            server.url(),
            self.options.interval.as_secs_f64()
        ));
        self.store = Some(store);
        self.server = Some(server);
        Ok(())
    }

    fn update(&mut self, delta: &Profile, length: Duration) -> Result<()> {
        if let Some(store) = &self.store {
            // A panic elsewhere while holding the lock cannot leave the
            // store half-updated for readers: they only see whole
            // intervals.
            let mut store = store.lock().unwrap_or_else(|e| e.into_inner());
            store.push_profile(delta, length);
        }
        Ok(())
    }

    fn end(&mut self) -> Result<()> {
        self.server.take();
        Ok(())
    }
}
