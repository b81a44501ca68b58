//! Java frames named from a fake JVM: methods, constant pools, symbols,
//! classes, line tables and nmethods with their scopes laid out in a
//! buffer at JDK 17's offsets (its real tables, `jdk17-vmstructs.txt`),
//! encoded the way HotSpot's writers encode them; then what a hostile or
//! freed memory does to the readers.

use crate::runtime::tracker::ProcessNamer;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::JavaNamer;
use crate::collect::{Namer, Runtime, RuntimeFrame};
use crate::profile::{Frame, FrameKind, SourceLine};
use crate::runtime::java::layout::{
    from_vmstructs, CodeCacheAt, Layout, MetadataAt, NmethodData, SourceFileAt,
};
use crate::runtime::java::method::{
    class_name, parameters, read_const_method, read_method, read_symbol, Stream,
};
use crate::runtime::java::scopes::{read_nmethod, Scope};
use crate::runtime::java::vmstructs::{Field, VmStructs};
use crate::runtime::java::{FrameId, Kind, Process, Registry, NO_BCI};
use crate::runtime::memory::Buffer;

/// A JDK's tables as `/tmp/j/dump.py` printed them:
/// `F type field type-string offset`, `S type field type-string address`,
/// `T type super size` (types may hold spaces), `C name value`.
fn tables(dump: &str) -> VmStructs {
    let mut vm = VmStructs::default();
    for line in dump.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        let n = t.len();
        match t.first() {
            Some(&"F") => {
                let offset = t[n - 1].parse().unwrap();
                vm.fields
                    .insert((t[1].into(), t[2].into()), Field::Offset(offset));
            }
            Some(&"S") => {
                let address = u64::from_str_radix(t[n - 1].trim_start_matches("0x"), 16).unwrap();
                vm.fields
                    .insert((t[1].into(), t[2].into()), Field::Address(address));
            }
            Some(&"T") => {
                vm.sizes
                    .insert(t[1..n - 2].join(" "), t[n - 1].parse().unwrap());
            }
            Some(&"C") => {
                vm.constants.insert(t[1].into(), t[2].parse().unwrap());
            }
            _ => {}
        }
    }
    vm
}

/// The JDKs whose layouts the fake JVM is laid out in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Jdk {
    /// Debian sid's 8u504 tables (`jdk8-vmstructs.txt`): one code heap,
    /// offsets in code blobs and nmethods, the source file in the class.
    J8,
    /// Debian 11's 11.0.24 tables (`jdk11-vmstructs.txt`): the source
    /// file in the class, `GenericGrowableArray`, a longer nmethod.
    J11,
    /// 17.0.15's tables (`jdk17-vmstructs.txt`).
    J17,
    /// The JDK 23 and 24 shape: 25's tables with the metadata after the
    /// code (`nmethod::_metadata_offset`, a u16 past 25's members) instead
    /// of in a mutable data block.
    J24,
    /// Temurin 25's tables (`jdk25-vmstructs.txt`).
    J25,
}

const JDKS: [Jdk; 5] = [Jdk::J8, Jdk::J11, Jdk::J17, Jdk::J24, Jdk::J25];

impl Jdk {
    /// The UNSIGNED5 excess its streams are written with.
    fn excess(self) -> u8 {
        u8::from(!matches!(self, Jdk::J8 | Jdk::J11 | Jdk::J17))
    }
}

pub(crate) fn layout(jdk: Jdk) -> Layout {
    let l = match jdk {
        Jdk::J8 => from_vmstructs(&tables(include_str!("jdk8-vmstructs.txt")), 8),
        Jdk::J11 => from_vmstructs(&tables(include_str!("jdk11-vmstructs.txt")), 11),
        Jdk::J17 => from_vmstructs(&tables(include_str!("jdk17-vmstructs.txt")), 17),
        Jdk::J24 => {
            let mut vm = tables(include_str!("jdk25-vmstructs.txt"));
            vm.fields
                .remove(&("CodeBlob".into(), "_mutable_data".into()));
            vm.fields.insert(
                ("nmethod".into(), "_metadata_offset".into()),
                Field::Offset(224),
            );
            from_vmstructs(&vm, 24)
        }
        Jdk::J25 => from_vmstructs(&tables(include_str!("jdk25-vmstructs.txt")), 25),
    }
    .unwrap();
    assert_eq!(l.unsigned5_excess, jdk.excess());
    l
}

#[test]
fn the_jdk17_tables_give_the_offsets_hotspot_17_has() {
    let l = layout(Jdk::J17);
    assert_eq!(
        (l.method_const, l.const_constants, l.const_size, l.pool_size),
        (8, 8, 48, 72)
    );
    assert_eq!((l.symbol_length, l.symbol_body, l.klass_name), (4, 6, 24));
    assert_eq!((l.pc_desc_size, l.pc_desc_pc, l.pc_desc_scope), (16, 0, 4));
    assert_eq!((l.nm_method, l.nm_compile_id), (112, 304));
    assert!(matches!(
        l.nm_data,
        NmethodData::Inline {
            scopes_data: 120,
            ..
        }
    ));
    assert_eq!(l.has_line_table, 1);
    assert_eq!(l.source_file, SourceFileAt::Pool(54));
}

#[test]
fn the_jdk11_tables_give_the_offsets_hotspot_11_has() {
    let l = layout(Jdk::J11);
    assert_eq!(
        (l.method_const, l.const_constants, l.const_size, l.pool_size),
        (8, 8, 56, 64)
    );
    assert_eq!((l.symbol_length, l.symbol_body, l.klass_name), (0, 6, 24));
    assert_eq!(l.source_file, SourceFileAt::Klass(298));
    assert_eq!(l.growable_len, 0);
    assert!(!l.blob_offsets);
    assert_eq!(
        (l.nm_method, l.nm_compile_id, l.nm_orig_pc),
        (112, 324, 320)
    );
    assert!(matches!(
        l.nm_data,
        NmethodData::Inline {
            metadata: 292,
            scopes_data: 120,
            scopes_offset: false,
            scopes_pcs: 300,
            dependencies: 304,
        }
    ));
    assert_eq!(l.has_line_table, 1);
}

#[test]
fn the_jdk8_tables_give_the_offsets_hotspot_8_has() {
    let l = layout(Jdk::J8);
    assert_eq!(
        (l.method_const, l.const_constants, l.const_size, l.pool_size),
        (8, 8, 48, 80)
    );
    assert_eq!((l.symbol_length, l.symbol_body, l.klass_name), (0, 8, 16));
    assert_eq!(l.source_file, SourceFileAt::Klass(258));
    assert!(l.blob_offsets);
    assert_eq!(
        (l.blob_code_begin, l.blob_frame_complete, l.nm_deopt),
        (32, 36, 148)
    );
    assert_eq!((l.nm_method, l.nm_compile_id, l.nm_orig_pc), (64, 204, 200));
    assert_eq!(
        l.nm_data,
        NmethodData::Inline {
            metadata: 172,
            scopes_data: 176,
            scopes_offset: true,
            scopes_pcs: 180,
            dependencies: 184,
        }
    );
    assert!(matches!(l.code_cache, CodeCacheAt::One { .. }));
    assert_eq!((l.interp_method, l.interp_bcp), (-3, -7));
    assert_eq!((l.has_line_table, l.unsigned5_excess), (1, 0));
}

/// HotSpot's UNSIGNED5 writer (`CompressedWriteStream::write_int`, JDK
/// 19's `UNSIGNED5::write_uint`): `L` is 192 less the excess.
fn write_int(out: &mut Vec<u8>, value: u32, x: u8) {
    let (x, l) = (u32::from(x), 192 - u32::from(x));
    let mut sum = value;
    for i in 0.. {
        if sum < l || i == 4 {
            out.push((sum + x) as u8);
            return;
        }
        sum -= l;
        out.push((l + sum % 64 + x) as u8);
        sum >>= 6;
    }
}

fn write_signed(out: &mut Vec<u8>, value: i32, x: u8) {
    write_int(out, ((value << 1) ^ (value >> 31)) as u32, x);
}

/// `CompressedLineNumberWriteStream`: (bci, line) pairs, each a byte when
/// its deltas fit (and it is not 0xFF), else 0xFF and both deltas; 0 ends.
fn line_table(pairs: &[(i32, i32)], x: u8) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut bci, mut line) = (0, 0);
    for &(b, l) in pairs {
        let (db, dl) = (b - bci, l - line);
        (bci, line) = (b, l);
        if db == 0 && dl == 0 {
            continue;
        }
        if db & !0x1f == 0 && dl & !7 == 0 && (db << 3 | dl) != 0xff {
            out.push((db << 3 | dl) as u8);
            continue;
        }
        out.push(0xff);
        write_signed(&mut out, db, x);
        write_signed(&mut out, dl, x);
    }
    out.push(0);
    out
}

#[test]
fn the_test_writer_writes_what_hotspot_writes() {
    // 191 and 1000 zig-zag to 382 and 2000: 254 + 2·64 and 208 + 28·64
    // (JDK 17); less 191, 6 bits at a time, each byte one more (JDK 19+).
    assert_eq!(line_table(&[(191, 1000)], 0), [0xff, 254, 2, 208, 28, 0]);
    assert_eq!(line_table(&[(191, 1000)], 1), [0xff, 255, 3, 209, 29, 0]);
    assert_eq!(
        line_table(&[(4, 3), (35, 10)], 0),
        [4 << 3 | 3, 0xff, 62, 14, 0]
    );
}

#[test]
fn unsigned5_reads_every_length_and_refuses_a_zero_byte_past_jdk_19() {
    for x in [0, 1] {
        let values = [
            0,
            1,
            190,
            191,
            192,
            1000,
            12_345,
            1 << 20,
            1 << 30,
            u32::MAX,
        ];
        let mut bytes = Vec::new();
        for v in values {
            write_int(&mut bytes, v, x);
        }
        let mem = Buffer {
            base: 0x1000,
            bytes: bytes.clone(),
        };
        let mut s = Stream::new(&mem, 0x1000, bytes.len());
        for v in values {
            assert_eq!(s.unsigned(x), Some(v), "{v} excess {x}");
        }
        assert_eq!(s.byte(), None, "past the limit");
    }
    // A 5-byte number ends at its fifth byte, whatever it is.
    let mem = Buffer {
        base: 0,
        bytes: vec![255, 255, 255, 255, 255, 7],
    };
    let mut s = Stream::new(&mem, 0, 6);
    assert!(s.unsigned(0).is_some());
    assert_eq!(s.byte(), Some(7));
    let mem = Buffer {
        base: 0,
        bytes: vec![0],
    };
    assert_eq!(Stream::new(&mem, 0, 1).unsigned(1), None);
    assert_eq!(Stream::new(&mem, 0, 1).unsigned(0), Some(0));
}

const BASE: u64 = 0x7f00_0000_0000;
const PID: u32 = 4242;
const COMPILE_ID: u64 = 42;

/// A JVM's memory, filled as HotSpot fills it.
struct Jvm {
    l: Layout,
    mem: Buffer,
    next: u64,
}

impl Jvm {
    fn new(jdk: Jdk) -> Self {
        Jvm {
            l: layout(jdk),
            mem: Buffer {
                base: BASE,
                bytes: vec![0; 1 << 18],
            },
            next: BASE + 0x100,
        }
    }

    fn alloc(&mut self, n: usize) -> u64 {
        let at = self.next;
        self.next += (n as u64 + 15) & !15;
        at
    }

    fn put(&mut self, at: u64, bytes: &[u8]) {
        let at = (at - BASE) as usize;
        self.mem.bytes[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn put_u64(&mut self, at: u64, v: u64) {
        self.put(at, &v.to_ne_bytes());
    }

    fn put_i32(&mut self, at: u64, v: i32) {
        self.put(at, &v.to_ne_bytes());
    }

    fn put_u16(&mut self, at: u64, v: u16) {
        self.put(at, &v.to_ne_bytes());
    }

    fn symbol_bytes(&mut self, body: &[u8]) -> u64 {
        let at = self.alloc(usize::from(self.l.symbol_body) + body.len());
        self.put_u16(at + u64::from(self.l.symbol_length), body.len() as u16);
        self.put(at + u64::from(self.l.symbol_body), body);
        at
    }

    fn symbol(&mut self, s: &str) -> u64 {
        self.symbol_bytes(s.as_bytes())
    }

    /// A class `name` whose constant pool holds `entries` (index 1 on)
    /// and, if given, a source file name (the entry after them).
    fn class(&mut self, name: &str, source: Option<&str>, entries: &[&str]) -> u64 {
        let klass = self.alloc(0x100);
        let klass_name = self.symbol(name);
        self.put_u64(klass + u64::from(self.l.klass_name), klass_name);
        let slots = entries.len() + 2;
        let pool = self.alloc(usize::from(self.l.pool_size) + slots * 8);
        self.put_u64(pool + u64::from(self.l.pool_holder), klass);
        let mut all: Vec<&str> = entries.to_vec();
        if let Some(source) = source {
            all.push(source);
            let index = all.len() as u16;
            let at = match self.l.source_file {
                SourceFileAt::Pool(off) => pool + u64::from(off),
                SourceFileAt::Klass(off) => klass + u64::from(off),
            };
            self.put_u16(at, index);
        }
        for (i, e) in all.iter().enumerate() {
            let sym = self.symbol(e);
            self.put_u64(pool + u64::from(self.l.pool_size) + (i as u64 + 1) * 8, sym);
        }
        pool
    }

    /// A method (its `Method` and `ConstMethod`) of `pool`'s class named
    /// by entries `name` and `sig`, with `code_size` bytes of code and, if
    /// given, a line table.
    fn method(
        &mut self,
        pool: u64,
        (name, sig): (u16, u16),
        code_size: u16,
        table: Option<&[u8]>,
    ) -> (u64, u64) {
        let l = self.l.clone();
        let table = table.unwrap_or(&[]);
        let cm = self.alloc(usize::from(l.const_size) + usize::from(code_size) + table.len());
        self.put_u64(cm + u64::from(l.const_constants), pool);
        let flags = if table.is_empty() {
            0
        } else {
            l.has_line_table
        };
        self.put_u16(cm + u64::from(l.const_flags), flags);
        self.put_u16(cm + u64::from(l.const_code_size), code_size);
        self.put_u16(cm + u64::from(l.const_name_index), name);
        self.put_u16(cm + u64::from(l.const_signature_index), sig);
        // Bytecodes the line table must not be read in: all non-zero.
        let code = vec![0xb1; usize::from(code_size)];
        self.put(cm + u64::from(l.const_size), &code);
        self.put(cm + u64::from(l.const_size) + u64::from(code_size), table);
        let method = self.alloc(0x58);
        self.put_u64(method + u64::from(l.method_const), cm);
        (method, cm)
    }

    /// An nmethod of `method` whose metadata holds `metadata`, whose
    /// scopes data is `scopes` and whose `PcDesc`s are `pcs` (pc offset,
    /// decode offset).
    fn nmethod(&mut self, method: u64, metadata: &[u64], scopes: &[u8], pcs: &[(i32, i32)]) -> u64 {
        let l = self.l.clone();
        let pcs_len = pcs.len() * usize::from(l.pc_desc_size);
        let meta_len = metadata.len() * 8;
        let header = 0x180;
        // Where the metadata, scopes data and pcs go.
        let (nm, meta_at, scopes_at, pcs_at) = match l.nm_data {
            // In the nmethod: metadata, scopes data, pcs, dependencies.
            NmethodData::Inline {
                metadata: meta_off,
                scopes_data,
                scopes_offset,
                scopes_pcs,
                dependencies,
            } => {
                let meta_at = header;
                let scopes_at = meta_at + meta_len;
                let pcs_at = (scopes_at + scopes.len() + 7) & !7;
                let deps_at = pcs_at + pcs_len;
                let nm = self.alloc(deps_at + 0x40);
                self.put_i32(nm + u64::from(meta_off), meta_at as i32);
                if scopes_offset {
                    self.put_i32(nm + u64::from(scopes_data), scopes_at as i32);
                } else {
                    self.put_u64(nm + u64::from(scopes_data), nm + scopes_at as u64);
                }
                self.put_i32(nm + u64::from(scopes_pcs), pcs_at as i32);
                self.put_i32(nm + u64::from(dependencies), deps_at as i32);
                let at = |o: usize| nm + o as u64;
                (nm, at(meta_at), at(scopes_at), at(pcs_at))
            }
            // Blocks of their own: dependencies (16 bytes here), pcs and
            // scopes data in the immutable one; the metadata after the
            // code (JDK 23, 24) or after the relocations (25).
            NmethodData::Immutable {
                data,
                size,
                scopes_pcs,
                scopes_data,
                metadata: where_meta,
                ..
            } => {
                let (code_end, code_len) = (header, 0x40);
                let nm = self.alloc(code_end + code_len + meta_len);
                let (pcs_off, scopes_off) = (16, 16 + pcs_len);
                let immutable = self.alloc(scopes_off + scopes.len() + 8);
                self.put_u64(nm + u64::from(data), immutable);
                self.put_i32(nm + u64::from(size), (scopes_off + scopes.len()) as i32);
                self.put_i32(nm + u64::from(scopes_pcs), pcs_off as i32);
                self.put_i32(nm + u64::from(scopes_data), scopes_off as i32);
                let meta_at = match where_meta {
                    MetadataAt::AfterCode {
                        data_offset,
                        metadata: meta_off,
                        blob_size,
                    } => {
                        self.put_i32(nm + u64::from(data_offset), code_end as i32);
                        self.put_u16(nm + u64::from(meta_off), code_len as u16);
                        self.put_i32(
                            nm + u64::from(blob_size),
                            (code_end + code_len + meta_len) as i32,
                        );
                        nm + (code_end + code_len) as u64
                    }
                    MetadataAt::Mutable {
                        data,
                        size,
                        relocation_size,
                    } => {
                        let relocations = 24;
                        let mutable = self.alloc(relocations + meta_len);
                        self.put_u64(nm + u64::from(data), mutable);
                        self.put_i32(nm + u64::from(relocation_size), relocations as i32);
                        self.put_i32(nm + u64::from(size), (relocations + meta_len) as i32);
                        mutable + relocations as u64
                    }
                };
                let at = |o: usize| immutable + o as u64;
                (nm, meta_at, at(scopes_off), at(pcs_off))
            }
        };
        self.put_u64(nm + u64::from(l.nm_method), method);
        self.put_i32(nm + u64::from(l.nm_compile_id), COMPILE_ID as i32);
        for (i, &m) in metadata.iter().enumerate() {
            self.put_u64(meta_at + i as u64 * 8, m);
        }
        self.put(scopes_at, scopes);
        for (i, &(pc, scope)) in pcs.iter().enumerate() {
            let at = pcs_at + (i * usize::from(l.pc_desc_size)) as u64;
            self.put_i32(at + u64::from(l.pc_desc_pc), pc);
            self.put_i32(at + u64::from(l.pc_desc_scope), scope);
        }
        nm
    }

    fn process(&self) -> Arc<Process> {
        Arc::new(Process {
            layout: Arc::new(self.l.clone()),
            heaps: Vec::new(),
            cache: 0..0,
        })
    }
}

fn frame(kind: Kind, pointer: u64, offset: u32, cookie: u64) -> RuntimeFrame {
    let id = FrameId {
        kind,
        pointer,
        offset,
        return_address: false,
    };
    RuntimeFrame {
        runtime: Runtime::Java,
        ids: id.encode(),
        cookie,
    }
}

/// A frame as the namer should give it.
fn want(name: &str, kind: FrameKind, file: &str, line: Option<u32>, inlined: bool) -> Frame {
    Frame {
        source: Some(Box::new(SourceLine {
            file: file.into(),
            line,
        })),
        inlined,
        ..Frame::named(name, kind)
    }
}

/// The (bci, line) pairs of the handler's line table: one-byte entries,
/// escapes for a line delta past 7, a multi-byte delta, a negative one,
/// and the (31, 7) delta that would be the escape byte.
const HANDLER_LINES: &[(i32, i32)] = &[
    (0, 10),
    (4, 11),
    (9, 13),
    (200, 1013),
    (205, 1012),
    (236, 1019),
];

/// A JVM with `com.foo.Handler.renderPage(int, String[])`, Handler.java,
/// and its line table; the methods it inlines; an nmethod of it.
struct Fixture {
    jvm: Jvm,
    handler: (u64, u64),
    append: (u64, u64),
    get_chars: (u64, u64),
    nm: u64,
}

fn fixture(jdk: Jdk) -> Fixture {
    let x = jdk.excess();
    let mut jvm = Jvm::new(jdk);
    let pool = jvm.class(
        "com/foo/Handler",
        Some("Handler.java"),
        &["renderPage", "(I[Ljava/lang/String;)J"],
    );
    let table = line_table(HANDLER_LINES, x);
    let handler = jvm.method(pool, (1, 2), 240, Some(&table));
    let sb = jvm.class(
        "java/lang/AbstractStringBuilder",
        Some("AbstractStringBuilder.java"),
        &["append", "(I)Ljava/lang/AbstractStringBuilder;"],
    );
    let table = line_table(&[(0, 800), (290, 805), (300, 806)], x);
    let append = jvm.method(sb, (1, 2), 400, Some(&table));
    let int = jvm.class("java/lang/Integer", None, &["getChars", "(II[B)I"]);
    let get_chars = jvm.method(int, (1, 2), 60, None);

    // Scopes data as DebugInformationRecorder writes it: each scope its
    // sender's offset, its method's metadata index, its bci + 1 (offset 0
    // is the null scope).
    let mut scopes = vec![0xff];
    let scope = |out: &mut Vec<u8>, sender: u32, meta: u32, bci: u32| -> i32 {
        let at = out.len() as i32;
        write_int(out, sender, x);
        write_int(out, meta, x);
        write_int(out, bci + 1, x);
        at
    };
    let outer = scope(&mut scopes, 0, 1, 205);
    let middle = scope(&mut scopes, outer as u32, 2, 300);
    let inner = scope(&mut scopes, middle as u32, 3, 4);
    let metadata = [handler.0, append.0, get_chars.0];
    let pcs = [(-1, 0), (0x10, outer), (0x40, inner), (i32::MAX, 0)];
    let nm = jvm.nmethod(handler.0, &metadata, &scopes, &pcs);
    Fixture {
        jvm,
        handler,
        append,
        get_chars,
        nm,
    }
}

impl Fixture {
    fn name(&self, namer: &mut JavaNamer, frame: &RuntimeFrame) -> Option<Vec<Frame>> {
        namer.name_in(&self.jvm.mem, PID, &self.jvm.process(), frame)
    }
}

fn namer() -> JavaNamer {
    JavaNamer::new(Arc::new(Mutex::new(HashMap::new())))
}

#[test]
fn reads_a_method_its_class_source_and_lines() {
    for x in JDKS {
        let f = fixture(x);
        let m = read_method(&f.jvm.mem, &f.jvm.l, f.handler.0).unwrap();
        assert_eq!(m.const_method, f.handler.1);
        assert_eq!(
            (m.class.as_str(), m.name.as_str(), m.signature.as_str()),
            ("com.foo.Handler", "renderPage", "(I[Ljava/lang/String;)J")
        );
        assert_eq!(m.source_file.as_deref(), Some("Handler.java"));
        assert_eq!(
            m.display_name(),
            "com.foo.Handler.renderPage(int, java.lang.String[])"
        );
        let lines: Vec<Option<u32>> = [
            0, 3, 4, 8, 9, 199, 200, 204, 205, 235, 236, 239, 240, -1, -2,
        ]
        .iter()
        .map(|&bci| m.line(bci))
        .collect();
        let some = |l: u32| Some(l);
        assert_eq!(
            lines,
            [
                some(10),
                some(10),
                some(11),
                some(11),
                some(13),
                some(13),
                some(1013),
                some(1013),
                some(1012),
                some(1012),
                some(1019),
                some(1019),
                None,
                some(10),
                None
            ],
            "{x:?}"
        );
        // No line table, no source file.
        let m = read_method(&f.jvm.mem, &f.jvm.l, f.get_chars.0).unwrap();
        assert_eq!(
            m.display_name(),
            "java.lang.Integer.getChars(int, int, byte[])"
        );
        assert_eq!((m.source_file.as_deref(), m.line(0)), (None, None));
    }
}

#[test]
fn an_unsorted_line_table_gives_hotspots_answer() {
    // HotSpot's tables need not be sorted: an exact entry wins, else the
    // last of the highest below.
    let mut jvm = Jvm::new(Jdk::J17);
    let pool = jvm.class("A", Some("A.java"), &["f", "()V"]);
    let table = line_table(&[(0, 5), (10, 7), (4, 6), (4, 9), (12, 3)], 0);
    let (method, _) = jvm.method(pool, (1, 2), 20, Some(&table));
    let m = read_method(&jvm.mem, &jvm.l, method).unwrap();
    assert_eq!(
        [0, 3, 4, 5, 9, 10, 11, 12, 19].map(|b| m.line(b)),
        [5, 5, 6, 9, 9, 7, 7, 3, 3].map(Some)
    );
}

#[test]
fn names_an_interpreted_frame_and_refuses_a_stale_one() {
    let f = fixture(Jdk::J17);
    let mut n = namer();
    let (method, cm) = f.handler;
    let name = "com.foo.Handler.renderPage(int, java.lang.String[])";
    let got = f.name(&mut n, &frame(Kind::Interpreted, method, 204, cm));
    assert_eq!(
        got,
        Some(vec![want(
            name,
            FrameKind::Interpreted,
            "Handler.java",
            Some(1013),
            false
        )])
    );
    let got = f.name(&mut n, &frame(Kind::Interpreted, method, NO_BCI, cm));
    assert_eq!(
        got,
        Some(vec![want(
            name,
            FrameKind::Interpreted,
            "Handler.java",
            None,
            false
        )])
    );
    // The method's memory now holds another ConstMethod than BPF read.
    assert_eq!(
        f.name(&mut n, &frame(Kind::Interpreted, method, 4, cm + 8)),
        None
    );
    assert_eq!(f.name(&mut n, &frame(Kind::Interpreted, 0, 4, 0)), None);
    // Not a Java frame, not a JVM known: nothing.
    let python = RuntimeFrame {
        runtime: Runtime::Python,
        ..frame(Kind::Interpreted, method, 4, cm)
    };
    assert_eq!(n.name(PID, &python), None);
    assert_eq!(n.name(PID, &frame(Kind::Interpreted, method, 4, cm)), None);
}

#[test]
fn expands_what_the_jit_inlined_outermost_first() {
    for x in JDKS {
        let f = fixture(x);
        let mut n = namer();
        let handler = "com.foo.Handler.renderPage(int, java.lang.String[])";
        let append = "java.lang.AbstractStringBuilder.append(int)";
        let jit = FrameKind::Jit;
        // At the deepest PcDesc (a return address): its scopes.
        let got = f.name(&mut n, &frame(Kind::Compiled, f.nm, 0x40, COMPILE_ID));
        let get_chars = Frame {
            inlined: true,
            ..Frame::named("java.lang.Integer.getChars(int, int, byte[])", jit)
        };
        assert_eq!(
            got,
            Some(vec![
                want(handler, jit, "Handler.java", Some(1012), false),
                want(append, jit, "AbstractStringBuilder.java", Some(806), true),
                get_chars,
            ]),
            "{x:?}"
        );
        // A sampled pc between two: the next one's.
        let between = f.name(&mut n, &frame(Kind::Compiled, f.nm, 0x30, COMPILE_ID));
        assert_eq!(between, got, "{x:?}");
        // At a PcDesc with the nmethod's method only, and a return
        // address between it and the next (a leaf call): the one before.
        let mut at_ra = frame(Kind::Compiled, f.nm, 0x30, COMPILE_ID);
        at_ra.ids = FrameId {
            return_address: true,
            ..FrameId::decode(at_ra.ids).unwrap()
        }
        .encode();
        for fr in [frame(Kind::Compiled, f.nm, 0x10, COMPILE_ID), at_ra] {
            assert_eq!(
                f.name(&mut n, &fr),
                Some(vec![want(handler, jit, "Handler.java", Some(1012), false)])
            );
        }
        // Past the last: the end sentinel, no scope recorded.
        let own = Some(vec![want(handler, jit, "Handler.java", None, false)]);
        let got = f.name(&mut n, &frame(Kind::Compiled, f.nm, 0x41, COMPILE_ID));
        assert_eq!(got, own);
        let got = f.name(&mut n, &frame(Kind::Native, f.nm, 0x30, COMPILE_ID));
        assert_eq!(got, own);
        // Another nmethod now: another compile id than BPF read.
        for kind in [Kind::Compiled, Kind::Native] {
            assert_eq!(
                f.name(&mut n, &frame(kind, f.nm, 0x30, COMPILE_ID + 1)),
                None
            );
        }
        let nm = read_nmethod(&f.jvm.mem, &f.jvm.l, f.nm).unwrap();
        let scopes = nm.scopes(&f.jvm.mem, &f.jvm.l, 0x40, true).unwrap();
        assert_eq!(
            scopes,
            [
                (f.handler.0, Some(205)),
                (f.append.0, Some(300)),
                (f.get_chars.0, Some(4))
            ]
            .map(|(method, bci)| Scope { method, bci })
        );
    }
}

#[test]
fn names_a_stub_by_its_blob_name() {
    let mut jvm = Jvm::new(Jdk::J17);
    let blob = jvm.alloc(0x100);
    let name = jvm.alloc(32);
    jvm.put(name, b"StubRoutines (1)\0");
    jvm.put_u64(blob + u64::from(jvm.l.blob_name), name);
    let mut n = namer();
    let process = jvm.process();
    let cookie = u64::from(u32::from_le_bytes(*b"Stub"));
    let got = n.name_in(
        &jvm.mem,
        PID,
        &process,
        &frame(Kind::Stub, blob, 12, cookie),
    );
    assert_eq!(
        got,
        Some(vec![Frame::named("[StubRoutines (1)]", FrameKind::Jit)])
    );
    let other = u64::from(u32::from_le_bytes(*b"Inte"));
    let got = n.name_in(&jvm.mem, PID, &process, &frame(Kind::Stub, blob, 12, other));
    assert_eq!(got, None);
}

#[test]
fn class_names_descriptors_and_modified_utf8() {
    assert_eq!(
        class_name("java/util/HashMap$Node"),
        "java.util.HashMap$Node"
    );
    assert_eq!(
        class_name("Service$$Lambda$14+0x0000000800c03000"),
        "Service$$Lambda$14/<hidden>"
    );
    assert_eq!(class_name("a/b+c"), "a.b+c");
    assert_eq!(parameters("()V").as_deref(), Some("()"));
    assert_eq!(
        parameters("(BCDFIJSZ[[JLx/Y;)V").as_deref(),
        Some("(byte, char, double, float, int, long, short, boolean, long[][], x.Y)")
    );
    for bad in ["", "V", "(", "(Q)V", "(Ljava/lang/String)V", "([)V"] {
        assert_eq!(parameters(bad), None, "{bad}");
    }
    assert_eq!(parameters(&format!("({}I)V", "[".repeat(256))), None);
    // Garbage whose type byte starts a character of two bytes.
    assert_eq!(parameters("(é)V"), None);
    // A NUL, a character past the BMP as two surrogates, a stray byte.
    let mut jvm = Jvm::new(Jdk::J17);
    let body = [
        b'a', 0xc0, 0x80, 0xed, 0xa1, 0x80, 0xed, 0xb0, 0x80, 0xff, b'z',
    ];
    let at = jvm.symbol_bytes(&body);
    assert_eq!(
        read_symbol(&jvm.mem, &jvm.l, at).as_deref(),
        Some("a\0\u{20000}\u{fffd}z")
    );
    let at = jvm.symbol("größe");
    assert_eq!(read_symbol(&jvm.mem, &jvm.l, at).as_deref(), Some("größe"));
}

#[test]
fn scopes_that_loop_or_point_outside_leave_the_nmethods_method() {
    let f = fixture(Jdk::J17);
    let l = f.jvm.l.clone();
    let own = Some(vec![want(
        "com.foo.Handler.renderPage(int, java.lang.String[])",
        FrameKind::Jit,
        "Handler.java",
        None,
        false,
    )]);
    let metadata = [f.handler.0, f.append.0];
    // A scope that is its own sender; one whose method index is past the
    // metadata; one whose sender lies past the scopes data; one whose
    // outermost method is not the nmethod's.
    let cases: [&[u32]; 4] = [&[1, 1, 6], &[0, 3, 6], &[5000, 1, 6], &[0, 2, 6]];
    for case in cases {
        let mut jvm = Jvm {
            l: l.clone(),
            mem: f.jvm.mem.clone(),
            next: f.jvm.next,
        };
        let mut scopes = vec![0xff];
        for &v in case {
            write_int(&mut scopes, v, 0);
        }
        let nm = jvm.nmethod(f.handler.0, &metadata, &scopes, &[(0x10, 1)]);
        let n = read_nmethod(&jvm.mem, &l, nm).unwrap();
        assert_eq!(n.scopes(&jvm.mem, &l, 0x10, true), None, "{case:?}");
        let got = namer().name_in(
            &jvm.mem,
            PID,
            &jvm.process(),
            &frame(Kind::Compiled, nm, 0, COMPILE_ID),
        );
        assert_eq!(got, own, "{case:?}");
    }
    // A PcDesc section of two billion bytes is not read.
    let mut jvm = Jvm {
        l: l.clone(),
        mem: f.jvm.mem.clone(),
        next: f.jvm.next,
    };
    let NmethodData::Inline { dependencies, .. } = l.nm_data else {
        panic!("JDK 17's nmethods hold their sections");
    };
    jvm.put_i32(f.nm + u64::from(dependencies), i32::MAX);
    let got = namer().name_in(
        &jvm.mem,
        PID,
        &jvm.process(),
        &frame(Kind::Compiled, f.nm, 0x30, COMPILE_ID),
    );
    assert_eq!(got, own);
}

#[test]
fn lengths_a_freed_method_holds_are_bounded() {
    let mut f = fixture(Jdk::J17);
    let l = f.jvm.l.clone();
    // A line table with no end: the method is named, without lines.
    let pool = f.jvm.class("B", Some("B.java"), &["g", "()V"]);
    // (The run overwrites the `Method`, allocated after: read through
    // the `ConstMethod`.)
    let (_, cm) = f.jvm.method(pool, (1, 2), 10, Some(&[8]));
    let start = cm + u64::from(l.const_size) + 10;
    let end = BASE + f.jvm.mem.bytes.len() as u64;
    assert!(end - start > (1 << 16) + 200);
    let run = vec![8u8; (end - start) as usize];
    f.jvm.put(start, &run);
    let m = read_const_method(&f.jvm.mem, &l, cm).unwrap();
    assert_eq!((m.name.as_str(), m.line(1)), ("g", None));
    // The same 64 KiB on, then a 0: past the bound, still no lines.
    f.jvm.put(start + (1 << 16) + 8, &[0]);
    let m = read_const_method(&f.jvm.mem, &l, cm).unwrap();
    assert_eq!(m.line(1), None);
    f.jvm.put(start + 100, &[0]);
    let m = read_const_method(&f.jvm.mem, &l, cm).unwrap();
    assert_eq!(m.line(1), Some(0));
    // A symbol longer than the memory there.
    let sym = end - 16;
    f.jvm.put_u16(sym + u64::from(l.symbol_length), 0xffff);
    assert_eq!(read_symbol(&f.jvm.mem, &l, sym), None);
    // Constant pool indexes past the memory, a null pool.
    let (method, cm) = f.handler;
    f.jvm.put_u16(cm + u64::from(l.const_name_index), 0xffff);
    assert_eq!(read_method(&f.jvm.mem, &l, method), None);
    f.jvm.put_u64(cm + u64::from(l.const_constants), 0);
    assert_eq!(read_method(&f.jvm.mem, &l, method), None);
}

#[test]
fn garbage_memory_names_nothing_or_something_never_panics() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for x in JDKS {
        let f = fixture(x);
        let good = f.jvm.mem.clone();
        let pointers = [f.handler.0, f.handler.1, f.append.0, f.get_chars.0, f.nm];
        for round in 0..300 {
            let mut jvm = Jvm {
                l: f.jvm.l.clone(),
                mem: good.clone(),
                next: f.jvm.next,
            };
            // Every few rounds all of it is noise; else some bytes are.
            let noise = if round % 10 == 0 {
                jvm.mem.bytes.len()
            } else {
                64
            };
            for _ in 0..noise {
                let at = (next() % jvm.mem.bytes.len() as u64) as usize;
                jvm.mem.bytes[at] = next() as u8;
            }
            // Bytes of the structures themselves.
            for &p in &pointers {
                let at = (p - BASE) as usize + (next() % 0x200) as usize;
                if let Some(b) = jvm.mem.bytes.get_mut(at) {
                    *b = next() as u8;
                }
            }
            let process = jvm.process();
            let mut n = namer();
            for kind in [Kind::Interpreted, Kind::Compiled, Kind::Native, Kind::Stub] {
                for &p in &pointers {
                    let offset = (next() % 0x100) as u32;
                    let cookie = match kind {
                        Kind::Interpreted => f.handler.1,
                        Kind::Stub => next() & 0xffff_ffff,
                        _ => COMPILE_ID,
                    };
                    let _ = n.name_in(&jvm.mem, PID, &process, &frame(kind, p, offset, cookie));
                    let random = BASE + next() % jvm.mem.bytes.len() as u64;
                    let _ = n.name_in(
                        &jvm.mem,
                        PID,
                        &process,
                        &frame(kind, random, offset, next()),
                    );
                }
            }
        }
    }
}

#[test]
fn a_process_id_reused_by_another_jvm_is_read_again() {
    let f = fixture(Jdk::J17);
    let registry: Registry = Arc::new(Mutex::new(HashMap::new()));
    let mut n = JavaNamer::new(registry);
    let (method, cm) = f.handler;
    let fr = frame(Kind::Interpreted, method, 0, cm);
    let first = f.jvm.process();
    assert!(n.name_in(&f.jvm.mem, PID, &first, &fr).is_some());
    // The same addresses in another process, whose method there is another.
    let mut other = Jvm {
        l: f.jvm.l.clone(),
        mem: f.jvm.mem.clone(),
        next: f.jvm.next,
    };
    other.put_u16(cm + u64::from(other.l.const_name_index), 2);
    let got = n.name_in(&other.mem, PID, &other.process(), &fr).unwrap();
    assert_eq!(
        &*got[0].name,
        "com.foo.Handler.(I[Ljava/lang/String;)J(int, java.lang.String[])"
    );
}
