//! Prints what `flare completions` and `flare man` generate from the
//! command-line definitions.

use std::io::{self, Write};

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::docs::CompletionsArgs;
use crate::cli::Cli;

pub fn completions(args: &CompletionsArgs) -> Result<()> {
    // Generated into memory: clap_complete panics on a failed write, and
    // `flare completions bash | head` must not.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "flare", &mut script);
    let mut out = io::stdout().lock();
    out.write_all(&script)?;
    out.flush()?;
    Ok(())
}

/// The man page (roff): flare(1), with a section per subcommand.
pub fn man() -> Result<()> {
    let cmd = Cli::command();
    let mut out = io::stdout().lock();
    clap_mangen::Man::new(cmd.clone()).render(&mut out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        if name == "help" {
            continue;
        }
        writeln!(out, ".SH \"FLARE {}\"", name.to_uppercase())?;
        let man = clap_mangen::Man::new(sub.clone().bin_name(format!("flare {name}")));
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        man.render_options_section(&mut out)?;
        if let Some(examples) = sub.get_after_help() {
            // Verbatim; roff's escape character doubled.
            let text = examples.to_string().replace('\\', "\\e");
            writeln!(out, ".PP\n.nf\n{text}\n.fi")?;
        }
    }
    out.flush()?;
    Ok(())
}
