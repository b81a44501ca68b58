//! The `flare top` table: each function's self value (samples with it as
//! the leaf) and total value (samples with it anywhere on the stack, counted
//! once per stack even under recursion), as `pprof -top` and
//! `perf report --no-children` rank them.

use std::collections::{HashMap, HashSet};

use super::Stacks;

/// One function's line in the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopEntry {
    pub name: String,
    pub self_value: u64,
    pub total_value: u64,
}

/// Every function with its self and total value, most self first (then
/// most total, then by name, so the order is stable).
pub fn top(stacks: &Stacks) -> Vec<TopEntry> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut entries: Vec<TopEntry> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for s in &stacks.stacks {
        seen.clear();
        for (i, frame) in s.frames.iter().enumerate() {
            let at = *index.entry(frame).or_insert_with(|| {
                entries.push(TopEntry {
                    name: frame.clone(),
                    self_value: 0,
                    total_value: 0,
                });
                entries.len() - 1
            });
            if seen.insert(frame) {
                entries[at].total_value = entries[at].total_value.saturating_add(s.value);
            }
            if i + 1 == s.frames.len() {
                entries[at].self_value = entries[at].self_value.saturating_add(s.value);
            }
        }
    }
    entries.sort_by(|a, b| {
        b.self_value
            .cmp(&a.self_value)
            .then(b.total_value.cmp(&a.total_value))
            .then(a.name.cmp(&b.name))
    });
    entries
}
