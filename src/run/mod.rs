//! Running the tools from the command line: what every tool does around
//! its own collection (waiting for a stop, reporting losses, writing).

pub mod analyze;
pub mod docs;
pub mod offcpu;
pub mod output;
pub mod profile;
pub mod serve;
pub mod stackcount;

use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result};
use flare::profile::Lost;

/// A channel that receives once per SIGINT/SIGTERM. Installs the handler,
/// which can be done once per process.
pub fn stop_signal() -> Result<mpsc::Receiver<()>> {
    let (tx, rx) = mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("installing the Ctrl-C handler")?;
    Ok(rx)
}

/// Blocks until `duration` has passed or SIGINT/SIGTERM arrives. Later
/// signals are swallowed so that output is never cut short.
pub fn wait_for_stop(duration: Option<Duration>) -> Result<()> {
    let rx = stop_signal()?;
    match duration {
        Some(d) => {
            let _ = rx.recv_timeout(d);
        }
        None => {
            let _ = rx.recv();
        }
    }
    Ok(())
}

/// Prints bcc's warnings about what the kernel could not record.
pub fn warn_lost(lost: &Lost) {
    if lost.stacks > 0 {
        let hint = if lost.stacks_enomem {
            " Consider increasing --stack-storage-size."
        } else {
            ""
        };
        eprintln!(
            "WARNING: {} stack traces could not be displayed.{hint}",
            lost.stacks
        );
    }
    if lost.hash_full > 0 {
        eprintln!(
            "WARNING: {} samples were dropped because the hash table was full. Consider increasing --hash-storage-size.",
            lost.hash_full
        );
    }
}
