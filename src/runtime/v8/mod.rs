//! Node.js's JavaScript frames: V8 read from outside the process, with no
//! flag (no `--perf-basic-prof`, no inspector), as official Node.js 20,
//! 22, 24 and 26 builds run (x86-64 and arm64).
//!
//! Every official node binary carries V8's postmortem constants
//! (`v8dbg_*`: field offsets, instance types, frame types) and its
//! version among its symbols. The flow: [`symbols`] reads them of the
//! file; [`layout`] turns them into the [`layout::Layout`] a walk and a
//! namer read that V8 with (`constants` reads them, a constant a V8
//! lacks taken only from a fallback checked on that V8, else the layout
//! refused); [`heap`] reads a live process's heap objects with it: a
//! function's shared function info, name, script, lines and code.

mod constants;
pub mod heap;
pub mod layout;
pub mod symbols;

#[cfg(test)]
mod live_tests;
