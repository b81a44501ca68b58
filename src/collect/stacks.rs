//! Reading flare's stack storage (`stacks`, `bpf/stacks.h`): the one
//! place that decodes a stack record and the ids the BPF programs store in
//! their keys (a valid id, or a negative errno saying why there is none)
//! into raw traces. Losses are counted as they are met, so each tool
//! reports them the same way.

use std::collections::HashMap;
use std::sync::Arc;

use libbpf_rs::{MapCore, MapFlags};

use super::raw::{RawFrame, RawTrace, Runtime, RuntimeFrame};
use crate::profile::Lost;

/// Mirrors `common.h`: the stack id stored when a stack was not asked for.
pub const STACK_SKIPPED: i64 = -1;
const EFAULT: i64 = 14;
const ENOMEM: i64 = 12;
const EEXIST: i64 = 17;

/// Stacks already read, by id. The storage is never cleared and an entry
/// is never replaced, so an id names the same stack for a whole run and
/// periodic readers can keep this across reads. It holds at most one
/// entry per slot of the storage.
pub type StackCache = HashMap<i64, RawTrace>;

/// Reads stacks by id during one collection: each valid id is looked up
/// in the kernel once, and stacks that could not be stored are counted.
pub struct StackReader<'m, M: MapCore> {
    stacks: &'m M,
    cache: StackCache,
    missed: u64,
    map_full: bool,
}

impl<'m, M: MapCore> StackReader<'m, M> {
    pub fn new(stacks: &'m M) -> Self {
        Self::with_cache(stacks, StackCache::new())
    }

    /// A reader that starts from stacks read earlier in the run.
    pub fn with_cache(stacks: &'m M, cache: StackCache) -> Self {
        StackReader {
            stacks,
            cache,
            missed: 0,
            map_full: false,
        }
    }

    /// The stacks read so far, for the next reader.
    pub fn into_cache(self) -> StackCache {
        self.cache
    }

    /// The stack behind an id in the storage. `collected` says whether
    /// the tool asked for this kind of stack at all. A valid id is looked
    /// up; -EFAULT means there is no such stack (a user-mode sample has no
    /// kernel stack); any other error means the stack could not be stored,
    /// and is counted (per key, as bcc counts).
    pub fn read(&mut self, id: impl Into<i64>, collected: bool) -> RawTrace {
        let id = id.into();
        if !collected || id == STACK_SKIPPED {
            return RawTrace::NotCollected;
        }
        if id == -EFAULT {
            return RawTrace::Frames(Arc::from([]));
        }
        if id < 0 {
            // -ENOMEM: the storage was full. -EEXIST (every probed id
            // held another stack) is as much a sign of a crowded storage.
            let enomem = id == -ENOMEM || id == -EEXIST;
            self.missed += 1;
            self.map_full |= enomem;
            return RawTrace::Missed { enomem };
        }
        let trace = match self.cache.get(&id) {
            Some(t) => t.clone(),
            None => {
                let t = match self.lookup(id) {
                    Some(frames) => RawTrace::Frames(frames.into()),
                    None => RawTrace::Missed { enomem: false },
                };
                // A failed lookup may succeed later: only stacks are kept.
                if matches!(t, RawTrace::Frames(_)) {
                    self.cache.insert(id, t.clone());
                }
                t
            }
        };
        if matches!(trace, RawTrace::Missed { .. }) {
            self.missed += 1;
        }
        trace
    }

    /// The frames stored under `id`, leaf first.
    fn lookup(&self, id: i64) -> Option<Vec<RawFrame>> {
        let bytes = self
            .stacks
            .lookup(&(id as u64).to_ne_bytes(), MapFlags::ANY)
            .ok()??;
        frames(&bytes)
    }

    /// What was lost, with `hash_full` events dropped for a full counts map.
    pub fn lost(&self, hash_full: u64) -> Lost {
        Lost {
            stacks: self.missed,
            stacks_enomem: self.map_full,
            hash_full,
            ..Lost::default()
        }
    }
}

/// Mirrors `bpf/common.h`: the top 16 bits of a frame header word.
pub const FRAME_TAG: u64 = 0xf1a0;
/// Mirrors `bpf/common.h`: the words that follow a runtime frame's header.
pub const RUNTIME_FRAME_WORDS: usize = 3;

/// The header word of a frame of `frame_type` followed by `words` words
/// (`FLARE_FRAME_HEADER` in `bpf/common.h`).
pub const fn frame_header(frame_type: u8, words: u8) -> u64 {
    FRAME_TAG << 48 | (frame_type as u64) << 40 | words as u64
}

/// The frames of a `struct flare_stack` (a length in words, the hash,
/// then the words), or `None` when the bytes are not one.
fn frames(bytes: &[u8]) -> Option<Vec<RawFrame>> {
    let mut words = bytes
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])));
    let len = usize::try_from(words.next()?).ok()?;
    let _hash = words.next()?;
    let words: Vec<u64> = words.take(len).collect();
    (words.len() == len).then(|| decode(&words))
}

/// Decodes a stack record's words, leaf first: an address is a native
/// frame; a header (tag in the top 16 bits) starts a frame of its type
/// and the words it says follow. A frame cut short by the record's end
/// ends the stack; one of a type this build does not know is skipped
/// whole and shown as `[unknown frame type N]`, so that what lies below
/// it keeps its place.
pub fn decode(words: &[u64]) -> Vec<RawFrame> {
    let mut out = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        i += 1;
        if w >> 48 != FRAME_TAG {
            out.push(RawFrame::Addr(w));
            continue;
        }
        let frame_type = (w >> 40) as u8;
        let n = (w & 0xff) as usize;
        let Some(body) = words.get(i..i + n) else {
            break;
        };
        i += n;
        match (Runtime::from_frame_type(frame_type), body) {
            (Some(runtime), &[a, b, cookie]) => {
                out.push(RawFrame::Runtime(Box::new(RuntimeFrame {
                    runtime,
                    ids: [a, b],
                    cookie,
                })))
            }
            _ => out.push(RawFrame::label(format!(
                "[unknown frame type {frame_type}]"
            ))),
        }
    }
    out
}

/// What a tool carries from one clearing read of its maps to the next (for
/// interval output and the live view): the stacks already read, and how
/// much of each kernel counter has been reported.
#[derive(Debug, Default)]
pub struct Periodic {
    cache: StackCache,
    seen: HashMap<&'static str, u64>,
}

impl Periodic {
    /// A stack reader for one read. Clearing reads start from the stacks
    /// read before: an id names the same stack for a whole run.
    pub fn reader<'m, M: MapCore>(&mut self, stacks: &'m M, clear: bool) -> StackReader<'m, M> {
        let cache = if clear {
            std::mem::take(&mut self.cache)
        } else {
            StackCache::new()
        };
        StackReader::with_cache(stacks, cache)
    }

    /// Ends a read; a clearing read keeps its stacks for the next one.
    pub fn done<M: MapCore>(&mut self, reader: StackReader<'_, M>, clear: bool) {
        if clear {
            self.cache = reader.into_cache();
        }
    }

    /// The part of the kernel counter `name` (now at `total`) not yet
    /// reported by a clearing read; with `clear`, it counts as reported.
    pub fn delta(&mut self, name: &'static str, total: u64, clear: bool) -> u64 {
        let seen = self.seen.entry(name).or_default();
        let delta = total - (*seen).min(total);
        if clear {
            *seen = total;
        }
        delta
    }
}

#[cfg(test)]
#[path = "stacks_tests.rs"]
mod tests;
