//! `flare offcputime`, `wakeuptime` and `offwaketime` from the command
//! line: attach, print bcc's header, wait for the duration or a signal,
//! then symbolize, tidy and write in the tool's layout.

use std::io::{self, BufWriter, StdoutLock, Write};
use std::mem::MaybeUninit;
use std::time::Instant;

use anyhow::Result;
use flare::output::{folded, offcpu};
use flare::profile::Profile;
use flare::symbolize::{self, Symbolizer};
use flare::tools::offcpu::{header, tidy, Attach, Config, Session};

use super::{wait_for_stop, warn_lost};
use crate::cli::offcpu::{OffcputimeArgs, OffwaketimeArgs, WakeuptimeArgs};

type Out = BufWriter<StdoutLock<'static>>;

/// The part all three tools share; `write` prints the samples.
fn run<F>(config: Config, folded: bool, trailer: Option<&str>, write: F) -> Result<()>
where
    F: Fn(&mut Out, &Profile) -> io::Result<()>,
{
    let mut object = MaybeUninit::uninit();
    let session = Session::start(config.clone(), &mut object)?;
    if config.attach == Attach::Auto && session.attach() != Attach::TpBtf {
        eprintln!(
            "flare: BTF-typed tracepoints are not available here; attached with {}",
            session.attach().name()
        );
    }
    let started = Instant::now();
    let mut out = BufWriter::new(io::stdout().lock());
    if !folded {
        writeln!(out, "{}", header(&config))?;
        out.flush()?;
    }
    wait_for_stop(config.duration)?;
    let elapsed = started.elapsed();
    let collection = session.collect()?;
    let mut meta = session.meta(elapsed);
    meta.lost = collection.lost;
    drop(session);

    let mut symbolizer = Symbolizer::new(symbolize::Options::default());
    let mut profile = Profile::new(meta);
    profile.samples = symbolizer.resolve(collection.samples);
    tidy(&mut profile, config.tool);

    if !folded {
        writeln!(out)?;
    }
    write(&mut out, &profile)?;
    if let (false, Some(t)) = (folded, trailer) {
        writeln!(out, "{t}")?;
    }
    out.flush()?;
    warn_lost(&profile.meta.lost);
    if collection.untracked > 0 {
        eprintln!(
            "WARNING: {} off-CPU periods were not tracked because too many threads were blocked at once.",
            collection.untracked
        );
    }
    Ok(())
}

pub fn offcputime(args: &OffcputimeArgs) -> Result<()> {
    let style = args.stacks.style();
    let fold = args.common.folded;
    run(args.config(), fold, None, |w, p| {
        if fold {
            folded::write(w, &p.samples, style)
        } else {
            offcpu::offcputime_text(w, &p.samples, style)
        }
    })
}

pub fn wakeuptime(args: &WakeuptimeArgs) -> Result<()> {
    let fold = args.common.folded;
    // bcc's wakeuptime says so when it is done.
    run(args.config(), fold, Some("Detaching..."), |w, p| {
        if fold {
            offcpu::wakeuptime_folded(w, &p.samples)
        } else {
            offcpu::wakeuptime_text(w, &p.samples)
        }
    })
}

pub fn offwaketime(args: &OffwaketimeArgs) -> Result<()> {
    let style = args.stacks.style();
    let fold = args.common.folded;
    run(args.config(), fold, None, |w, p| {
        if fold {
            offcpu::offwaketime_folded(w, &p.samples, style)
        } else {
            offcpu::offwaketime_text(w, &p.samples, style)
        }
    })
}
