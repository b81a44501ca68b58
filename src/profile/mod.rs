//! The one internal model of a profile that every tool produces and every
//! output format consumes.
//!
//! A [`Profile`] is a list of [`Sample`]s: a task's user and kernel stacks
//! (and, for the off-CPU family, its waker's) with a value in the profile's
//! [`ValueUnit`]. Stacks are kept leaf first, as the kernel returns them and
//! as bcc prints them; writers that want root-first paths use
//! [`Sample::path`]. Frames are already symbolized: the model knows nothing
//! of BPF or of addresses that still need names.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

mod path;
mod timeline;

pub use path::{PathFrame, PathKind};
pub use timeline::{monotonic_ns, Event, Timeline, UNKNOWN_CPU};

/// What a sample's value counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueUnit {
    /// Timer samples (`flare profile`); each is worth [`Meta::period_ns`].
    Samples,
    /// Blocked time in microseconds (the off-CPU family).
    Microseconds,
    /// Events (`flare stackcount`).
    Count,
}

/// What kind of profile this is: the layout bcc's text and folded writers
/// use, the sample types of pprof, the palette of flame graphs. Writers
/// match on it exhaustively, so a new kind cannot fall into another's
/// layout unnoticed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Timed samples of on-CPU stacks (`flare profile`).
    Cpu,
    /// Blocked time by the blocked task's stacks (`offcputime`).
    OffCpu,
    /// Blocked time by the waker's stacks (`wakeuptime`).
    Wakeup,
    /// Blocked time by the blocked task's and its waker's stacks
    /// (`offwaketime`).
    OffWake,
    /// Event counts by stack (`stackcount`).
    Count,
    /// Wall-clock time by stack, on and off the CPU (`wallclock`): the
    /// value is microseconds, the extra value `cpu` nanoseconds on the CPU.
    Wall,
}

impl Kind {
    /// The unit sample values of this kind are in.
    pub fn unit(self) -> ValueUnit {
        match self {
            Kind::Cpu => ValueUnit::Samples,
            Kind::OffCpu | Kind::Wakeup | Kind::OffWake | Kind::Wall => ValueUnit::Microseconds,
            Kind::Count => ValueUnit::Count,
        }
    }

    /// The name of the tool that makes profiles of this kind.
    pub fn tool(self) -> &'static str {
        match self {
            Kind::Cpu => "profile",
            Kind::OffCpu => "offcputime",
            Kind::Wakeup => "wakeuptime",
            Kind::OffWake => "offwaketime",
            Kind::Count => "stackcount",
            Kind::Wall => "wallclock",
        }
    }
}

/// What a frame is: where its code runs and how it was found. Whether a
/// frame is a function inlined into its caller is [`Frame::inlined`],
/// apart from its kind: native code and JIT code both inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// Kernel code.
    Kernel,
    /// Native user code: a function in a binary or library.
    Native,
    /// A function run by an interpreter (a Python frame, a Java method
    /// being interpreted), named from the runtime's own records.
    Interpreted,
    /// Code compiled at run time (a JIT perf map's entry, a compiled Java
    /// method).
    Jit,
    /// A fixed name a collector adds, not code (wall-clock's
    /// `[off-cpu: sleeping]`).
    Label,
}

impl FrameKind {
    /// The kind's word, for writers that name it (speedscope files, the
    /// live page's legend).
    pub fn word(self) -> &'static str {
        match self {
            FrameKind::Kernel => "kernel",
            FrameKind::Native => "native",
            FrameKind::Interpreted => "interpreted",
            FrameKind::Jit => "jit",
            FrameKind::Label => "label",
        }
    }
}

/// A binary or library that user frames lie in, shared by all of them.
///
/// With the build id, a frame's [`Frame::file_offset`] can be symbolized
/// anywhere the same file is found: after the process has exited, on
/// another machine, or by a profiling server (pprof mappings carry both).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// The file's path as the process saw it (inside its own mount
    /// namespace for a process in a container).
    pub path: Arc<str>,
    /// The GNU build id (`NT_GNU_BUILD_ID` note), when the file has one.
    pub build_id: Option<Arc<[u8]>>,
}

impl ObjectRef {
    /// An object known by its path only.
    pub fn path(path: impl Into<Arc<str>>) -> Arc<Self> {
        Arc::new(ObjectRef {
            path: path.into(),
            build_id: None,
        })
    }

    /// The build id in lowercase hexadecimal, as `.build-id` directories,
    /// debuginfod and pprof spell it.
    pub fn build_id_hex(&self) -> Option<String> {
        use std::fmt::Write as _;
        let id = self.build_id.as_ref()?;
        let mut s = String::with_capacity(id.len() * 2);
        for b in id.iter() {
            let _ = write!(s, "{b:02x}");
        }
        Some(s)
    }
}

/// One symbolized frame. Strings and objects are shared (`Arc`): one
/// function appears in many stacks, and a profile of 10,000 stacks would
/// otherwise hold hundreds of thousands of copies of the same names and
/// paths. A frame is 56 bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Function name. For a function without a name ([`Frame::unnamed`]):
    /// `object+0xSTART` where its object and start are known (so that two
    /// unnamed functions are two frames), else `[unknown]`.
    pub name: Arc<str>,
    pub kind: FrameKind,
    /// The instruction address the frame was resolved from (0 if none).
    pub addr: u64,
    /// The binary or library `addr` lies in (`None` for the kernel, JIT
    /// code, or when unknown).
    pub object: Option<Arc<ObjectRef>>,
    /// Where `addr` lies in [`Frame::object`]'s file, or 0 when that is
    /// not known (no code lies at offset 0, where the ELF header is).
    pub file_offset: u64,
    /// Source file and line, where debug information said so (boxed: most
    /// frames have none, and frames are many).
    pub source: Option<Box<SourceLine>>,
    /// True for a function inlined into the frame below it (its caller).
    pub inlined: bool,
    /// True when no symbol named the function: bcc's formats print
    /// `[unknown]` for it, whatever [`Frame::name`] says.
    pub unnamed: bool,
    /// The offset of `addr` into its function (bcc's `-s`), for a named
    /// frame; 0 for an inlined one, whose address lies in its caller.
    pub offset: u32,
}

impl Frame {
    /// A frame with a name only.
    pub fn named(name: impl Into<Arc<str>>, kind: FrameKind) -> Self {
        Frame {
            name: name.into(),
            kind,
            addr: 0,
            object: None,
            file_offset: 0,
            source: None,
            inlined: false,
            unnamed: false,
            offset: 0,
        }
    }

    /// The frame for an address that could not be resolved.
    pub fn unknown(addr: u64, kind: FrameKind) -> Self {
        Frame {
            addr,
            unnamed: true,
            ..Frame::named(UNKNOWN, kind)
        }
    }

    /// The name bcc's formats print: `[unknown]` for a function without a
    /// name, unless `label` asks for flare's `object+0xSTART`.
    pub fn bcc_name(&self, label: bool) -> &str {
        if self.unnamed && !label {
            UNKNOWN
        } else {
            &self.name
        }
    }
}

impl Frame {
    /// Path of the binary or library, where known.
    pub fn module(&self) -> Option<&str> {
        self.object.as_deref().map(|o| &*o.path)
    }

    /// The file offset of the frame's address in its object, where known.
    pub fn offset_in_object(&self) -> Option<u64> {
        (self.object.is_some() && self.file_offset != 0).then_some(self.file_offset)
    }

    /// The source file, where known.
    pub fn file(&self) -> Option<&str> {
        self.source.as_ref().map(|s| &*s.file)
    }

    /// The source line, where known.
    pub fn line(&self) -> Option<u32> {
        self.source.as_ref().and_then(|s| s.line)
    }
}

/// Where in the source a frame's address lies.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourceLine {
    pub file: Arc<str>,
    pub line: Option<u32>,
}

/// The name bcc and flare give a frame that could not be resolved.
pub const UNKNOWN: &str = "[unknown]";

/// The longest name, in bytes, an output shows of a symbol, a file or a
/// process: a longer one is cut at a character boundary and ends in `…`.
/// (C++ names past it are rare; names made to fill output are not.)
pub const MAX_NAME: usize = 1024;

/// The longest name, in bytes, of a runtime's function or file (read from
/// another process's memory: Python, Java).
pub const MAX_RUNTIME_NAME: usize = 512;

/// A name others chose (a process name, a symbol, a perf map's entry, a
/// file name) made safe for every output: control characters, line
/// breaks and escape sequences among them, and Unicode's format and
/// separator characters (bidirectional overrides, U+2028/U+2029, U+FEFF)
/// become `?`, so that a name can neither forge a line of folded or text
/// output, nor drive a terminal, nor reorder what a viewer shows; and it
/// is cut at [`MAX_NAME`] bytes. (`;`, which only folded lines give a
/// meaning, is their writers' to replace: [`folded_safe`].)
pub fn clean_name(name: &str) -> std::borrow::Cow<'_, str> {
    clean_name_within(name, MAX_NAME)
}

/// [`clean_name`], cut at `max` bytes (then `…`, three more).
pub fn clean_name_within(name: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if name.len() <= max && !name.chars().any(unsafe_char) {
        return name.into();
    }
    let mut out = String::with_capacity(name.len().min(max + 3));
    for c in name.chars() {
        let c = if unsafe_char(c) { '?' } else { c };
        if out.len() + c.len_utf8() > max {
            out.push('…');
            break;
        }
        out.push(c);
    }
    out.into()
}

/// A character no name is shown with: a control, format (Cf: bidi
/// controls, zero-width ones, U+FEFF) or line or paragraph separator.
fn unsafe_char(c: char) -> bool {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    c.is_control()
        || matches!(
            c.general_category(),
            GeneralCategory::Format
                | GeneralCategory::LineSeparator
                | GeneralCategory::ParagraphSeparator
        )
}

/// A name as a folded line may hold it: cleaned, and `;` (which
/// separates frames) replaced by `:`.
pub fn folded_safe(name: &str) -> std::borrow::Cow<'_, str> {
    match clean_name(name) {
        c if c.contains(';') => c.replace(';', ":").into(),
        c => c,
    }
}

/// One of a task's two stacks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Trace {
    /// Not asked for (`-U` drops kernel stacks, `-K` user stacks).
    NotCollected,
    /// The kernel could not store it. `enomem` is true when a larger stack
    /// map would have helped (it was full, or the stack's bucket was taken
    /// by another stack: -ENOMEM or -EEXIST).
    Missed { enomem: bool },
    /// The frames, leaf first. Empty when there is no such stack (a sample
    /// in user mode has no kernel stack; a kernel thread no user stack).
    /// Shared: the samples of one stack, and the views and copies made of
    /// a profile, hold one list (the agent cloned 135,000 frames a window
    /// into its CPU and off-CPU views alone).
    Frames(Arc<[Frame]>),
}

impl Trace {
    /// A stack of `frames`, leaf first.
    pub fn of(frames: Vec<Frame>) -> Self {
        Trace::Frames(frames.into())
    }

    /// The frames to change in place, copied first when shared.
    pub fn frames_mut(&mut self) -> Option<&mut [Frame]> {
        match self {
            Trace::Frames(f) => Some(Arc::make_mut(f)),
            _ => None,
        }
    }

    /// Changes the list of frames (a copy of it: others may share it).
    pub fn edit_frames(&mut self, edit: impl FnOnce(&mut Vec<Frame>)) {
        if let Trace::Frames(f) = self {
            let mut frames = f.to_vec();
            edit(&mut frames);
            *f = frames.into();
        }
    }

    /// Drops the top of the stack (leaf first) down to, and with, the
    /// last of its top `depth` frames that `machinery` names: the tracing
    /// machinery a kernel stack was taken in, and anything above it (the
    /// BPF program's own frame is not always named).
    pub fn drop_top_through(&mut self, depth: usize, machinery: impl Fn(&str) -> bool) {
        let frames = self.frames();
        let top = frames.len().min(depth);
        if let Some(last) = frames[..top].iter().rposition(|f| machinery(&f.name)) {
            self.edit_frames(|f| {
                f.drain(..=last);
            });
        }
    }

    /// The frames, or an empty slice when there are none.
    pub fn frames(&self) -> &[Frame] {
        match self {
            Trace::Frames(f) => f,
            _ => &[],
        }
    }

    /// True when the stack exists and has frames (bcc: a valid stack id).
    pub fn has_frames(&self) -> bool {
        !self.frames().is_empty()
    }

    /// True when the stack was asked for but could not be stored.
    pub fn is_missed(&self) -> bool {
        matches!(self, Trace::Missed { .. })
    }
}

/// A task and its stacks at the moment of a sample.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TaskStack {
    /// Process id (thread group id), as flare's PID namespace sees it;
    /// `None` for stacks of all processes counted together (stackcount's
    /// kernel stacks without `-P`, wakeuptime's targets).
    pub pid: Option<u32>,
    /// Thread id, where the tool tells threads apart.
    pub tid: Option<u32>,
    /// The task's command name (at most 15 bytes, as the kernel keeps it),
    /// shared by the copies of a sample that views of a profile make.
    pub comm: Arc<str>,
    pub user: Trace,
    pub kernel: Trace,
}

/// A distinct stack (or pair of stacks) and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub task: TaskStack,
    /// The waking task, for tools that record who woke the target.
    pub waker: Option<TaskStack>,
    pub value: u64,
    /// The values of [`Meta::extra_values`], in that order (empty for
    /// profiles with one value per sample).
    pub extra: Box<[u64]>,
}

impl Sample {
    /// A sample with one value.
    pub fn new(task: TaskStack, waker: Option<TaskStack>, value: u64) -> Self {
        Sample {
            task,
            waker,
            value,
            extra: Box::default(),
        }
    }
}

/// A value a profile carries beside each sample's main one (a wall-clock
/// profile's CPU time beside its wall time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtraValue {
    /// What it measures, as pprof names sample types (`cpu`).
    pub name: String,
    /// Its unit, as pprof names units (`nanoseconds`).
    pub unit: String,
}

/// Counts of what the kernel could not record during a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    /// Stacks that could not be stored (the stack storage was full).
    pub stacks: u64,
    /// True if at least one of those was for lack of room in the storage
    /// (-ENOMEM, or -EEXIST: every id probed held another stack).
    pub stacks_enomem: bool,
    /// Events dropped because the counts map was full.
    pub hash_full: u64,
    /// Blocked periods not tracked because too many threads were blocked
    /// at once (the off-CPU tools' map of blocked threads was full).
    pub untracked: u64,
    /// Events the kernel did not run the program for (another BPF program
    /// was running on the same CPU).
    pub missed_events: u64,
    /// Samples the kernel dropped because flare's perf buffer was full
    /// (perf-event mode: `PERF_RECORD_LOST`).
    pub samples: u64,
    /// User stacks the kernel's own frame-pointer walk (`--unwind fp`)
    /// may have cut at its limit, `kernel.perf_event_max_stack`.
    pub capped: u64,
}

impl Lost {
    /// Adds another read's losses to these.
    pub fn add(&mut self, other: &Lost) {
        self.stacks += other.stacks;
        self.stacks_enomem |= other.stacks_enomem;
        self.hash_full += other.hash_full;
        self.untracked += other.untracked;
        self.missed_events += other.missed_events;
        self.samples += other.samples;
        self.capped += other.capped;
    }

    /// True when nothing was lost.
    pub fn is_empty(&self) -> bool {
        *self == Lost::default()
    }
}

/// What a profile is of, for titles, headers and file metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// What kind of profile it is: the layout writers use.
    pub kind: Kind,
    /// The tool that made it, for titles: `profile`, `offcputime`, ...
    pub tool: String,
    /// The event sampled or traced: `cpu-clock`, `sched_switch`, a probe.
    pub event: String,
    pub unit: ValueUnit,
    /// For [`ValueUnit::Samples`]: nanoseconds of CPU time one sample stands
    /// for (1e9 / frequency), when sampling by frequency.
    pub period_ns: Option<u64>,
    /// How long the collection ran.
    pub duration: Duration,
    /// Who was profiled, in words (`all threads`, `PID [185]`).
    pub target: String,
    pub lost: Lost,
    /// Values each sample carries beside its main one ([`Sample::extra`]).
    pub extra_values: Vec<ExtraValue>,
}

impl Meta {
    /// Metadata of a profile of `kind` made by tracing or sampling `event`,
    /// with nothing else known yet.
    pub fn new(kind: Kind, event: &str) -> Self {
        Meta {
            kind,
            tool: kind.tool().to_string(),
            event: event.to_string(),
            unit: kind.unit(),
            period_ns: None,
            duration: Duration::ZERO,
            target: String::new(),
            lost: Lost::default(),
            extra_values: Vec::new(),
        }
    }
}

/// A whole profile: metadata and samples, and when they happened where
/// the collection kept their times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    pub meta: Meta,
    pub samples: Vec<Sample>,
    /// Each sample's times, for outputs that show when (`None` when the
    /// run did not keep them).
    pub timeline: Option<Timeline>,
}

/// What two samples must share to be merged: the tasks and the frame
/// names. Compared in place (and hashed) without copying any names, since
/// merging runs over every stack of a profile at once.
fn same_task(a: &TaskStack, b: &TaskStack) -> bool {
    fn same_trace(a: &Trace, b: &Trace) -> bool {
        match (a, b) {
            (Trace::NotCollected, Trace::NotCollected) => true,
            (Trace::Missed { .. }, Trace::Missed { .. }) => true,
            (Trace::Frames(x), Trace::Frames(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .zip(y.iter())
                        .all(|(f, g)| f.name == g.name && f.inlined == g.inlined)
            }
            _ => false,
        }
    }
    a.pid == b.pid
        && a.tid == b.tid
        && a.comm == b.comm
        && same_trace(&a.user, &b.user)
        && same_trace(&a.kernel, &b.kernel)
}

fn same_key(a: &Sample, b: &Sample) -> bool {
    same_task(&a.task, &b.task)
        && match (&a.waker, &b.waker) {
            (None, None) => true,
            (Some(x), Some(y)) => same_task(x, y),
            _ => false,
        }
}

/// Samples already merged, by [`key_hash`]: indices into their list.
struct Index {
    slots: ahash::AHashMap<u64, Vec<usize>>,
}

impl Index {
    fn with_capacity(n: usize) -> Self {
        Index {
            slots: ahash::AHashMap::with_capacity(n),
        }
    }

    /// Adds `sample` to the one in `merged` with the same key, or to the
    /// end of `merged`; returns its index there.
    fn merge(&mut self, merged: &mut Vec<Sample>, sample: Sample) -> u32 {
        let slot = self.slots.entry(key_hash(&sample)).or_default();
        match slot.iter().find(|&&i| same_key(&merged[i], &sample)) {
            Some(&i) => {
                let m = &mut merged[i];
                m.value = m.value.saturating_add(sample.value);
                for (a, b) in m.extra.iter_mut().zip(sample.extra.iter()) {
                    *a += b;
                }
                i as u32
            }
            None => {
                slot.push(merged.len());
                merged.push(sample);
                (merged.len() - 1) as u32
            }
        }
    }
}

/// A hash consistent with [`same_key`].
fn key_hash(s: &Sample) -> u64 {
    fn task<H: Hasher>(t: &TaskStack, h: &mut H) {
        (t.pid, t.tid, &t.comm).hash(h);
        for trace in [&t.user, &t.kernel] {
            match trace {
                Trace::NotCollected => 0u8.hash(h),
                Trace::Missed { .. } => 1u8.hash(h),
                Trace::Frames(f) => {
                    2u8.hash(h);
                    f.len().hash(h);
                    for f in f.iter() {
                        (&*f.name, f.inlined).hash(h);
                    }
                }
            }
        }
    }
    // ahash, keyed once per process: SipHash here was 2 % of the agent's
    // time, and the names hashed are the profiled programs'.
    static KEYS: std::sync::OnceLock<ahash::RandomState> = std::sync::OnceLock::new();
    let mut h = KEYS.get_or_init(ahash::RandomState::new).build_hasher();
    task(&s.task, &mut h);
    if let Some(w) = &s.waker {
        task(w, &mut h);
    }
    h.finish()
}

impl Profile {
    /// An empty profile.
    pub fn new(meta: Meta) -> Self {
        Profile {
            meta,
            samples: Vec::new(),
            timeline: None,
        }
    }

    /// A profile of `samples` without times.
    pub fn untimed(meta: Meta, samples: Vec<Sample>) -> Self {
        Profile {
            meta,
            samples,
            timeline: None,
        }
    }

    /// Sum of all sample values.
    pub fn total(&self) -> u64 {
        self.samples
            .iter()
            .fold(0u64, |t, s| t.saturating_add(s.value))
    }

    /// Merges samples whose tasks and frame names are the same (different
    /// addresses in one function become one entry), keeping the first
    /// sample's frame details. Order of first appearance is kept.
    pub fn merge_identical(&mut self) {
        let mut index = Index::with_capacity(self.samples.len());
        let mut merged: Vec<Sample> = Vec::with_capacity(self.samples.len());
        // Old index -> merged index, for the timeline.
        let map: Vec<u32> = self
            .samples
            .drain(..)
            .map(|s| index.merge(&mut merged, s))
            .collect();
        self.samples = merged;
        if let Some(t) = &mut self.timeline {
            t.remap(&map);
        }
    }

    /// Merges `other`'s samples into this merged profile, and appends its
    /// events, in time proportional to this profile's samples and
    /// `other`'s events (a long run's whole profile absorbs each interval
    /// without walking every event it already holds).
    pub fn absorb(&mut self, other: Profile) {
        let mut index = Index::with_capacity(self.samples.len() + other.samples.len());
        for (i, s) in self.samples.iter().enumerate() {
            index.slots.entry(key_hash(s)).or_default().push(i);
        }
        let map: Vec<u32> = other
            .samples
            .into_iter()
            .map(|s| index.merge(&mut self.samples, s))
            .collect();
        if let Some(mut o) = other.timeline {
            o.remap(&map);
            match &mut self.timeline {
                Some(t) => t.events.extend(o.events),
                None => self.timeline = Some(o),
            }
        }
    }

    /// Sorts samples by value, smallest first (bcc's order), ties kept in
    /// a stable order.
    pub fn sort_ascending(&mut self) {
        let Some(timeline) = &mut self.timeline else {
            self.samples.sort_by_key(|s| s.value);
            return;
        };
        let mut order: Vec<u32> = (0..self.samples.len() as u32).collect();
        order.sort_by_key(|&i| self.samples[i as usize].value);
        let mut map = vec![0u32; order.len()];
        for (new, &old) in order.iter().enumerate() {
            map[old as usize] = new as u32;
        }
        let mut old: Vec<Option<Sample>> = self.samples.drain(..).map(Some).collect();
        self.samples = order
            .iter()
            .filter_map(|&i| old[i as usize].take())
            .collect();
        timeline.remap(&map);
    }

    /// The profile of the events from `from_ns` to `to_ns` (offsets from
    /// the start, `to_ns` excluded), each sample valued by its events in
    /// that range and dropped when it has none; its timeline keeps those
    /// events. `None` for a profile without times. Extra values are
    /// scaled with the main one.
    pub fn range(&self, from_ns: u64, to_ns: u64) -> Option<Profile> {
        let timeline = self.timeline.as_ref()?;
        let mut values = vec![0u64; self.samples.len()];
        let mut events = Vec::new();
        for e in &timeline.events {
            let at = timeline.offset_ns(e);
            if at >= from_ns && at < to_ns {
                if let Some(v) = values.get_mut(e.sample as usize) {
                    *v += e.value;
                    events.push(*e);
                }
            }
        }
        let mut map = vec![u32::MAX; self.samples.len()];
        let mut samples = Vec::new();
        for (i, (s, &v)) in self.samples.iter().zip(&values).enumerate() {
            if v == 0 {
                continue;
            }
            map[i] = samples.len() as u32;
            let mut s = s.clone();
            if s.value > 0 {
                for x in s.extra.iter_mut() {
                    *x = (*x as u128 * v as u128 / s.value as u128) as u64;
                }
            }
            s.value = v;
            samples.push(s);
        }
        for e in &mut events {
            e.sample = map[e.sample as usize];
        }
        let mut meta = self.meta.clone();
        meta.duration = Duration::from_nanos(to_ns.saturating_sub(from_ns));
        Some(Profile {
            meta,
            samples,
            timeline: Some(Timeline {
                events,
                ..timeline.clone_empty()
            }),
        })
    }
}

#[cfg(test)]
mod tests;
