//! Symbolization for periodic runs: each interval's raw samples are named
//! through one long-lived [`Symbolizer`] (its caches persist across
//! intervals), and a raw stack seen in an earlier interval is not named
//! again: the kernel keeps a stack's addresses for the whole run, so it
//! means the same in every interval.

use std::collections::HashMap;

use crate::collect::{Collector, RawSample, RawTask};
use crate::procmaps::Mappings;
use crate::profile::{Sample, TaskStack};
use crate::symbolize::{self, Symbolizer};

/// Known raw stacks are forgotten this often (in intervals), so that a
/// process that reuses a PID (and the same addresses) is named afresh,
/// and so that the map stays small.
const FORGET_EVERY: u64 = 60;
const MAX_KNOWN: usize = 1 << 20;

#[derive(Clone, PartialEq, Eq, Hash)]
struct RawKey {
    task: RawTask,
    waker: Option<RawTask>,
}

/// Names raw samples, remembering what each distinct raw stack became.
pub struct Resolver {
    symbolizer: Symbolizer,
    known: HashMap<RawKey, (TaskStack, Option<TaskStack>)>,
    batches: u64,
}

impl Resolver {
    pub fn new(options: symbolize::Options, mappings: Mappings) -> Self {
        Resolver {
            symbolizer: Symbolizer::with_mappings(options, mappings),
            known: HashMap::new(),
            batches: 0,
        }
    }

    /// Names one interval's samples (tidied by `collector`, not merged).
    pub fn resolve(&mut self, collector: &dyn Collector, raw: Vec<RawSample>) -> Vec<Sample> {
        self.batches += 1;
        if self.batches % FORGET_EVERY == 0 || self.known.len() > MAX_KNOWN {
            self.known.clear();
        }
        let mut out = Vec::with_capacity(raw.len());
        let mut new = Vec::new();
        let mut new_keys = Vec::new();
        for s in raw {
            let key = RawKey {
                task: s.task,
                waker: s.waker,
            };
            match self.known.get(&key) {
                Some((task, waker)) => out.push(Sample::new(task.clone(), waker.clone(), s.value)),
                None => {
                    new.push(RawSample {
                        task: key.task.clone(),
                        waker: key.waker.clone(),
                        value: s.value,
                    });
                    new_keys.push(key);
                }
            }
        }
        let mut named = self.symbolizer.resolve(new);
        collector.tidy(&mut named);
        for (key, s) in new_keys.into_iter().zip(&named) {
            self.known.insert(key, (s.task.clone(), s.waker.clone()));
        }
        out.extend(named);
        out
    }
}
