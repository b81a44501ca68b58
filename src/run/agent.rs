//! Running `flare agent`: its push sink from the parsed options, the
//! collector window after window until SIGINT/SIGTERM, the last flush and
//! one line per destination; and the reports a one-shot push shares.

use std::time::Duration;

use anyhow::Result;
use flare::agent;
use flare::collect::Target;
use flare::export::labels;
use flare::export::sender::Report;
use flare::export::sink::PushSink;

use crate::cli::agent::AgentArgs;

/// Runs the agent until SIGINT/SIGTERM.
pub fn run(args: &AgentArgs) -> Result<()> {
    // Before the senders' threads exist.
    flare::agent::limit_heaps();
    let mut config = args.config()?;
    let dir = args.output_dir.clone().map(|d| (d, args.keep as usize));
    let push = args.push.config(dir)?;
    if push.is_empty() {
        anyhow::bail!(
            "nothing to push to: give --pyroscope URL, --otlp URL, --parca ADDR or -o DIR"
        );
    }
    let host = labels::hostname();
    let mut sink = PushSink::new(push.senders(&host).map_err(anyhow::Error::msg)?, &host);
    let timed = flare::pipeline::Sink::times(&sink).any();
    for source in &mut config.sources {
        source.set_timed(timed);
    }
    let (_, stop, _) = super::stop_signal()?;
    let names: Vec<&str> = config.sources.iter().map(|s| s.name()).collect();
    eprintln!(
        "flare agent: profiling {} ({}) at {} Hz, pushing every {} s to {}",
        match args.pids.target() {
            Target::Pids(p) => format!("PID {p:?}"),
            _ => "all CPUs".into(),
        },
        names.join(", "),
        args.frequency,
        args.interval,
        sink.names().join(", ")
    );
    let result = agent::run(&config, &mut sink, stop);
    let early = sink.early;
    if early.full + early.processes > 0 {
        eprintln!(
            "flare agent: renewed early {} time(s) for room in the stack storage, {} time(s) \
             after {} processes",
            early.full,
            early.processes,
            agent::RENEW_PROCESSES
        );
    }
    report(&sink.finish(FLUSH_TIMEOUT));
    Ok(result?)
}

/// How long queued windows are tried at exit.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// One line per destination on stderr: what became of the windows.
pub fn report(reports: &[Report]) {
    for r in reports {
        let lost = match r.lost {
            0 => String::new(),
            n => format!(", {n} lost (spool file unreadable)"),
        };
        eprintln!(
            "flare: {}: {} window(s) delivered, {} dropped (over the spool bound), {} refused, \
             {} left queued{lost}",
            r.name, r.delivered, r.dropped, r.rejected, r.left
        );
    }
}

/// A one-shot run's push must have delivered its profile everywhere: an
/// error naming the first destination that did not take it, and why.
pub fn check_delivered(reports: &[Report]) -> Result<()> {
    let Some(r) = reports.iter().find(|r| !r.all_delivered()) else {
        return Ok(());
    };
    let why = r.error.as_deref().unwrap_or("not accepted in time");
    let why = why
        .strip_prefix(r.name.as_str())
        .map_or(why, |w| w.trim_start_matches(':').trim_start());
    anyhow::bail!(
        "the profile was not delivered to {} ({why}): check the address and that the \
         server is up and accepts it, then run again",
        r.name
    )
}
