//! `flare agent` arguments, and the push options other tools share.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, ValueEnum};
use flare::agent::{self, Source};
use flare::bpf::perf::Sampling;
use flare::collect::{Recording, Target};
use flare::export::auth::{Connection, Credentials};
use flare::export::push::PushConfig;
use flare::tools::{offcpu, profile, wallclock};

use super::{nonzero, nonzero_u32};

pub const EXAMPLES: &str = "\
Examples:
    flare agent --pyroscope http://pyroscope:4040          # all CPUs at 19 Hz, 10 s windows
    flare agent --otlp http://otel-collector:4318 --interval 60
    flare agent --parca parca:7070 --spool-dir /var/lib/flare/spool
    flare agent -o /var/lib/flare/windows --keep 360       # one pprof file per window
    flare agent --profiles cpu,off-cpu,wall --pyroscope http://pyroscope:4040
    flare agent -p 185 --pyroscope https://profiles.example.com --credentials /etc/flare/credentials

Credentials come from the environment or --credentials FILE (KEY=VALUE lines), never
from the command line: FLARE_PYROSCOPE_TOKEN, FLARE_PYROSCOPE_USER and
FLARE_PYROSCOPE_PASSWORD, FLARE_PYROSCOPE_TENANT, FLARE_OTLP_HEADERS (k=v,k2=v2),
FLARE_PARCA_TOKEN, FLARE_CA_FILE.";

/// Where to push profiles (shared by `flare agent` and the tools).
#[derive(Debug, Args)]
pub struct PushArgs {
    /// Push to Grafana Pyroscope at this URL (ingest API, pprof)
    #[arg(long, value_name = "URL")]
    pub pyroscope: Vec<String>,

    /// Push to an OpenTelemetry collector at this URL (OTLP/HTTP profiles)
    #[arg(long, value_name = "URL")]
    pub otlp: Vec<String>,

    /// Push to Parca at this address (gRPC WriteRaw; https://HOST:PORT for TLS)
    #[arg(long, value_name = "ADDR")]
    pub parca: Vec<String>,

    /// Application (Pyroscope) and service (OTLP) name of processes that name no
    /// service of their own (OTEL_SERVICE_NAME)
    #[arg(long, value_name = "NAME", default_value = "flare")]
    pub app_name: String,

    /// File of credentials (KEY=VALUE lines; see the examples)
    #[arg(long, value_name = "FILE")]
    pub credentials: Option<PathBuf>,

    /// Queue undelivered windows on disk here (else in memory)
    #[arg(long, value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,

    /// Bound of each destination's queue, in MiB
    #[arg(long, value_name = "MB", default_value_t = 32.0, value_parser = megabytes)]
    pub spool_max_mb: f64,

    /// Timeout of one push, in seconds (at most 3600)
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = push_timeout)]
    pub push_timeout: u64,
}

impl PushArgs {
    /// The push configuration, when a destination is given.
    pub fn config_if_any(&self) -> Result<Option<PushConfig>> {
        let c = self.config(None)?;
        Ok((!c.is_empty()).then_some(c))
    }

    /// The library's push configuration (`dir`: `-o DIR` of the agent).
    pub fn config(&self, dir: Option<(PathBuf, usize)>) -> Result<PushConfig> {
        Ok(PushConfig {
            pyroscope: self.pyroscope.clone(),
            otlp: self.otlp.clone(),
            parca: self.parca.clone(),
            dir,
            app_name: self.app_name.clone(),
            spool_dir: self.spool_dir.clone(),
            spool_max_bytes: (self.spool_max_mb * (1u64 << 20) as f64) as u64,
            credentials: Credentials::load(self.credentials.as_deref())
                .map_err(anyhow::Error::msg)?,
            connection: Connection {
                timeout: Duration::from_secs(self.push_timeout),
                ca_pem: None,
            },
            retry: Default::default(),
        })
    }
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub pids: super::common::PidArgs,

    /// Sample frequency, Hertz
    #[arg(short = 'F', long, value_name = "FREQUENCY", default_value_t = flare::defaults::AGENT_FREQUENCY, value_parser = nonzero)]
    pub frequency: u64,

    /// Length of a window: profiles are pushed this often, in seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = interval)]
    pub interval: f64,

    /// Profiles to take, each pushed every window: cpu (samples on the
    /// CPU), off-cpu (blocked time, as offcputime counts it), wall
    /// (samples on and off the CPU, as wallclock takes them)
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "cpu"
    )]
    pub profiles: Vec<ProfileName>,

    /// In the off-cpu and wall profiles, blocked periods shorter than this
    /// many milliseconds are sampled: each is kept with probability (its
    /// length / MS) and counted as MS long, so that sums stay true on
    /// average while a busy machine's thousands of short waits a second
    /// cost what CPU samples cost. Default: one sample period (1000/F);
    /// 0 counts every period as it is
    #[arg(long, value_name = "MS", value_parser = sample_ms)]
    pub blocked_sample_ms: Option<f64>,

    #[command(flatten)]
    pub stacks: super::common::StacksArgs,

    #[command(flatten)]
    pub maps: super::common::MapFilterArgs,

    // The storage sizes are the tools' options (common::HashStorageArgs,
    // StackStorageArgs) with the agent's value name and wording: it
    // displays no stacks.
    /// The number of hash keys that can be stored
    #[arg(long, value_name = "N", default_value_t = flare::defaults::HASH_STORAGE_SIZE, value_parser = nonzero_u32)]
    pub hash_storage_size: u32,

    /// The number of unique stack traces that can be stored
    #[arg(long, value_name = "N", default_value_t = flare::defaults::STACK_STORAGE_SIZE, value_parser = nonzero_u32)]
    pub stack_storage_size: u32,

    /// Write one pprof file per window into this directory
    #[arg(short = 'o', long = "output-dir", value_name = "DIR")]
    pub output_dir: Option<PathBuf>,

    /// Window files kept in the -o directory (the oldest are removed)
    #[arg(long, value_name = "N", default_value_t = 360, value_parser = nonzero)]
    pub keep: u64,

    #[command(flatten)]
    pub push: PushArgs,
}

/// A size in MiB, fractions allowed, greater than zero.
fn megabytes(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a size in MiB greater than zero")),
    }
}

/// A window length: seconds, 0.1 to a day.
fn interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.1..=86_400.0).contains(&v) => Ok(v),
        Ok(v) if v.is_finite() && v > 0.0 => Err(format!(
            "'{s}' is out of range: give 0.1 to 86400 seconds (a day)"
        )),
        _ => Err(format!("'{s}' is not a number of seconds of at least 0.1")),
    }
}

/// A sampling period of blocked time: milliseconds, 0 to a second.
fn sample_ms(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1000.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not a sampling period: give 0 to 1000 milliseconds (0: no sampling)"
        )),
    }
}

/// A push timeout: whole seconds, 1 to an hour.
fn push_timeout(s: &str) -> Result<u64, String> {
    match super::nonzero(s)? {
        n if n <= 3600 => Ok(n),
        _ => Err(format!("'{s}' is out of range: give 1 to 3600 seconds")),
    }
}

/// A profile `--profiles` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProfileName {
    Cpu,
    OffCpu,
    Wall,
}

impl AgentArgs {
    pub fn config(&self) -> Result<agent::Config> {
        let target = self.pids.target();
        let recording = Recording {
            stacks: self.stacks.stacks(),
            hash_storage_size: self.hash_storage_size,
            stack_storage_size: self.stack_storage_size,
            ..Recording::default()
        };
        let names = &self.profiles;
        let filtered = self.maps.cgroupmap.is_some() || self.maps.mntnsmap.is_some();
        if filtered && names.iter().any(|n| *n != ProfileName::Cpu) {
            anyhow::bail!(
                "--cgroupmap and --mntnsmap filter the cpu profile only: \
                 give --profiles cpu, or -p PID for the off-cpu and wall profiles"
            );
        }
        // One sample period unless told: a second at most, as -F is 1 Hz
        // at least.
        let sample_us = match self.blocked_sample_ms {
            Some(ms) => (ms * 1000.0).round() as u64,
            None => 1_000_000 / self.frequency.max(1),
        };
        let mut sources = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                continue;
            }
            sources.push(match name {
                ProfileName::Cpu => Source::Cpu(profile::Config {
                    target: target.clone(),
                    sampling: Sampling::Frequency(self.frequency),
                    recording,
                    cgroup_map: self.maps.cgroupmap.clone(),
                    mntns_map: self.maps.mntnsmap.clone(),
                    ..profile::Config::default()
                }),
                ProfileName::OffCpu => Source::OffCpu(offcpu::Config {
                    // Kernel threads wait for work most of their lives:
                    // their blocked time says nothing of a service.
                    threads: match &target {
                        Target::Pids(p) => offcpu::Threads::Pids(p.clone()),
                        _ => offcpu::Threads::User,
                    },
                    recording,
                    sample_us,
                    ..offcpu::Config::new(offcpu::Tool::OffCpu)
                }),
                ProfileName::Wall => Source::Wall(wallclock::Config {
                    target: target.clone(),
                    frequency: self.frequency,
                    recording,
                    sample_us,
                    // As the off-CPU profile's: a kernel thread's wait for
                    // work says nothing of a service.
                    user_blocked_only: true,
                    ..wallclock::Config::default()
                }),
            });
        }
        Ok(agent::Config::new(
            sources,
            Duration::from_secs_f64(self.interval),
        ))
    }
}
