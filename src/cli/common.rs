//! The argument groups the collecting tools share. Each option here is
//! declared once — its name, short flag, help, default and parser — with
//! its one conversion into the library's config, and every tool that
//! takes it flattens the group (`#[command(flatten)]`) where its `--help`
//! lists the option, so bcc's order is kept. Options whose help, default
//! or behaviour differ between tools (bcc words some per tool) stay in
//! that tool's own arguments, where the difference shows.

use clap::Args;

/// `--unwind`, on every tool that takes user stacks.
#[derive(Clone, Copy, Debug, Args)]
pub struct UnwindArgs {
    /// How to walk user stacks: auto (unwind tables where an object has
    /// them, frame pointers elsewhere), fp (frame pointers only), dwarf
    /// (unwind tables only)
    #[arg(long = "unwind", value_name = "MODE", default_value = "auto", value_parser = |s: &str| s.parse::<flare::unwind::Mode>())]
    pub mode: flare::unwind::Mode,
}

/// `-- CMD ARGS...`: the command to start and profile, flattened into
/// every collecting tool's arguments.
#[derive(Clone, Debug, Default, Args)]
pub struct LaunchArgs {
    /// Start this command (as the invoking user under sudo), profile it and
    /// the processes it starts until it exits, and exit with its status
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}
