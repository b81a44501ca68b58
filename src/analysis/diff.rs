//! Differential profiles: two sets of stacks joined stack by stack, the
//! "before" side scaled to the "after" side's total so that a busier second
//! run does not paint everything red. What is left is the change in share.

use std::collections::HashMap;

use super::Stacks;

/// A stack with its (normalised) value before and its value after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffStack {
    pub frames: Vec<String>,
    pub before: u64,
    pub after: u64,
}

/// Joins `before` and `after` by stack, scaling the before values by
/// `total(after) / total(before)`. Stacks come out sorted by their frames.
pub fn diff(before: &Stacks, after: &Stacks) -> Vec<DiffStack> {
    let (tb, ta) = (before.total(), after.total());
    let scale = if tb == 0 { 1.0 } else { ta as f64 / tb as f64 };
    let mut joined: HashMap<&[String], (u64, u64)> = HashMap::new();
    for s in &before.stacks {
        let e = joined.entry(&s.frames).or_default();
        e.0 = e.0.saturating_add(s.value);
    }
    for s in &after.stacks {
        let e = joined.entry(&s.frames).or_default();
        e.1 = e.1.saturating_add(s.value);
    }
    let mut out: Vec<DiffStack> = joined
        .into_iter()
        .map(|(frames, (b, a))| DiffStack {
            frames: frames.to_vec(),
            before: (b as f64 * scale).round() as u64,
            after: a,
        })
        .collect();
    out.sort_by(|a, b| a.frames.cmp(&b.frames));
    out
}
