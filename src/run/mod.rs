//! Running a tool from the command line: the arguments become a
//! [`Request`] (the tool's config, the plan, the sinks asked for), and the
//! library's pipeline does the rest. Nothing here collects, symbolizes or
//! formats.

pub mod analyze;
pub mod docs;

use std::sync::mpsc;

use anyhow::{Context, Result};
use flare::export::push::PushConfig;
use flare::export::sink::PushSink;
use flare::live::sink::LiveSink;
use flare::live::Options as LiveOptions;
use flare::output::StackStyle;
use flare::pipeline::{self, Plan, Sink};
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
    /// `--pyroscope`, `--otlp`, `--parca`: push the profile too.
    pub push: Option<PushConfig>,
}

/// How long a one-shot run tries to deliver its profile at the end.
const PUSH_FLUSH: std::time::Duration = std::time::Duration::from_secs(30);

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

/// Starts the tool and runs it through the pipeline into the sinks the
/// request names.
pub fn run(request: Request) -> Result<()> {
    let stop = stop_signal()?;
    let collector = tools::start(request.tool)?;
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
    let mut sinks: Vec<&mut dyn Sink> = vec![&mut printer, &mut warnings, &mut files];
    if let Some(l) = live.as_mut() {
        sinks.push(l);
    }
    if let Some(p) = push.as_mut() {
        sinks.push(p);
    }
    let result = pipeline::run(collector, &mut sinks, &request.plan, &stop);
    if let Some(p) = push {
        crate::cli::agent::report(p.finish(PUSH_FLUSH));
    }
    Ok(result?)
}
