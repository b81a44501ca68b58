//! Running a tool from the command line: attach, wait for the duration or
//! a signal, then symbolize and write what was collected.

use std::io::{self, BufWriter, Write};
use std::mem::MaybeUninit;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use flare::output::{folded, text};
use flare::profile::{Lost, Profile};
use flare::symbolize::{self, Symbolizer};
use flare::tools::profile::{header, Session};

use crate::cli::profile::ProfileArgs;

/// Blocks until `duration` has passed or SIGINT/SIGTERM arrives. Later
/// signals are swallowed so that output is never cut short.
fn wait_for_stop(duration: Option<Duration>) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("installing the Ctrl-C handler")?;
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
fn warn_lost(lost: &Lost) {
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

pub fn profile(args: &ProfileArgs) -> Result<()> {
    let config = args.config();
    let mut object = MaybeUninit::uninit();
    let mut session = Session::start(config.clone(), &mut object)?;
    let started = Instant::now();
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if !args.folded {
        writeln!(out, "{}", header(&config))?;
        out.flush()?;
    }
    wait_for_stop(config.duration)?;
    let elapsed = started.elapsed();
    let collection = session.collect(false)?;
    let mut meta = session.meta(elapsed);
    meta.lost = collection.lost;
    drop(session);

    let mut symbolizer = Symbolizer::new(symbolize::Options::default());
    let mut profile = Profile::new(meta);
    profile.samples = symbolizer.resolve(collection.samples);
    profile.merge_identical();
    profile.sort_ascending();

    if args.folded {
        folded::write(&mut out, &profile.samples, args.style())?;
    } else {
        writeln!(out)?;
        text::write(&mut out, &profile.samples, args.style())?;
    }
    out.flush()?;
    warn_lost(&profile.meta.lost);
    Ok(())
}
