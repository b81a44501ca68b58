//! Collecting: BPF skeletons, perf events, and what every loader needs
//! (privilege and BTF checks, memlock, CPU lists, PID namespaces, reading
//! stack-trace maps).

pub mod perf;
pub mod probe;
pub mod system;

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
    pub mod offcpu {
        include!(concat!(env!("OUT_DIR"), "/offcpu.skel.rs"));
    }
}

/// Mirrors `common.h`.
pub const STACK_SKIPPED: i32 = -1;
const EFAULT: i32 = 14;
const ENOMEM: i32 = 12;

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
    let enomem = id == -ENOMEM;
    loss.enomem |= enomem;
    RawTrace::Missed { enomem }
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
