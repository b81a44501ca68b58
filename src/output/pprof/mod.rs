//! pprof output: a gzipped `profile.proto`, as `go tool pprof`, Pyroscope,
//! Parca and other continuous-profiling servers read it.
//!
//! Sample types carry real units (samples and CPU nanoseconds for
//! `profile`, off-CPU nanoseconds for the off-CPU family, counts for
//! `stackcount`); functions, locations and mappings are interned tables;
//! inlined frames share their caller's location, as pprof models them; the
//! process is not a frame but the labels `pid`, `tid` and `comm`.

pub mod proto;

use std::collections::HashMap;
use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use ahash::AHashMap;
use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use crate::profile::{Frame, FrameKind, Kind, PathFrame, PathKind, Profile, TaskStack, ValueUnit};

/// The module name pprof and perf give kernel code.
const KERNEL_MAPPING: &str = "[kernel.kallsyms]";
/// The module name of code compiled at run time.
const JIT_MAPPING: &str = "[jit]";

/// Writes the profile gzipped, stamped with the time it started.
pub fn write<W: Write>(w: W, profile: &Profile) -> io::Result<()> {
    let end = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let start = end.saturating_sub(profile.meta.duration);
    let bytes = build(profile, start.as_nanos() as i64).encode_to_vec();
    let mut gz = GzEncoder::new(w, Compression::default());
    gz.write_all(&bytes)?;
    gz.finish()?.flush()
}

/// What makes a location distinct: mapping, address, (function, line)s.
type LocationKey = (u64, u64, Vec<(u64, i64)>);

/// A text by where it lies: its address and length.
type TextAt = (usize, usize);

/// What a single frame's location is made of, by where its texts lie:
/// its name, file and line (the function and line), its address, kind,
/// object and offset in it (the mapping). Frames of one function at one
/// address share their name's, file's and object's text, as `held` says.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct FrameKey {
    name: TextAt,
    file: TextAt,
    line: Option<u32>,
    addr: u64,
    kind: FrameKind,
    object: Option<TextAt>,
    file_offset: u64,
}

impl FrameKey {
    fn of(frame: &Frame) -> Self {
        let at = |s: &str| (s.as_ptr() as usize, s.len());
        FrameKey {
            name: at(&frame.name),
            file: frame.file().map_or((0, 0), at),
            line: frame.line(),
            addr: frame.addr,
            kind: frame.kind,
            object: frame.object.as_ref().map(|o| at(&o.path)),
            file_offset: frame.file_offset,
        }
    }
}

/// Interning tables for strings and the profile's lists, for a
/// profile borrowed for `'p`.
struct Builder<'p> {
    out: proto::Profile,
    strings: AHashMap<String, i64>,
    /// Strings of the profile by address and length: frames cloned from
    /// one symbolized frame share their names', files' and objects'
    /// text, so most lookups hash two words instead of a long name.
    /// While the profile is borrowed no other text can be at an address
    /// one of its strings is at.
    held: AHashMap<TextAt, i64>,
    _profile: std::marker::PhantomData<&'p Profile>,
    functions: AHashMap<(i64, i64), u64>,
    mappings: AHashMap<(i64, Option<u64>), u64>,
    /// Locations of inlined groups, and of single frames by mapping,
    /// address, function and line (no list to build or hash).
    locations: AHashMap<LocationKey, u64>,
    single_locations: AHashMap<(u64, u64, u64, i64), u64>,
    /// Locations of single frames by what makes them (see
    /// [`FrameKey`]): a frame seen before is found in one lookup, not in
    /// the five that name its function, mapping and location.
    frame_locations: AHashMap<FrameKey, u64>,
}

impl<'p> Builder<'p> {
    /// [`Builder::string`] of text the profile holds.
    fn held(&mut self, s: &'p str) -> i64 {
        let key = (s.as_ptr() as usize, s.len());
        if let Some(&i) = self.held.get(&key) {
            return i;
        }
        let i = self.string(s);
        self.held.insert(key, i);
        i
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.out.string_table.len() as i64;
        self.out.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn value_type(&mut self, ty: &str, unit: &str) -> proto::ValueType {
        proto::ValueType {
            r#type: self.string(ty),
            unit: self.string(unit),
        }
    }

    fn function(&mut self, name: &'p str, file: Option<&'p str>) -> u64 {
        let key = (self.held(name), self.held(file.unwrap_or("")));
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.out.function.len() as u64 + 1;
        self.out.function.push(proto::Function {
            id,
            name: key.0,
            system_name: key.0,
            filename: key.1,
            start_line: 0,
        });
        self.functions.insert(key, id);
        id
    }

    /// The mapping of a frame: one per object and load address (libc in
    /// two processes is two mappings), carrying the object's build id and
    /// a layout from which pprof computes each address's file offset
    /// (`address - memory_start + file_offset`), so that a server can
    /// symbolize by build id. Frames whose offset is unknown share one
    /// mapping per path.
    fn mapping(&mut self, frame: &'p Frame) -> u64 {
        let (file, object) = match (frame.kind, &frame.object) {
            (FrameKind::Kernel, _) => (KERNEL_MAPPING, None),
            (FrameKind::Native, Some(o)) => (&*o.path, Some(o)),
            // Code compiled at run time lies in no file: one mapping
            // says which frames are such code, as perf's `[JIT]` does.
            (FrameKind::Jit, None) => (JIT_MAPPING, None),
            (FrameKind::Jit, Some(o)) => (&*o.path, Some(o)),
            // An interpreted function is a function and a source line,
            // a label only a function: neither lies in a mapping.
            (FrameKind::Native, None) | (FrameKind::Interpreted | FrameKind::Label, _) => return 0,
        };
        let name = self.held(file);
        // The load bias: where offset 0 of the file would be in memory.
        let bias = frame
            .offset_in_object()
            .and_then(|off| frame.addr.checked_sub(off));
        let key = (name, bias);
        if let Some(&id) = self.mappings.get(&key) {
            self.extend_mapping(id, frame.addr);
            return id;
        }
        let id = self.out.mapping.len() as u64 + 1;
        let build_id = match object.and_then(|o| o.build_id_hex()) {
            Some(hex) => self.string(&hex),
            None => 0,
        };
        self.out.mapping.push(proto::Mapping {
            id,
            filename: name,
            build_id,
            has_functions: true,
            ..Default::default()
        });
        if let Some(bias) = bias {
            if let Some(m) = self.out.mapping.last_mut() {
                m.memory_start = bias;
                m.memory_limit = bias;
            }
            self.extend_mapping(id, frame.addr);
        }
        self.mappings.insert(key, id);
        id
    }

    /// Widens a mapping with a known layout to hold `addr`.
    fn extend_mapping(&mut self, id: u64, addr: u64) {
        if let Some(m) = self.out.mapping.get_mut((id as usize).wrapping_sub(1)) {
            if m.memory_limit != 0 && addr >= m.memory_limit {
                m.memory_limit = addr + 1;
            }
        }
    }

    /// The location of a group of frames, innermost inlined first and the
    /// real (not inlined) frame last.
    fn location(&mut self, group: &[PathFrame<'p>]) -> u64 {
        let single = match group {
            [p] => p.frame.map(FrameKey::of),
            _ => None,
        };
        if let Some(id) = single.and_then(|k| self.frame_locations.get(&k)) {
            return *id;
        }
        let mut lines = Vec::with_capacity(group.len());
        for p in group {
            let file = p.frame.and_then(Frame::file);
            let line = p.frame.and_then(Frame::line).unwrap_or(0) as i64;
            lines.push((self.function(p.name, file), line));
        }
        let outer = group.last().and_then(|p| p.frame);
        let (mapping_id, address) = match outer {
            Some(f) => (self.mapping(f), f.addr),
            None => (0, 0),
        };
        let key = (mapping_id, address, lines);
        let found = match key.2[..] {
            [(function, line)] => self
                .single_locations
                .get(&(mapping_id, address, function, line)),
            _ => self.locations.get(&key),
        };
        let id = match found {
            Some(&id) => id,
            None => self.new_location(group, key),
        };
        if let Some(k) = single {
            self.frame_locations.insert(k, id);
        }
        id
    }

    /// Adds the location of `group`, found in no table yet.
    fn new_location(&mut self, group: &[PathFrame<'p>], key: LocationKey) -> u64 {
        let (mapping_id, address, lines) = key;
        let id = self.out.location.len() as u64 + 1;
        if let Some(m) = self
            .out
            .mapping
            .get_mut((mapping_id as usize).wrapping_sub(1))
        {
            m.has_filenames |= group
                .iter()
                .any(|p| p.frame.is_some_and(|f| f.source.is_some()));
            m.has_line_numbers |= lines.iter().any(|&(_, l)| l != 0);
            m.has_inline_frames |= group.len() > 1;
        }
        self.out.location.push(proto::Location {
            id,
            mapping_id,
            address,
            line: lines
                .iter()
                .map(|&(function_id, line)| proto::Line {
                    function_id,
                    line,
                    column: 0,
                })
                .collect(),
            is_folded: false,
        });
        match lines[..] {
            [(function, line)] => {
                self.single_locations
                    .insert((mapping_id, address, function, line), id);
            }
            _ => {
                self.locations.insert((mapping_id, address, lines), id);
            }
        }
        id
    }

    /// The label key `key` with `prefix`.
    fn label_key(&mut self, prefix: &str, key: &'static str) -> i64 {
        match prefix {
            "" => self.held(key),
            _ => self.string(&format!("{prefix}{key}")),
        }
    }

    fn labels(&mut self, task: &'p TaskStack, prefix: &str, out: &mut Vec<proto::Label>) {
        let num = |b: &mut Self, key: &'static str, n: u32| proto::Label {
            key: b.label_key(prefix, key),
            num: n as i64,
            ..Default::default()
        };
        if let Some(pid) = task.pid {
            out.push(num(self, "pid", pid));
        }
        if let Some(tid) = task.tid {
            out.push(num(self, "tid", tid));
        }
        out.push(proto::Label {
            key: self.label_key(prefix, "comm"),
            str: self.held(&task.comm),
            ..Default::default()
        });
    }
}

/// The sample types of a profile and each one's multiplier of the raw value.
fn sample_types(profile: &Profile) -> Vec<(&'static str, &'static str, u64)> {
    let meta = &profile.meta;
    match meta.kind {
        Kind::Cpu => {
            let mut t = vec![("samples", "count", 1)];
            if let Some(ns) = meta.period_ns {
                t.push(("cpu", "nanoseconds", ns));
            }
            t
        }
        Kind::Wakeup => vec![("wakeup", "nanoseconds", 1000)],
        Kind::OffCpu | Kind::OffWake => vec![("offcpu", "nanoseconds", 1000)],
        Kind::Count => vec![("events", "count", 1)],
        Kind::Wall => vec![("wall", "nanoseconds", 1000)],
    }
}

/// Splits a leaf-first path into locations: a frame inlined into its
/// caller shares the caller's location.
fn groups<'a, 'p>(leaf_first: &'a [PathFrame<'p>]) -> Vec<&'a [PathFrame<'p>]> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, p) in leaf_first.iter().enumerate() {
        let inlined = p.frame.is_some_and(|f| f.inlined) && i + 1 < leaf_first.len();
        if !inlined {
            out.push(&leaf_first[start..=i]);
            start = i + 1;
        }
    }
    out
}

/// The profile as a `profile.proto` message, started at `time_nanos`.
pub fn build(profile: &Profile, time_nanos: i64) -> proto::Profile {
    build_interned(profile, time_nanos, &mut Sizes::default()).0
}

/// How large a profile's tables grew. A caller that builds one profile
/// after another of the same kind (the agent, every window) passes the
/// last one's, so that the next starts at those sizes instead of growing
/// step by step: each step rehashed its table into fresh memory, pages
/// faulted in again (3 % of the agent's CPU).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sizes {
    strings: usize,
    held: usize,
    functions: usize,
    mappings: usize,
    locations: usize,
    single_locations: usize,
    frame_locations: usize,
    samples: usize,
}

/// [`build`], and its string table's index (each text's place in it),
/// for a caller that adds strings of its own: the agent's labels. Starts
/// at `sizes` and leaves there the sizes this profile's tables reached.
pub fn build_interned(
    profile: &Profile,
    time_nanos: i64,
    sizes: &mut Sizes,
) -> (proto::Profile, AHashMap<String, i64>) {
    let mut b = Builder {
        out: proto::Profile {
            string_table: Vec::with_capacity(sizes.strings),
            function: Vec::with_capacity(sizes.functions),
            mapping: Vec::with_capacity(sizes.mappings),
            location: Vec::with_capacity(sizes.locations + sizes.single_locations),
            sample: Vec::with_capacity(sizes.samples),
            ..Default::default()
        },
        strings: AHashMap::with_capacity(sizes.strings),
        functions: AHashMap::with_capacity(sizes.functions),
        mappings: AHashMap::with_capacity(sizes.mappings),
        locations: AHashMap::with_capacity(sizes.locations),
        single_locations: AHashMap::with_capacity(sizes.single_locations),
        frame_locations: AHashMap::with_capacity(sizes.frame_locations),
        held: AHashMap::with_capacity(sizes.held),
        _profile: std::marker::PhantomData,
    };
    b.string("");
    let meta = &profile.meta;
    let types = sample_types(profile);
    b.out.sample_type = types.iter().map(|(t, u, _)| b.value_type(t, u)).collect();
    // The period is one sample's CPU time for `profile`; the other tools
    // record every event, each of which stands for itself.
    let (period_type, period_unit) = types.last().map(|&(t, u, _)| (t, u)).unwrap_or(("", ""));
    b.out.period_type = Some(b.value_type(period_type, period_unit));
    b.out.period = match meta.unit {
        ValueUnit::Samples => meta.period_ns.unwrap_or(0) as i64,
        _ => 1,
    };
    b.out.default_sample_type = b.out.sample_type.last().map(|t| t.r#type).unwrap_or(0);
    // Values samples carry beside the main one follow it, as they are.
    for e in &meta.extra_values {
        let t = b.value_type(&e.name, &e.unit);
        b.out.sample_type.push(t);
    }
    b.out.time_nanos = time_nanos;
    b.out.duration_nanos = meta.duration.as_nanos() as i64;
    let mut comments = vec![format!("flare {}: {}", meta.tool, meta.event)];
    if !meta.target.is_empty() {
        comments.push(format!("target: {}", meta.target));
    }
    if meta.lost.stacks > 0 {
        comments.push(format!("{} stacks could not be stored", meta.lost.stacks));
    }
    if meta.lost.hash_full > 0 {
        comments.push(format!(
            "{} samples dropped: hash table full",
            meta.lost.hash_full
        ));
    }
    b.out.comment = comments.iter().map(|c| b.string(c)).collect();

    // pprof names the first mapping as the profile's main binary: register
    // the user modules first, the one with the most frame-weight leading.
    // Weighed first by where each module's path lies (frames share their
    // object's), then by the path itself, whose order is the same every
    // run.
    type ModuleKey<'a> = (&'a str, Option<u64>);
    let mut weights: AHashMap<(TextAt, Option<u64>), (u64, &Frame)> = AHashMap::new();
    for s in &profile.samples {
        for f in s.task.user.frames() {
            if let Some(m) = f.module() {
                let bias = f.offset_in_object().and_then(|o| f.addr.checked_sub(o));
                let at = (m.as_ptr() as usize, m.len());
                weights.entry((at, bias)).or_insert((0, f)).0 += s.value;
            }
        }
    }
    let mut modules: HashMap<ModuleKey<'_>, (u64, &Frame)> = HashMap::new();
    for ((_, bias), (weight, f)) in weights {
        let m = f.module().unwrap_or_default();
        modules.entry((m, bias)).or_insert((0, f)).0 += weight;
    }
    let mut modules: Vec<(ModuleKey<'_>, (u64, &Frame))> = modules.into_iter().collect();
    modules.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    for (_, (_, f)) in modules {
        b.mapping(f);
    }

    for s in &profile.samples {
        let path = s.path();
        // The process name at the root is a label, not a frame.
        let mut leaf_first: Vec<PathFrame<'_>> = path
            .into_iter()
            .filter(|p| p.kind != PathKind::Process)
            .collect();
        leaf_first.reverse();
        let location_id = groups(&leaf_first)
            .into_iter()
            .map(|g| b.location(g))
            .collect();
        let mut label = Vec::new();
        b.labels(&s.task, "", &mut label);
        if let Some(w) = &s.waker {
            b.labels(w, "waker_", &mut label);
        }
        b.out.sample.push(proto::Sample {
            location_id,
            value: types
                .iter()
                .map(|&(_, _, m)| (s.value * m) as i64)
                .chain(
                    (0..meta.extra_values.len())
                        .map(|i| s.extra.get(i).copied().unwrap_or(0) as i64),
                )
                .collect(),
            label,
        });
    }
    *sizes = Sizes {
        strings: b.strings.len(),
        held: b.held.len(),
        functions: b.functions.len(),
        mappings: b.mappings.len(),
        locations: b.locations.len(),
        single_locations: b.single_locations.len(),
        frame_locations: b.frame_locations.len(),
        samples: b.out.sample.len(),
    };
    (b.out, b.strings)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::profile::{ExtraValue, Kind, Meta, ObjectRef, Sample, TaskStack, Trace};

    fn frame(name: &str, addr: u64, object: &Arc<ObjectRef>, offset: u64) -> Frame {
        Frame {
            addr,
            object: Some(object.clone()),
            file_offset: offset,
            ..Frame::named(name, FrameKind::Native)
        }
    }

    /// libc in two processes, loaded at two addresses: two mappings, each
    /// with the build id and a layout that gives every location's file
    /// offset back (address - memory_start + file_offset).
    #[test]
    fn mappings_carry_build_ids_and_offsets() {
        let libc = Arc::new(ObjectRef {
            path: "/usr/lib/libc.so.6".into(),
            build_id: Some(Arc::from(&[0x93, 0xac, 0x01][..])),
        });
        let sample = |pid: u32, base: u64| {
            let user = Trace::of(vec![
                frame("read", base + 0x1100, &libc, 0x1100),
                frame("main_caller", base + 0x2200, &libc, 0x2200),
            ]);
            let task = TaskStack {
                pid: Some(pid),
                tid: None,
                comm: "app".into(),
                user,
                kernel: Trace::of(vec![]),
            };
            Sample::new(task, None, 1)
        };
        let mut profile = Profile::new(Meta::new(Kind::Cpu, "cpu-clock"));
        profile.samples = vec![sample(1, 0x7f00_0000_0000), sample(2, 0x7f11_0000_0000)];
        let out = build(&profile, 0);
        assert_eq!(out.mapping.len(), 2);
        for m in &out.mapping {
            assert_eq!(out.string_table[m.build_id as usize], "93ac01");
            assert_eq!(out.string_table[m.filename as usize], "/usr/lib/libc.so.6");
        }
        for l in &out.location {
            let m = &out.mapping[l.mapping_id as usize - 1];
            assert!(m.memory_start <= l.address && l.address < m.memory_limit);
            let offset = l.address - m.memory_start + m.file_offset;
            assert!([0x1100, 0x2200].contains(&offset), "{offset:#x}");
        }
    }

    #[test]
    fn extra_values_follow_the_main_sample_types() {
        let mut meta = Meta::new(Kind::Cpu, "cpu-clock");
        meta.period_ns = Some(10);
        meta.extra_values.push(ExtraValue {
            name: "wall".into(),
            unit: "nanoseconds".into(),
        });
        let task = TaskStack {
            pid: Some(1),
            tid: None,
            comm: "app".into(),
            user: Trace::of(Vec::new()),
            kernel: Trace::NotCollected,
        };
        let mut sample = Sample::new(task, None, 3);
        sample.extra = vec![700].into();
        let p = build(&Profile::untimed(meta, vec![sample]), 0);
        let names: Vec<&str> = p
            .sample_type
            .iter()
            .map(|t| p.string_table[t.r#type as usize].as_str())
            .collect();
        assert_eq!(names, ["samples", "cpu", "wall"]);
        assert_eq!(p.sample[0].value, [3, 30, 700]);
        // The default stays the main value's.
        assert_eq!(p.string_table[p.default_sample_type as usize], "cpu");
    }

    /// Samples that share a trace, and traces that hold equal frames,
    /// share locations; a frame at the same place under another name, or
    /// inlined into a caller, has its own.
    #[test]
    fn locations_are_shared_by_content_not_by_trace() {
        let exe = Arc::new(ObjectRef {
            path: "/usr/bin/app".into(),
            build_id: None,
        });
        let base = 0x5500_0000_0000;
        let frames = |leaf: &str| {
            vec![
                frame(leaf, base + 0x1100, &exe, 0x1100),
                frame("main", base + 0x2200, &exe, 0x2200),
            ]
        };
        let shared = Trace::of(frames("work"));
        let sample = |tid: u32, user: Trace| {
            let task = TaskStack {
                pid: Some(1),
                tid: Some(tid),
                comm: "app".into(),
                user,
                kernel: Trace::of(vec![]),
            };
            Sample::new(task, None, 1)
        };
        let mut inlined = frames("work");
        inlined.insert(
            0,
            Frame {
                inlined: true,
                ..frame("helper", base + 0x1100, &exe, 0x1100)
            },
        );
        let samples = vec![
            sample(1, shared.clone()),
            sample(2, shared),
            sample(3, Trace::of(frames("work"))),
            sample(4, Trace::of(frames("other"))),
            sample(5, Trace::of(inlined.clone())),
            sample(6, Trace::of(inlined)),
        ];
        let profile = Profile::untimed(Meta::new(Kind::Cpu, "cpu-clock"), samples);
        let p = build(&profile, 0);
        let ids: Vec<&[u64]> = p.sample.iter().map(|s| &s.location_id[..]).collect();
        assert_eq!(ids[0], ids[1]);
        assert_eq!(ids[0], ids[2]);
        assert_ne!(ids[3][0], ids[0][0]);
        assert_eq!(ids[3][1], ids[0][1]);
        assert_eq!(ids[4], ids[5]);
        assert_ne!(ids[4][0], ids[0][0]);
        // work, main, other, and helper inlined into work.
        assert_eq!(p.location.len(), 4);
        let names = |id: u64| -> Vec<&str> {
            p.location[id as usize - 1]
                .line
                .iter()
                .map(|l| {
                    let f = &p.function[l.function_id as usize - 1];
                    p.string_table[f.name as usize].as_str()
                })
                .collect()
        };
        assert_eq!(names(ids[4][0]), ["helper", "work"]);
        assert_eq!(names(ids[3][0]), ["other"]);
        assert_eq!(p.function.len(), 4);
    }

    /// A build started at the last one's sizes makes the same profile,
    /// and leaves the sizes its tables reached.
    #[test]
    fn sizes_carried_from_the_last_build_change_nothing() {
        let exe = Arc::new(ObjectRef {
            path: "/usr/bin/app".into(),
            build_id: None,
        });
        let samples = (0..50u64)
            .map(|i| {
                let task = TaskStack {
                    pid: Some(1 + i as u32 % 3),
                    tid: None,
                    comm: "app".into(),
                    user: Trace::of(vec![
                        frame(&format!("f{}", i % 7), 0x1000 + i % 7, &exe, 0x1000 + i % 7),
                        frame("main", 0x2000, &exe, 0x2000),
                    ]),
                    kernel: Trace::of(vec![]),
                };
                Sample::new(task, None, i + 1)
            })
            .collect();
        let profile = Profile::untimed(Meta::new(Kind::Cpu, "cpu-clock"), samples);
        let mut sizes = Sizes::default();
        let (first, _) = build_interned(&profile, 5, &mut sizes);
        assert_eq!(sizes.functions, first.function.len());
        assert_eq!(sizes.functions, 8);
        assert_eq!(sizes.samples, 50);
        assert_eq!(
            sizes.single_locations + sizes.locations,
            first.location.len()
        );
        let (again, _) = build_interned(&profile, 5, &mut sizes);
        assert_eq!(again, first);
    }
}
