//! The tools: each turns a plain config into attached BPF programs and,
//! when asked, into raw samples for the symbolizer.

pub mod profile;
pub mod stackcount;
