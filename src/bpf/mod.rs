//! Collecting: BPF skeletons, perf events, and what every loader needs
//! (privilege and BTF checks, memlock, CPU lists, PID namespaces, reading
//! stack-trace maps).

pub mod perf;
pub mod system;
pub mod tracefs;

use libbpf_rs::{MapCore, MapFlags};

use crate::symbolize::RawTrace;

/// The generated skeletons, one per BPF program in `bpf/`.
#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    unused,
    non_camel_case_types
)]
pub mod skel {
    pub mod profile {
        include!(concat!(env!("OUT_DIR"), "/profile.skel.rs"));
    }
    pub mod stackcount {
        include!(concat!(env!("OUT_DIR"), "/stackcount.skel.rs"));
    }
}

/// Mirrors `common.h`.
pub const STACK_SKIPPED: i32 = -1;
const EFAULT: i32 = 14;
const ENOMEM: i32 = 12;
const EEXIST: i32 = 17;

/// Stacks that could not be stored, counted while reading a collection.
#[derive(Clone, Copy, Debug, Default)]
pub struct StackLoss {
    pub missed: u64,
    pub enomem: bool,
}

/// Reads a stack id returned by `bpf_get_stackid` into a [`RawTrace`]:
/// a valid id is looked up in the stack map; -EFAULT means there is no such
/// stack (a user-mode sample has no kernel stack); any other error means
/// the stack could not be stored and is counted in `loss`.
pub fn read_stack<M: MapCore>(
    stacks: &M,
    id: i32,
    collected: bool,
    loss: &mut StackLoss,
) -> RawTrace {
    if !collected {
        return RawTrace::NotCollected;
    }
    if id >= 0 {
        return match stacks.lookup(&id.to_ne_bytes(), MapFlags::ANY) {
            Ok(Some(bytes)) => RawTrace::Addrs(
                bytes
                    .chunks_exact(8)
                    .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
                    .take_while(|&a| a != 0)
                    .collect(),
            ),
            _ => {
                loss.missed += 1;
                RawTrace::Missed { enomem: false }
            }
        };
    }
    if id == -EFAULT {
        return RawTrace::Addrs(Vec::new());
    }
    loss.missed += 1;
    // A stack map is a hash table without chaining: a taken bucket
    // (-EEXIST) is as much a sign of a small map as running out (-ENOMEM).
    let enomem = id == -ENOMEM || id == -EEXIST;
    loss.enomem |= enomem;
    RawTrace::Missed { enomem }
}

/// Stacks already read during one collection: many keys share a stack id,
/// and each id is looked up in the kernel once.
#[derive(Default)]
pub struct StackCache {
    traces: std::collections::HashMap<i32, RawTrace>,
}

impl StackCache {
    /// [`read_stack`], looking each valid id up once. Losses are counted
    /// for every key, as bcc counts them.
    pub fn read<M: MapCore>(
        &mut self,
        stacks: &M,
        id: i32,
        collected: bool,
        loss: &mut StackLoss,
    ) -> RawTrace {
        if !collected || id < 0 {
            return read_stack(stacks, id, collected, loss);
        }
        if let Some(t) = self.traces.get(&id) {
            if matches!(t, RawTrace::Missed { .. }) {
                loss.missed += 1;
            }
            return t.clone();
        }
        let t = read_stack(stacks, id, collected, loss);
        self.traces.insert(id, t.clone());
        t
    }
}

/// Reads every entry of a `counts` hash map of `key_size`-byte keys and
/// `u64` values, in batches of 4096 (one syscall each, instead of two per
/// key); with `clear`, entries are deleted as they are read, so that
/// periodic readers see only what came after.
pub fn read_counts<M: MapCore>(
    counts: &M,
    key_size: usize,
    clear: bool,
) -> crate::error::Result<Vec<(Vec<u8>, u64)>> {
    let batch = if clear {
        counts.lookup_and_delete_batch(4096, MapFlags::ANY, MapFlags::ANY)
    } else {
        counts.lookup_batch(4096, MapFlags::ANY, MapFlags::ANY)
    }
    .map_err(|source| crate::error::Error::MapRead {
        map: "counts",
        source,
    })?;
    Ok(batch
        .filter(|(key, _)| key.len() == key_size)
        .map(|(key, value)| {
            let count = u64::from_ne_bytes(
                value
                    .get(..8)
                    .and_then(|v| v.try_into().ok())
                    .unwrap_or([0; 8]),
            );
            (key, count)
        })
        .collect())
}

/// A C `char[]` comm as a string (up to the first NUL, lossy UTF-8).
pub fn comm_str(comm: &[i8]) -> String {
    let bytes: Vec<u8> = comm
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
