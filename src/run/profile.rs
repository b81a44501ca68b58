//! `flare profile` from the command line: attach, print bcc's header, wait
//! for the duration or a signal, then symbolize and write the profile.

use std::io::{self, BufWriter, Write};
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use anyhow::Result;
use flare::output::{folded, text};
use flare::procmaps::Scope;
use flare::profile::Profile;
use flare::symbolize::{self, Background};
use flare::tools::profile::{header, Session, Target};

use super::output::write_outputs;
use super::{wait_for_stop, warn_lost};
use crate::cli::profile::ProfileArgs;

pub fn run(args: &ProfileArgs) -> Result<()> {
    let config = args.config();
    // Check where the result goes before spending the profiling time.
    args.output.destinations().map_err(anyhow::Error::msg)?;
    let (_tracker, mappings) = super::track(match &config.target {
        Target::Pids(p) => Scope::Pids(p.clone()),
        _ => Scope::All,
    });
    let mut object = MaybeUninit::uninit();
    let mut session = Session::start(config.clone(), &mut object)?;
    let started = Instant::now();
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if args.output.bcc_header(args.folded) {
        writeln!(out, "{}", header(&config))?;
        out.flush()?;
    }
    let mut profile = match args.serve.options() {
        Some(live) => {
            let meta = session.meta(Duration::ZERO);
            let profile = super::serve::run(&mut session, meta, &live, config.duration, mappings)?;
            drop(session);
            profile
        }
        None => {
            // Symbolization warms up (kallsyms, the targets' binaries)
            // while samples are being taken.
            let warm_pids = match &config.target {
                Target::Pids(p) => p.clone(),
                _ => Vec::new(),
            };
            let symbolizer = Background::with_mappings(
                symbolize::Options::default(),
                mappings,
                config.stacks.kernel,
                warm_pids,
            );
            wait_for_stop(config.duration)?;
            let elapsed = started.elapsed();
            let collection = session.collect(false)?;
            let mut meta = session.meta(elapsed);
            meta.lost = collection.lost;
            drop(session);
            let mut profile = Profile::new(meta);
            profile.samples = symbolizer.resolve(collection.samples);
            profile
        }
    };
    profile.merge_identical();
    profile.sort_ascending();

    let bcc_stdout = args.output.bcc_stdout(args.folded);
    if bcc_stdout && args.folded {
        folded::write(&mut out, &profile.samples, args.style())?;
    } else if bcc_stdout {
        writeln!(out)?;
        text::write(&mut out, &profile.samples, args.style())?;
    }
    out.flush()?;
    drop(out);
    warn_lost(&profile.meta.lost);
    write_outputs(&profile, &args.output, args.style())
}
