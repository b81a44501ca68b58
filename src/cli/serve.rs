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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<super::ServeArgs, clap::Error> {
        let mut argv = vec!["flare", "profile"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map(|c| match c.command {
            Command::Profile(p) => p.serve,
            other => unreachable!("parsed as another command: {other:?}"),
        })
    }

    #[test]
    fn serve_defaults_to_a_free_loopback_port() {
        assert_eq!(parse(&[]).unwrap().options(), None);
        let o = parse(&["5", "--serve"]).unwrap().options().unwrap();
        assert_eq!(o.bind.to_string(), "127.0.0.1:0");
        assert_eq!(o.interval.as_millis(), 1000);
        assert_eq!(o.limits.keep.as_secs(), 300);
        let o = parse(&[
            "--serve=:8080",
            "--serve-interval",
            "0.5",
            "--serve-keep",
            "60",
        ])
        .unwrap()
        .options()
        .unwrap();
        assert_eq!(o.bind.to_string(), "127.0.0.1:8080");
        assert_eq!(o.interval.as_millis(), 500);
        assert_eq!(o.limits.keep.as_secs(), 60);
        let o = parse(&["--serve", "0.0.0.0:9000"])
            .unwrap()
            .options()
            .unwrap();
        assert!(o.bind.ip().is_unspecified());
    }

    #[test]
    fn serve_arguments_are_checked() {
        // A bare number after --serve is a mistaken duration, not a port.
        let e = parse(&["--serve", "5"]).unwrap_err().to_string();
        assert!(e.contains("a duration goes before --serve"), "{e}");
        assert!(parse(&["--serve", "--serve-interval", "0"]).is_err());
        assert!(parse(&["--serve", "--serve-keep", "0"]).is_err());
        // The companions mean nothing without --serve.
        assert!(parse(&["--serve-interval", "2"]).is_err());
    }
}
