//! Working with saved profiles: folded stacks as flare, bcc and
//! perf + stackcollapse write them, parsed into one shape that the flame
//! graph writer, the differential view and the `top` table read.
//!
//! Timed files (the Firefox Profiler's, flare's `-o NAME.json.gz` and
//! samply's) are read into a timed [`crate::profile::Profile`] by
//! [`timed`], for heat maps and flame graphs of a time range.
//!
//! Live profiles enter the same shape through [`Stacks::from_profile`], so
//! a flame graph drawn from a run and one drawn from its saved file agree.

mod diff;
mod folded;
pub mod timed;
mod top;

pub use diff::{diff, DiffStack};
pub use folded::{parse, parse_file, ParseError, Stack, Stacks};
pub use top::{top, TopEntry};

#[cfg(test)]
mod tests;
