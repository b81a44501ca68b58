//! Naming Python frames: BPF recorded (code object, instruction, cookie)
//! for each Python frame; [`PythonNamer`] reads the code object in the
//! live process (the [`Registry`] says where its interpreter keeps what,
//! for its version) and gives function, file and line — or nothing when
//! the code object at that address is no longer the one BPF saw.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use super::code::{read_code, CodeInfo};
use super::memory::ProcessMemory;
use super::{Process, Registry};
use crate::collect::{Namer, Runtime, RuntimeFrame};
use crate::profile::{clean_name, Frame, FrameKind, SourceLine};

/// Past this many code objects read, all are forgotten (a run without end
/// stays flat; what is still sampled is read again).
const MAX_CODES: usize = 1 << 16;

/// (process id, code object's address, cookie).
type Key = (u32, u64, u64);

/// Names [`Runtime::Python`] frames of the processes in a [`Registry`].
pub struct PythonNamer {
    registry: Registry,
    /// What each code object read gave (`None`: not a code object with
    /// that cookie), with the process it was read in: a process id reused
    /// by another process is another [`Process`] in the registry.
    codes: HashMap<Key, (Arc<Process>, Option<Arc<CodeInfo>>)>,
}

impl PythonNamer {
    pub fn new(registry: Registry) -> Self {
        PythonNamer {
            registry,
            codes: HashMap::new(),
        }
    }

    /// The code object of `frame` in `process`, if it still has the cookie
    /// BPF read; read once for all its instructions.
    fn code(
        &mut self,
        pid: u32,
        process: &Arc<Process>,
        frame: &RuntimeFrame,
    ) -> Option<Arc<CodeInfo>> {
        let key = (pid, frame.ids[0], frame.cookie);
        if let Some((p, info)) = self.codes.get(&key) {
            if Arc::ptr_eq(p, process) {
                return info.clone();
            }
        }
        let info = read_code(
            &ProcessMemory { pid },
            &process.layout,
            process.code_type,
            frame.ids[0],
        )
        .filter(|c| c.cookie == frame.cookie)
        .map(Arc::new);
        if self.codes.len() >= MAX_CODES {
            self.codes.clear();
        }
        self.codes.insert(key, (Arc::clone(process), info.clone()));
        info
    }
}

impl Namer for PythonNamer {
    fn name(&mut self, pid: u32, frame: &RuntimeFrame) -> Option<Vec<Frame>> {
        if frame.runtime != Runtime::Python {
            return None;
        }
        let process = self
            .registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&pid)
            .cloned()?;
        let code = self.code(pid, &process, frame)?;
        Some(vec![Frame {
            source: Some(Box::new(SourceLine {
                file: clean_name(&code.filename).into(),
                line: code.line(frame.ids[1]),
            })),
            ..Frame::named(display_name(&code), FrameKind::Interpreted)
        }])
    }
}

/// How a Python function is shown: `render_page (app/views.py:11)`, its
/// qualified name, the last two parts of its file and the line it is
/// defined on — one name per function, as native frames have, whatever
/// line a sample was on (that line is the frame's source line, which
/// pprof keeps); py-spy's `name (file:line)` shape, which flamegraph.pl
/// and every folded reader take as one frame.
fn display_name(code: &CodeInfo) -> String {
    let file = clean_name(&code.filename);
    let short = match file.rmatch_indices('/').nth(1) {
        Some((i, _)) => &file[i + 1..],
        None => &file[..],
    };
    format!("{} ({short}:{})", clean_name(&code.name), code.firstlineno)
}
