//! `--serve` from the command line: read the tool every interval into the
//! live store while the web server shows it, until the duration passes or
//! a signal arrives; then hand back the whole run for the usual output.

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use flare::live::{server::Server, Feeder, Options, Selection, Source, Store};
use flare::procmaps::Mappings;
use flare::profile::{Meta, Profile};
use flare::symbolize::{self, Symbolizer};

/// Runs the live view over `source` and returns the whole run's profile.
pub fn run<S: Source + ?Sized>(
    source: &mut S,
    meta: Meta,
    options: &Options,
    duration: Option<Duration>,
    mappings: Mappings,
) -> Result<Profile> {
    let store = Arc::new(Mutex::new(Store::new(meta, options.limits)));
    let server = Server::start(options.bind, Arc::clone(&store))?;
    if !server.addr().ip().is_loopback() {
        eprintln!(
            "WARNING: serving on {}: anyone who can reach this address sees the names and stacks of the profiled processes.",
            server.addr()
        );
    }
    eprintln!(
        "Live flame graph at {} (updated every {:.1} s)",
        server.url(),
        options.interval.as_secs_f64()
    );

    let (tx, rx) = mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("installing the Ctrl-C handler")?;
    let started = Instant::now();
    let end = duration.map(|d| started + d);
    let mut feeder = Feeder::new(Symbolizer::with_mappings(
        symbolize::Options::default(),
        mappings,
    ));
    let mut last_read = started;
    let mut next = started + options.interval;
    loop {
        let stop_at = end.map_or(next, |e| e.min(next));
        let stopped = rx
            .recv_timeout(stop_at.saturating_duration_since(Instant::now()))
            .is_ok()
            || end.is_some_and(|e| Instant::now() >= e);
        let now = Instant::now();
        feeder.step(source, &store, now - last_read)?;
        last_read = now;
        if stopped {
            break;
        }
        next += options.interval;
        // After a slow read, skip ticks rather than read back to back.
        while next <= Instant::now() {
            next += options.interval;
        }
    }
    drop(server);
    let store = store.lock().unwrap_or_else(|e| e.into_inner());
    Ok(store.profile(Selection::default()))
}
