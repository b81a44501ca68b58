//! What the JIT inlined at a compiled frame's pc: HotSpot records, for
//! each pc where compiled code may stop (calls, safepoints), a `PcDesc`
//! saying where in the nmethod's scopes data the scope of that pc is
//! described, and each scope names its method, its bytecode index and the
//! scope it was inlined into (`ScopeDesc::decode_body`). flare reads them
//! from the live JVM to turn one compiled frame into the methods it runs.
//!
//! Where the sections lie changed with JDK 23 ([`NmethodData`]). The
//! nmethod may have been freed and its memory reused since BPF sampled
//! it: every offset is checked against the nmethod's own sections, every
//! count and chain bounded.

use std::ops::Range;

use super::layout::{Layout, MetadataAt, NmethodData};
use super::method::{half, int, word, Stream};
use super::BLOB_HEADER;
use crate::runtime::memory::Memory;

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

impl crate::runtime::tracker::Weight for Nmethod {
    fn weight(&self) -> usize {
        self.pcs.len() * std::mem::size_of::<(i32, i32)>() + std::mem::size_of::<Self>()
    }
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
    let mut head = vec![0u8; BLOB_HEADER];
    mem.read(nm, &mut head).ok()?;
    let mut out = Nmethod {
        method: word(&head, layout.nm_method)?,
        compile_id: int(&head, layout.nm_compile_id)?,
        pcs: Vec::new(),
        scopes: 0,
        scopes_len: 0,
        metadata: 0,
        metadata_len: 0,
    };
    let Some(s) = sections(layout, nm, &head) else {
        return Some(out);
    };
    let len = |r: &Range<u64>| r.end - r.start;
    if len(&s.metadata) > MAX_SECTION || len(&s.scopes) > MAX_SECTION || layout.pc_desc_size < 8 {
        return Some(out);
    }
    let size = u64::from(layout.pc_desc_size);
    let count = len(&s.pcs) / size;
    if count > MAX_PC_DESCS || len(&s.pcs) % size != 0 {
        return Some(out);
    }
    let mut bytes = vec![0u8; (count * size) as usize];
    if mem.read(s.pcs.start, &mut bytes).is_err() {
        return Some(out);
    }
    let descs: Option<Vec<(i32, i32)>> = bytes
        .chunks_exact(usize::from(layout.pc_desc_size))
        .map(|d| Some((int(d, layout.pc_desc_pc)?, int(d, layout.pc_desc_scope)?)))
        .collect();
    out.pcs = descs.unwrap_or_default();
    out.scopes = s.scopes.start;
    out.scopes_len = len(&s.scopes);
    out.metadata = s.metadata.start;
    out.metadata_len = len(&s.metadata) / 8;
    Some(out)
}

/// Where an nmethod's metadata, scopes data and `PcDesc`s lie.
struct Sections {
    metadata: Range<u64>,
    scopes: Range<u64>,
    pcs: Range<u64>,
}

/// The sections of the nmethod at `nm` whose header is `head`; `None`
/// when they are not in the order HotSpot writes them.
fn sections(layout: &Layout, nm: u64, head: &[u8]) -> Option<Sections> {
    let unsigned = |o: u16| u64::try_from(int(head, o)?).ok();
    match layout.nm_data {
        // `nmethod.hpp` (JDK 8-22): metadata ends where the scopes data
        // begins, which ends where the pcs begin, which end where the
        // dependencies begin.
        NmethodData::Inline {
            metadata,
            scopes_data,
            scopes_offset,
            scopes_pcs,
            dependencies,
        } => {
            let at = |o: u16| nm.checked_add(unsigned(o)?);
            let s = if scopes_offset {
                at(scopes_data)?
            } else {
                word(head, scopes_data)?
            };
            let m = at(metadata)?;
            let (p, d) = (at(scopes_pcs)?, at(dependencies)?);
            (nm <= m && m <= s && s <= p && p <= d).then_some(Sections {
                metadata: m..s,
                scopes: s..p,
                pcs: p..d,
            })
        }
        // JDK 23 on: the pcs end where the scopes data begins, which runs
        // to the end of the immutable data at most (speculations may
        // follow it).
        NmethodData::Immutable {
            data,
            size,
            ref_count,
            scopes_pcs,
            scopes_data,
            metadata,
        } => {
            let base = word(head, data)?;
            let mut end = unsigned(size)?;
            if let Some(r) = ref_count {
                end = end.min(unsigned(r)?);
            }
            let (p, s) = (unsigned(scopes_pcs)?, unsigned(scopes_data)?);
            if !(p <= s && s <= end) {
                return None;
            }
            let metadata = match metadata {
                MetadataAt::AfterCode {
                    data_offset,
                    metadata,
                    blob_size,
                } => {
                    let start = unsigned(data_offset)? + u64::from(half(head, metadata)?);
                    nm.checked_add(start)?..nm.checked_add(unsigned(blob_size)?)?
                }
                MetadataAt::Mutable {
                    data,
                    size,
                    relocation_size,
                } => {
                    let at = word(head, data)?;
                    at.checked_add(unsigned(relocation_size)?)?..at.checked_add(unsigned(size)?)?
                }
            };
            (metadata.start <= metadata.end).then_some(Sections {
                metadata,
                scopes: base.checked_add(s)?..base.checked_add(end)?,
                pcs: base.checked_add(p)?..base.checked_add(s)?,
            })
        }
    }
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
