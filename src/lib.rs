//! flare: an eBPF CPU profiler toolkit.
//!
//! The crate is layered the way data flows: [`bpf`] loads programs and
//! opens perf events (collect), [`symbolize`] names addresses, [`profile`]
//! is the model every tool produces, and [`output`] writes it. [`tools`]
//! ties these together per command; the binary only parses arguments.
//! [`export`] pushes profiles to continuous-profiling servers, and
//! [`agent`] runs the profiler without end, window after window, for it.

pub mod agent;
pub mod analysis;
pub mod bpf;
pub mod error;
pub mod export;
pub mod live;
pub mod output;
pub mod profile;
pub mod symbolize;
pub mod tools;

pub use error::{Error, Result};
