//! Naming Ruby frames in a fake process memory laid out per version as
//! CRuby lays out its objects: strings (embedded and on the heap),
//! arrays, instruction sequences with their succinct line index, method
//! entries, classes (plain, singleton, included module) and the symbol
//! table; then [`RubyNamer`] on frames as BPF records them.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Mutex};

use super::super::{RubyNamer, NO_POSITION};
use super::*;
use crate::collect::{Namer, Runtime, RuntimeFrame};
use crate::profile::{Frame, FrameKind};
use crate::runtime::ruby::{Process, Registry, Tls};
use crate::runtime::tracker::ProcessNamer;

/// Where the fake process's `rb_cObject` lies (below what
/// [`Fake::alloc`] hands out).
const OBJECT_VAR: u64 = 0x8_0000;
/// 3.1's ids of `__classpath__` and `__attached__` in the fake process.
const CLASSPATH: u64 = (3131 << 4) | 1;
const ATTACHED: u64 = (3133 << 4) | 1;

/// Memory of separate regions, with unmapped gaps between them.
#[derive(Default)]
struct Fake {
    regions: BTreeMap<u64, Vec<u8>>,
    next: u64,
}

impl Memory for Fake {
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let (base, bytes) = self
            .regions
            .range(..=addr)
            .next_back()
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        let start = (addr - base) as usize;
        let src = bytes
            .get(start..start + buf.len())
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

fn u64s(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

impl Fake {
    /// Places `bytes` at a new 16-aligned address, after a gap.
    fn alloc(&mut self, bytes: Vec<u8>) -> u64 {
        if self.next == 0 {
            self.next = 0x10_0000;
        }
        let at = self.next;
        self.next += (bytes.len() as u64).div_ceil(16) * 16 + 64;
        self.regions.insert(at, bytes);
        at
    }

    /// Writes `value` at `off` of the region at `at`.
    fn put(&mut self, at: u64, off: u16, value: &[u8]) {
        let r = self.regions.get_mut(&at).unwrap();
        r[usize::from(off)..usize::from(off) + value.len()].copy_from_slice(value);
    }

    fn put64(&mut self, at: u64, off: u16, value: u64) {
        self.put(at, off, &value.to_ne_bytes());
    }

    fn put32(&mut self, at: u64, off: u16, value: u32) {
        self.put(at, off, &value.to_ne_bytes());
    }

    /// A `String` of `text`, embedded in the object or on the heap.
    fn string(&mut self, l: &Layout, text: &str, heap: bool) -> u64 {
        let len = text.len() as u64;
        if heap {
            let chars = self.alloc(text.as_bytes().to_vec());
            let s = self.alloc(vec![0; 40]);
            self.put64(s, 0, T_STRING | l.rstring_noembed);
            self.put64(s, l.rstring_len, len);
            self.put64(s, l.rstring_ptr, chars);
            return s;
        }
        let mut bytes = vec![0u8; usize::from(l.rstring_embed) + text.len().max(16)];
        bytes[usize::from(l.rstring_embed)..][..text.len()].copy_from_slice(text.as_bytes());
        let s = self.alloc(bytes);
        match l.rstring_embed_len {
            Some((shift, mask)) => {
                assert!(len <= mask, "too long to embed in 3.1");
                self.put64(s, 0, T_STRING | len << shift);
            }
            None => {
                self.put64(s, 0, T_STRING);
                self.put64(s, l.rstring_len, len);
            }
        }
        s
    }

    /// An `Array` of `elements`, embedded or on the heap.
    fn array(&mut self, l: &Layout, elements: &[u64], heap: bool) -> u64 {
        let len = elements.len() as u64;
        if heap {
            let at = self.alloc(u64s(elements));
            let a = self.alloc(vec![0; 40]);
            self.put64(a, 0, T_ARRAY);
            self.put64(a, l.rarray_len, len);
            self.put64(a, l.rarray_ptr, at);
            return a;
        }
        let flags = T_ARRAY | l.rarray_embed_flag | len << l.rarray_embed_len_shift;
        assert_eq!(
            flags & l.rarray_embed_len_mask,
            len << l.rarray_embed_len_shift
        );
        let mut bytes = u64s(&[flags, 0]);
        bytes.extend(u64s(elements));
        self.alloc(bytes)
    }

    /// A class (or module, `ty`) named `path`: 3.3+ keep it in the
    /// class (its classpath), 3.1 in a hidden instance variable, whose id
    /// the process's `Object` tells (made with the first class).
    fn class(&mut self, l: &Layout, ty: u64, path: Option<&str>) -> u64 {
        if l.class_ext.is_some() && !self.regions.contains_key(&OBJECT_VAR) {
            self.object(l);
        }
        let c = self.alloc(vec![0; 160]);
        self.put64(c, 0, ty);
        if let Some(p) = path {
            let s = self.string(l, p, false);
            match l.class_path {
                Some(at) => self.put64(c, at, s),
                None => self.ivars(l, c, &[(CLASSPATH, s)]),
            }
        }
        c
    }

    /// The singleton class of `object`.
    fn singleton(&mut self, l: &Layout, object: u64) -> u64 {
        let c = self.class(l, T_CLASS | l.fl_singleton, None);
        match l.class_attached {
            Some(at) => self.put64(c, at, object),
            None => self.ivars(l, c, &[(ATTACHED, object)]),
        }
        c
    }

    /// 3.1: the instance-variable table of class `c` (an `st_table` in
    /// its extension), holding `ivars` after a deleted entry and another
    /// variable (a Fixnum): the table is looked through, not hashed.
    fn ivars(&mut self, l: &Layout, c: u64, ivars: &[(u64, u64)]) {
        let mut entries = vec![u64::MAX, 0, 0, 0x55, (77 << 4) | 1, 7];
        for &(id, value) in ivars {
            entries.extend([id.wrapping_mul(31), id, value]);
        }
        let n = entries.len() as u64 / 3;
        let at = self.alloc(u64s(&entries));
        // entry_power 3, bin_power 0 (no bins), 16 bytes to num_entries,
        // bins, entries_start, entries_bound, entries.
        let table = self.alloc(u64s(&[3, 0, n, 0, 0, n, at]));
        let ext = self.alloc(vec![0; 64]);
        self.put64(ext, l.ext_iv_tbl, table);
        self.put64(c, l.class_ext.unwrap(), ext);
    }

    /// 3.1: `Object`, named "Object", its singleton class attached to
    /// it, and `rb_cObject` at [`OBJECT_VAR`] holding it.
    fn object(&mut self, l: &Layout) -> u64 {
        self.regions.insert(OBJECT_VAR, vec![0; 8]);
        let object = self.class(l, T_CLASS, Some("Object"));
        let meta = self.singleton(l, object);
        self.put64(object, 8, meta);
        self.put64(OBJECT_VAR, 0, object);
        object
    }

    /// The `T_ICLASS` of `module` in some class's ancestry.
    fn iclass(&mut self, module: u64) -> u64 {
        self.alloc(u64s(&[T_ICLASS, module, 0, 0, 0]))
    }

    /// A method entry for `defined_class` whose definition has `ty` and
    /// `iseq` (ISEQ methods) and `id`; (entry, definition).
    fn cme(&mut self, l: &Layout, defined_class: u64, ty: u8, iseq: u64, id: u64) -> (u64, u64) {
        let def = self.alloc(vec![0; 48]);
        self.put(def, l.def_type, &[ty | 0x30]); // other bit-fields above
        self.put64(def, l.def_iseqptr, iseq);
        self.put64(def, l.def_original_id, id);
        let cme = self.alloc(vec![0; 48]);
        self.put64(cme, l.cme_flags, T_IMEMO | IMEMO_MENT << 12);
        self.put64(cme, l.cme_defined_class, defined_class);
        self.put64(cme, l.cme_def, def);
        self.put64(cme, l.cme_called_id, id);
        self.put64(cme, l.cme_owner, defined_class);
        (cme, def)
    }

    /// `ruby_global_symbols` naming `names` (id, name), the `ids` Array's
    /// pages on the heap.
    fn symbols(&mut self, l: &Layout, names: &[(u64, &str)]) -> u64 {
        let serial = |id: u64| if id > l.last_op_id { id >> 4 } else { id };
        let last = names.iter().map(|&(id, _)| serial(id)).max().unwrap();
        let mut pages = vec![vec![8u64; 1024]; (last / 512 + 1) as usize];
        for &(id, name) in names {
            let s = self.string(l, name, name.len() > 20);
            pages[(serial(id) / 512) as usize][(serial(id) % 512 * 2) as usize] = s;
        }
        let pages: Vec<u64> = pages.iter().map(|p| self.array(l, p, true)).collect();
        let ids = self.array(l, &pages, true);
        let symbols = self.alloc(vec![0; 32]);
        self.put32(symbols, l.symbols_last_id, last as u32);
        self.put64(symbols, l.symbols_ids, ids);
        symbols
    }
}

/// An instruction sequence to lay out.
struct Seq<'a> {
    ty: u32,
    label: &'a str,
    base_label: &'a str,
    path: &'a str,
    first_lineno: i32,
    /// The code's size in words.
    size: u32,
    /// Each line-table entry's position and line.
    entries: &'a [(u32, i32)],
    /// The sequence a block is in (0: itself).
    local: u64,
}

impl Default for Seq<'_> {
    fn default() -> Self {
        Seq {
            ty: ISEQ_TYPE_METHOD,
            label: "handle",
            base_label: "handle",
            path: "/srv/app/service.rb",
            first_lineno: 12,
            size: 10,
            entries: &[(0, 12), (4, 13), (7, 15)],
            local: 0,
        }
    }
}

/// `succ_index_table_create(max_pos, positions)` (iseq.c), in Rust: the
/// immediate part's ranks, then each block's rank, small blocks' ranks
/// and bits.
fn succ_index(max_pos: u32, positions: &[u32]) -> Vec<u8> {
    let max = u64::from(max_pos);
    let (imm, blocks) = if max < IMMEDIATE {
        (max.div_ceil(9), 0)
    } else {
        (IMMEDIATE / 9, (max - IMMEDIATE).div_ceil(512))
    };
    let pos: Vec<u64> = positions.iter().map(|&p| u64::from(p)).collect();
    let mut out = Vec::new();
    let mut r = 0usize;
    for j in 0..imm {
        let mut w = 0u64;
        for i in 0..9 {
            if r < pos.len() && pos[r] == j * 9 + i {
                r += 1;
            }
            w |= (r as u64) << (7 * i);
        }
        out.extend(w.to_ne_bytes());
    }
    for k in 0..blocks {
        let mut block = vec![0u8; 80];
        block[0..4].copy_from_slice(&(r as u32).to_ne_bytes());
        let mut small_ranks = 0u64;
        let mut small_rank = 0u64;
        for j in 0..8u64 {
            if j > 0 {
                small_ranks |= small_rank << (9 * (j - 1));
            }
            let mut bits = 0u64;
            for i in 0..64 {
                if r < pos.len() && pos[r] == k * 512 + j * 64 + i + IMMEDIATE {
                    bits |= 1 << i;
                    r += 1;
                }
            }
            let at = 16 + 8 * j as usize;
            block[at..at + 8].copy_from_slice(&bits.to_ne_bytes());
            small_rank += u64::from(bits.count_ones());
        }
        block[8..16].copy_from_slice(&small_ranks.to_ne_bytes());
        out.extend(block);
    }
    out
}

impl Fake {
    /// Lays out `seq` as an `rb_iseq_t` and its body: (iseq, code).
    fn iseq(&mut self, l: &Layout, seq: &Seq) -> (u64, u64) {
        let code = self.alloc(vec![0; seq.size as usize * 8]);
        let mut info = vec![0u8; seq.entries.len() * usize::from(l.insn_info_size)];
        for (i, &(_, line)) in seq.entries.iter().enumerate() {
            let at = i * usize::from(l.insn_info_size) + usize::from(l.insn_info_line_no);
            info[at..at + 4].copy_from_slice(&line.to_ne_bytes());
        }
        let info = self.alloc(info);
        let positions: Vec<u32> = seq.entries.iter().map(|e| e.0).collect();
        let index = self.alloc(succ_index(seq.size, &positions));
        let label = self.string(l, seq.label, seq.label.len() > 20);
        let base_label = self.string(l, seq.base_label, false);
        let path = self.string(l, seq.path, true);
        let body = self.alloc(vec![0; 320]);
        self.put32(body, l.body_type, seq.ty);
        self.put32(body, l.body_iseq_size, seq.size);
        self.put64(body, l.body_iseq_encoded, code);
        self.put64(body, l.body_pathobj, path);
        self.put64(body, l.body_base_label, base_label);
        self.put64(body, l.body_label, label);
        if l.first_lineno_fixnum {
            self.put64(
                body,
                l.body_first_lineno,
                (seq.first_lineno as u64) << 1 | 1,
            );
        } else {
            self.put32(body, l.body_first_lineno, seq.first_lineno as u32);
        }
        self.put64(body, l.body_insns_info, info);
        self.put32(body, l.body_insns_info_size, seq.entries.len() as u32);
        self.put64(body, l.body_succ_index_table, index);
        let iseq = self.alloc(vec![0; 40]);
        self.put64(iseq, 0, T_IMEMO | IMEMO_ISEQ << 12);
        self.put64(iseq, l.iseq_body, body);
        let local = if seq.local == 0 { iseq } else { seq.local };
        self.put64(body, l.body_local_iseq, local);
        (iseq, code)
    }

    /// The body of the sequence at `iseq`.
    fn body(&self, l: &Layout, iseq: u64) -> u64 {
        self.read_u64(iseq + u64::from(l.iseq_body)).unwrap()
    }
}

fn layouts() -> [(&'static str, Layout); 3] {
    ["3.1.2", "3.3.8", "3.4.11"].map(|v| (v, Layout::for_version(v).unwrap()))
}

#[test]
fn strings_embedded_and_on_the_heap() {
    for (v, l) in layouts() {
        let mut m = Fake::default();
        for text in ["", "x", "outer", "block in outer", "exactly twenty-three!!"] {
            for heap in [false, true] {
                let s = m.string(&l, text, heap);
                assert_eq!(
                    read_string(&m, &l, s).as_deref(),
                    Some(text),
                    "{v} heap {heap}"
                );
            }
        }
        // Invalid UTF-8 is replaced; a non-string is none.
        let s = m.string(&l, "a\u{e9}b", true);
        let chars = m.read_u64(s + u64::from(l.rstring_ptr)).unwrap();
        m.put(chars, 1, &[0xff]);
        assert_eq!(
            read_string(&m, &l, s).as_deref(),
            Some("a\u{fffd}\u{fffd}b")
        );
        let a = m.array(&l, &[s], false);
        assert_eq!(read_string(&m, &l, a), None, "{v}");
        assert_eq!(read_string(&m, &l, 0), None);
        assert_eq!(read_string(&m, &l, s + 4), None, "unaligned");
    }
}

#[test]
fn strings_are_bounded() {
    let l = Layout::for_version("3.3.8").unwrap();
    let mut m = Fake::default();
    // A long one is cut, at a character, and says so.
    let long = format!("a{}", "é".repeat(3000));
    let s = m.string(&l, &long, true);
    let read = read_string(&m, &l, s).unwrap();
    assert!(read.ends_with("é…"), "{}", &read[read.len() - 8..]);
    assert_eq!(read.len(), MAX_STRING_BYTES - 1 + '…'.len_utf8());
    // A garbage length is no string, and reads nothing.
    m.put64(s, l.rstring_len, u64::MAX / 2);
    assert_eq!(read_string(&m, &l, s), None);
    // An embedded one of a garbage length too (3.3+: the length word).
    let e = m.string(&l, "abc", false);
    m.put64(e, l.rstring_len, 1 << 40);
    assert_eq!(read_string(&m, &l, e), None);
    // A heap string whose characters are unmapped.
    let h = m.string(&l, "abc", true);
    m.put64(h, l.rstring_ptr, 0x10);
    assert_eq!(read_string(&m, &l, h), None);
}

#[test]
fn arrays_embedded_and_on_the_heap() {
    for (v, l) in layouts() {
        let mut m = Fake::default();
        for heap in [false, true] {
            let a = m.array(&l, &[16, 32, 48], heap);
            assert_eq!(array_element(&m, &l, a, 0), Some(16), "{v}");
            assert_eq!(array_element(&m, &l, a, 2), Some(48), "{v}");
            assert_eq!(array_element(&m, &l, a, 3), None, "{v}");
        }
        // pathobj: [path, realpath].
        let path = m.string(&l, "lib/a.rb", false);
        let real = m.string(&l, "/srv/lib/a.rb", true);
        let pathobj = m.array(&l, &[path, real], false);
        assert_eq!(read_path(&m, &l, pathobj).as_deref(), Some("lib/a.rb"));
        assert_eq!(read_path(&m, &l, path).as_deref(), Some("lib/a.rb"));
    }
}

#[test]
fn succinct_index_by_hand() {
    // Positions 0, 3 and 55 in a 60-word sequence: the immediate words
    // rank positions 0..=53, one block the rest.
    let index = succ_index(60, &[0, 3, 55]);
    assert_eq!(index.len(), 6 * 8 + 80);
    let word = |at: usize| u64::from_ne_bytes(index[at..at + 8].try_into().unwrap());
    // Word 0: positions 0..9, ranks 1,1,1,2,2,2,2,2,2.
    let ranks: Vec<u64> = (0..9).map(|i| (word(0) >> (7 * i)) & 0x7f).collect();
    assert_eq!(ranks, [1, 1, 1, 2, 2, 2, 2, 2, 2]);
    // The block: rank 2 before it, bit 1 (position 55) set, every small
    // block after the first has one entry before it.
    assert_eq!(u32::from_ne_bytes(index[48..52].try_into().unwrap()), 2);
    assert_eq!(word(48 + 16), 0b10);
    assert_eq!(word(48 + 8) & 0x1ff, 1);
    let table = LineTable {
        size: 60,
        lines: vec![10, 11, 12],
        index,
    };
    let lines: Vec<Option<u32>> = [0, 2, 3, 53, 54, 55, 59, 60, 0xffff]
        .iter()
        .map(|&p| table.line(p))
        .collect();
    assert_eq!(
        lines,
        [
            Some(10),
            Some(10),
            Some(11),
            Some(11),
            Some(11),
            Some(12),
            Some(12),
            None,
            None
        ]
    );
}

#[test]
fn succinct_index_across_blocks() {
    // 1500 words: the immediate part and three blocks; entries in every
    // small block of the second and at the ends of each.
    let mut positions: Vec<u32> = vec![0, 8, 9, 53, 54, 100, 565, 566];
    positions.extend((600..1078).step_by(37));
    positions.extend([1079, 1500 - 1]);
    let lines: Vec<i32> = (0..positions.len() as i32).map(|i| 100 + i).collect();
    let table = LineTable {
        size: 1500,
        lines: lines.clone(),
        index: succ_index(1500, &positions),
    };
    for pos in 0..1500u32 {
        let rank = positions.iter().filter(|&&p| p <= pos).count();
        assert_eq!(table.line(pos), Some(lines[rank - 1] as u32), "pos {pos}");
    }
    // One entry: its line, wherever; none: no line; garbage: none.
    let one = LineTable {
        size: 1500,
        lines: vec![7],
        index: Vec::new(),
    };
    assert_eq!(one.line(1234), Some(7));
    assert_eq!(LineTable::default().line(0), None);
    let short = LineTable {
        index: table.index[..100].to_vec(),
        ..table
    };
    assert_eq!(short.line(1400), None);
}

#[test]
fn iseqs_read_with_their_lines() {
    for (v, l) in layouts() {
        let mut m = Fake::default();
        let (iseq, code) = m.iseq(&l, &Seq::default());
        let info = read_iseq(&m, &l, iseq, code).unwrap();
        assert_eq!(info.label, "handle", "{v}");
        assert_eq!(info.base_label, "handle");
        assert_eq!(info.path, "/srv/app/service.rb");
        assert_eq!(info.first_lineno, 12);
        assert_eq!(info.method_name.as_deref(), Some("handle"));
        let lines: Vec<_> = (0..11).map(|p| info.line(p)).collect();
        let want = [12, 12, 12, 12, 13, 13, 13, 15, 15, 15].map(Some);
        assert_eq!(lines[..10], want);
        assert_eq!(lines[10], None);
        // Another code address: memory reused.
        assert_eq!(read_iseq(&m, &l, iseq, code + 8), None);
        // Not an iseq: a method entry.
        let (cme, _) = m.cme(&l, 0, METHOD_TYPE_ISEQ, iseq, 0);
        assert_eq!(read_iseq(&m, &l, cme, code), None);
        // A line table too large to read: still named, first line.
        let body = m.body(&l, iseq);
        m.put32(body, l.body_iseq_size, u32::MAX);
        m.put32(body, l.body_insns_info_size, 1 << 30);
        let info = read_iseq(&m, &l, iseq, code).unwrap();
        assert_eq!(info.line(3), None);
    }
}

fn registry_with(pid: u32, process: &Arc<Process>) -> Registry {
    let registry = Arc::new(Mutex::new(HashMap::new()));
    registry.lock().unwrap().insert(pid, Arc::clone(process));
    registry
}

fn process(version: &str, global_symbols: Option<u64>) -> Arc<Process> {
    Arc::new(Process {
        layout: Arc::new(Layout::for_version(version).unwrap()),
        version: version.into(),
        exec: 0..0,
        exec_caller: 0..0,
        tls: Tls {
            modid: 1,
            slots: vec![0x10],
        },
        global_symbols,
        object_class: Some(OBJECT_VAR),
    })
}

/// A frame as BPF records it.
fn frame(iseq: u64, cme: u64, pos: u32, cookie: u64) -> RuntimeFrame {
    RuntimeFrame {
        runtime: Runtime::Ruby,
        ids: [iseq, cme | u64::from(pos) << 48],
        cookie,
    }
}

/// A frame's name, and its file and line if any.
type Named = (String, Option<(String, Option<u32>)>);

/// What the namer gives `f` in `m`.
fn name(
    namer: &mut RubyNamer,
    m: &dyn Memory,
    p: &Arc<Process>,
    f: &RuntimeFrame,
) -> Option<Named> {
    let frame: Frame = namer.name_in(m, 7, p, f)?.pop()?;
    assert_eq!(frame.kind, FrameKind::Interpreted);
    let source = frame.source.as_ref().map(|s| (s.file.to_string(), s.line));
    Some((frame.name.to_string(), source))
}

#[test]
fn ruby_frames_are_qualified_as_ruby_profiles_them() {
    for (v, l) in layouts() {
        let p = process(v, None);
        let mut namer = RubyNamer::new(registry_with(7, &p));
        let mut m = Fake::default();
        let service = m.class(&l, T_CLASS, Some("App::Service"));
        let (method, code) = m.iseq(&l, &Seq::default());
        let (cme, _) = m.cme(&l, service, METHOD_TYPE_ISEQ, method, 0x1234);
        let src = |line| Some(("/srv/app/service.rb".to_string(), Some(line)));

        // A method: its class, `#`, its name; the definition's line in
        // the name, the sample's in the source.
        let want = "App::Service#handle (app/service.rb:12)";
        let got = name(&mut namer, &m, &p, &frame(method, cme, 5, code));
        assert_eq!(got, Some((want.into(), src(13))), "{v}");
        // No instruction: the first line.
        let got = name(&mut namer, &m, &p, &frame(method, cme, NO_POSITION, code));
        assert_eq!(got.unwrap().1, src(12));
        // No method entry: the label.
        let got = name(&mut namer, &m, &p, &frame(method, 0, 8, code));
        assert_eq!(got, Some(("handle (app/service.rb:12)".into(), src(15))));
        // A stale cookie: nothing.
        assert_eq!(
            name(&mut namer, &m, &p, &frame(method, cme, 5, code + 8)),
            None
        );

        // A block in it: `block in App::Service#handle`.
        let (block, block_code) = m.iseq(
            &l,
            &Seq {
                ty: 2,
                label: "block (2 levels) in handle",
                first_lineno: 13,
                entries: &[(0, 14)],
                local: method,
                ..Seq::default()
            },
        );
        let want = "block (2 levels) in App::Service#handle (app/service.rb:13)";
        let got = name(&mut namer, &m, &p, &frame(block, cme, 1, block_code));
        assert_eq!(got, Some((want.into(), src(14))), "{v}");
        // A method entry of another method: not its class.
        let (other, _) = m.cme(&l, service, METHOD_TYPE_ISEQ, block, 0x1234);
        let got = name(&mut namer, &m, &p, &frame(block, other, 1, block_code));
        assert_eq!(
            got.unwrap().0,
            "block (2 levels) in handle (app/service.rb:13)"
        );

        // A singleton method: `Foo.bar`.
        let foo = m.class(&l, T_CLASS, Some("Foo"));
        let meta = m.singleton(&l, foo);
        let (klass_m, klass_code) = m.iseq(
            &l,
            &Seq {
                label: "klass_m",
                base_label: "klass_m",
                path: "foo.rb",
                first_lineno: 3,
                ..Seq::default()
            },
        );
        let (scme, _) = m.cme(&l, meta, METHOD_TYPE_ISEQ, klass_m, 0x1240);
        let want = "Foo.klass_m (foo.rb:3)";
        let got = name(&mut namer, &m, &p, &frame(klass_m, scme, 0, klass_code));
        assert_eq!(got.unwrap().0, want, "{v}");
        // An object's singleton: the method's name alone.
        let object = m.alloc(u64s(&[0x01, foo, 0, 0, 0]));
        let own = m.singleton(&l, object);
        let (ocme, _) = m.cme(&l, own, METHOD_TYPE_ISEQ, klass_m, 0x1240);
        let got = name(&mut namer, &m, &p, &frame(klass_m, ocme, 0, klass_code));
        assert_eq!(got.unwrap().0, "klass_m (foo.rb:3)", "{v}");

        // A module's method, through the class's T_ICLASS: the module.
        let module = m.class(&l, T_MODULE, Some("Greeting"));
        let iclass = m.iclass(module);
        let (hello, hello_code) = m.iseq(
            &l,
            &Seq {
                label: "hello",
                base_label: "hello",
                path: "greeting.rb",
                first_lineno: 2,
                ..Seq::default()
            },
        );
        let (mcme, _) = m.cme(&l, iclass, METHOD_TYPE_ISEQ, hello, 0x1250);
        let want = "Greeting#hello (greeting.rb:2)";
        let got = name(&mut namer, &m, &p, &frame(hello, mcme, 0, hello_code));
        assert_eq!(got.unwrap().0, want, "{v}");

        // Top-level code: `<main>`, whatever entry; a class body.
        for (ty, label) in [(7, "<main>"), (3, "<class:Foo>")] {
            let (top, top_code) = m.iseq(
                &l,
                &Seq {
                    ty,
                    label,
                    base_label: label,
                    path: "/srv/app/bin/main.rb",
                    first_lineno: 1,
                    entries: &[(0, 1), (2, 4)],
                    ..Seq::default()
                },
            );
            for c in [0, cme] {
                let got = name(&mut namer, &m, &p, &frame(top, c, 3, top_code));
                let file = "/srv/app/bin/main.rb".to_string();
                assert_eq!(
                    got,
                    Some((format!("{label} (bin/main.rb:1)"), Some((file, Some(4)))))
                );
            }
        }
    }
}

#[test]
fn c_functions_are_named_through_the_symbol_table() {
    for (v, l) in layouts() {
        let mut m = Fake::default();
        let each_id = l.each_id;
        let plus = 43; // `+`: an operator's id is its serial
        let long_id = 5000 << 4 | 1; // a second page
        let symbols = m.symbols(
            &l,
            &[
                (each_id, "each"),
                (plus, "+"),
                (long_id, "a_method_with_a_long_name"),
            ],
        );
        assert_eq!(id_name(&m, &l, symbols, each_id).as_deref(), Some("each"));
        assert_eq!(id_name(&m, &l, symbols, plus).as_deref(), Some("+"));
        let long = id_name(&m, &l, symbols, long_id);
        assert_eq!(long.as_deref(), Some("a_method_with_a_long_name"));
        // Past the last id, or an id with no name: none.
        assert_eq!(id_name(&m, &l, symbols, (5001 << 4) | 1), None);
        assert_eq!(id_name(&m, &l, symbols, (300 << 4) | 1), None);

        let array = m.class(&l, T_CLASS, Some("Array"));
        let integer = m.class(&l, T_CLASS, Some("Integer"));
        let (each, each_def) = m.cme(&l, array, METHOD_TYPE_CFUNC, 0, each_id);
        let (add, add_def) = m.cme(&l, integer, METHOD_TYPE_CFUNC, 0, plus);
        for (found, want, want_plus) in [
            (Some(symbols), "Array#each", "Integer#+"),
            (None, "Array#<cfunc>", "Integer#<cfunc>"),
        ] {
            let p = process(v, found);
            let mut namer = RubyNamer::new(registry_with(7, &p));
            let got = name(&mut namer, &m, &p, &frame(0, each, 0, each_def));
            assert_eq!(got, Some((want.into(), None)), "{v}");
            let got = name(&mut namer, &m, &p, &frame(0, add, 0, add_def));
            assert_eq!(got.unwrap().0, want_plus);
            // Another definition than BPF saw, no entry, not a C function.
            assert_eq!(name(&mut namer, &m, &p, &frame(0, each, 0, add_def)), None);
            assert_eq!(name(&mut namer, &m, &p, &frame(0, 0, 0, add_def)), None);
            let (iseq_m, iseq_def) = m.cme(&l, array, METHOD_TYPE_ISEQ, 0, each_id);
            assert_eq!(
                name(&mut namer, &m, &p, &frame(0, iseq_m, 0, iseq_def)),
                None
            );
        }
    }
}

#[test]
fn ruby_3_1_names_classes_through_objects_hidden_variables() {
    let l = Layout::for_version("3.1.2").unwrap();
    let mut m = Fake::default();
    let service = m.class(&l, T_CLASS, Some("App::Service"));
    let object = m.read_u64(OBJECT_VAR).unwrap();
    let ivars = class_ivars(&m, &l, object);
    assert_eq!(
        ivars,
        Some(ClassIvars {
            classpath: CLASSPATH,
            attached: ATTACHED
        })
    );
    let path = |klass| class_path(&m, &l, klass, ivars.as_ref());
    assert_eq!(path(service), Some(("App::Service".into(), false)));
    assert_eq!(path(object), Some(("Object".into(), false)));
    let meta = m.read_u64(object + 8).unwrap();
    assert_eq!(path(meta), Some(("Object".into(), true)));
    // Without the ids, or with other ids: no path.
    assert_eq!(class_path(&m, &l, service, None), None);
    let wrong = ClassIvars {
        classpath: ATTACHED,
        attached: CLASSPATH,
    };
    assert_eq!(class_path(&m, &l, service, Some(&wrong)), None);
    // A layout that keeps paths in the class has no ids to find.
    let l33 = Layout::for_version("3.3.8").unwrap();
    assert_eq!(class_ivars(&m, &l33, object), None);
    // An Object not named "Object", or whose singleton is not attached
    // to it: no ids.
    let mut other = Fake::default();
    let foo = other.class(&l, T_CLASS, Some("Foo"));
    assert_eq!(class_ivars(&other, &l, foo), None);
    let object = other.read_u64(OBJECT_VAR).unwrap();
    let meta = other.read_u64(object + 8).unwrap();
    let stray = other.singleton(&l, foo);
    other.put64(object, 8, stray);
    assert_eq!(class_ivars(&other, &l, object), None);
    other.put64(object, 8, meta);
    assert!(class_ivars(&other, &l, object).is_some());
    // A table whose bounds are backwards, or whose entries cannot be
    // read: nothing.
    let ext = other.read_u64(foo + 24).unwrap();
    let table = other.read_u64(ext + 8).unwrap();
    other.put64(table, 32, 9);
    assert_eq!(class_path(&other, &l, foo, ivars.as_ref()), None);
    other.put64(table, 32, 0);
    other.put64(table, 48, 0x10);
    assert_eq!(class_path(&other, &l, foo, ivars.as_ref()), None);

    // The namer: qualified through the process's `rb_cObject`; without
    // it, the method alone.
    let (method, code) = m.iseq(&l, &Seq::default());
    let (cme, _) = m.cme(&l, service, METHOD_TYPE_ISEQ, method, 0x1234);
    for (object_class, want) in [
        (Some(OBJECT_VAR), "App::Service#handle (app/service.rb:12)"),
        (None, "handle (app/service.rb:12)"),
    ] {
        let p = Arc::new(Process {
            object_class,
            ..(*process("3.1.2", None)).clone()
        });
        let mut namer = RubyNamer::new(registry_with(7, &p));
        let got = name(&mut namer, &m, &p, &frame(method, cme, 5, code));
        assert_eq!(got.unwrap().0, want);
    }
}

#[test]
fn the_namer_names_ruby_frames_of_known_processes_only() {
    let p = process("3.3.8", None);
    let mut namer = RubyNamer::new(registry_with(7, &p));
    let f = frame(0x1000, 0, 0, 0x2000);
    // Process 8 is not known; process 7's memory is this test's own and
    // holds no sequence at 0x1000.
    assert_eq!(namer.name(8, &f), None);
    assert_eq!(namer.name(7, &f), None);
    let python = RuntimeFrame {
        runtime: Runtime::Python,
        ..f
    };
    assert_eq!(namer.name(7, &python), None);
}

#[test]
fn full_labels() {
    assert_eq!(full_label("outer", "outer", Some("Foo#outer")), "Foo#outer");
    assert_eq!(
        full_label("block in outer", "outer", Some("Foo#outer")),
        "block in Foo#outer"
    );
    assert_eq!(full_label("outer", "outer", Some("outer")), "outer");
    assert_eq!(full_label("<main>", "<main>", None), "<main>");
    assert_eq!(full_label("odd", "outer", Some("Foo#outer")), "odd");
}

/// The live part: a CRuby that prints the addresses of its own objects
/// (`Fiddle.dlwrap`) and what Ruby says of them, read here through
/// `process_vm_readv`.
mod live {
    use std::io::{BufRead, BufReader, Write};
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};

    use super::*;
    use crate::runtime::memory::ProcessMemory;

    /// Strings of each form, classes, methods, a long method (its line
    /// table past the immediate part) and a block, then each fact on a
    /// line: `string ADDR TEXT`, `class ADDR SINGLETON PATH`, `method
    /// ADDR NAME` (a `Method`, which holds a method entry), `iseq WRAPPER
    /// FIRST_LINENO LABEL|BASE_LABEL|PATH`, `line POS LINE` (each
    /// instruction of the last sequence, from its disassembly), `done`.
    fn script() -> String {
        let body: String = (0..150)
            .map(|i| format!("      x += {i}\n      x *= 2 if x.odd?\n"))
            .collect();
        format!(
            r#"require "fiddle"
module Outer
  class Inner
    def self.klass_m; end
    def long_method(x)
{body}      x
    end
    def make
      proc {{ |y| y * 2 }}
    end
  end
end
KEEP = []
def fact(*a) = puts(a.join(" "))
["short", "ünïcødé", "a" * 100, "b" * 1000, +"", String.new("cap", capacity: 300)].each do |s|
  KEEP << s
  fact "string", Fiddle.dlwrap(s), s
end
fact "object", Fiddle.dlwrap(Object)
[[Outer, false], [Outer::Inner, false], [Comparable, false], [Outer::Inner.singleton_class, true]].each do |c, single|
  fact "class", Fiddle.dlwrap(c), single, single ? c.inspect[/Class:(.*)>/, 1] : c.name
end
[[[].method(:each), "Array#each"], [method(:sleep), "Kernel#sleep"],
 [1.method(:clamp), "Comparable#clamp"], [Outer::Inner.method(:klass_m), "Outer::Inner.klass_m"],
 [Outer::Inner.new.method(:long_method), "Outer::Inner#long_method"]].each do |m, name|
  KEEP << m
  fact "method", Fiddle.dlwrap(m), name
end
[RubyVM::InstructionSequence.of(Outer::Inner.instance_method(:long_method)),
 RubyVM::InstructionSequence.of(Outer::Inner.new.make)].each do |is|
  KEEP << is
  fact "iseq", Fiddle.dlwrap(is), is.first_lineno, [is.label, is.base_label, is.path].join("|")
  line = nil
  is.disasm.split("\n== disasm").first.each_line do |l|
    next unless l =~ /\A(\d{{4,}}) /
    pos = $1.to_i
    line = $1.to_i if l =~ /\(\s*(\d+)\)(\[[^\]]*\])?\s*\z/
    fact "line", pos, line
  end
end
puts "done"
STDOUT.flush
STDIN.read
"#
        )
    }

    /// The interpreter of Ruby `minor` here, if any: Debian 12's
    /// ruby3.1, the cache of `scripts/runtimes` for 3.3 and 3.4 (not
    /// fetched from a unit test).
    fn ruby(minor: u8) -> Option<PathBuf> {
        if minor == 1 {
            let p = PathBuf::from("/usr/bin/ruby3.1");
            return p.exists().then_some(p);
        }
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            _ => return None,
        };
        let cache = std::env::var("FLARE_RUNTIME_CACHE")
            .unwrap_or_else(|_| "/var/cache/flare-runtimes".into());
        let prefix = format!("ruby3.{minor}-");
        std::fs::read_dir(cache)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let n = p.file_name().unwrap_or_default().to_string_lossy();
                n.starts_with(&prefix) && n.ends_with(arch)
            })
            .map(|p| p.join(format!("bin/ruby3.{minor}")))
            .find(|p| p.exists())
    }

    struct Running(Child);

    impl Drop for Running {
        fn drop(&mut self) {
            drop(self.0.stdin.take());
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn check(minor: u8) {
        let Some(ruby) = ruby(minor) else {
            eprintln!("skipped: no Ruby 3.{minor}");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.rb");
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(script().as_bytes()))
            .unwrap();
        let child = Command::new(&ruby)
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut running = Running(child);
        let pid = running.0.id();
        let stdout = running.0.stdout.take().unwrap();
        let mut facts = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if line == "done" {
                break;
            }
            facts.push(line);
        }
        assert!(!facts.is_empty(), "{} printed nothing", ruby.display());
        let mem = ProcessMemory { pid };
        let version = format!("3.{minor}.0");
        let l = Layout::for_version(&version).unwrap();
        // The process as detection finds it (where its `rb_cObject` lies,
        // which names 3.1's classes), without its symbol table.
        let found = loop {
            let maps = crate::unwind::procs::exec_mappings(pid).unwrap();
            match crate::runtime::ruby::detect::Detector::new().detect(pid, &maps, &mem) {
                crate::runtime::tracker::Found::Yes(found) => break found,
                crate::runtime::tracker::Found::NotReady => {
                    std::thread::sleep(std::time::Duration::from_millis(50))
                }
                other => panic!("3.{minor}: {other:?}"),
            }
        };
        assert!(found.object_class.is_some(), "3.{minor}: rb_cObject");
        let p = Arc::new(Process {
            object_class: found.object_class,
            ..(*process(&version, None)).clone()
        });
        let mut namer = RubyNamer::new(registry_with(pid, &p));
        let mut ivars = None;
        let (mut strings, mut classes, mut lines) = (0, 0, 0);
        let mut methods = HashMap::new();
        let mut iseqs = HashMap::new();
        // The last sequence read: (iseq, code, first line).
        let mut current: Option<(u64, u64, u32, String)> = None;
        for fact in &facts {
            let mut f = fact.splitn(3, ' ');
            let (kind, addr) = (f.next().unwrap(), f.next().unwrap());
            let rest = f.next().unwrap_or("");
            let addr: u64 = addr.parse().unwrap();
            match kind {
                "string" => {
                    assert_eq!(
                        read_string(&mem, &l, addr).as_deref(),
                        Some(rest),
                        "3.{minor}"
                    );
                    strings += 1;
                }
                "object" => {
                    ivars = class_ivars(&mem, &l, addr);
                    assert_eq!(ivars.is_some(), minor == 1, "3.{minor}");
                }
                "class" => {
                    let (single, path) = rest.split_once(' ').unwrap();
                    let want = Some((path.to_string(), single == "true"));
                    let got = class_path(&mem, &l, addr, ivars.as_ref());
                    assert_eq!(got, want, "3.{minor}: {fact}");
                    classes += 1;
                }
                "method" => {
                    // The `Method` (T_DATA) holds a `struct METHOD`:
                    // {recv, klass, iclass, me} in 3.1, {…, owner, me}
                    // since; in the object from its `data` field
                    // (TYPED_DATA_EMBEDDED, 3.3+) or where that points.
                    let word = |a: u64| mem.read_u64(a).unwrap();
                    let data = match word(addr + 24) & 2 {
                        0 => word(addr + 32),
                        _ => addr + 32,
                    };
                    let cme = word(data + if minor == 1 { 24 } else { 32 });
                    assert_eq!(imemo_type(&mem, cme), Some(IMEMO_MENT), "3.{minor}");
                    let entry = read_method_entry(&mem, &l, cme, ivars.as_ref()).unwrap();
                    let (class, method) = rest.split_once(['#', '.']).unwrap();
                    assert_eq!(entry.qualify(method), rest, "3.{minor}");
                    let cfunc = class != "Outer::Inner";
                    let ty = if cfunc {
                        METHOD_TYPE_CFUNC
                    } else {
                        METHOD_TYPE_ISEQ
                    };
                    assert_eq!(entry.def_type, ty, "3.{minor} {rest}");
                    if method == "each" {
                        assert_eq!(entry.original_id, l.each_id, "3.{minor}");
                    }
                    methods.insert(method.to_string(), (cme, entry));
                }
                "iseq" => {
                    let (first, rest) = rest.split_once(' ').unwrap();
                    let parts: Vec<&str> = rest.split('|').collect();
                    // The wrapper (T_DATA) holds the rb_iseq_t (3.1,
                    // 3.3) or a pointer to it (3.4).
                    let iseq = (1..8)
                        .map(|i| mem.read_u64(addr + 8 * i).unwrap())
                        .flat_map(|w| [w, mem.read_u64(w).unwrap_or(0)])
                        .find(|&w| imemo_type(&mem, w) == Some(IMEMO_ISEQ))
                        .unwrap();
                    let body = mem.read_u64(iseq + u64::from(l.iseq_body)).unwrap();
                    let code = mem.read_u64(body + u64::from(l.body_iseq_encoded)).unwrap();
                    let info = read_iseq(&mem, &l, iseq, code).unwrap();
                    assert_eq!(info.label, parts[0], "3.{minor}");
                    assert_eq!(info.base_label, parts[1], "3.{minor}");
                    assert_eq!(info.path, parts[2], "3.{minor}");
                    assert_eq!(info.first_lineno.to_string(), first, "3.{minor}");
                    let method = if info.label.starts_with("block") {
                        "make"
                    } else {
                        "long_method"
                    };
                    assert_eq!(info.method_name.as_deref(), Some(method));
                    assert_eq!(read_iseq(&mem, &l, iseq, code + 8), None);
                    iseqs.insert(info.label.clone(), (iseq, code));
                    current = Some((iseq, code, info.first_lineno, info.label));
                }
                "line" => {
                    let (iseq, code, first, label) = current.clone().unwrap();
                    let pos = u32::try_from(addr).unwrap();
                    let want: u32 = rest.parse().unwrap();
                    let got = name(&mut namer, &mem, &p, &frame(iseq, 0, pos, code));
                    let file = path.to_string_lossy().to_string();
                    let short = format!(
                        "{}/probe.rb",
                        dir.path().file_name().unwrap().to_string_lossy()
                    );
                    assert_eq!(
                        got,
                        Some((
                            format!("{label} ({short}:{first})"),
                            Some((file, Some(want)))
                        )),
                        "3.{minor} pos {pos}"
                    );
                    lines += 1;
                }
                _ => panic!("{fact}"),
            }
        }
        assert_eq!((strings, classes, methods.len()), (6, 4, 5));
        // A frame of `long_method` with its method entry: qualified.
        let (iseq, code) = iseqs["long_method"];
        let (cme, entry) = &methods["long_method"];
        assert_eq!(entry.iseqptr, iseq, "3.{minor}");
        let (got, _) = name(&mut namer, &mem, &p, &frame(iseq, *cme, 0, code)).unwrap();
        assert!(
            got.starts_with("Outer::Inner#long_method ("),
            "3.{minor}: {got}"
        );
        // C functions: without the symbol table, only their class.
        let (each, entry) = &methods["each"];
        let got = name(&mut namer, &mem, &p, &frame(0, *each, 0, entry.def))
            .unwrap()
            .0;
        assert_eq!(got, "Array#<cfunc>", "3.{minor}");
        assert!(lines > 600, "{lines} instructions");
    }

    #[test]
    fn ruby_3_1() {
        check(1);
    }

    #[test]
    fn ruby_3_3() {
        check(3);
    }

    #[test]
    fn ruby_3_4() {
        check(4);
    }
}
