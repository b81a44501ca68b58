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

// ahash: the keys are numbers, hashed for every runtime frame of every
// sample; SipHash was 1.5 % of the agent's time.
use ahash::{AHashMap as HashMap, AHashSet as HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::collect::{Namer, Namers, RawFrame, RawSample, RawTrace, Runtime, RuntimeFrame};
use crate::profile::{Frame, FrameKind, SourceLine};

/// Frames named (or failed) that a generation holds: past it, the old
/// generation is forgotten and the young one becomes old. So a run
/// without end stays flat, and what is still sampled is asked for in
/// every read and stays (clearing everything at a bound named it all
/// again at once).
const GENERATION: usize = 1 << 15;

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
    young: Answers,
    old: Answers,
    /// Stacks of the last pass over samples whose every runtime frame was
    /// answered, by process, start and address (the stack held, so that
    /// no other stack is at its address while it is kept): the next pass
    /// skips them instead of looking up each of their frames again.
    learned: HashMap<StackAt, Arc<[RawFrame]>>,
    /// Times the young generation became old: answers a skipped stack
    /// relies on may then go, so `learned` is emptied and its stacks'
    /// frames are looked at again.
    turnovers: u64,
}

/// A stack of a process: (process id, start, the frames' address).
type StackAt = (u32, u64, usize);

/// One generation of what was asked of the namers.
#[derive(Default)]
struct Answers {
    named: HashMap<Key, Arc<[Frame]>>,
    /// Frames their namer could not name in a process it knew
    /// ([`Namer::knows`]): not asked again. The agent reads its samples
    /// every second to name them; without this, each read asked again
    /// for every frame of the processes that had exited since (a sixth
    /// of its questions, none ever answered).
    failed: HashSet<Key>,
}

impl Answers {
    fn len(&self) -> usize {
        self.named.len() + self.failed.len()
    }
}

impl Default for Runtimes {
    fn default() -> Self {
        let mut namers: HashMap<Runtime, Box<dyn Namer>> = HashMap::new();
        namers.insert(Runtime::Test, Box::new(TestNamer));
        Runtimes {
            namers,
            young: Answers::default(),
            old: Answers::default(),
            learned: HashMap::new(),
            turnovers: 0,
        }
    }
}

impl Runtimes {
    /// Uses `namers` for their runtimes' frames.
    pub fn set(&mut self, namers: Namers) {
        self.namers.extend(namers);
    }

    /// Names the runtime frames of `raw` not asked for yet (named, or
    /// failed in a known process), by their runtimes' namers, while
    /// their processes may still live.
    pub fn learn_samples(&mut self, raw: &[RawSample]) {
        let mut runtime: HashMap<(u32, u64), Vec<RuntimeFrame>> = HashMap::new();
        // Samples share their stacks (the stack cache's): each is looked
        // at once per process, and only frames not yet answered are
        // gathered. The agent does this every second for every sample of
        // its window; gathering every frame, most answered long before,
        // was 4 % of its learning's CPU, and looking up each frame of
        // stacks answered in the pass before 3 % of all its CPU.
        let turnovers = self.turnovers;
        // Sized as the last pass's, so that it is not grown step by step.
        let mut learned = HashMap::with_capacity(self.learned.len());
        let mut fresh = Vec::new();
        let mut asked = HashSet::new();
        let tasks = raw
            .iter()
            .flat_map(|s| std::iter::once(&s.task).chain(s.waker.as_ref()));
        for t in tasks {
            let (Some(pid), RawTrace::Frames(frames)) = (t.pid, &t.user) else {
                continue;
            };
            let at = (pid, t.start, frames.as_ptr() as usize);
            if learned.contains_key(&at) {
                continue;
            }
            if let Some(held) = self.learned.remove(&at) {
                learned.insert(at, held);
                continue;
            }
            learned.insert(at, Arc::clone(frames));
            fresh.push(at);
            for f in frames.iter() {
                let RawFrame::Runtime(r) = f else { continue };
                let key = (pid, t.start, **r);
                if !self.answered(&key) && asked.insert(key) {
                    runtime.entry((pid, t.start)).or_default().push(**r);
                }
            }
        }
        for ((pid, start), frames) in runtime {
            self.learn(pid, start, &frames);
        }
        // A stack is skipped next time only if all its frames were
        // answered, and no answer it relies on may have gone since.
        for at in fresh {
            let done = learned.get(&at).is_some_and(|frames| {
                frames.iter().all(|f| match f {
                    RawFrame::Runtime(r) => self.answered(&(at.0, at.1, **r)),
                    _ => true,
                })
            });
            if !done {
                learned.remove(&at);
            }
        }
        if self.turnovers != turnovers {
            learned.clear();
        }
        self.learned = learned;
    }

    /// True once `key` was asked for: named, or failed in a process its
    /// namer knew. An old answer is young again.
    fn answered(&mut self, key: &Key) -> bool {
        if self.young.named.contains_key(key) || self.young.failed.contains(key) {
            return true;
        }
        if let Some(named) = self.old.named.remove(key) {
            self.keep(*key, Some(named));
            return true;
        }
        if self.old.failed.remove(key) {
            self.keep(*key, None);
            return true;
        }
        false
    }

    /// Keeps an answer in the young generation, which first becomes old
    /// when full.
    fn keep(&mut self, key: Key, named: Option<Arc<[Frame]>>) {
        if self.young.len() >= GENERATION {
            self.old = std::mem::take(&mut self.young);
            self.turnovers += 1;
            self.learned.clear();
        }
        match named {
            Some(named) => {
                self.young.named.insert(key, named);
            }
            None => {
                self.young.failed.insert(key);
            }
        }
    }

    /// Names the frames of process `pid` (started at `start`) not asked
    /// for yet, while it may still be alive.
    pub fn learn<'a>(
        &mut self,
        pid: u32,
        start: u64,
        frames: impl IntoIterator<Item = &'a RuntimeFrame>,
    ) {
        let mut todo: HashMap<Runtime, Vec<RuntimeFrame>> = HashMap::new();
        let mut seen = HashSet::new();
        for f in frames {
            let key = (pid, start, *f);
            if !self.answered(&key) && seen.insert(*f) {
                todo.entry(f.runtime).or_default().push(*f);
            }
        }
        for (runtime, frames) in todo {
            let Some(namer) = self.namers.get_mut(&runtime) else {
                continue;
            };
            // Known before the reads: a failure then is the frame's own.
            let known = namer.knows(pid);
            let named = namer.name_all(pid, &frames);
            for (f, named) in frames.into_iter().zip(named) {
                match named {
                    Some(named) => self.keep((pid, start, f), Some(named.into())),
                    None if known => self.keep((pid, start, f), None),
                    None => {}
                }
            }
        }
    }

    /// What `frame` of process `pid` was named, or an unnamed frame that
    /// tells it apart from others (`python+0x7f1200001000`).
    pub fn get(&self, pid: Option<u32>, start: u64, frame: &RuntimeFrame) -> Vec<Frame> {
        let key = pid.map(|p| (p, start, *frame));
        let named = key.and_then(|k| self.young.named.get(&k).or_else(|| self.old.named.get(&k)));
        match named {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The batches a namer was given: process and frames.
    type Given = Arc<Mutex<Vec<(u32, Vec<RuntimeFrame>)>>>;

    /// Names every frame `f<first id>` but id 0, and keeps the batches;
    /// knows every process but 5 (whose runtime is still looked for).
    struct Batches(Given);

    impl Namer for Batches {
        fn name(&mut self, _: u32, _: &RuntimeFrame) -> Option<Vec<Frame>> {
            unreachable!("learn names a process's frames together")
        }

        fn name_all(&mut self, pid: u32, frames: &[RuntimeFrame]) -> Vec<Option<Vec<Frame>>> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((pid, frames.to_vec()));
            frames
                .iter()
                .map(|f| {
                    (f.ids[0] != 0)
                        .then(|| vec![Frame::named(format!("f{}", f.ids[0]), FrameKind::Jit)])
                })
                .collect()
        }

        fn knows(&self, pid: u32) -> bool {
            pid != 5
        }
    }

    fn frame(id: u64) -> RuntimeFrame {
        RuntimeFrame {
            runtime: Runtime::Java,
            ids: [id, 0],
            cookie: 7,
        }
    }

    /// A task of process `pid` whose user stack is `stack`.
    fn task(pid: Option<u32>, stack: &Arc<[RawFrame]>) -> crate::collect::RawTask {
        crate::collect::RawTask {
            pid,
            start: 1,
            tid: pid,
            comm: "t".into(),
            user: crate::collect::RawTrace::Frames(Arc::clone(stack)),
            kernel: crate::collect::RawTrace::NotCollected,
        }
    }

    #[test]
    fn samples_ask_for_each_new_frame_of_a_process_once() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let mut runtimes = Runtimes::default();
        runtimes.set(vec![(Runtime::Java, Box::new(Batches(batches.clone())))]);
        let rt = |id| RawFrame::Runtime(Box::new(frame(id)));
        let a: Arc<[RawFrame]> = vec![RawFrame::Addr(0x10), rt(1), rt(2)].into();
        let b: Arc<[RawFrame]> = vec![rt(2), rt(3)].into();
        let sample = |task, waker| RawSample {
            task,
            waker,
            value: 1,
        };
        runtimes.learn_samples(&[
            sample(task(Some(6), &a), None),
            sample(task(Some(6), &a), Some(task(Some(6), &b))),
            sample(task(Some(7), &a), None),
            // Stacks of all processes together: no process to read.
            sample(task(None, &b), None),
        ]);
        runtimes.learn_samples(&[sample(task(Some(6), &b), None)]);
        let mut got = batches.lock().unwrap().clone();
        got.sort_by_key(|(pid, _)| *pid);
        assert_eq!(
            got,
            vec![
                (6, vec![frame(1), frame(2), frame(3)]),
                (7, vec![frame(1), frame(2)]),
            ],
            "each frame of a process asked once, the waker's too; none again"
        );
        assert_eq!(runtimes.get(Some(6), 1, &frame(3))[0].name, "f3".into());
    }

    #[test]
    fn frames_still_sampled_stay_named_while_the_rest_is_forgotten() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let mut runtimes = Runtimes::default();
        runtimes.set(vec![(Runtime::Java, Box::new(Batches(batches.clone())))]);
        // Four generations' worth of frames pass, each asked for once;
        // frame 1 (named) and 0 (failed) are asked for between batches.
        let passing = 4 * GENERATION as u64;
        for first in (100..100 + passing).step_by(1000) {
            let frames: Vec<RuntimeFrame> = (first..first + 1000).map(frame).collect();
            runtimes.learn(6, 1, &frames);
            runtimes.learn(6, 1, &[frame(1), frame(0)]);
            assert!(runtimes.young.len() + runtimes.old.len() <= 2 * GENERATION);
        }
        let got = batches.lock().unwrap();
        let asked = |id| {
            got.iter()
                .filter(|(_, frames)| frames.contains(&frame(id)))
                .count()
        };
        assert_eq!((asked(1), asked(0)), (1, 1), "in use, asked again");
        assert_eq!(runtimes.get(Some(6), 1, &frame(1))[0].name, "f1".into());
        assert!(
            runtimes.get(Some(6), 1, &frame(100))[0].unnamed,
            "the first frames passed are still kept"
        );
    }

    #[test]
    fn stacks_answered_are_skipped_until_their_answers_may_go() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let mut runtimes = Runtimes::default();
        runtimes.set(vec![(Runtime::Java, Box::new(Batches(batches.clone())))]);
        let rt = |id| RawFrame::Runtime(Box::new(frame(id)));
        let hot: Arc<[RawFrame]> = vec![rt(1), rt(2)].into();
        // A frame not named in process 5, which its namer does not know
        // yet: asked in every pass.
        let waiting: Arc<[RawFrame]> = vec![rt(0)].into();
        let samples = [
            RawSample {
                task: task(Some(6), &hot),
                waker: None,
                value: 1,
            },
            RawSample {
                task: task(Some(5), &waiting),
                waker: None,
                value: 1,
            },
        ];
        runtimes.learn_samples(&samples);
        let hot_at = (6, 1, hot.as_ptr() as usize);
        assert_eq!(runtimes.learned.len(), 1, "only the stack answered whole");
        assert!(runtimes.learned.contains_key(&hot_at));
        // Generations of other frames pass between the passes: the hot
        // stack's answers would go if it were still skipped after its
        // generation turned over.
        let passing = 4 * GENERATION as u64;
        for first in (100..100 + passing).step_by(1000) {
            let frames: Vec<RuntimeFrame> = (first..first + 1000).map(frame).collect();
            runtimes.learn(6, 1, &frames);
            runtimes.learn_samples(&samples);
        }
        assert_eq!(runtimes.get(Some(6), 1, &frame(1))[0].name, "f1".into());
        assert_eq!(runtimes.get(Some(6), 1, &frame(2))[0].name, "f2".into());
        let got = batches.lock().unwrap();
        let asked = |pid, id| {
            got.iter()
                .filter(|(p, frames)| *p == pid && frames.contains(&frame(id)))
                .count()
        };
        assert_eq!(asked(6, 1), 1, "the hot stack is named once");
        assert_eq!(
            asked(5, 0),
            1 + (passing as usize).div_ceil(1000),
            "a stack not answered is looked at in every pass"
        );
    }

    #[test]
    fn a_process_new_frames_are_named_in_one_batch_once_each() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let mut runtimes = Runtimes::default();
        runtimes.set(vec![(Runtime::Java, Box::new(Batches(batches.clone())))]);
        runtimes.learn(5, 1, &[frame(1), frame(2), frame(1), frame(0)]);
        runtimes.learn(5, 1, &[frame(2), frame(3), frame(0)]);
        runtimes.learn(6, 1, &[frame(2), frame(0)]);
        runtimes.learn(6, 1, &[frame(0), frame(4)]);
        let got = batches.lock().unwrap().clone();
        assert_eq!(
            got,
            vec![
                (5, vec![frame(1), frame(2), frame(0)]),
                // Named ones are not asked again; unnamed ones of a
                // process the namer does not know yet are.
                (5, vec![frame(3), frame(0)]),
                (6, vec![frame(2), frame(0)]),
                // A frame of a known process that could not be named is
                // not asked again.
                (6, vec![frame(4)]),
            ]
        );
        assert!(runtimes.get(Some(6), 1, &frame(0))[0].unnamed);
        assert_eq!(runtimes.get(Some(5), 1, &frame(3))[0].name, "f3".into());
        assert!(runtimes.get(Some(5), 1, &frame(0))[0].unnamed);
        assert!(
            runtimes.get(Some(5), 2, &frame(1))[0].unnamed,
            "another start"
        );
    }
}
