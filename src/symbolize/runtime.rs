//! Names runtime frames (Python, Java): identifiers read in BPF that only
//! the process they were read in can turn into a function, file and line.
//!
//! Each runtime has its [`Namer`], which reads the live process's memory
//! (handed over by the collector that reads the runtime's frames).
//! What it names is kept under (process, start, identifiers, cookie), so a
//! frame named while its process lived is still named after the process
//! exits, as native frames are (their mappings are kept too); the cookie,
//! read in BPF beside the identifiers, keeps a code object freed and
//! reused at the same address from taking the old name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::collect::{Namer, Namers, RawFrame, RawSample, Runtime, RuntimeFrame};
use crate::profile::{Frame, FrameKind, SourceLine};

/// Past this many named frames, all are forgotten (a run without end
/// stays flat; what is still sampled is named again).
const MAX_NAMED: usize = 1 << 18;

type Key = (u32, u64, RuntimeFrame);

/// [`Runtimes`] shared by the threads that name (learning while the
/// processes live) and resolve.
pub type Shared = Arc<Mutex<Runtimes>>;

/// Locks `shared` (a poisoned lock is used as it stands: what it holds
/// is a cache).
pub fn lock(shared: &Shared) -> MutexGuard<'_, Runtimes> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The namers of every runtime and what they named.
pub struct Runtimes {
    namers: HashMap<Runtime, Box<dyn Namer>>,
    named: HashMap<Key, Arc<[Frame]>>,
}

impl Default for Runtimes {
    fn default() -> Self {
        let mut namers: HashMap<Runtime, Box<dyn Namer>> = HashMap::new();
        namers.insert(Runtime::Test, Box::new(TestNamer));
        Runtimes {
            namers,
            named: HashMap::new(),
        }
    }
}

impl Runtimes {
    /// Uses `namers` for their runtimes' frames.
    pub fn set(&mut self, namers: Namers) {
        self.namers.extend(namers);
    }

    /// Names the runtime frames of `raw` not named yet, by their
    /// runtimes' namers, while their processes may still live.
    pub fn learn_samples(&mut self, raw: &[RawSample]) {
        let mut runtime: HashMap<(u32, u64), Vec<RuntimeFrame>> = HashMap::new();
        let tasks = raw
            .iter()
            .flat_map(|s| std::iter::once(&s.task).chain(s.waker.as_ref()));
        for t in tasks {
            let Some(pid) = t.pid else { continue };
            let frames = t.user.frames().iter().filter_map(|f| match f {
                RawFrame::Runtime(r) => Some(**r),
                _ => None,
            });
            runtime.entry((pid, t.start)).or_default().extend(frames);
        }
        for ((pid, start), frames) in runtime {
            self.learn(pid, start, &frames);
        }
    }

    /// Names the frames of process `pid` (started at `start`) not named
    /// yet, while it may still be alive.
    pub fn learn<'a>(
        &mut self,
        pid: u32,
        start: u64,
        frames: impl IntoIterator<Item = &'a RuntimeFrame>,
    ) {
        if self.named.len() > MAX_NAMED {
            self.named.clear();
        }
        for f in frames {
            let key = (pid, start, *f);
            if self.named.contains_key(&key) {
                continue;
            }
            let Some(namer) = self.namers.get_mut(&f.runtime) else {
                continue;
            };
            if let Some(frames) = namer.name(pid, f) {
                self.named.insert(key, frames.into());
            }
        }
    }

    /// What `frame` of process `pid` was named, or an unnamed frame that
    /// tells it apart from others (`python+0x7f1200001000`).
    pub fn get(&self, pid: Option<u32>, start: u64, frame: &RuntimeFrame) -> Vec<Frame> {
        match pid.and_then(|p| self.named.get(&(p, start, *frame))) {
            Some(f) => f.to_vec(),
            None => vec![unnamed(frame)],
        }
    }
}

/// The frame for a runtime frame no namer could name.
fn unnamed(frame: &RuntimeFrame) -> Frame {
    Frame {
        unnamed: true,
        ..Frame::named(
            format!("{}+{:#x}", frame.runtime, frame.ids[0]),
            FrameKind::Interpreted,
        )
    }
}

/// Names the frames `FLARE_TEST_RUNTIME_FRAME` makes BPF add to the root
/// of user stacks: identifiers (process id, native frames below), cookie
/// 0. Like a real namer it reads the live process, here its name, and
/// refuses identifiers that do not belong to it.
struct TestNamer;

impl Namer for TestNamer {
    fn name(&mut self, pid: u32, frame: &RuntimeFrame) -> Option<Vec<Frame>> {
        if frame.ids[0] != u64::from(pid) || frame.cookie != 0 {
            return None;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        Some(vec![Frame {
            source: Some(Box::new(SourceLine {
                file: "<test-runtime>".into(),
                line: u32::try_from(frame.ids[1]).ok(),
            })),
            ..Frame::named(
                format!(
                    "runtime_root_of_{}",
                    crate::profile::clean_name(comm.trim_end())
                ),
                FrameKind::Interpreted,
            )
        }])
    }
}
