//! bcc's `-s`: frame names with the offset of the address into its
//! function (`vfs_read+0x5`). The symbolizer gives names only, so the
//! function starts are looked up again here, in one batch per process.

use std::collections::{BTreeSet, HashMap};

use blazesym::symbolize::source::{Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolizer};
use blazesym::Pid;

use crate::profile::{Frame, FrameKind, Sample, Trace, UNKNOWN};

/// The address looked up for a frame: return addresses (every frame but
/// the leaf) one byte earlier, as the symbolizer does.
fn lookup(index: usize, addr: u64) -> u64 {
    if index == 0 {
        addr
    } else {
        addr.wrapping_sub(1)
    }
}

/// The address each of `addrs` has at the start of its function. (Not
/// the symbol's own address, which for a process is relative to its
/// file: the start is the address less its offset into the symbol.)
fn starts(sym: &Symbolizer, src: &Source<'_>, addrs: &BTreeSet<u64>) -> HashMap<u64, u64> {
    let addrs: Vec<u64> = addrs.iter().copied().collect();
    match sym.symbolize(src, Input::AbsAddr(&addrs)) {
        Ok(res) => addrs
            .iter()
            .zip(res)
            .filter_map(|(&a, s)| Some((a, a.wrapping_sub(s.into_sym()?.offset as u64))))
            .collect(),
        Err(_) => HashMap::new(),
    }
}

fn each_frame(samples: &mut [Sample], mut f: impl FnMut(u32, usize, &mut Frame)) {
    for s in samples {
        // Only stacks of one process have user frames.
        let pid = s.task.pid.unwrap_or(0);
        for t in [&mut s.task.kernel, &mut s.task.user] {
            if let Trace::Frames(frames) = t {
                for (i, fr) in frames.iter_mut().enumerate() {
                    f(pid, i, fr);
                }
            }
        }
    }
}

/// Appends `+0xOFFSET` to every resolved frame name.
pub fn add_offsets(samples: &mut [Sample]) {
    let sym = Symbolizer::new();
    let mut kernel = BTreeSet::new();
    let mut user: HashMap<u32, BTreeSet<u64>> = HashMap::new();
    each_frame(samples, |pid, i, f| {
        if &*f.name == UNKNOWN {
            return;
        }
        match f.kind {
            FrameKind::Kernel => kernel.insert(lookup(i, f.addr)),
            FrameKind::User => user.entry(pid).or_default().insert(lookup(i, f.addr)),
        };
    });
    let kstarts = starts(&sym, &Source::Kernel(Kernel::default()), &kernel);
    let ustarts: HashMap<u32, HashMap<u64, u64>> = user
        .iter()
        .map(|(&pid, a)| {
            let src = Source::Process(Process::new(Pid::from(pid)));
            (pid, starts(&sym, &src, a))
        })
        .collect();
    let empty = HashMap::new();
    each_frame(samples, |pid, i, f| {
        if &*f.name == UNKNOWN {
            return;
        }
        let table = match f.kind {
            FrameKind::Kernel => &kstarts,
            FrameKind::User => ustarts.get(&pid).unwrap_or(&empty),
        };
        if let Some(&start) = table.get(&lookup(i, f.addr)) {
            f.name = format!("{}+0x{:x}", f.name, f.addr.wrapping_sub(start)).into();
        }
    });
}
