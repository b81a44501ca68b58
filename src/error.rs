//! The library's error type. Every message names what went wrong and, where
//! there is one, the way out.

use std::io;
use std::path::PathBuf;

/// Errors from collecting a profile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("flare needs root, or the capabilities CAP_BPF and CAP_PERFMON (and CAP_SYS_ADMIN on kernels before 5.8): run it with sudo (without them, only `flare profile` of a command it starts or of your own processes runs, with perf events)")]
    NotPermitted,
    #[error("this kernel has no BTF type information (/sys/kernel/btf/vmlinux is missing): flare needs a kernel built with CONFIG_DEBUG_INFO_BTF=y (5.4 or later; most distributions ship one)")]
    NoBtf,
    #[error(
        "no process with PID {0} (is it running? PIDs are as seen from flare's PID namespace)"
    )]
    NoSuchProcess(u32),
    #[error("no thread with TID {0} (is it running? TIDs are as seen from flare's PID namespace)")]
    NoSuchThread(u32),
    #[error("CPU {cpu} does not exist or is offline (online CPUs: {online})")]
    NoSuchCpu { cpu: u32, online: String },
    #[error("{option} {path}: {reason}")]
    PinnedMap {
        option: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("cannot open the {what} perf event: {source}{hint}")]
    PerfEvent {
        what: String,
        source: io::Error,
        hint: &'static str,
    },
    #[error("cannot load the {prog} BPF program: {source:#}")]
    Load {
        prog: &'static str,
        source: libbpf_rs::Error,
    },
    #[error("cannot attach {what}: {source:#}")]
    Attach {
        what: String,
        source: libbpf_rs::Error,
    },
    #[error("reading BPF map {map}: {source:#}")]
    MapRead {
        map: &'static str,
        source: libbpf_rs::Error,
    },
    #[error("{0}")]
    Unsupported(String),
    #[error("bad pattern \"{pattern}\": {reason}")]
    BadPattern { pattern: String, reason: String },
    #[error("no {what} matched by \"{pattern}\"{hint}")]
    NoMatch {
        pattern: String,
        what: &'static str,
        hint: String,
    },
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    /// A command to launch (`-- CMD`) that could not run; `code` is the
    /// exit status a shell would give (127 not found, 126 not runnable).
    #[error("cannot run '{program}': {reason}")]
    Command {
        program: String,
        reason: String,
        code: u8,
    },
    /// Output files that could not be written, one line each.
    #[error("{0}")]
    Output(String),
}

/// Results of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;
