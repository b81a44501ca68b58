//! The `flare` binary: parse the command line, run the tool, turn errors
//! into one line on stderr and an exit code.

mod cli;
mod run;

use std::io;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // The library's warnings and notes, as they come.
    flare::notes::set_handler(|line| eprintln!("{line}"));
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Profile(args) => args.request().and_then(run::run),
        cli::Command::Stackcount(args) => args.request().and_then(run::run),
        cli::Command::Offcputime(args) => args.request().and_then(run::run),
        cli::Command::Wakeuptime(args) => args.request().and_then(run::run),
        cli::Command::Offwaketime(args) => args.request().and_then(run::run),
        cli::Command::Wallclock(args) => args.request().and_then(run::run),
        cli::Command::Flamegraph(args) => run::analyze::flamegraph(&args).map(|()| 0),
        cli::Command::Heatmap(args) => run::analyze::heatmap(&args).map(|()| 0),
        cli::Command::Diff(args) => run::analyze::diff(&args).map(|()| 0),
        cli::Command::Top(args) => run::analyze::top(&args).map(|()| 0),
        cli::Command::Agent(args) => run::agent::run(&args).map(|()| 0),
        cli::Command::Completions(args) => run::docs::completions(&args).map(|()| 0),
        cli::Command::Man(_) => run::docs::man().map(|()| 0),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        // `flare ... | head` closing the pipe early is not a failure.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flare: error: {e:#}");
            // A command that could not run exits as a shell would say.
            match e.downcast_ref::<flare::Error>() {
                Some(flare::Error::Command { code, .. }) => ExitCode::from(*code),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}
