//! flare: an eBPF CPU profiler toolkit.
//!
//! The crate is layered the way data flows: collect → symbolize → model →
//! sinks. [`tools`] are the collectors (each implements the contract in
//! [`collect`], using [`bpf`] to load programs and open perf events),
//! [`symbolize`] names addresses, [`profile`] is the model every tool
//! produces, and sinks consume it: [`sinks`] (bcc's printer, files,
//! warnings, written by [`output`]) and the live view ([`live`]).
//! [`pipeline`] runs any collector into any sinks ([`launch`] starts a
//! command for them to profile); the binary only parses
//! arguments into configs and sinks. [`system`] is the floor all stand on
//! (CPUs, limits, the kernel's version, `perf_event_open`).
//! `docs/ARCHITECTURE.md` has the map.
//! [`export`] holds the push exporters (Pyroscope, Parca, OTLP, a
//! directory) and their sink; [`agent`] runs the profile collector without
//! end, window after window, into them. [`runtime`] holds the language
//! runtimes whose frames the unwinder reads (CPython, HotSpot), one
//! folder each.

pub mod agent;
pub mod analysis;
pub mod bpf;
pub mod collect;
pub mod defaults;
pub mod elf;
pub mod error;
pub mod export;
pub mod launch;
pub mod live;
pub mod notes;
pub mod output;
pub mod pipeline;
pub mod procmaps;
pub mod profile;
pub mod runtime;
pub mod sinks;
pub mod symbolize;
pub mod system;
#[cfg(test)]
pub(crate) mod testutil;
pub mod tools;
pub mod untrusted;
pub mod unwind;

pub use error::{Error, Result};
