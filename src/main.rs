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
            eprintln!("flare: error: {}", message(&e));
            // A command that could not run exits as a shell would say.
            match e.downcast_ref::<flare::Error>() {
                Some(flare::Error::Command { code, .. }) => ExitCode::from(*code),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// The error and its causes on one line, each said once: an error whose
/// text already ends with its cause's (thiserror's `{what}: {source}`)
/// does not repeat it.
fn message(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::message;
    use std::io;

    #[test]
    fn a_cause_its_error_already_says_is_said_once() {
        let full = || io::Error::from_raw_os_error(libc::ENOSPC);
        let e = anyhow::Error::new(flare::Error::Io {
            what: "writing to standard output".into(),
            source: full(),
        });
        let said = message(&e);
        assert_eq!(said.matches(&full().to_string()).count(), 1, "{said}");
        assert!(said.starts_with("writing to standard output: "), "{said}");
        // Context that does not say its cause keeps it.
        let e = anyhow::Error::new(full()).context("cannot write out.svg");
        assert_eq!(message(&e), format!("cannot write out.svg: {}", full()));
    }
}
