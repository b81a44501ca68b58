//! `flare completions SHELL` and the hidden `flare man`: the shell
//! completions and the man page, generated from the same clap definitions
//! as the parser, so that they cannot drift from it. `scripts/package`
//! puts both into the .deb.

use clap::Args;
use clap_complete::Shell;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to print completions for
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {}
