//! Naming Ruby frames: BPF recorded (instruction sequence, method entry,
//! instruction, cookie) for each Ruby frame and (method entry, cookie)
//! for each C function's; [`RubyNamer`] reads them in the live process
//! (the [`Registry`] gives its version's [`super::Layout`] and where its
//! symbol table lies) and gives method, file and line as Ruby's own
//! profiler API (`rb_profile_frame_full_label`) names them — or nothing
//! when the object at that address is no longer the one BPF saw.

#[path = "names.rs"]
mod names;

use std::sync::Arc;

use names::{full_label, ClassIvars, Iseq, MethodEntry, METHOD_TYPE_CFUNC, METHOD_TYPE_ISEQ};
pub use names::{id_name, read_string};

use super::{split_ids, Process, Registry};
use crate::collect::{Runtime, RuntimeFrame};
use crate::profile::{clean_name_within, Frame, FrameKind, SourceLine, MAX_RUNTIME_NAME};
use crate::runtime::memory::Memory;
use crate::runtime::tracker::{ProcessNamer, ReadCache, Weight};

/// The instruction index BPF gives when it has none (the pc at or past
/// the 16 bits it keeps): the frame shows its first line.
pub const NO_POSITION: u32 = 0xffff;

/// What a C function's frame is called when its method's name cannot be
/// read (no `ruby_global_symbols` found in the process).
pub const UNKNOWN_CFUNC: &str = "<cfunc>";

/// A name read from the process (a method id's).
struct Name(String);

impl Weight for Name {
    fn weight(&self) -> usize {
        self.0.len() + std::mem::size_of::<Self>()
    }
}

/// Names [`Runtime::Ruby`] frames of the processes in a [`Registry`].
pub struct RubyNamer {
    registry: Registry,
    /// Instruction sequences, by (process id, `rb_iseq_t *`, its code's
    /// address): `None` for not a sequence with that code.
    iseqs: ReadCache<Process, Iseq>,
    /// Method entries of Ruby frames, by (process id, entry, the method's
    /// sequence): `None` for not an ISEQ method of that sequence.
    methods: ReadCache<Process, MethodEntry>,
    /// Method entries of C functions' frames, by (process id, entry, its
    /// definition): `None` for not a C function of that definition.
    cfuncs: ReadCache<Process, MethodEntry>,
    /// Method ids' names, by (process id, id, `ruby_global_symbols`).
    ids: ReadCache<Process, Name>,
    /// 3.1's hidden instance variables that name classes, by (process
    /// id, `rb_cObject`'s address, 0).
    class_ivars: ReadCache<Process, ClassIvars>,
}

/// 3.1's [`ClassIvars`] of process `pid`, read once from its `Object`;
/// `None` for a version that keeps class paths in the class.
fn class_ivars(
    cache: &mut ReadCache<Process, ClassIvars>,
    mem: &dyn Memory,
    pid: u32,
    process: &Arc<Process>,
) -> Option<Arc<ClassIvars>> {
    process.layout.class_ext?;
    let var = process.object_class?;
    cache.get_or_read((pid, var, 0), process, || {
        let object = mem.read_u64(var).ok()?;
        names::class_ivars(mem, &process.layout, object)
    })
}

impl RubyNamer {
    pub fn new(registry: Registry) -> Self {
        RubyNamer {
            registry,
            iseqs: ReadCache::default(),
            methods: ReadCache::default(),
            cfuncs: ReadCache::default(),
            ids: ReadCache::default(),
            class_ivars: ReadCache::default(),
        }
    }

    /// A Ruby method's (block's, class body's, file's) frame: the
    /// sequence `iseq` whose code BPF saw at `cookie`, run by method
    /// entry `cme` (0: none found), at instruction `pos`.
    #[allow(clippy::too_many_arguments)]
    fn ruby_frame(
        &mut self,
        mem: &dyn Memory,
        pid: u32,
        process: &Arc<Process>,
        iseq: u64,
        cme: u64,
        pos: u32,
        cookie: u64,
    ) -> Option<Frame> {
        let layout = &process.layout;
        let info = self.iseqs.get_or_read((pid, iseq, cookie), process, || {
            names::read_iseq(mem, layout, iseq, cookie)
        })?;
        // Qualified by the method entry only when it is the entry of the
        // method the sequence is (in): an entry found for another would
        // name the wrong class.
        let qualified = match (&info.method_name, cme) {
            (Some(method), cme) if cme != 0 => self
                .methods
                .get_or_read((pid, cme, info.local_iseq), process, || {
                    let ivars = class_ivars(&mut self.class_ivars, mem, pid, process);
                    names::read_method_entry(mem, layout, cme, ivars.as_deref())
                        .filter(|m| m.def_type == METHOD_TYPE_ISEQ && m.iseqptr == info.local_iseq)
                })
                .map(|m| m.qualify(method)),
            _ => None,
        };
        let label = full_label(&info.label, &info.base_label, qualified.as_deref());
        let file = clean_name_within(&info.path, MAX_RUNTIME_NAME);
        let line = match pos {
            NO_POSITION => None,
            pos => info.line(pos),
        };
        Some(Frame {
            source: Some(Box::new(SourceLine {
                file: file.as_ref().into(),
                line: Some(line.unwrap_or(info.first_lineno)),
            })),
            ..Frame::named(display_name(&label, &file, &info), FrameKind::Interpreted)
        })
    }

    /// A C function's frame: method entry `cme`, whose definition BPF saw
    /// at `cookie`.
    fn cfunc_frame(
        &mut self,
        mem: &dyn Memory,
        pid: u32,
        process: &Arc<Process>,
        cme: u64,
        cookie: u64,
    ) -> Option<Frame> {
        if cme == 0 {
            return None;
        }
        let layout = &process.layout;
        let entry = self.cfuncs.get_or_read((pid, cme, cookie), process, || {
            let ivars = class_ivars(&mut self.class_ivars, mem, pid, process);
            names::read_method_entry(mem, layout, cme, ivars.as_deref())
                .filter(|m| m.def_type == METHOD_TYPE_CFUNC && m.def == cookie)
        })?;
        let id = entry.original_id;
        let method = process.global_symbols.and_then(|symbols| {
            self.ids.get_or_read((pid, id, symbols), process, || {
                names::id_name(mem, layout, symbols, id).map(Name)
            })
        });
        let method = method.as_ref().map_or(UNKNOWN_CFUNC, |n| n.0.as_str());
        let name = entry.qualify(method);
        Some(Frame::named(
            clean_name_within(&name, MAX_RUNTIME_NAME),
            FrameKind::Interpreted,
        ))
    }
}

impl ProcessNamer for RubyNamer {
    type Process = Process;

    fn runtime(&self) -> Runtime {
        Runtime::Ruby
    }

    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn name_in(
        &mut self,
        mem: &dyn Memory,
        pid: u32,
        process: &Arc<Process>,
        frame: &RuntimeFrame,
    ) -> Option<Vec<Frame>> {
        let (iseq, cme, pos) = split_ids(frame.ids);
        let frame = if iseq != 0 {
            self.ruby_frame(mem, pid, process, iseq, cme, pos, frame.cookie)
        } else {
            self.cfunc_frame(mem, pid, process, cme, frame.cookie)
        }?;
        Some(vec![frame])
    }
}

/// How a Ruby frame is shown: `Service#handle (app/service.rb:12)`, its
/// label qualified as Ruby's profiler API does, the last two parts of
/// its file and the line its code starts on — one name per method or
/// block, whatever line a sample was on (that line is the frame's source
/// line); the shape Python frames have. `file` is the path, cleaned.
fn display_name(label: &str, file: &str, iseq: &Iseq) -> String {
    let short = match file.rmatch_indices('/').nth(1) {
        Some((i, _)) => &file[i + 1..],
        None => file,
    };
    format!(
        "{} ({short}:{})",
        clean_name_within(label, MAX_RUNTIME_NAME),
        iseq.first_lineno
    )
}
