//! Finding a HotSpot JVM in a process: a mapped `libjvm.so` that exports
//! the Serviceability Agent tables, its [`Layout`] read from them, and the
//! code heaps BPF looks code blobs up in.
//!
//! As for Python (src/runtime/python/detect.rs), the file is another user's: it is
//! opened through the paths the process maps it by and read in bounded
//! pieces; and the memory is the process's: the heaps read from it are
//! checked to lie in the code cache, their segment sizes to be sane.
//! What a libjvm file says (its symbols, its segments) is kept per file
//! (device, inode); the layout, read from a process's memory, serves that
//! process alone: another user's process may map the same file beside
//! tables of its own making, which must not be trusted for anyone else's
//! JVM.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use super::layout::{self, CodeCacheAt, Layout};
use super::vmstructs::VmStructs;
use super::{Heap, Process, MAX_HEAPS};
use crate::elf::{each_symbol, Elf, FileSource, SHT_DYNSYM};
use crate::runtime::memory::Memory;
use crate::runtime::open_mapped;
use crate::runtime::tracker::Found;
use crate::unwind::elf::vaddr_of_offset;
use crate::unwind::procs::{Backing, ExecMapping};

/// What a process runs, as far as Java goes: `NotReady` for a JVM not
/// started far enough yet (no tables, no code cache); `Unsupported` says
/// why (one text per libjvm).
pub type Detected = Found<Process>;

/// Files kept at most; past it, one is forgotten per new one.
const MAX_OBJECTS: usize = 256;

/// What one libjvm file says.
#[derive(Debug, Default)]
struct Object {
    /// `gHotSpot*` symbols: name, virtual address.
    symbols: HashMap<String, u64>,
    segments: Vec<crate::unwind::elf::Segment>,
}

/// Finds JVMs in processes.
#[derive(Debug, Default)]
pub struct Detector {
    objects: HashMap<(u64, u64), Object>,
}

/// True for a path naming HotSpot's library.
pub fn is_libjvm(path: &str) -> bool {
    path.rsplit('/').next() == Some("libjvm.so")
}

impl Detector {
    pub fn new() -> Self {
        Self::default()
    }

    /// Finds the JVM process `pid` runs, from its executable mappings
    /// `maps` and its memory `mem`.
    pub fn detect(&mut self, pid: u32, maps: &[ExecMapping], mem: &dyn Memory) -> Detected {
        let Some(m) = maps
            .iter()
            .find(|m| matches!(&m.backing, Backing::File(p) if is_libjvm(p)))
        else {
            return Found::No;
        };
        let key = m.dev_ino;
        if !self.objects.contains_key(&key) {
            let Some(object) = read_object(pid, m) else {
                // Gone, or not an ELF file flare reads.
                return Found::No;
            };
            if self.objects.len() >= MAX_OBJECTS {
                if let Some(old) = self.objects.keys().next().copied() {
                    self.objects.remove(&old);
                }
            }
            self.objects.insert(key, object);
        }
        let Some(object) = self.objects.get(&key) else {
            return Found::No;
        };
        let Some(vaddr) = vaddr_of_offset(&object.segments, m.offset) else {
            return Found::Unsupported(
                "a libjvm.so mapped outside its segments is not supported".into(),
            );
        };
        let bias = m.start.wrapping_sub(vaddr);
        let symbols = &object.symbols;
        let at = |name: &str| symbols.get(name).map(|v| v.wrapping_add(bias));
        if !symbols.contains_key("gHotSpotVMStructs") {
            return Found::Unsupported(
                "HotSpot is not supported: its libjvm.so exports no gHotSpotVMStructs (not HotSpot?)"
                    .into(),
            );
        }
        let mut vm = match VmStructs::read(mem, &at) {
            Ok(vm) => vm,
            Err(e) => return unreadable(&e),
        };
        // Test knob: a JVM whose tables lack a member (a layout flare does
        // not know).
        if let Ok(lacks) = std::env::var("FLARE_TEST_JAVA_LAYOUT_LACKS") {
            if let Some((ty, field)) = lacks.split_once("::") {
                vm.fields.remove(&(ty.to_string(), field.to_string()));
            }
        }
        let vm_major = vm
            .address("Abstract_VM_Version", "_vm_major_version")
            .and_then(|a| mem.read_u32(a).ok())
            .unwrap_or(0);
        let major = match layout::feature_version(&vm, vm_major) {
            Ok(Some(major)) => major,
            // A JDK 8 still starting.
            Ok(None) => return Found::NotReady,
            Err(why) => return Found::Unsupported(format!("HotSpot is not supported: {why}")),
        };
        let layout = match layout::from_vmstructs(&vm, major) {
            Ok(l) => l,
            Err(why) => {
                let java = if major != 0 {
                    format!("Java {major}: ")
                } else {
                    String::new()
                };
                return Found::Unsupported(format!("HotSpot is not supported: {java}{why}"));
            }
        };
        match heaps(&layout, mem) {
            Ok(Some((heaps, cache))) => Found::Yes(Process {
                layout: Arc::new(layout),
                heaps,
                cache,
            }),
            Ok(None) => Found::NotReady,
            Err(e) => unreadable(&e),
        }
    }
}

/// A failed read: the process may be gone or starting (try later), unless
/// flare may not read it at all.
fn unreadable(e: &io::Error) -> Detected {
    match e.kind() {
        io::ErrorKind::PermissionDenied => {
            Found::Unsupported(format!("its memory cannot be read ({e})"))
        }
        // A table pointer still null: the JVM is starting.
        _ => Found::NotReady,
    }
}

/// libjvm's dynamic symbol and string tables read at most (JDK 17's
/// and 25's are some 18 KiB together).
const MAX_DYNSYM: u64 = 16 << 20;

/// The `gHotSpot*` symbols and load segments of the libjvm mapped at `m`.
fn read_object(pid: u32, m: &ExecMapping) -> Option<Object> {
    let file = open_mapped(pid, m)?;
    let elf = Elf::parse(FileSource::new(&file)?)?;
    if elf.layout != crate::elf::Layout::HOST || elf.machine != crate::elf::EM_HOST {
        return None;
    }
    let mut symbols = HashMap::new();
    if let Some((syms, strs)) = elf.symbol_table(SHT_DYNSYM, MAX_DYNSYM) {
        each_symbol(elf.layout, &syms, &strs, |s| {
            if s.defined && s.name.starts_with(b"gHotSpotVM") {
                // Versioned names (`gHotSpotVMStructs@@SUNWprivate_1.1`)
                // are in .dynsym without the version.
                symbols.insert(String::from_utf8_lossy(s.name).into_owned(), s.value);
            }
        });
    }
    Some(Object {
        symbols,
        segments: elf.loads().map(Into::into).collect(),
    })
}

/// Smallest and largest segment of a code heap (JDK: 32 to 1024 bytes;
/// BPF hops back through the segment map with it).
const SEGMENT_BITS: std::ops::RangeInclusive<u32> = 4..=12;

/// The code heaps and the code cache's bounds, or `None` while the code
/// cache is not set up (or not all its heaps are added).
fn heaps(l: &Layout, mem: &dyn Memory) -> io::Result<Option<(Vec<Heap>, std::ops::Range<u64>)>> {
    let (array, low, high) = match l.code_cache {
        CodeCacheAt::Heaps { heaps, low, high } => (
            mem.read_u64(heaps)?,
            mem.read_u64(low)?,
            mem.read_u64(high)?,
        ),
        // JDK 8: the one heap is the code cache.
        CodeCacheAt::One { heap } => {
            let heap = mem.read_u64(heap)?;
            if heap == 0 {
                return Ok(None);
            }
            let one = read_heap(l, mem, heap, 0..u64::MAX)?;
            let cache = one.range.clone();
            return Ok(Some((vec![one], cache)));
        }
    };
    if array == 0 || low == 0 || high <= low {
        return Ok(None);
    }
    let len = mem.read_u32(array + u64::from(l.growable_len))? as usize;
    let data = mem.read_u64(array + u64::from(l.growable_data))?;
    if len == 0 || len > MAX_HEAPS || data == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{len} code heaps"),
        ));
    }
    let mut out = Vec::with_capacity(len);
    for i in 0..len as u64 {
        let heap = mem.read_u64(data + i * 8)?;
        out.push(read_heap(l, mem, heap, low..high)?);
    }
    // The heaps split the code cache between them, every byte of it (JDK
    // 17 and 25, segmented or not, seen here): fewer bytes are a JVM still
    // adding its heaps, which BPF would otherwise be given some of for
    // good (its compiled methods then unknown).
    let mut sorted: Vec<&Heap> = out.iter().collect();
    sorted.sort_by_key(|h| h.range.start);
    if sorted.windows(2).any(|w| w[0].range.end > w[1].range.start) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "overlapping code heaps",
        ));
    }
    let covered: u64 = out.iter().map(|h| h.range.end - h.range.start).sum();
    if covered != high - low {
        return Ok(None);
    }
    Ok(Some((out, low..high)))
}

/// The `CodeHeap` at `heap`, its reserved space within `within`.
fn read_heap(
    l: &Layout,
    mem: &dyn Memory,
    heap: u64,
    within: std::ops::Range<u64>,
) -> io::Result<Heap> {
    let memory = heap + u64::from(l.heap_memory);
    let start = mem.read_u64(memory + u64::from(l.space_low))?;
    let end = mem.read_u64(memory + u64::from(l.space_high))?;
    let segmap = mem.read_u64(heap + u64::from(l.heap_segmap) + u64::from(l.space_low))?;
    let log2 = mem.read_u32(heap + u64::from(l.heap_log2_segment))?;
    if start < within.start
        || end > within.end
        || start >= end
        || segmap == 0
        || !SEGMENT_BITS.contains(&log2)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a code heap at {start:#x}..{end:#x} outside the code cache"),
        ));
    }
    Ok(Heap {
        range: start..end,
        segmap,
        log2_segment: log2 as u8,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::java::layout::{MetadataAt, NmethodData};
    use crate::runtime::java::vmstructs::Field;

    /// The tables of a real JDK, as src/runtime/java/*-vmstructs.txt keep them
    /// (`F type field typestring offset`, `S type field type address`,
    /// `T type super size`, `C name value`).
    pub(crate) fn parse_dump(text: &str) -> VmStructs {
        let mut vm = VmStructs::default();
        for line in text.lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            let last = parts.last().copied().unwrap_or("");
            let number = |s: &str| -> i64 {
                match s.strip_prefix("0x") {
                    Some(h) => i64::from_str_radix(h, 16).unwrap_or(0),
                    None => s.parse().unwrap_or(0),
                }
            };
            match parts.first().copied() {
                Some("F") if parts.len() >= 5 => {
                    vm.fields.insert(
                        (parts[1].into(), parts[2].into()),
                        Field::Offset(number(last) as u64),
                    );
                }
                Some("S") if parts.len() >= 5 => {
                    vm.fields.insert(
                        (parts[1].into(), parts[2].into()),
                        Field::Address(number(last) as u64),
                    );
                }
                Some("T") if parts.len() >= 4 => {
                    vm.sizes.insert(parts[1].into(), number(last) as u64);
                }
                Some("C") if parts.len() >= 3 => {
                    vm.constants.insert(parts[1].into(), number(last));
                }
                _ => {}
            }
        }
        vm
    }

    #[test]
    fn jdk17_and_jdk25_have_their_layouts_and_a_lack_is_named() {
        let vm = parse_dump(include_str!("jdk17-vmstructs.txt"));
        let l = layout::from_vmstructs(&vm, 17).expect("JDK 17");
        assert_eq!(
            (l.blob_name, l.blob_code_begin, l.blob_frame_size),
            (96, 32, 28)
        );
        assert!(!l.blob_offsets);
        assert_eq!((l.nm_method, l.nm_compile_id, l.heap_block), (112, 304, 16));
        assert_eq!((l.interp_method, l.interp_bcp), (-3, -8));
        assert_eq!(l.unsigned5_excess, 0);
        assert!(matches!(l.nm_data, NmethodData::Inline { .. }));

        // JDK 25: offsets in code blobs, nmethod data in blocks of their
        // own, the method flags a struct.
        let vm25 = parse_dump(include_str!("jdk25-vmstructs.txt"));
        let l = layout::from_vmstructs(&vm25, 25).expect("JDK 25");
        assert!(l.blob_offsets);
        assert_eq!(
            (l.blob_code_begin, l.blob_frame_complete, l.nm_deopt),
            (36, 54, 176)
        );
        assert_eq!((l.nm_method, l.nm_compile_id, l.nm_orig_pc), (80, 212, 208));
        assert_eq!((l.const_flags, l.has_line_table), (28, 1));
        assert_eq!(l.unsigned5_excess, 1);
        assert_eq!(
            l.nm_data,
            NmethodData::Immutable {
                data: 96,
                size: 160,
                ref_count: None,
                scopes_pcs: 196,
                scopes_data: 200,
                metadata: MetadataAt::Mutable {
                    data: 16,
                    size: 48,
                    relocation_size: 28
                },
            }
        );

        // JDK 21 and 22: JDK 17's shape, the method flags a struct.
        let mut vm21 = vm.clone();
        let flags = vm21
            .fields
            .remove(&("ConstMethod".to_string(), "_flags".to_string()))
            .expect("JDK 17's flags");
        vm21.fields
            .insert(("ConstMethod".into(), "_flags._flags".into()), flags);
        let bit = vm21
            .constants
            .remove("ConstMethod::_has_linenumber_table")
            .expect("JDK 17's flag");
        vm21.constants
            .insert("ConstMethodFlags::_misc_has_linenumber_table".into(), bit);
        let l21 = layout::from_vmstructs(&vm21, 21).expect("JDK 21");
        let l17 = layout::from_vmstructs(&vm, 17).expect("JDK 17");
        assert_eq!((l21.const_flags, l21.has_line_table), (l17.const_flags, 1));
        assert_eq!(l21.unsigned5_excess, 1);

        // JDK 11 (its layout: names_tests' the_jdk11_tables_...) gives its
        // own version; JDK 8 (one code heap; Debian sid's 8u504 tables)
        // HotSpot's 25, and an older one (24: JDK 7) is named as too old,
        // not by what it lacks.
        let vm11 = parse_dump(include_str!("jdk11-vmstructs.txt"));
        assert_eq!(layout::feature_version(&vm11, 11), Ok(Some(11)));
        assert_eq!(layout::feature_version(&vm, 25), Ok(Some(25)));
        let vm8 = parse_dump(include_str!("jdk8-vmstructs.txt"));
        assert_eq!(layout::feature_version(&vm8, 25), Ok(Some(8)));
        // JDK 8 sets its version as it starts: not ready before.
        assert_eq!(layout::feature_version(&vm8, 0), Ok(None));
        let why = layout::feature_version(&vm8, 24).expect_err("JDK 7 is too old");
        assert!(why.contains("Java 7 or older"), "{why}");

        // A member of neither shape is named with its alternatives.
        let mut vm = vm;
        vm.fields
            .remove(&("CodeBlob".to_string(), "_code_begin".to_string()));
        let why = layout::from_vmstructs(&vm, 17).unwrap_err();
        assert!(
            why.contains("CodeBlob::_code_begin or CodeBlob::_code_offset"),
            "{why}"
        );
    }

    /// A code cache of `len` heaps (of three: 64, 32 and 160 KiB from
    /// 0x10_0000 up) as JDK 17's layout reads it, with the heap at
    /// `last` instead when given.
    fn code_cache(
        len: u32,
        last: Option<std::ops::Range<u64>>,
    ) -> (Layout, crate::runtime::memory::Buffer) {
        let vm = parse_dump(include_str!("jdk17-vmstructs.txt"));
        let mut l = layout::from_vmstructs(&vm, 17).expect("JDK 17");
        let base = 0x1000u64;
        let mut bytes = vec![0u8; 0x1000];
        let mut put = |at: u64, v: u64, wide: bool| {
            let at = (at - base) as usize;
            match wide {
                true => bytes[at..at + 8].copy_from_slice(&v.to_ne_bytes()),
                false => bytes[at..at + 4].copy_from_slice(&(v as u32).to_ne_bytes()),
            }
        };
        let (low, high) = (0x10_0000u64, 0x13_0000u64);
        l.code_cache = CodeCacheAt::Heaps {
            heaps: base,
            low: base + 8,
            high: base + 16,
        };
        put(base, base + 0x100, true);
        put(base + 8, low, true);
        put(base + 16, high, true);
        put(
            base + 0x100 + u64::from(l.growable_len),
            u64::from(len),
            false,
        );
        put(
            base + 0x100 + u64::from(l.growable_data),
            base + 0x200,
            true,
        );
        let mut ranges = [low..0x11_0000, 0x11_0000..0x11_8000, 0x11_8000..high];
        if let Some(r) = last {
            ranges[2] = r;
        }
        for (i, r) in ranges.iter().enumerate() {
            let heap = base + 0x400 + i as u64 * 0x300;
            put(base + 0x200 + i as u64 * 8, heap, true);
            let memory = heap + u64::from(l.heap_memory);
            put(memory + u64::from(l.space_low), r.start, true);
            put(memory + u64::from(l.space_high), r.end, true);
            put(
                heap + u64::from(l.heap_segmap) + u64::from(l.space_low),
                0x9000,
                true,
            );
            put(heap + u64::from(l.heap_log2_segment), 7, false);
        }
        (l, crate::runtime::memory::Buffer { base, bytes })
    }

    #[test]
    fn a_code_cache_is_ready_once_its_heaps_fill_it() {
        let (l, mem) = code_cache(3, None);
        let (got, cache) = heaps(&l, &mem).expect("read").expect("ready");
        assert_eq!((got.len(), cache), (3, 0x10_0000..0x13_0000));
        // A JVM between adding its second heap and its third.
        let (l, mem) = code_cache(2, None);
        assert!(heaps(&l, &mem).expect("read").is_none());
        // Heaps that overlap are not a code cache.
        let (l, mem) = code_cache(3, Some(0x11_4000..0x13_0000));
        assert!(heaps(&l, &mem).is_err());
    }

    #[test]
    fn a_jdk8_code_cache_is_its_one_heap() {
        let vm = parse_dump(include_str!("jdk8-vmstructs.txt"));
        let mut l = layout::from_vmstructs(&vm, 8).expect("JDK 8");
        let base = 0x1000u64;
        l.code_cache = CodeCacheAt::One { heap: base };
        let mut bytes = vec![0u8; 0x400];
        let mut put = |at: u64, v: u64| {
            let at = (at - base) as usize;
            bytes[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        };
        let heap = base + 0x100;
        put(base, heap);
        let memory = heap + u64::from(l.heap_memory);
        put(memory + u64::from(l.space_low), 0x10_0000);
        put(memory + u64::from(l.space_high), 0x20_0000);
        put(
            heap + u64::from(l.heap_segmap) + u64::from(l.space_low),
            0x9000,
        );
        put(heap + u64::from(l.heap_log2_segment), 6);
        let mut mem = crate::runtime::memory::Buffer { base, bytes };
        let (got, cache) = heaps(&l, &mem).expect("read").expect("ready");
        assert_eq!(cache, 0x10_0000..0x20_0000);
        assert_eq!(
            (got.len(), got[0].segmap, got[0].log2_segment),
            (1, 0x9000, 6)
        );
        // Before the JVM sets its heap up: not ready, not an error.
        mem.bytes[..8].fill(0);
        assert!(heaps(&l, &mem).expect("read").is_none());
    }

    #[test]
    fn libjvm_is_named_by_its_file_name() {
        assert!(is_libjvm(
            "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
        ));
        assert!(!is_libjvm("/usr/lib/libjvm.so.1"));
        assert!(!is_libjvm("/opt/notlibjvm.so"));
    }
}
