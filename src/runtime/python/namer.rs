//! Naming Python frames: BPF recorded (code object, instruction, cookie)
//! for each Python frame; [`PythonNamer`] reads the code object in the
//! live process (the [`Registry`] says where its interpreter keeps what,
//! for its version) and gives function, file and line — or nothing when
//! the code object at that address is no longer the one BPF saw.

use std::sync::Arc;

use super::code::{read_code, CodeInfo};
use super::{Process, Registry};
use crate::collect::{Runtime, RuntimeFrame};
use crate::profile::{clean_name_within, Frame, FrameKind, SourceLine, MAX_RUNTIME_NAME};
use crate::runtime::memory::Memory;
use crate::runtime::tracker::{ProcessNamer, ReadCache};

/// Names [`Runtime::Python`] frames of the processes in a [`Registry`].
pub struct PythonNamer {
    registry: Registry,
    /// What each code object read gave, by (process id, code object's
    /// address, cookie): `None` for not a code object with that cookie.
    codes: ReadCache<Process, CodeInfo>,
}

impl PythonNamer {
    pub fn new(registry: Registry) -> Self {
        PythonNamer {
            registry,
            codes: ReadCache::default(),
        }
    }

    /// The code object of `frame` in `process`, if it still has the cookie
    /// BPF read; read once for all its instructions.
    fn code(
        &mut self,
        mem: &dyn Memory,
        pid: u32,
        process: &Arc<Process>,
        frame: &RuntimeFrame,
    ) -> Option<Arc<CodeInfo>> {
        self.codes
            .get_or_read((pid, frame.ids[0], frame.cookie), process, || {
                read_code(mem, &process.layout, process.code_type, frame.ids[0])
                    .filter(|c| c.cookie == frame.cookie)
            })
    }
}

impl ProcessNamer for PythonNamer {
    type Process = Process;

    fn runtime(&self) -> Runtime {
        Runtime::Python
    }

    fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The frame `frame` of process `pid` stands for, read through `mem`.
    fn name_in(
        &mut self,
        mem: &dyn Memory,
        pid: u32,
        process: &Arc<Process>,
        frame: &RuntimeFrame,
    ) -> Option<Vec<Frame>> {
        let code = self.code(mem, pid, process, frame)?;
        let file = clean_name_within(&code.filename, MAX_RUNTIME_NAME);
        let name = display_name(&code, &file);
        Some(vec![Frame {
            source: Some(Box::new(SourceLine {
                file: file.into(),
                line: code.line(frame.ids[1]),
            })),
            ..Frame::named(name, FrameKind::Interpreted)
        }])
    }
}

/// How a Python function is shown: `render_page (app/views.py:11)`, its
/// qualified name, the last two parts of its file and the line it is
/// defined on — one name per function, as native frames have, whatever
/// line a sample was on (that line is the frame's source line, which
/// pprof keeps); py-spy's `name (file:line)` shape, which flamegraph.pl
/// and every folded reader take as one frame. `file` is the code's file
/// name, cleaned.
fn display_name(code: &CodeInfo, file: &str) -> String {
    let short = match file.rmatch_indices('/').nth(1) {
        Some((i, _)) => &file[i + 1..],
        None => file,
    };
    format!(
        "{} ({short}:{})",
        clean_name_within(&code.name, MAX_RUNTIME_NAME),
        code.firstlineno
    )
}
