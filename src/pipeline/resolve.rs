//! Symbolization for periodic runs: each interval's raw samples are named
//! through one long-lived [`Symbolizer`] (its caches persist across
//! intervals), and a raw stack seen in the interval before is not named
//! again: the kernel keeps a stack's addresses for the whole run, so it
//! means the same in every interval. What a run no longer needs — stacks
//! not seen for an interval, mappings of processes that exited before the
//! last read — is forgotten, so that a run without end stays flat.

use ahash::AHashMap;

use crate::collect::{Collector, RawSample, RawTask};
use crate::procmaps::Mappings;
use crate::profile::{Sample, TaskStack};
use crate::symbolize::{self, Symbolizer};

/// What a raw stack was named: the task's stacks and the waker's.
type Named = (TaskStack, Option<TaskStack>);

/// Past this many known raw stacks, all are forgotten.
const MAX_KNOWN: usize = 1 << 20;

#[derive(Clone, PartialEq, Eq, Hash)]
struct RawKey {
    task: RawTask,
    waker: Option<RawTask>,
}

/// Names raw samples, remembering what each distinct raw stack became.
pub struct Resolver {
    symbolizer: Symbolizer,
    mappings: Mappings,
    /// Raw stacks seen in the last interval named: a stack missing from
    /// a whole interval is forgotten (its process may be gone, or its PID
    /// reused), so that memory follows what runs, not what ever ran.
    known: AHashMap<RawKey, Named>,
    /// Exits known when the previous interval was named.
    exits_before: u64,
}

impl Resolver {
    /// A resolver naming runtime frames with `namers` (a collector's).
    pub fn new(
        options: symbolize::Options,
        mappings: Mappings,
        namers: crate::collect::Namers,
    ) -> Self {
        let mut symbolizer = Symbolizer::with_mappings(options, mappings.clone());
        symbolizer.set_namers(namers);
        Resolver {
            symbolizer,
            exits_before: mappings.exits(),
            mappings,
            known: AHashMap::new(),
        }
    }

    /// Names the runtime frames of samples read before the end of an
    /// interval, while their processes may still live.
    pub fn learn(&mut self, raw: &[RawSample]) {
        self.symbolizer.learn(raw);
    }

    /// Names one interval's samples (tidied by `collector`, not merged).
    pub fn resolve(&mut self, collector: &dyn Collector, raw: Vec<RawSample>) -> Vec<Sample> {
        if self.known.len() > MAX_KNOWN {
            self.known.clear();
        }
        // The interval before's, dropped when this one is named rather
        // than kept beside it while the sinks write it (the agent's
        // encoding is its peak of memory).
        let mut older = std::mem::take(&mut self.known);
        let known = &mut self.known;
        let mut lookup = |key: &RawKey| -> Option<Named> {
            if let Some(n) = known.get(key) {
                return Some(n.clone());
            }
            let (k, n) = older.remove_entry(key)?;
            known.insert(k, n.clone());
            Some(n)
        };
        // Samples stay in the order of `raw`: a timeline's events name
        // them by index.
        let mut out: Vec<Option<Sample>> = Vec::with_capacity(raw.len());
        let mut new = Vec::new();
        let mut new_keys = Vec::new();
        for s in raw {
            let key = RawKey {
                task: s.task,
                waker: s.waker,
            };
            match lookup(&key) {
                Some((task, waker)) => out.push(Some(Sample::new(task, waker, s.value))),
                None => {
                    new.push(RawSample {
                        task: key.task.clone(),
                        waker: key.waker.clone(),
                        value: s.value,
                    });
                    new_keys.push((key, out.len()));
                    out.push(None);
                }
            }
        }
        drop(older);
        let mut named = self.symbolizer.resolve(new);
        collector.tidy(&mut named);
        for ((key, at), s) in new_keys.into_iter().zip(named) {
            self.known.insert(key, (s.task.clone(), s.waker.clone()));
            out[at] = Some(s);
        }
        let out: Vec<Sample> = out.into_iter().flatten().collect();
        // A process whose exit was known when the previous interval was
        // named had exited before this interval's counts were read: all
        // its samples are named now, and its mappings can go.
        let exits = self.mappings.exits();
        self.mappings.forget_exited(self.exits_before);
        self.exits_before = exits;
        out
    }
}
