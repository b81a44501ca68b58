//! The flame graph of a [`View`] as a tree of frames, and its compact JSON
//! form for the page.
//!
//! Children are merged by name and sorted by name, as flame graphs draw
//! them. The store's trie already merges paths, so a view's tree is the
//! trie with the view's values summed into it. Frames narrower than a
//! pixel at full width would only bloat each update, so [`Tree::build`]
//! folds nodes under a minimum value into their parent (the parent keeps
//! their value, so totals stay exact).

use std::fmt::Write as _;

use super::window::{Store, View};
use crate::profile::PathKind;

/// One frame of the flame graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Index into [`Tree::names`].
    pub name: u32,
    /// Value of this frame and everything above it.
    pub value: u64,
    /// Indices into [`Tree::nodes`], sorted by name.
    pub children: Vec<u32>,
}

/// A flame graph: node 0 is the root (`all`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    /// Labels used by the nodes: name and what the frame is.
    pub names: Vec<(String, Kind)>,
    pub nodes: Vec<Node>,
    /// For a differential graph, each node's value in the baseline,
    /// scaled to the graph's total (as `flare diff` scales "before").
    pub before: Option<Vec<u64>>,
}

/// What a frame stands for, for colouring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Root,
    Process,
    User,
    Kernel,
    Interpreted,
    Jit,
    Label,
    Missed,
    Waker,
}

impl Kind {
    /// The one-letter code the page reads.
    pub fn code(self) -> char {
        match self {
            Kind::Root => 'r',
            Kind::Process => 'p',
            Kind::User => 'u',
            Kind::Kernel => 'k',
            Kind::Interpreted => 'i',
            Kind::Jit => 'j',
            Kind::Label => 'l',
            Kind::Missed => 'm',
            Kind::Waker => 'w',
        }
    }

    fn of(k: PathKind) -> Self {
        match k {
            PathKind::Process => Kind::Process,
            PathKind::User => Kind::User,
            PathKind::Kernel => Kind::Kernel,
            PathKind::Interpreted => Kind::Interpreted,
            PathKind::Jit => Kind::Jit,
            PathKind::Label => Kind::Label,
            PathKind::Missed => Kind::Missed,
            PathKind::WakerKernel | PathKind::WakerUser | PathKind::WakerProcess => Kind::Waker,
        }
    }
}

impl Tree {
    /// Builds the tree of `view`, leaving out frames whose value is below
    /// `min_value` (their value stays in their parent).
    pub fn build(store: &Store, view: &View, min_value: u64) -> Tree {
        Tree::build_counts(store, &view.counts, None, min_value)
    }

    /// The values of `counts` (stack id, value) summed into the trie.
    fn trie_values(store: &Store, counts: &[(u32, u64)]) -> Vec<u64> {
        let mut values = vec![0u64; store.trie.len()];
        for &(id, value) in counts {
            values[0] += value;
            for &n in store.stacks[id as usize].nodes.iter() {
                values[n as usize] += value;
            }
        }
        values
    }

    /// The tree of `counts`, differential against `before` (stack id,
    /// value) when given: widths are `counts`, each node also carries its
    /// value in `before` scaled to the total of `counts`.
    pub fn build_counts(
        store: &Store,
        counts: &[(u32, u64)],
        before: Option<&[(u32, u64)]>,
        min_value: u64,
    ) -> Tree {
        let trie = &store.trie;
        let values = Tree::trie_values(store, counts);
        let base = before.map(|b| Tree::trie_values(store, b));
        let scale = match &base {
            Some(b) if b[0] > 0 => values[0] as f64 / b[0] as f64,
            _ => 1.0,
        };
        let mut before_out = base.as_ref().map(|_| Vec::new());
        let mut tree = Tree {
            names: vec![("all".to_string(), Kind::Root)],
            nodes: Vec::new(),
            before: None,
        };
        // Store label -> tree name, by index (0: not yet used).
        let mut name_ids: Vec<u32> = vec![0; store.labels()];
        let min = min_value.max(1);
        // (trie node, parent in the tree)
        let mut stack = vec![(0u32, None::<u32>)];
        while let Some((t, parent)) = stack.pop() {
            let name = if t == 0 {
                0
            } else {
                let label = trie.label[t as usize];
                let slot = &mut name_ids[label as usize];
                if *slot == 0 {
                    let (n, k) = store.label(label);
                    tree.names.push((n.to_string(), Kind::of(k)));
                    *slot = tree.names.len() as u32 - 1;
                }
                *slot
            };
            let new = tree.nodes.len() as u32;
            tree.nodes.push(Node {
                name,
                value: values[t as usize],
                children: Vec::new(),
            });
            if let (Some(out), Some(b)) = (&mut before_out, &base) {
                out.push((b[t as usize] as f64 * scale).round() as u64);
            }
            if let Some(p) = parent {
                tree.nodes[p as usize].children.push(new);
            }
            let mut kids: Vec<u32> = trie.children[t as usize]
                .iter()
                .copied()
                .filter(|&c| values[c as usize] >= min)
                .collect();
            let label_name = |c: u32| store.label(trie.label[c as usize]).0;
            // Pushed in reverse name order, so popped (and numbered) in order.
            kids.sort_by(|&a, &b| label_name(b).cmp(label_name(a)));
            stack.extend(kids.into_iter().map(|c| (c, Some(new))));
        }
        tree.before = before_out;
        tree
    }

    /// The total value (the root's).
    pub fn total(&self) -> u64 {
        self.nodes.first().map_or(0, |n| n.value)
    }

    /// The number of frames from the root to the deepest leaf.
    pub fn depth(&self) -> usize {
        fn go(t: &Tree, n: u32) -> usize {
            1 + t.nodes[n as usize]
                .children
                .iter()
                .map(|&c| go(t, c))
                .max()
                .unwrap_or(0)
        }
        if self.nodes.is_empty() {
            0
        } else {
            go(self, 0)
        }
    }

    /// The tree as JSON: `{"names":[[name,kind],..],"root":NODE}` with each
    /// node `[name index, value, [children..]]` (children left out when
    /// there are none); a differential tree's nodes are `[name index,
    /// value, [children..], before]`, children always given.
    pub fn write_json(&self, out: &mut String) {
        out.push_str("{\"names\":[");
        for (i, (n, k)) in self.names.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push('[');
            json_str(out, n);
            let _ = write!(out, ",\"{}\"]", k.code());
        }
        out.push_str("],\"root\":");
        if self.nodes.is_empty() {
            out.push_str("null");
        } else {
            self.node_json(out, 0);
        }
        out.push('}');
    }

    fn node_json(&self, out: &mut String, i: u32) {
        let n = &self.nodes[i as usize];
        let _ = write!(out, "[{},{}", n.name, n.value);
        let before = self
            .before
            .as_ref()
            .and_then(|b| b.get(i as usize).copied());
        if !n.children.is_empty() || before.is_some() {
            out.push_str(",[");
            for (j, &c) in n.children.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                self.node_json(out, c);
            }
            out.push(']');
        }
        if let Some(b) = before {
            let _ = write!(out, ",{b}");
        }
        out.push(']');
    }
}

/// Appends `s` as a JSON string.
pub fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
