//! BPF: the skeletons, their two builds, feature probes, perf events that
//! drive sampling, tracefs, and reading the maps every tool has. It stands
//! on [`crate::system`] and the model's vocabulary only: what a stack
//! record means to a collector is decoded above it.

pub mod loader;
pub mod maps;
pub mod perf;
pub mod probe;
pub mod tracefs;
pub mod variant;

/// The generated skeletons, one per BPF program in `bpf/` (`build.rs`
/// writes a module for each `bpf/<tool>.bpf.c`).
#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    unused,
    non_camel_case_types
)]
pub mod skel {
    include!(concat!(env!("OUT_DIR"), "/skels.rs"));
}

pub use maps::{read_counts, PlainKey};

/// A C `char[]` comm as a string (up to the first NUL, lossy UTF-8).
pub fn comm_str(comm: &[i8]) -> String {
    let bytes: Vec<u8> = comm
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    crate::profile::clean_name(&String::from_utf8_lossy(&bytes)).into_owned()
}
