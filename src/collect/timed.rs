//! Reading time-stamped records (`bpf/timed.h`): a tool that keeps times
//! sends each sample to a ring buffer instead of counting it, and this
//! turns the records into the same raw samples a count map gives, plus
//! the timeline's events pointing at them.
//!
//! A thread drains the ring every [`POLL`] (the BPF side wakes it early
//! only when the ring is half full), so the ring stays small however long
//! the run. Records are folded as they arrive: one entry per distinct
//! key, with its value, and one 32-byte [`Event`] per record.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use libbpf_rs::{MapCore, RingBuffer, RingBufferBuilder};

use crate::bpf::PlainKey;
use crate::error::{Error, Result};
use crate::profile::Event;

/// How often the drain thread reads the ring.
pub const POLL: Duration = Duration::from_millis(20);

/// Bytes of a record's header (`struct flare_timed_hdr`).
const HEADER: usize = 24;

/// The ring's size in bytes for a timed run: 64 KiB per CPU (about 900
/// records, 0.9 s of samples at 997 Hz) as a power of two between 1 and
/// 16 MiB. Drained every [`POLL`], it holds 45 times what arrives in
/// between.
pub fn ring_size() -> u64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    (cpus * 64 * 1024)
        .next_power_of_two()
        .clamp(1 << 20, 16 << 20)
}

/// The ring's size in bytes when nothing is sent (one page).
pub fn idle_ring_size() -> u64 {
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).unwrap_or(4096)
}

/// What one read gives a tool: each distinct key once with its value (the
/// sum of its records', or its count in the kernel's map) and, when times
/// are kept, an event per record pointing at its key.
#[derive(Debug)]
pub struct Folded<K> {
    pub keys: Vec<(K, u64)>,
    /// `None` when the kernel counted (no times).
    pub events: Option<Vec<Event>>,
}

impl<K> Default for Folded<K> {
    fn default() -> Self {
        Folded {
            keys: Vec::new(),
            events: None,
        }
    }
}

impl<K> Folded<K> {
    /// Adds an entry read elsewhere (a period still running), with its
    /// event at `time_ns` when times are kept.
    pub fn push(&mut self, key: K, value: u64, time_ns: u64, tid: u32) {
        if let Some(events) = &mut self.events {
            events.push(Event {
                time_ns,
                value,
                sample: self.keys.len() as u32,
                tid,
                cpu: crate::profile::UNKNOWN_CPU,
            });
        }
        self.keys.push((key, value));
    }

    /// Divides every value by `div` (nanoseconds to microseconds), each
    /// event's on its own so that keys stay the sums of their events, and
    /// drops what becomes 0.
    pub fn scale_down(self, div: u64) -> Self {
        let div = div.max(1);
        let Some(events) = self.events else {
            return Folded {
                keys: self
                    .keys
                    .into_iter()
                    .map(|(k, v)| (k, v / div))
                    .filter(|&(_, v)| v > 0)
                    .collect(),
                events: None,
            };
        };
        let mut sums = vec![0u64; self.keys.len()];
        let events: Vec<Event> = events
            .into_iter()
            .filter_map(|mut e| {
                e.value /= div;
                let sum = sums.get_mut(e.sample as usize)?;
                *sum += e.value;
                (e.value > 0).then_some(e)
            })
            .collect();
        let mut map = vec![u32::MAX; sums.len()];
        let mut keys = Vec::new();
        for (i, ((k, _), sum)) in self.keys.into_iter().zip(sums).enumerate() {
            if sum > 0 {
                map[i] = keys.len() as u32;
                keys.push((k, sum));
            }
        }
        let events = events
            .into_iter()
            .map(|mut e| {
                e.sample = map[e.sample as usize];
                e
            })
            .collect();
        Folded {
            keys,
            events: Some(events),
        }
    }
}

/// One read's keys: from the ring when `ring` is there (times kept),
/// else from the kernel's `counts` map. With `clear`, what is read is
/// forgotten.
pub fn read<K, M>(ring: Option<&TimedRing<K>>, counts: &M, clear: bool) -> Result<Folded<K>>
where
    K: PlainKey + Send + 'static,
    M: MapCore,
{
    Ok(match ring {
        Some(r) => r.read(clear),
        None => Folded {
            keys: crate::bpf::read_counts(counts, clear)?,
            events: None,
        },
    })
}

/// Records folded so far: each key's index and value, and the events.
struct Acc<K> {
    keys: Vec<(K, u64)>,
    events: Vec<Event>,
}

/// What the drain thread and the reads share.
struct Shared<K> {
    index: HashMap<Vec<u8>, u32>,
    folded: Acc<K>,
}

impl<K> Shared<K> {
    fn new() -> Self {
        Shared {
            index: HashMap::new(),
            folded: Acc {
                keys: Vec::new(),
                events: Vec::new(),
            },
        }
    }
}

impl<K: PlainKey> Shared<K> {
    /// Folds one record; false for one too short to hold a key.
    fn fold(&mut self, rec: &[u8]) -> bool {
        let key_size = std::mem::size_of::<K>();
        let Some(key_bytes) = rec.get(HEADER..HEADER + key_size) else {
            return false;
        };
        let word = |at: usize| u64::from_ne_bytes(rec[at..at + 8].try_into().unwrap_or([0; 8]));
        let half = |at: usize| u32::from_ne_bytes(rec[at..at + 4].try_into().unwrap_or([0; 4]));
        let (time_ns, value, tid, cpu) = (word(0), word(8), half(16), half(20));
        let keys = &mut self.folded.keys;
        let i = *self.index.entry(key_bytes.to_vec()).or_insert_with(|| {
            // SAFETY: key_bytes is exactly K's size and K is valid for
            // any bit pattern (PlainKey); read_unaligned copes with the
            // ring's 8-byte alignment.
            let k: K = unsafe { std::ptr::read_unaligned(key_bytes.as_ptr().cast()) };
            keys.push((k, 0));
            (keys.len() - 1) as u32
        });
        keys[i as usize].1 += value;
        self.folded.events.push(Event {
            time_ns,
            value,
            sample: i,
            tid,
            cpu,
        });
        true
    }
}

/// A ring of timed records being drained.
pub struct TimedRing<K> {
    shared: Arc<Mutex<Shared<K>>>,
    ring: Arc<Mutex<RingBuffer<'static>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl<K: PlainKey + Send + 'static> TimedRing<K> {
    /// Starts draining `map`, the loaded program's `timed_events` ring.
    pub fn start(map: &dyn MapCore) -> Result<Self> {
        let shared = Arc::new(Mutex::new(Shared::<K>::new()));
        let sink = Arc::clone(&shared);
        let mut builder = RingBufferBuilder::new();
        builder
            .add(map, move |rec: &[u8]| {
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .fold(rec);
                0
            })
            .map_err(ring_error)?;
        let ring = builder.build().map_err(ring_error)?;
        let epoll = ring.epoll_fd();
        let ring = Arc::new(Mutex::new(ring));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (ring, stop) = (Arc::clone(&ring), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("flare-timed".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        // Waits up to POLL for a wake-up (the ring half
                        // full) without holding the lock, then reads
                        // whatever is there.
                        let mut fd = libc::pollfd {
                            fd: epoll,
                            events: libc::POLLIN,
                            revents: 0,
                        };
                        // SAFETY: one valid pollfd; the epoll fd lives as
                        // long as the ring, which outlives this thread.
                        unsafe { libc::poll(&mut fd, 1, POLL.as_millis() as i32) };
                        let _ = ring
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .consume();
                    }
                })
                .map_err(|source| Error::Io {
                    what: "starting the thread that reads timed samples".into(),
                    source,
                })?
        };
        Ok(TimedRing {
            shared,
            ring,
            stop,
            thread: Some(thread),
        })
    }

    /// Reads what the ring holds now and returns everything folded since
    /// the last clearing read; with `clear`, that is forgotten.
    pub fn read(&self, clear: bool) -> Folded<K> {
        let _ = self
            .ring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .consume();
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if clear {
            shared.index.clear();
            Folded {
                keys: std::mem::take(&mut shared.folded.keys),
                events: Some(std::mem::take(&mut shared.folded.events)),
            }
        } else {
            Folded {
                keys: shared.folded.keys.clone(),
                events: Some(shared.folded.events.clone()),
            }
        }
    }
}

impl<K> Drop for TimedRing<K> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn ring_error(source: libbpf_rs::Error) -> Error {
    Error::MapRead {
        map: "timed_events",
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    #[repr(C)]
    struct Key {
        pid: u32,
        stack: u32,
    }
    // SAFETY: two integers, valid for any bit pattern.
    unsafe impl PlainKey for Key {}

    fn record(time: u64, value: u64, tid: u32, cpu: u32, key: Key) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend(time.to_ne_bytes());
        r.extend(value.to_ne_bytes());
        r.extend(tid.to_ne_bytes());
        r.extend(cpu.to_ne_bytes());
        r.extend(key.pid.to_ne_bytes());
        r.extend(key.stack.to_ne_bytes());
        r
    }

    #[test]
    fn records_fold_into_keys_and_events() {
        let mut s = Shared::<Key>::new();
        let a = Key { pid: 1, stack: 7 };
        let b = Key { pid: 2, stack: 7 };
        assert!(s.fold(&record(100, 1, 11, 0, a)));
        assert!(s.fold(&record(200, 1, 21, 1, b)));
        assert!(s.fold(&record(300, 5, 12, 1, a)));
        assert!(!s.fold(&record(400, 1, 1, 1, a)[..30]), "cut short");
        assert_eq!(s.folded.keys, vec![(a, 6), (b, 1)]);
        let e = &s.folded.events;
        assert_eq!(e.len(), 3);
        assert_eq!(
            (e[2].time_ns, e[2].value, e[2].sample, e[2].tid, e[2].cpu),
            (300, 5, 0, 12, 1)
        );
        assert_eq!(e[1].sample, 1);
    }

    #[test]
    fn ring_sizes_are_powers_of_two_pages() {
        let r = ring_size();
        assert!(r.is_power_of_two() && (1 << 20..=16 << 20).contains(&r));
        assert!(idle_ring_size().is_power_of_two());
    }
}

#[cfg(test)]
mod scale_tests {
    use super::*;

    #[test]
    fn scaling_keeps_keys_the_sums_of_their_events() {
        let ev = |time_ns, value, sample| Event {
            time_ns,
            value,
            sample,
            tid: 1,
            cpu: 0,
        };
        let f = Folded {
            keys: vec![("a", 2_500), ("b", 900), ("c", 3_000)],
            events: Some(vec![
                ev(1, 1_500, 0),
                ev(2, 1_000, 0),
                ev(3, 900, 1),
                ev(4, 3_000, 2),
            ]),
        }
        .scale_down(1000);
        assert_eq!(f.keys, vec![("a", 2), ("c", 3)]);
        let e = f.events.unwrap();
        assert_eq!(
            e.iter().map(|e| (e.sample, e.value)).collect::<Vec<_>>(),
            [(0, 1), (0, 1), (1, 3)]
        );
        let untimed = Folded {
            keys: vec![("a", 2_500), ("b", 900)],
            events: None,
        }
        .scale_down(1000);
        assert_eq!(untimed.keys, vec![("a", 2)]);
    }
}
