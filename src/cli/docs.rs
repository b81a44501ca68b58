//! `flare completions SHELL` and the hidden `flare man`: the shell
//! completions and the man page, generated from the same clap definitions
//! as the parser, so that they cannot drift from it. `scripts/package`
//! puts both into the .deb.

use clap::Args;
use clap_complete::Shell;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
    flare completions bash > /etc/bash_completion.d/flare
    flare completions zsh > \"${fpath[1]}/_flare\"
    flare completions fish > ~/.config/fish/completions/flare.fish")]
pub struct CompletionsArgs {
    /// The shell to print completions for
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {}
