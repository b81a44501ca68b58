//! Reading flare's stack storage (`stacks` and `stack_tails`,
//! `bpf/stacks.h`): the one place that sizes it, decodes a stack record
//! and the ids the BPF programs store in their keys (a valid id, or a
//! negative errno saying why there is none) into raw traces, and marks a
//! stack that was cut at its root end. Losses are counted as they are
//! met, so each tool reports them the same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use libbpf_rs::{MapCore, MapFlags, OpenMapMut, RingBuffer, RingBufferBuilder};

use super::raw::{RawFrame, RawTrace, Runtime, RuntimeFrame};
use crate::profile::Lost;

/// Mirrors `common.h`: the stack id stored when a stack was not asked for.
pub const STACK_SKIPPED: i64 = -1;
const EFAULT: i64 = 14;
const ENOMEM: i64 = 12;
const EEXIST: i64 = 17;

/// Stacks already read, by id. An entry of the storage is never replaced,
/// and deleted only once dropped from here ([`Periodic::forgetting`]), so
/// an id kept here names the same stack and periodic readers keep this
/// across reads. But a run without end meets
/// most stacks for a while only (processes come and go, the agent's
/// beside a build held thousands of stacks of exited processes), so a
/// stack not met in the last two reads is dropped, and read again from
/// the storage if it is met later. It holds at most one entry per slot
/// of the storage.
#[derive(Debug, Default)]
pub struct StackCache {
    /// Met in this read.
    now: HashMap<i64, RawTrace>,
    /// Met in the read before, not yet in this one.
    last: HashMap<i64, RawTrace>,
    /// Met in the read before that, in neither since.
    before: HashMap<i64, RawTrace>,
}

impl StackCache {
    /// The stack under `id`, if kept.
    fn get(&mut self, id: i64) -> Option<RawTrace> {
        if let Some(t) = self.now.get(&id) {
            return Some(t.clone());
        }
        let t = self.last.remove(&id).or_else(|| self.before.remove(&id))?;
        self.now.insert(id, t.clone());
        Some(t)
    }

    fn insert(&mut self, id: i64, trace: RawTrace) {
        self.now.insert(id, trace);
    }

    /// Ends a read: stacks met in neither it nor the one before are
    /// dropped, and returned.
    fn end_read(&mut self) -> HashMap<i64, RawTrace> {
        let dropped = std::mem::take(&mut self.before);
        self.before = std::mem::take(&mut self.last);
        self.last = std::mem::take(&mut self.now);
        dropped
    }

    /// True when the stack under `id` is kept.
    fn contains(&self, id: i64) -> bool {
        self.now.contains_key(&id) || self.last.contains_key(&id) || self.before.contains_key(&id)
    }

    /// Stacks kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.now.len() + self.last.len() + self.before.len()
    }
}

/// The bytes of the `stack_news` ring: some 10,000 announcements (16
/// bytes and an 8-byte header each) between two reads, where busy
/// runtimes' off-CPU periods make a few hundred new stacks a second.
const NEWS_RING: u32 = 256 << 10;

/// Mirrors `bpf/common.h`: the words of a stored stack's head, and of
/// each chunk of its tail.
pub const CHUNK_WORDS: usize = 127;
/// Mirrors `bpf/common.h`: the chunks of the deepest stack.
pub const STACK_CHUNKS: usize = 36;
/// Mirrors `bpf/common.h`: the frames of the deepest user stack.
pub const MAX_FRAMES: usize = 1024;
/// Mirrors `bpf/common.h`: the parts of a stack record's `len`.
const LEN_WORDS: u64 = 0xffff;
const LEN_FRAMES_SHIFT: u32 = 16;
const LEN_CUT: u64 = 1 << 32;
const LEN_KERNEL_CAP: u64 = 1 << 33;

/// The frame a stack cut at its root end ends in: all stacks cut past
/// the depth limit share it, so that a flame graph shows them under one
/// node rather than as many false roots.
pub const TRUNCATED: &str = "[truncated]";

/// The frame that ends a cut stack: [`TRUNCATED`], or with the count of
/// frames lost where it is known.
pub fn truncated(more: Option<usize>) -> RawFrame {
    match more {
        Some(n) if n > 0 => RawFrame::label(format!(
            "[truncated: {n} more frame{}]",
            if n == 1 { "" } else { "s" }
        )),
        _ => RawFrame::label(TRUNCATED),
    }
}

/// The deepest user stack, in frames, that the kernel's own walk
/// (`bpf_get_stack`, `--unwind fp`) gives: `kernel.perf_event_max_stack`
/// (127 unless raised), up to [`MAX_FRAMES`].
pub fn kernel_max_frames() -> u32 {
    crate::system::perf_event_max_stack().min(MAX_FRAMES as u32)
}

/// Sizes the stack storage before load: `stacks` holds `size` stacks'
/// heads; `stack_tails` the tails of the deep ones. Where the kernel's
/// allocator keeps up with a map allocated as it fills in NMI context
/// (6.12+; 6.1's refills one element at a time, and a deep stack needs
/// up to 35), the tails cost what deep stacks are stored, up to two
/// chunks a stack; elsewhere they are allocated up front, an eighth of
/// the heads' room (none where no stack can be longer than a head: the
/// kernel's own walk at its default depth). The scratch has one stack
/// per possible CPU.
pub fn size_storage(
    stacks: &mut OpenMapMut<'_>,
    tails: &mut OpenMapMut<'_>,
    scratch: &mut OpenMapMut<'_>,
    news: &mut OpenMapMut<'_>,
    size: u32,
    mode: super::UnwindMode,
) -> libbpf_rs::Result<()> {
    stacks.set_max_entries(size)?;
    news.set_max_entries(NEWS_RING)?;
    let cpus = libbpf_rs::num_possible_cpus().map_or(1, |n| n.max(1));
    scratch.set_max_entries(u32::try_from(cpus).unwrap_or(u32::MAX))?;
    let deep = mode != super::UnwindMode::Fp || kernel_max_frames() as usize > CHUNK_WORDS;
    let chunks = match (deep, crate::system::kernel_version() >= (6, 12)) {
        (false, _) => 1,
        (true, true) => {
            tails.set_map_flags(libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC)?;
            size.saturating_mul(2)
        }
        (true, false) => (size / 8).max(64),
    };
    tails.set_max_entries(chunks)
}

/// The stack storage of a loaded program: heads and tails.
pub struct Storage<'m, M: MapCore> {
    pub stacks: &'m M,
    pub tails: &'m M,
}

// By hand: derived, they would ask the maps to be `Copy` too.
impl<M: MapCore> Clone for Storage<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: MapCore> Copy for Storage<'_, M> {}

/// Reads stacks by id during one collection: each valid id is looked up
/// in the kernel once, and stacks that could not be stored are counted.
pub struct StackReader<'m, M: MapCore> {
    storage: Storage<'m, M>,
    cache: StackCache,
    missed: u64,
    map_full: bool,
    /// Stacks read that the kernel's own walk may have cut.
    capped: u64,
}

impl<'m, M: MapCore> StackReader<'m, M> {
    pub fn new(storage: Storage<'m, M>) -> Self {
        Self::with_cache(storage, StackCache::default())
    }

    /// A reader that starts from stacks read earlier in the run.
    pub fn with_cache(storage: Storage<'m, M>, cache: StackCache) -> Self {
        StackReader {
            storage,
            cache,
            missed: 0,
            map_full: false,
            capped: 0,
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
        let trace = match self.cache.get(id) {
            Some(t) => t,
            None => match self.lookup(id) {
                Some(record) => {
                    self.capped += u64::from(record.capped);
                    let t = RawTrace::Frames(record.frames.into());
                    // A failed lookup, or a tail another CPU is still
                    // storing, may succeed later: only whole reads are
                    // kept.
                    if record.whole {
                        self.cache.insert(id, t.clone());
                    }
                    t
                }
                None => RawTrace::Missed { enomem: false },
            },
        };
        if matches!(trace, RawTrace::Missed { .. }) {
            self.missed += 1;
        }
        trace
    }

    /// The stack stored under `id`: its head, then its tail's chunks.
    fn lookup(&self, id: i64) -> Option<Record> {
        let bytes = self
            .storage
            .stacks
            .lookup(&(id as u64).to_ne_bytes(), MapFlags::ANY)
            .ok()??;
        record(&bytes, |chunk| {
            let key = tail_key(id as u64, chunk as u64);
            self.storage.tails.lookup(&key, MapFlags::ANY).ok()?
        })
    }

    /// What was lost, with `hash_full` events dropped for a full counts map.
    pub fn lost(&self, hash_full: u64) -> Lost {
        Lost {
            stacks: self.missed,
            stacks_enomem: self.map_full,
            capped: self.capped,
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

/// A stack as read from the storage.
#[derive(Debug, PartialEq)]
struct Record {
    /// Leaf first, ending in a [`truncated`] frame when cut.
    frames: Vec<RawFrame>,
    /// False when part of its tail was not there (yet).
    whole: bool,
    /// The kernel's own walk stopped at its limit.
    capped: bool,
}

/// The words of native-endian bytes.
fn words(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
}

/// The stack of a `struct flare_stack` head (its `len`, the hash, then up
/// to [`CHUNK_WORDS`] words) and of the tail chunks `chunk(k)` gives, or
/// `None` when the bytes are not one. A stack the walk cut, or whose tail
/// is missing a chunk, ends in a [`truncated`] frame.
fn record(head: &[u8], chunk: impl Fn(usize) -> Option<Vec<u8>>) -> Option<Record> {
    let mut it = words(head);
    let len = it.next()?;
    let _hash = it.next()?;
    let total = (len & LEN_WORDS) as usize;
    let frames = ((len >> LEN_FRAMES_SHIFT) & LEN_WORDS) as usize;
    let cut = len & LEN_CUT != 0;
    let mut all: Vec<u64> = it.take(total.min(CHUNK_WORDS)).collect();
    if all.len() < total.min(CHUNK_WORDS) {
        return None;
    }
    let mut whole = true;
    for k in 1..STACK_CHUNKS {
        if all.len() >= total {
            break;
        }
        let Some(bytes) = chunk(k) else {
            whole = false;
            break;
        };
        let want = (total - all.len()).min(CHUNK_WORDS);
        let before = all.len();
        all.extend(words(&bytes).take(want));
        if all.len() - before < want {
            whole = false;
            break;
        }
    }
    let mut out = decode(&all);
    if cut {
        out.push(truncated(None));
    } else if !whole {
        out.push(truncated(Some(frames.saturating_sub(out.len()))));
    }
    Some(Record {
        frames: out,
        whole,
        capped: len & LEN_KERNEL_CAP != 0,
    })
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
#[derive(Default)]
pub struct Periodic {
    cache: StackCache,
    seen: HashMap<&'static str, u64>,
    /// With this, stacks dropped from the cache are deleted from the
    /// storage too, and so are stacks stored that no read meets.
    news: Option<News>,
}

/// The stacks BPF stored lately (the `stack_news` ring) that no read has
/// met yet. An off-CPU period's stacks are stored when its thread leaves
/// the CPU, and most short periods are then sampled out at its return:
/// no count names those stacks, so no read meets them, and nothing else
/// would delete them. Beside busy runtimes they filled the agent's 16,384
/// stacks in about 100 s even as it deleted the stacks it no longer met.
struct News {
    ring: RingBuffer<'static>,
    /// Announced since the last drain: (id, words).
    fresh: Arc<Mutex<Vec<(u64, u64)>>>,
    unmet: Unmet,
}

impl News {
    fn start(ring: &dyn MapCore) -> libbpf_rs::Result<Self> {
        let fresh = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&fresh);
        let mut builder = RingBufferBuilder::new();
        builder.add(ring, move |rec: &[u8]| {
            let word = |i: usize| {
                rec.get(i * 8..i * 8 + 8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_ne_bytes)
            };
            if let (Some(id), Some(words)) = (word(0), word(1)) {
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((id, words));
            }
            0
        })?;
        Ok(News {
            ring: builder.build()?,
            fresh,
            unmet: Unmet::default(),
        })
    }

    /// Takes in what the ring announced since the last call.
    fn drain(&mut self, cache: &StackCache) {
        let _ = self.ring.consume();
        let fresh = std::mem::take(&mut *self.fresh.lock().unwrap_or_else(PoisonError::into_inner));
        for (id, words) in fresh {
            self.unmet.announce(id, words, cache);
        }
    }
}

/// Stacks announced as stored and not met by a read since: words, and
/// the clearing reads since.
#[derive(Debug, Default)]
struct Unmet(HashMap<u64, (u64, u8)>);

impl Unmet {
    /// Stack `id` of `words` words was stored.
    fn announce(&mut self, id: u64, words: u64, cache: &StackCache) {
        if !cache.contains(id as i64) {
            self.0.insert(id, (words, 0));
        }
    }

    /// At a clearing read's end: forgets the stacks met since, and
    /// returns (id, words) of those met in neither this read nor the one
    /// before, to delete.
    fn age(&mut self, cache: &StackCache) -> Vec<(u64, u64)> {
        let mut gone = Vec::new();
        self.0.retain(|&id, (words, reads)| {
            if cache.contains(id as i64) {
                return false;
            }
            *reads += 1;
            if *reads < 2 {
                return true;
            }
            gone.push((id, *words));
            false
        });
        gone
    }
}

impl Periodic {
    /// A reader's state that also deletes from the storage the stacks
    /// the cache drops (met in none of the last two clearing reads), so
    /// that a run without end keeps room for new stacks: code compiled at
    /// run time and short-lived processes make new stacks all the time
    /// (busy runtimes filled 16,384 in 30 s to 3 minutes). Only for a
    /// collector whose every stack id still to be counted is met at each
    /// clearing read (in its counts, or its blocked threads'): one held
    /// elsewhere (offcputime's blocked threads, its wakers') would lose
    /// its stack. A stack met again after it is deleted is stored again;
    /// one met by BPF in the moment it is deleted is lost, and counted.
    ///
    /// `news` is the program's `stack_news` ring: stacks stored that no
    /// count names are deleted too ([`News`]).
    pub fn forgetting(news: &dyn MapCore) -> crate::error::Result<Self> {
        let news = News::start(news).map_err(|source| crate::error::Error::MapRead {
            map: "stack_news",
            source,
        })?;
        Ok(Periodic {
            news: Some(news),
            ..Periodic::default()
        })
    }

    /// A stack reader for one read, starting from the stacks read before:
    /// an id kept names the same stack (see [`StackCache`]).
    pub fn reader<'m, M: MapCore>(&mut self, storage: Storage<'m, M>) -> StackReader<'m, M> {
        StackReader::with_cache(storage, std::mem::take(&mut self.cache))
    }

    /// Ends a read, keeping the stacks it met for the next one. Only a
    /// clearing read ends a generation of the cache: the reads between
    /// two (learning runtime frames' names while processes live) count as
    /// part of the next.
    pub fn done<M: MapCore>(&mut self, reader: StackReader<'_, M>, clear: bool) {
        let StackReader { storage, cache, .. } = reader;
        self.cache = cache;
        if let Some(news) = &mut self.news {
            news.drain(&self.cache);
        }
        if clear {
            let dropped = self.cache.end_read();
            if let Some(news) = &mut self.news {
                forget(storage, &dropped);
                for (id, words) in news.unmet.age(&self.cache) {
                    delete(storage, id, words);
                }
            }
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

/// Deletes the stacks `dropped` (by id) from `storage`: each head, then
/// the chunks of its tail (stored from chunk 1 on, each after the one
/// before, so the first missing one ends it). A stack that cannot have
/// a tail, fewer frames than a head holds words, has none to look for.
fn forget<M: MapCore>(storage: Storage<'_, M>, dropped: &HashMap<i64, RawTrace>) {
    for (&id, trace) in dropped {
        // A frame takes at most 1 + RUNTIME_FRAME_WORDS words.
        let words = trace.frames().len() * (1 + RUNTIME_FRAME_WORDS);
        delete(storage, id as u64, words as u64);
    }
}

/// Deletes stack `id` from `storage`: its head, then the chunks of its
/// tail (stored from chunk 1 on, each after the one before, so the first
/// missing one ends it) when it may have more `words` than a head holds.
fn delete<M: MapCore>(storage: Storage<'_, M>, id: u64, words: u64) {
    let _ = storage.stacks.delete(&id.to_ne_bytes());
    if words <= CHUNK_WORDS as u64 {
        return;
    }
    for chunk in 1..STACK_CHUNKS as u64 {
        if storage.tails.delete(&tail_key(id, chunk)).is_err() {
            break;
        }
    }
}

/// Mirrors `struct flare_tail_key` (`bpf/common.h`): chunk `chunk` of the
/// tail of stack `id`.
fn tail_key(id: u64, chunk: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&id.to_ne_bytes());
    key[8..].copy_from_slice(&chunk.to_ne_bytes());
    key
}

#[cfg(test)]
#[path = "stacks_tests.rs"]
mod tests;
