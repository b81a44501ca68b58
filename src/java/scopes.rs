//! What the JIT inlined at a compiled frame's pc: HotSpot records, for
//! each pc where compiled code may stop (calls, safepoints), a `PcDesc`
//! saying where in the nmethod's scopes data the scope of that pc is
//! described, and each scope names its method, its bytecode index and the
//! scope it was inlined into (`ScopeDesc::decode_body`). flare reads them
//! from the live JVM to turn one compiled frame into the methods it runs.
//!
//! The layout read is JDK 9 to 22's (`nmethod` with `_scopes_pcs_offset`,
//! `_metadata_offset`, `_scopes_data_begin`). The nmethod may have been
//! freed and its memory reused since BPF sampled it: every offset is
//! checked against the nmethod's own sections, every count and chain
//! bounded.

use super::layout::Layout;
use super::method::{int, word, Stream};
use crate::python::memory::Memory;

/// `PcDesc`s read of an nmethod at most (a large C2 method has a few
/// thousand).
const MAX_PC_DESCS: u64 = 1 << 16;

/// Scopes followed from a pc at most: the depth of inlining (C2 inlines 15
/// levels by default).
pub const MAX_DEPTH: usize = 32;

/// `DebugInformationRecorder::serialized_null`: no scope recorded.
const SERIALIZED_NULL: i32 = 0;

/// `InvocationEntryBci`: the bytecode indexes of scopes are stored less
/// it.
const INVOCATION_ENTRY_BCI: i32 = -1;

/// Bytes of an nmethod's sections at most (metadata, scopes data).
const MAX_SECTION: u64 = 1 << 24;

/// An nmethod's method and where its scopes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nmethod {
    /// Its `Method*`.
    pub method: u64,
    pub compile_id: i32,
    /// (pc offset from the code's start, scope decode offset) of each
    /// `PcDesc`, in the nmethod's order (by pc). Empty when they could not
    /// be read: then only [`Nmethod::method`] is known.
    pcs: Vec<(i32, i32)>,
    /// The scopes data: where it starts, how long.
    scopes: u64,
    scopes_len: u64,
    /// The metadata (`Metadata*` array) scopes name their methods in.
    metadata: u64,
    metadata_len: u64,
}

/// One scope at a pc: a method and the bytecode index it is at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope {
    pub method: u64,
    /// The bytecode index (-1: the method's entry); `None` when the pc has
    /// no scope recorded (then the scope is the nmethod's method, at no
    /// known index).
    pub bci: Option<i32>,
}

/// Reads the nmethod at `nm`. `None` when its header cannot be read; its
/// scopes are left out (see [`Nmethod::scopes`]) when they do not lie
/// where the header says or are past the bounds.
pub fn read_nmethod(mem: &dyn Memory, layout: &Layout, nm: u64) -> Option<Nmethod> {
    if nm == 0 {
        return None;
    }
    let end = [
        layout.nm_method,
        layout.nm_scopes_data,
        layout.nm_compile_id,
        layout.nm_scopes_pcs,
        layout.nm_dependencies,
        layout.nm_metadata,
    ]
    .iter()
    .map(|&o| usize::from(o) + 8)
    .max()
    .unwrap_or(0);
    let mut head = vec![0u8; end];
    mem.read(nm, &mut head).ok()?;
    let section = |o: u16| -> Option<u64> {
        let off = int(&head, o)?;
        nm.checked_add(u64::try_from(off).ok()?)
    };
    let mut out = Nmethod {
        method: word(&head, layout.nm_method)?,
        compile_id: int(&head, layout.nm_compile_id)?,
        pcs: Vec::new(),
        scopes: 0,
        scopes_len: 0,
        metadata: 0,
        metadata_len: 0,
    };
    // The sections follow each other: metadata, scopes data, scopes pcs,
    // dependencies (`nmethod.hpp`: metadata ends where scopes data begins,
    // which ends where the pcs begin).
    let metadata = section(layout.nm_metadata);
    let scopes = word(&head, layout.nm_scopes_data);
    let pcs = section(layout.nm_scopes_pcs);
    let deps = section(layout.nm_dependencies);
    let (Some(metadata), Some(scopes), Some(pcs), Some(deps)) = (metadata, scopes, pcs, deps)
    else {
        return Some(out);
    };
    if !(nm <= metadata && metadata <= scopes && scopes <= pcs && pcs <= deps)
        || scopes - metadata > MAX_SECTION
        || pcs - scopes > MAX_SECTION
        || layout.pc_desc_size < 8
    {
        return Some(out);
    }
    let size = u64::from(layout.pc_desc_size);
    let count = (deps - pcs) / size;
    if count > MAX_PC_DESCS || (deps - pcs) % size != 0 {
        return Some(out);
    }
    let mut bytes = vec![0u8; (count * size) as usize];
    if mem.read(pcs, &mut bytes).is_err() {
        return Some(out);
    }
    let descs: Option<Vec<(i32, i32)>> = bytes
        .chunks_exact(usize::from(layout.pc_desc_size))
        .map(|d| Some((int(d, layout.pc_desc_pc)?, int(d, layout.pc_desc_scope)?)))
        .collect();
    out.pcs = descs.unwrap_or_default();
    out.scopes = scopes;
    out.scopes_len = pcs - scopes;
    out.metadata = metadata;
    out.metadata_len = (scopes - metadata) / 8;
    Some(out)
}

impl Nmethod {
    /// The scope decode offset of the pc `pc_offset` bytes into the code:
    /// that of its `PcDesc` if it has one (a call's return address has),
    /// else of the nearest in the direction that holds the code that ran:
    /// - a sampled pc (`return_address` false) takes the next one, as
    ///   HotSpot's `pc_desc_near`: in a loop, the back edge's poll after
    ///   the body, in the scope of the method inlined there;
    /// - a return address without one (a leaf call into the runtime,
    ///   which records no debug point) takes the one before: the code
    ///   after the call may be another branch's (a loop calling
    ///   `System.nanoTime()` before an inlined callee showed in it).
    ///
    /// [`SERIALIZED_NULL`] when none.
    fn decode_offset(&self, pc_offset: u32, return_address: bool) -> i32 {
        let Ok(pc) = i32::try_from(pc_offset) else {
            return SERIALIZED_NULL;
        };
        let i = self.pcs.partition_point(|&(at, _)| at < pc);
        let at = |j: usize| self.pcs.get(j).map_or(SERIALIZED_NULL, |&(_, d)| d);
        match self.pcs.get(i) {
            Some(&(p, d)) if p == pc => d,
            _ if !return_address => at(i),
            _ => i.checked_sub(1).map_or(SERIALIZED_NULL, at),
        }
    }

    /// The scopes at the pc `pc_offset` bytes into the code, outermost
    /// first: the nmethod's method, then each method inlined into the one
    /// before, the innermost (the one running) last. `None` when the
    /// scopes cannot be read or are not what HotSpot writes (a chain past
    /// [`MAX_DEPTH`], a method index past the metadata, an outermost scope
    /// that is not the nmethod's method).
    pub fn scopes(
        &self,
        mem: &dyn Memory,
        layout: &Layout,
        pc_offset: u32,
        return_address: bool,
    ) -> Option<Vec<Scope>> {
        let mut offset = self.decode_offset(pc_offset, return_address);
        let mut out = Vec::new();
        while offset != SERIALIZED_NULL {
            if out.len() == MAX_DEPTH {
                return None;
            }
            let (scope, sender) = self.scope_at(mem, layout, offset)?;
            out.push(scope);
            offset = sender;
        }
        if out.is_empty() {
            out.push(Scope {
                method: self.method,
                bci: None,
            });
        }
        out.reverse();
        (out[0].method == self.method).then_some(out)
    }

    /// The scope described at `offset` in the scopes data, and its
    /// sender's offset.
    fn scope_at(&self, mem: &dyn Memory, layout: &Layout, offset: i32) -> Option<(Scope, i32)> {
        let offset = u64::try_from(offset).ok()?;
        if offset >= self.scopes_len {
            return None;
        }
        let left = usize::try_from(self.scopes_len - offset).ok()?;
        let mut s = Stream::new(mem, self.scopes.checked_add(offset)?, left);
        let excess = layout.unsigned5_excess;
        let sender = s.unsigned(excess)? as i32;
        let method = self.metadata_at(mem, s.unsigned(excess)?)?;
        let bci = (s.unsigned(excess)? as i32).wrapping_add(INVOCATION_ENTRY_BCI);
        Some((
            Scope {
                method,
                bci: Some(bci),
            },
            sender,
        ))
    }

    /// `nmethod::metadata_at`: entry `index - 1` of the metadata (0 is a
    /// null, which no scope's method is).
    fn metadata_at(&self, mem: &dyn Memory, index: u32) -> Option<u64> {
        let index = u64::from(index).checked_sub(1)?;
        if index >= self.metadata_len {
            return None;
        }
        let m = mem.read_u64(self.metadata.checked_add(index * 8)?).ok()?;
        (m != 0).then_some(m)
    }
}
