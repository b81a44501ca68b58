//! Firefox Profiler files: the processed profile format that
//! profiler.firefox.com opens and samply writes (`profile.json.gz`),
//! built with samply's own writer, `fxprof-processed-profile`.
//!
//! A process per pid, a track per thread, every timed event a sample at
//! its time (relative to the profile's start) with its root-to-leaf
//! stack. Native frames point into their library (path and build id) at
//! their file offset, named through a symbol table of the names flare
//! already resolved, so the profiler needs no symbol server; kernel,
//! runtime, label and waker frames are labels, each kind its own
//! category. The writer has no place for source lines or inline depths,
//! so they are filled into its JSON afterwards ([`patch`]).
//!
//! Timer samples weigh 1 each (with their CPU time as the CPU delta);
//! the microsecond kinds weigh their blocked microseconds, so the call
//! tree's totals are the profile's. Wall-clock's off-CPU periods are also
//! interval markers spanning the blocked time. A profile without times
//! has each stack once at the start, weighted by its value, and says so
//! in its product name.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

use fxprof_processed_profile::{
    self as fx, debugid::DebugId, CategoryColor, CategoryHandle, CategoryPairHandle, CpuDelta,
    FrameFlags, FrameHandle, FrameInfo, LibraryHandle, LibraryInfo, MarkerFieldFormat,
    MarkerLocations, MarkerTiming, ProcessHandle, ReferenceTimestamp, SamplingInterval,
    StackHandle, StaticSchemaMarker, StaticSchemaMarkerField, StringHandle, Symbol, SymbolTable,
    ThreadHandle, Timestamp,
};
use serde_json::Value;

use crate::profile::{Frame, FrameKind, Kind, PathKind, Profile, ValueUnit};

/// Writes `profile` as a gzipped Firefox Profiler file.
pub fn write<W: Write>(w: W, profile: &Profile) -> io::Result<()> {
    let json = to_json(profile);
    let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
    serde_json::to_writer(&mut gz, &json).map_err(io::Error::other)?;
    gz.finish()?.flush()
}

/// The profile as the file's JSON (before gzip).
pub fn to_json(profile: &Profile) -> Value {
    let mut b = Builder::new(profile);
    b.add_events();
    let patches = std::mem::take(&mut b.patches);
    let tids = std::mem::take(&mut b.tid_names);
    let mut json = serde_json::to_value(&b.fx).unwrap_or(Value::Null);
    patch(&mut json, &tids, &patches);
    // The profile's start is the reference (time 0), its end the run's:
    // the range the profiler shows, and where readers put the start.
    if let Some(meta) = json.get_mut("meta").and_then(Value::as_object_mut) {
        let end_ns = profile
            .timeline
            .as_ref()
            .map_or(0, |t| t.end_ns())
            .max(profile.meta.duration.as_nanos() as u64);
        meta.insert("profilingStartTime".into(), 0.0.into());
        meta.insert("profilingEndTime".into(), (end_ns as f64 / 1e6).into());
    }
    json
}

/// The frame categories, one per kind of frame.
struct Categories {
    kernel: CategoryHandle,
    native: CategoryHandle,
    interpreted: CategoryHandle,
    jit: CategoryHandle,
    label: CategoryHandle,
    missed: CategoryHandle,
    waker: CategoryHandle,
}

/// What the writer cannot say about a frame, to be put into its JSON.
#[derive(Clone, Default)]
struct FramePatch {
    file: Option<Arc<str>>,
    line: Option<u32>,
    inline_depth: u32,
}

/// A library key: the object's path and build id (or the kernel).
type LibKey = (Arc<str>, Option<Arc<[u8]>>);

struct Builder<'p> {
    profile: &'p Profile,
    fx: fx::Profile,
    cat: Categories,
    /// Libraries with their symbol tables' names, by rva.
    libs: HashMap<LibKey, LibraryHandle>,
    kernel_lib: Option<(LibraryHandle, u64)>,
    processes: HashMap<u32, ProcessHandle>,
    threads: HashMap<(u32, u32), ThreadHandle>,
    stacks: HashMap<(ThreadHandle, u32), Option<StackHandle>>,
    /// Per thread: frame handles in the order the writer numbered them.
    frame_index: HashMap<ThreadHandle, HashMap<FrameHandle, usize>>,
    patches: HashMap<ThreadHandle, Vec<FramePatch>>,
    /// The `tid` string each thread has in the file (the writer makes
    /// repeated tids unique with a suffix, as this does).
    tid_names: HashMap<String, ThreadHandle>,
    tid_uses: HashMap<u32, u32>,
}

/// An off-CPU period of a wall-clock profile, as an interval marker.
struct OffCpu {
    name: StringHandle,
}

impl StaticSchemaMarker for OffCpu {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "OffCpu";
    const DESCRIPTION: Option<&'static str> = Some("A period the thread spent off the CPU");
    const LOCATIONS: MarkerLocations = MarkerLocations::MARKER_CHART
        .union(MarkerLocations::MARKER_TABLE)
        .union(MarkerLocations::TIMELINE_OVERVIEW);
    const CHART_LABEL: Option<&'static str> = Some("{marker.data.state}");
    const TABLE_LABEL: Option<&'static str> = Some("{marker.data.state}");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[StaticSchemaMarkerField {
        key: "state",
        label: "State",
        format: MarkerFieldFormat::String,
        flags: fx::MarkerFieldFlags::SEARCHABLE,
    }];

    fn name(&self, profile: &mut fx::Profile) -> StringHandle {
        profile.intern_string("Off-CPU")
    }

    fn category(&self, _profile: &mut fx::Profile) -> CategoryHandle {
        CategoryHandle::OTHER
    }

    fn string_field_value(&self, _field_index: u32) -> StringHandle {
        self.name
    }

    fn number_field_value(&self, _field_index: u32) -> f64 {
        0.0
    }
}

fn product(profile: &Profile) -> String {
    let meta = &profile.meta;
    let mut s = format!("flare {}: {}", meta.tool, meta.event);
    if !meta.target.is_empty() {
        s.push_str(", ");
        s.push_str(&meta.target);
    }
    if meta.unit == ValueUnit::Microseconds {
        s.push_str(" (sample weights are microseconds)");
    }
    if profile.timeline.is_none() {
        s.push_str(" (no sample times: each stack once at the start, weighted by its value)");
    }
    s
}

impl<'p> Builder<'p> {
    fn new(profile: &'p Profile) -> Self {
        let origin_unix_ns = profile.timeline.as_ref().map_or(0, |t| t.origin_unix_ns);
        let interval = match profile.meta.period_ns {
            Some(ns) if ns > 0 => SamplingInterval::from_nanos(ns),
            _ => SamplingInterval::from_millis(1),
        };
        let mut fx = fx::Profile::new(
            &product(profile),
            ReferenceTimestamp::from_millis_since_unix_epoch(origin_unix_ns as f64 / 1e6),
            interval,
        );
        fx.set_os_name("Linux");
        // Every frame is named here: nothing is left for a symbol server.
        fx.set_symbolicated(true);
        let cat = Categories {
            native: fx.add_category("User", CategoryColor::Yellow),
            kernel: fx.add_category("Kernel", CategoryColor::Orange),
            interpreted: fx.add_category("Interpreted", CategoryColor::Blue),
            jit: fx.add_category("JIT", CategoryColor::Green),
            label: fx.add_category("Off-CPU", CategoryColor::LightBlue),
            missed: fx.add_category("Missed stack", CategoryColor::Red),
            waker: fx.add_category("Waker", CategoryColor::Purple),
        };
        let mut b = Builder {
            profile,
            fx,
            cat,
            libs: HashMap::new(),
            kernel_lib: None,
            processes: HashMap::new(),
            threads: HashMap::new(),
            stacks: HashMap::new(),
            frame_index: HashMap::new(),
            patches: HashMap::new(),
            tid_names: HashMap::new(),
            tid_uses: HashMap::new(),
        };
        b.add_libraries();
        b
    }

    /// One library per object of the profile's native frames, and one for
    /// the kernel, each with a symbol table of the names flare resolved.
    fn add_libraries(&mut self) {
        let mut symbols: HashMap<LibKey, Vec<Symbol>> = HashMap::new();
        let mut order: Vec<LibKey> = Vec::new();
        let mut kernel: Vec<(u64, &str)> = Vec::new();
        for s in &self.profile.samples {
            for f in s.task.user.frames().iter().chain(s.task.kernel.frames()) {
                if f.inlined {
                    continue;
                }
                if f.kind == FrameKind::Kernel && f.addr != 0 && !f.unnamed {
                    kernel.push((f.addr, &f.name));
                } else if let Some((key, rva)) = lib_address(f) {
                    let list = symbols.entry(key.clone()).or_insert_with(|| {
                        order.push(key);
                        Vec::new()
                    });
                    list.push(Symbol {
                        address: rva,
                        size: Some(1),
                        name: f.name.to_string(),
                    });
                }
            }
        }
        for key in order {
            let path = key.0.to_string();
            let name = path.rsplit('/').next().unwrap_or(&path).to_string();
            let (debug_id, code_id) = match &key.1 {
                Some(id) => (debug_id_of(id), Some(hex(id))),
                None => (DebugId::nil(), None),
            };
            let lib = self.fx.add_lib(LibraryInfo {
                name: name.clone(),
                debug_name: name,
                path: path.clone(),
                debug_path: path,
                debug_id,
                code_id,
                arch: None,
                symbol_table: None,
            });
            let list = symbols.remove(&key).unwrap_or_default();
            self.fx
                .set_lib_symbol_table(lib, Arc::new(SymbolTable::new(list)));
            self.libs.insert(key, lib);
        }
        if let Some(base) = kernel.iter().map(|k| k.0).min() {
            let list = kernel
                .iter()
                .filter(|(a, _)| a - base <= u32::MAX as u64)
                .map(|(a, n)| Symbol {
                    address: (a - base) as u32,
                    size: Some(1),
                    name: n.to_string(),
                })
                .collect();
            let lib = self.fx.add_lib(LibraryInfo {
                name: "[kernel.kallsyms]".into(),
                debug_name: "[kernel.kallsyms]".into(),
                path: "[kernel.kallsyms]".into(),
                debug_path: "[kernel.kallsyms]".into(),
                debug_id: DebugId::nil(),
                code_id: None,
                arch: None,
                symbol_table: None,
            });
            self.fx
                .set_lib_symbol_table(lib, Arc::new(SymbolTable::new(list)));
            self.kernel_lib = Some((lib, base));
        }
    }

    /// The process of `pid`, named by `comm`.
    fn process(&mut self, pid: u32, comm: &str, at: Timestamp) -> ProcessHandle {
        if let Some(&p) = self.processes.get(&pid) {
            return p;
        }
        let p = self.fx.add_process(comm, pid, at);
        self.processes.insert(pid, p);
        p
    }

    fn thread(&mut self, pid: u32, tid: u32, comm: &str, at: Timestamp) -> ThreadHandle {
        if let Some(&t) = self.threads.get(&(pid, tid)) {
            return t;
        }
        let process = self.process(pid, comm, at);
        let t = self.fx.add_thread(process, tid, at, tid == pid);
        self.fx.set_thread_name(t, comm);
        self.fx.set_thread_show_markers_in_timeline(t, true);
        let uses = self.tid_uses.entry(tid).or_insert(0);
        let name = match *uses {
            0 => tid.to_string(),
            n => format!("{tid}.{n}"),
        };
        *uses += 1;
        self.tid_names.insert(name, t);
        self.threads.insert((pid, tid), t);
        t
    }

    /// Every event (or, without a timeline, every sample once at the
    /// start) as a sample of its thread.
    fn add_events(&mut self) {
        let profile = self.profile;
        let cpu_extra = profile
            .meta
            .extra_values
            .iter()
            .position(|e| e.name == "cpu");
        let events: Vec<(u64, u64, u32, Option<u32>)> = match &profile.timeline {
            Some(t) => {
                let mut ev: Vec<_> = t
                    .events
                    .iter()
                    .map(|e| (t.offset_ns(e), e.value, e.sample, Some(e.tid)))
                    .collect();
                ev.sort_by_key(|e| e.0);
                ev
            }
            None => (0..profile.samples.len() as u32)
                .map(|i| (0, profile.samples[i as usize].value, i, None))
                .collect(),
        };
        for (at_ns, value, index, tid) in events {
            let Some(sample) = profile.samples.get(index as usize) else {
                continue;
            };
            let pid = sample.task.pid.unwrap_or(0);
            let tid = tid.or(sample.task.tid).unwrap_or(pid);
            let at = Timestamp::from_nanos_since_reference(at_ns);
            let thread = self.thread(pid, tid, &sample.task.comm, at);
            let stack = self.stack(thread, index);
            let cpu = match (profile.meta.kind, cpu_extra) {
                (Kind::Cpu, _) => profile.meta.period_ns.unwrap_or(0).saturating_mul(value),
                (Kind::Wall, Some(i)) if sample.value > 0 => {
                    let c = sample.extra.get(i).copied().unwrap_or(0);
                    (c as u128 * value as u128 / sample.value as u128) as u64
                }
                _ => 0,
            };
            // Weights are i32: a longer period is several samples.
            let mut left = value;
            let mut first = true;
            while left > 0 || first {
                let w = left.min(i32::MAX as u64);
                let delta = if first {
                    CpuDelta::from_nanos(cpu)
                } else {
                    CpuDelta::ZERO
                };
                self.fx.add_sample(thread, at, stack, delta, w as i32);
                left -= w;
                first = false;
            }
            if profile.timeline.is_some() && profile.meta.kind == Kind::Wall {
                let leaf = sample.path().last().and_then(|p| p.frame);
                if let Some(f) = leaf.filter(|f| f.kind == FrameKind::Label) {
                    let name = self.fx.intern_string(&f.name);
                    let end = Timestamp::from_nanos_since_reference(
                        at_ns.saturating_add(value.saturating_mul(1000)),
                    );
                    self.fx
                        .add_marker(thread, MarkerTiming::Interval(at, end), OffCpu { name });
                }
            }
        }
    }

    /// The stack of sample `index` on `thread`, root first, without the
    /// process name (the track says it).
    fn stack(&mut self, thread: ThreadHandle, index: u32) -> Option<StackHandle> {
        if let Some(s) = self.stacks.get(&(thread, index)) {
            return *s;
        }
        let profile = self.profile;
        let sample = &profile.samples[index as usize];
        let path = sample.path();
        let mut parent: Option<StackHandle> = None;
        let mut depth = 0u32;
        // Inlined frames lie below (callee of) the frame they are inlined
        // into: count the run of inlined frames that ends at each.
        for p in path.iter().filter(|p| p.kind != PathKind::Process) {
            let inlined = p.frame.is_some_and(|f| f.inlined);
            depth = if inlined { depth + 1 } else { 0 };
            let (frame, category) = match p.frame {
                Some(f) => self.frame(f, p.kind),
                None => {
                    let cat = match p.kind {
                        PathKind::Missed => self.cat.missed,
                        PathKind::WakerProcess | PathKind::WakerKernel | PathKind::WakerUser => {
                            self.cat.waker
                        }
                        _ => self.cat.label,
                    };
                    (fx::Frame::Label(self.fx.intern_string(p.name)), cat)
                }
            };
            let info = FrameInfo {
                frame,
                category_pair: CategoryPairHandle::from(category),
                flags: FrameFlags::empty(),
            };
            let handle = self.fx.intern_frame(thread, info);
            let seen = self.frame_index.entry(thread).or_default();
            let next = seen.len();
            let i = *seen.entry(handle).or_insert(next);
            let patches = self.patches.entry(thread).or_default();
            if i == patches.len() {
                patches.push(FramePatch {
                    file: p
                        .frame
                        .and_then(|f| f.source.as_ref().map(|s| s.file.clone())),
                    line: p.frame.and_then(Frame::line),
                    inline_depth: depth,
                });
            }
            parent = Some(self.fx.intern_stack(thread, parent, handle));
        }
        self.stacks.insert((thread, index), parent);
        parent
    }

    /// A frame's location and category.
    fn frame(&mut self, f: &Frame, kind: PathKind) -> (fx::Frame, CategoryHandle) {
        let cat = match kind {
            PathKind::Kernel => self.cat.kernel,
            PathKind::User => self.cat.native,
            PathKind::Interpreted => self.cat.interpreted,
            PathKind::Jit => self.cat.jit,
            PathKind::Label => self.cat.label,
            PathKind::Missed => self.cat.missed,
            _ => self.cat.waker,
        };
        let waker = matches!(kind, PathKind::WakerKernel | PathKind::WakerUser);
        if !f.inlined && !waker {
            if f.kind == FrameKind::Kernel && f.addr != 0 && !f.unnamed {
                if let Some((lib, base)) = self.kernel_lib {
                    if let Ok(rva) = u32::try_from(f.addr - base) {
                        return (
                            fx::Frame::RelativeAddressFromInstructionPointer(lib, rva),
                            cat,
                        );
                    }
                }
            } else if let Some((key, rva)) = lib_address(f) {
                if let Some(&lib) = self.libs.get(&key) {
                    return (
                        fx::Frame::RelativeAddressFromInstructionPointer(lib, rva),
                        cat,
                    );
                }
            }
        }
        (fx::Frame::Label(self.fx.intern_string(&f.name)), cat)
    }
}

/// The library and relative address of a native frame that has both.
fn lib_address(f: &Frame) -> Option<(LibKey, u32)> {
    if f.kind != FrameKind::Native {
        return None;
    }
    let o = f.object.as_ref()?;
    let rva = u32::try_from(f.offset_in_object()?).ok()?;
    Some(((o.path.clone(), o.build_id.clone()), rva))
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The debug id samply derives from an ELF build id: its first 16 bytes
/// read as a little-endian GUID, age 0.
fn debug_id_of(id: &[u8]) -> DebugId {
    let mut b = [0u8; 16];
    for (d, s) in b.iter_mut().zip(id) {
        *d = *s;
    }
    DebugId::from_guid_age(&b, 0).unwrap_or_default()
}

/// Fills in what the writer has no place for: source files and lines
/// (per function and frame) and the inline depth of inlined frames.
fn patch(
    json: &mut Value,
    tids: &HashMap<String, ThreadHandle>,
    patches: &HashMap<ThreadHandle, Vec<FramePatch>>,
) {
    let Some(threads) = json.get_mut("threads").and_then(Value::as_array_mut) else {
        return;
    };
    for thread in threads {
        let Some(tid) = thread.get("tid").map(|t| match t {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }) else {
            continue;
        };
        let Some(list) = tids.get(&tid).and_then(|h| patches.get(h)) else {
            continue;
        };
        patch_thread(thread, list);
    }
}

fn patch_thread(thread: &mut Value, list: &[FramePatch]) -> Option<()> {
    let funcs: Vec<usize> = thread["frameTable"]["func"]
        .as_array()?
        .iter()
        .map(|v| v.as_u64().unwrap_or(0) as usize)
        .collect();
    let mut strings: Vec<Value> = thread["stringArray"].as_array()?.clone();
    let mut string_index: HashMap<String, usize> = strings
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((s.as_str()?.to_string(), i)))
        .collect();
    for (i, p) in list.iter().enumerate() {
        let Some(&func) = funcs.get(i) else { break };
        if p.inline_depth > 0 {
            set(
                &mut thread["frameTable"]["inlineDepth"],
                i,
                p.inline_depth.into(),
            );
        }
        if let Some(line) = p.line {
            set(&mut thread["frameTable"]["line"], i, line.into());
            set(&mut thread["funcTable"]["lineNumber"], func, line.into());
        }
        if let Some(file) = &p.file {
            let s = *string_index.entry(file.to_string()).or_insert_with(|| {
                strings.push(Value::String(file.to_string()));
                strings.len() - 1
            });
            set(&mut thread["funcTable"]["fileName"], func, s.into());
        }
    }
    thread["stringArray"] = Value::Array(strings);
    Some(())
}

fn set(column: &mut Value, i: usize, v: Value) {
    if let Some(slot) = column.as_array_mut().and_then(|a| a.get_mut(i)) {
        *slot = v;
    }
}
