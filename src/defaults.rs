//! The defaults that the command line, the tools' configurations and the
//! agent share, named once (bcc's where bcc has the option), so that a
//! change reaches every place that uses them.

/// Samples per second of `profile` and `wallclock` (bcc's `profile -F`).
pub const FREQUENCY: u64 = 49;
/// Samples per second of the continuous agent: low enough to leave on.
pub const AGENT_FREQUENCY: u64 = 19;
/// Entries of a tool's counts map (bcc's `--hash-storage-size`).
pub const HASH_STORAGE_SIZE: u32 = 40960;
/// Stacks the stack storage holds (bcc's `--stack-storage-size`).
pub const STACK_STORAGE_SIZE: u32 = 16384;
/// Threads off the CPU tracked at once (`--blocked-storage-size`).
pub const BLOCKED_STORAGE_SIZE: u32 = 16384;
