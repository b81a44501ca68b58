//! `flare offcputime`, `wakeuptime` and `offwaketime` from the command
//! line: attach, print bcc's header, wait for the duration or a signal,
//! then symbolize, tidy and write in the tool's layout.

use std::io::{self, BufWriter, Write};
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use anyhow::Result;
use flare::output::format::{write_folded, write_text};
use flare::output::StackStyle;
use flare::profile::Profile;
use flare::symbolize::{self, Background};
use flare::tools::offcpu::{header, tidy, Attach, Config, Session};

use super::output::write_outputs;
use super::{wait_for_stop, warn_lost};
use crate::cli::offcpu::{CommonArgs, OffcputimeArgs, OffwaketimeArgs, WakeuptimeArgs};

/// The part all three tools share: attach, print bcc's header, wait,
/// symbolize and tidy, then print in the tool's layout and write files.
fn run(
    config: Config,
    common: &CommonArgs,
    style: StackStyle,
    trailer: Option<&str>,
    offsets: bool,
) -> Result<()> {
    let output = &common.output;
    let folded = common.folded;
    // Check where the result goes before spending the tracing time.
    output.destinations().map_err(anyhow::Error::msg)?;
    let mut object = MaybeUninit::uninit();
    let mut session = Session::start(config.clone(), &mut object)?;
    if config.attach == Attach::Auto && session.attach() != Attach::TpBtf {
        eprintln!(
            "flare: BTF-typed tracepoints are not available here; attached with {}",
            session.attach().name()
        );
    }
    let started = Instant::now();
    let mut out = BufWriter::new(io::stdout().lock());
    if output.bcc_header(folded) {
        writeln!(out, "{}", header(&config))?;
        out.flush()?;
    }
    let (mut profile, untracked) = match common.serve.options() {
        Some(live) => {
            let meta = session.meta(Duration::ZERO);
            let profile = super::serve::run(&mut session, meta, &live, config.duration)?;
            (profile, 0)
        }
        None => {
            // Symbolization warms up (kallsyms) while the tool traces.
            let symbolizer = Background::start(symbolize::Options::default(), true, Vec::new());
            wait_for_stop(config.duration)?;
            let collection = session.collect(false)?;
            let mut meta = session.meta(started.elapsed());
            meta.lost = collection.lost;
            drop(session);
            let mut profile = Profile::new(meta);
            profile.samples = symbolizer.resolve(collection.samples);
            (profile, collection.untracked)
        }
    };
    tidy(&mut profile, config.tool);
    if offsets {
        flare::tools::stackcount::offsets::add_offsets(&mut profile.samples);
    }

    if output.bcc_stdout(folded) {
        if folded {
            write_folded(&mut out, &profile, style)?;
        } else {
            writeln!(out)?;
            write_text(&mut out, &profile, style)?;
            if let Some(t) = trailer {
                writeln!(out, "{t}")?;
            }
        }
    }
    out.flush()?;
    drop(out);
    warn_lost(&profile.meta.lost);
    if untracked > 0 {
        eprintln!(
            "WARNING: {untracked} off-CPU periods were not tracked because too many threads were blocked at once."
        );
    }
    write_outputs(&profile, output, style)
}

pub fn offcputime(args: &OffcputimeArgs) -> Result<()> {
    let style = args.stacks.style();
    run(args.config(), &args.common, style, None, args.offset)
}

pub fn wakeuptime(args: &WakeuptimeArgs) -> Result<()> {
    // bcc's wakeuptime says so when it is done.
    run(
        args.config(),
        &args.common,
        StackStyle::default(),
        Some("Detaching..."),
        false,
    )
}

pub fn offwaketime(args: &OffwaketimeArgs) -> Result<()> {
    run(
        args.config(),
        &args.common,
        args.stacks.style(),
        None,
        false,
    )
}
