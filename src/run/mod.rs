//! Running a tool from the command line: the arguments become a
//! [`Request`] (the tool's config, the plan, the sinks asked for), and the
//! library's pipeline does the rest. Nothing here collects, symbolizes or
//! formats.

pub mod agent;
pub mod analyze;
pub mod docs;
mod launch;

use std::ffi::OsString;
use std::sync::atomic::Ordering;
use std::sync::mpsc;

use anyhow::{Context, Result};
use flare::export::push::PushConfig;
use flare::export::sink::PushSink;
use flare::live::sink::LiveSink;
use flare::live::Options as LiveOptions;
use flare::output::StackStyle;
use flare::pipeline::{self, Mode, Plan, Sink};
use flare::sinks::{Destination, Files, Printer, PrinterOptions, Warnings};
use flare::tools::{self, ToolConfig};

/// Everything a collecting command asked for.
pub struct Request {
    pub tool: ToolConfig,
    pub plan: Plan,
    /// bcc's output on standard output.
    pub printer: PrinterOptions,
    /// `-o` files and `--format`, checked before the tool starts.
    pub destinations: Vec<Destination>,
    /// How files in bcc's layouts print stacks.
    pub style: StackStyle,
    /// `--serve`.
    pub live: Option<LiveOptions>,
    /// `-- CMD ARGS`: a command to start and profile (empty: none).
    pub command: Vec<OsString>,
    /// `--pyroscope`, `--otlp`, `--parca`: push the profile too.
    pub push: Option<PushConfig>,
}

/// How long a one-shot run tries to deliver its profile at the end.
const PUSH_FLUSH: std::time::Duration = std::time::Duration::from_secs(30);

/// A channel that receives once per SIGINT/SIGTERM (setting the flag),
/// and its sender for other reasons to stop. Installs the handler, which
/// can be done once per process.
pub fn stop_signal() -> Result<(mpsc::Sender<()>, mpsc::Receiver<()>, launch::Interrupted)> {
    let (tx, rx) = mpsc::channel();
    let interrupted = launch::Interrupted::default();
    let (signal_tx, flag) = (tx.clone(), interrupted.clone());
    ctrlc::set_handler(move || {
        flag.store(true, Ordering::SeqCst);
        let _ = signal_tx.send(());
    })
    .context("installing the Ctrl-C handler")?;
    Ok((tx, rx, interrupted))
}

/// Starts the tool (and the command to profile, if any) and runs it
/// through the pipeline into the sinks the request names. The exit code:
/// 0, or the command's.
pub fn run(request: Request) -> Result<u8> {
    let (stop_tx, stop, interrupted) = stop_signal()?;
    let mut tool = request.tool;
    let mut plan = request.plan;
    let mut command = None;
    if !request.command.is_empty() {
        // The command's processes are gone when it ends, and with them
        // their memory maps: symbolize while they run, every interval.
        if plan.mode == Mode::Once {
            plan.mode = Mode::Periodic {
                interval: launch::SYMBOLIZE_EVERY,
                report_each: false,
            };
        }
        let held = flare::launch::Launch::spawn(&request.command)?;
        tool.launch(held.pid(), held.program())?;
        command = Some(launch::CommandSink::new(held, stop_tx));
    }
    let mut printer = Printer::new(request.printer);
    let mut warnings = Warnings;
    let mut files = Files::new(request.destinations, request.style);
    let mut live = request.live.map(LiveSink::new);
    let mut push = match request.push {
        Some(p) => {
            let host = flare::export::labels::hostname();
            let senders = p.senders(&host).map_err(anyhow::Error::msg)?;
            Some(PushSink::new(senders, &host))
        }
        None => None,
    };
    // The live page's timeline, files with times and OTLP's sample
    // timestamps need each sample's time; other runs count in the kernel.
    let times = [
        files.times(),
        live.as_ref().map(Sink::times).unwrap_or_default(),
        push.as_ref().map(Sink::times).unwrap_or_default(),
    ];
    if times.iter().any(|t| t.any()) {
        tool.keep_times();
    }
    let collector = tools::start(tool)?;
    let mut sinks: Vec<&mut dyn Sink> = vec![&mut printer, &mut warnings, &mut files];
    if let Some(l) = live.as_mut() {
        sinks.push(l);
    }
    if let Some(p) = push.as_mut() {
        sinks.push(p);
    }
    // Last, so that the command starts after every sink has begun.
    if let Some(c) = command.as_mut() {
        sinks.push(c);
    }
    let result = pipeline::run(collector, &mut sinks, &plan, &stop);
    let pushed = push.map(|p| p.finish(PUSH_FLUSH));
    if let Some(reports) = &pushed {
        agent::report(reports);
    }
    result?;
    if let Some(reports) = &pushed {
        agent::check_delivered(reports)?;
    }
    Ok(command.map_or(0, |c| c.finish(&interrupted)))
}
