//! Naming Java frames: BPF recorded, for each Java frame, a method and a
//! bytecode index (interpreted), or a code blob and a pc offset in it
//! (compiled, native wrapper, stub), with a cookie that changes when that
//! memory is reused. [`JavaNamer`] reads the JVM's metadata in the live
//! process (the [`Registry`] says where it keeps what) and gives class,
//! method, file and line, expanding what the JIT inlined — or nothing
//! when what the identifiers point at no longer has the cookie BPF read.

use std::sync::Arc;

use super::method::{read_const_method, MethodInfo};
use super::scopes::{read_nmethod, Nmethod, Scope};
use super::vmstructs::string_at;
use super::{FrameId, Kind, Layout, Process, Registry, NO_BCI};
use crate::collect::{Namers, Runtime, RuntimeFrame};
use crate::profile::{clean_name_within, Frame, FrameKind, SourceLine, MAX_RUNTIME_NAME};
use crate::runtime::memory::Memory;
use crate::runtime::tracker::{ProcessNamer, ReadCache};

/// Names [`Runtime::Java`] frames of the processes in a [`Registry`].
pub struct JavaNamer {
    registry: Registry,
    /// By (process id, `Method*`, `ConstMethod*`).
    methods: ReadCache<Process, MethodInfo>,
    /// By (process id, nmethod, compile id).
    nmethods: ReadCache<Process, Nmethod>,
}

/// The namers of a run whose JVMs are in `registry`.
pub fn namers(registry: &Registry) -> Namers {
    vec![(Runtime::Java, Box::new(JavaNamer::new(registry.clone())))]
}

impl JavaNamer {
    pub fn new(registry: Registry) -> Self {
        JavaNamer {
            registry,
            methods: ReadCache::default(),
            nmethods: ReadCache::default(),
        }
    }

    /// The frames of a compiled frame's scopes (outermost first).
    fn inlined(
        &mut self,
        mem: &dyn Memory,
        pid: u32,
        process: &Arc<Process>,
        scopes: &[Scope],
    ) -> Option<Vec<Frame>> {
        let mut out = Vec::with_capacity(scopes.len());
        for (i, scope) in scopes.iter().enumerate() {
            let cm = self.const_method(mem, &process.layout, scope.method)?;
            let info = self.method(mem, pid, process, scope.method, cm)?;
            out.push(Frame {
                inlined: i > 0,
                ..java_frame(&info, scope.bci, FrameKind::Jit)
            });
        }
        Some(out)
    }

    /// The `ConstMethod*` of the method at `method` now.
    fn const_method(&self, mem: &dyn Memory, layout: &Layout, method: u64) -> Option<u64> {
        if method == 0 {
            return None;
        }
        mem.read_u64(method.checked_add(u64::from(layout.method_const))?)
            .ok()
            .filter(|&cm| cm != 0)
    }

    /// The method at `method` whose `ConstMethod` is at `cm`, read once.
    fn method(
        &mut self,
        mem: &dyn Memory,
        pid: u32,
        process: &Arc<Process>,
        method: u64,
        cm: u64,
    ) -> Option<Arc<MethodInfo>> {
        self.methods.get_or_read((pid, method, cm), process, || {
            read_const_method(mem, &process.layout, cm)
        })
    }

    /// The nmethod at `nm`, if its compile id is still `cookie`; read once.
    fn nmethod(
        &mut self,
        mem: &dyn Memory,
        pid: u32,
        process: &Arc<Process>,
        nm: u64,
        cookie: u64,
    ) -> Option<Arc<Nmethod>> {
        self.nmethods.get_or_read((pid, nm, cookie), process, || {
            read_nmethod(mem, &process.layout, nm)
                .filter(|n| u64::from(n.compile_id as u32) == cookie)
        })
    }
}

impl ProcessNamer for JavaNamer {
    type Process = Process;

    fn runtime(&self) -> Runtime {
        Runtime::Java
    }

    fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Names `frame` of process `pid` (`process` in the registry), read
    /// through `mem`.
    fn name_in(
        &mut self,
        mem: &dyn Memory,
        pid: u32,
        process: &Arc<Process>,
        frame: &RuntimeFrame,
    ) -> Option<Vec<Frame>> {
        let id = FrameId::decode(frame.ids)?;
        let layout = &process.layout;
        match id.kind {
            Kind::Interpreted => {
                let cm = self.const_method(mem, layout, id.pointer)?;
                if cm != frame.cookie {
                    return None;
                }
                let info = self.method(mem, pid, process, id.pointer, cm)?;
                let bci = (id.offset != NO_BCI).then_some(id.offset as i32);
                Some(vec![java_frame(&info, bci, FrameKind::Interpreted)])
            }
            Kind::Compiled | Kind::Native => {
                let nm = self.nmethod(mem, pid, process, id.pointer, frame.cookie)?;
                let own = |namer: &mut Self| {
                    let cm = namer.const_method(mem, layout, nm.method)?;
                    let info = namer.method(mem, pid, process, nm.method, cm)?;
                    Some(vec![java_frame(&info, None, FrameKind::Jit)])
                };
                if id.kind == Kind::Native {
                    return own(self);
                }
                // Scopes that cannot be read, or a method of them that
                // cannot, leave the nmethod's own method, at no line.
                match nm.scopes(mem, layout, id.offset, id.return_address) {
                    Some(scopes) => self
                        .inlined(mem, pid, process, &scopes)
                        .or_else(|| own(self)),
                    None => own(self),
                }
            }
            Kind::Stub => stub(mem, layout, id.pointer, frame.cookie),
        }
    }
}

/// A method's frame: its name, and its source file and the line of `bci`
/// (`None`: not known) where the class says.
fn java_frame(info: &MethodInfo, bci: Option<i32>, kind: FrameKind) -> Frame {
    Frame {
        source: info.source_file.as_ref().map(|file| {
            Box::new(SourceLine {
                file: clean_name_within(file, MAX_RUNTIME_NAME).into(),
                line: bci.and_then(|b| info.line(b)),
            })
        }),
        ..Frame::named(
            clean_name_within(&info.display_name(), MAX_RUNTIME_NAME),
            kind,
        )
    }
}

/// A code blob that is no method (a stub, an adapter, the interpreter):
/// its name, `[StubRoutines (1)]`, if its first 4 bytes are still the
/// cookie BPF read.
fn stub(mem: &dyn Memory, layout: &Layout, blob: u64, cookie: u64) -> Option<Vec<Frame>> {
    let name_at = mem
        .read_u64(blob.checked_add(u64::from(layout.blob_name))?)
        .ok()?;
    let mut head = [0u8; 4];
    mem.read(name_at, &mut head).ok()?;
    if name_at == 0 || u64::from(u32::from_le_bytes(head)) != cookie {
        return None;
    }
    let name = string_at(mem, name_at).ok()??;
    Some(vec![Frame::named(
        format!("[{}]", clean_name_within(&name, MAX_RUNTIME_NAME)),
        FrameKind::Jit,
    )])
}

#[cfg(test)]
#[path = "names_tests.rs"]
pub(crate) mod tests;
