//! `flare stackcount` from the command line: attach, print bcc's header,
//! then at every interval (`-i`, or once at the end of `-D` or Ctrl-C)
//! print and clear the counts, with `-T` timestamps, and `Detaching...`
//! at the end.

use std::io::{self, BufWriter, Write};
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use anyhow::Result;
use flare::output::{folded, stackcount as text, StackStyle};
use flare::procmaps::Scope;
use flare::profile::Profile;
use flare::symbolize::{self, Symbolizer};
use flare::tools::stackcount::{header, offsets, Collection, Session};

use super::output::write_outputs;
use super::{stop_signal, warn_lost};
use crate::cli::stackcount::StackcountArgs;

/// The local time as bcc's `strftime("%H:%M:%S")`.
fn clock() -> String {
    // SAFETY: time(NULL) has no preconditions; tm is plain data that
    // localtime_r fills from the time value we pass.
    unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return "??:??:??".into();
        }
        format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
    }
}

pub fn run(args: &StackcountArgs) -> Result<()> {
    // Check where the result goes before attaching.
    args.output.destinations().map_err(anyhow::Error::msg)?;
    let config = args.config();
    let (_tracker, mappings) = super::track(match config.pid {
        Some(p) => Scope::Pids(vec![p]),
        None => Scope::All,
    });
    let mut object = MaybeUninit::uninit();
    let mut session = Session::start(config, &mut object)?;
    let stop = stop_signal()?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let head = header(&args.pattern, session.matched());
    if args.folded || !args.output.bcc_header(args.folded) {
        // Keep the folded output (or another format) clean for the tools
        // that read it.
        eprintln!("{head}");
    } else {
        writeln!(out, "{head}")?;
        out.flush()?;
    }
    let style = args.style(session.keys_processes());
    let mut symbolizer = Symbolizer::with_mappings(symbolize::Options::default(), mappings);
    let interval = args.interval();
    let started = Instant::now();
    let mut traced = Duration::ZERO;
    loop {
        let interrupted = match interval {
            Some(i) => stop.recv_timeout(i).is_ok(),
            None => {
                let _ = stop.recv();
                true
            }
        };
        if let Some(i) = interval {
            if !interrupted {
                traced += i;
            }
        }
        let exiting = interrupted || args.duration().is_some_and(|d| traced >= d);
        // bcc's blank line and timestamps, unless stdout carries a file.
        let decorate = !args.output.format_on_stdout();
        if !args.folded && decorate {
            writeln!(out)?;
        }
        if args.timestamp && decorate {
            writeln!(out, "{:<8}", clock())?;
        }
        let collection = session.collect(true)?;
        print(
            &mut out,
            args,
            style,
            &mut symbolizer,
            &session,
            collection,
            started,
        )?;
        if exiting {
            if !args.folded && decorate {
                writeln!(out, "Detaching...")?;
            }
            out.flush()?;
            return Ok(());
        }
    }
}

fn print<W: Write>(
    out: &mut W,
    args: &StackcountArgs,
    style: text::Style,
    symbolizer: &mut Symbolizer,
    session: &Session<'_>,
    collection: Collection,
    started: Instant,
) -> Result<()> {
    let mut meta = session.meta(started.elapsed());
    meta.lost = collection.lost;
    let mut profile = Profile::new(meta);
    profile.samples = symbolizer.resolve(collection.samples);
    if args.offset {
        offsets::add_offsets(&mut profile.samples);
    }
    profile.merge_identical();
    profile.sort_ascending();
    let fstyle = StackStyle {
        delimited: style.delimited,
        annotate_kernel: false,
    };
    if args.output.bcc_stdout(args.folded) {
        if args.folded {
            folded::write(out, &profile.samples, fstyle)?;
        } else {
            text::write(out, &profile.samples, style)?;
        }
    }
    out.flush()?;
    write_outputs(&profile, &args.output, fstyle)?;
    warn_lost(&profile.meta.lost);
    if collection.missed_events > 0 {
        eprintln!(
            "WARNING: {} events were not counted: the kernel skipped the program while another BPF program ran on the same CPU.",
            collection.missed_events
        );
    }
    Ok(())
}
