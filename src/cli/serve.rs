//! `--serve` and its companions: the live flame graph in the browser, as
//! one flattened argument group any collecting tool can take.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use flare::live::{self, Limits, Options};

/// Parses `--serve`'s value.
fn bind(s: &str) -> Result<SocketAddr, String> {
    live::parse_bind(s)
}

/// Seconds, possibly fractional, between 0.1 and 3600.
fn seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(0.1..=3600.0).contains(&v) {
        return Err(format!("{v} is out of range: give 0.1 to 3600 seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

#[derive(Clone, Debug, Args)]
pub struct ServeArgs {
    /// Show a live flame graph in the browser, served on ADDR:PORT
    /// [default: 127.0.0.1, a free port]. Addresses other than loopback
    /// let anyone who can reach them see process names and stacks
    #[arg(long, value_name = "ADDR:PORT", num_args = 0..=1,
          default_missing_value = "127.0.0.1:0", value_parser = bind)]
    pub serve: Option<SocketAddr>,

    /// Seconds between live updates
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = seconds, requires = "serve")]
    pub serve_interval: Duration,

    /// Longest "last N seconds" window the live view keeps in memory
    #[arg(long, value_name = "SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86400), requires = "serve")]
    pub serve_keep: u64,
}

impl ServeArgs {
    /// The live view's options, when `--serve` was given.
    pub fn options(&self) -> Option<Options> {
        let bind = self.serve?;
        Some(Options {
            bind,
            interval: self.serve_interval,
            limits: Limits {
                keep: Duration::from_secs(self.serve_keep),
                ..Limits::default()
            },
        })
    }
}
