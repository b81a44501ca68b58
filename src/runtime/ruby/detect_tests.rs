//! Detection against live Ruby 3.1 (Debian 12's), 3.3 and 3.4 (sid's and
//! experimental's, from `scripts/runtimes`), checked against the fact
//! sheet's findings for those builds; the files of the arm64 builds read
//! alone; and the table search, the TLS and the `ruby_global_symbols`
//! scan on made-up inputs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;
use crate::runtime::memory::{Buffer, ProcessMemory};
use crate::runtime::ruby::Tls;
use crate::unwind::procs::exec_mappings;

/// A child killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn required() -> bool {
    std::env::var("FLARE_REQUIRE_BPF").is_ok_and(|v| v == "1")
}

/// Says a runtime is missing: a failure under FLARE_REQUIRE_BPF=1.
fn skip(what: &str, why: &str) {
    assert!(!required(), "{what} is required: {why}");
    eprintln!("skipped: no {what}: {why}");
}

/// Ruby 3.`minor` (a `ruby` to run, and its libruby), where this machine
/// has it: Debian 12's ruby3.1, the cache's 3.3 and 3.4 (`scripts/runtimes
/// ruby 3.X [arch]` prints their wrapper, in CACHE/ruby3.X-VERSION-ARCH/bin).
fn ruby(minor: u8, arch: &str) -> Option<(PathBuf, PathBuf)> {
    if minor == 1 {
        let exe = PathBuf::from("/usr/bin/ruby3.1");
        let lib = PathBuf::from("/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1");
        if arch != "amd64" || !exe.exists() || !lib.exists() {
            skip("Ruby 3.1", "/usr/bin/ruby3.1 (apt-get install ruby3.1)");
            return None;
        }
        return Some((exe, lib));
    }
    let version = format!("3.{minor}");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/runtimes");
    let out = Command::new(script).args(["ruby", &version, arch]).output();
    let wrapper = match &out {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        _ => {
            let why = match out {
                Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                Err(e) => e.to_string(),
            };
            skip(&format!("Ruby {version} {arch}"), &why);
            return None;
        }
    };
    let root = wrapper.parent()?.parent()?;
    let multiarch = if arch == "arm64" {
        "aarch64-linux-gnu"
    } else {
        "x86_64-linux-gnu"
    };
    let lib = root
        .join("usr/lib")
        .join(multiarch)
        .join(format!("libruby-{version}.so.{version}"));
    Some((wrapper, lib))
}

/// What the file at `path` says.
fn read_path(path: &Path) -> Object {
    let f = std::fs::File::open(path).expect("the file");
    read_file(&Elf::parse(FileSource::new(&f).unwrap()).unwrap())
}

fn ruby_file(path: &Path) -> Arc<RubyFile> {
    match read_path(path) {
        Object::Ruby(f) => f,
        other => panic!("{}: {other:?}", path.display()),
    }
}

/// What the fact sheet found in Debian's amd64 builds: version,
/// `vm_exec_core`'s `.eh_frame` function, `ruby_global_symbols` (both
/// from the library's start), the execution context's slot in the TLS
/// block. The functions of 3.1 and 3.4 were checked as the fact sheet's
/// 3.3 was: the return addresses of a live `[1].each { sleep }` (gdb's
/// backtrace) into the loop, from both of its activations, lie in them
/// (3.1: +0x24ec3e, +0x24ec9b, called from `rb_vm_exec`; 3.4: +0x2b3683,
/// +0x2b4da4).
struct Known {
    version: &'static str,
    exec: Range<u64>,
    global_symbols: u64,
    slot: i64,
}

fn known(minor: u8) -> Known {
    match minor {
        1 => Known {
            version: "3.1.2",
            exec: 0x24ebd0..0x253047,
            global_symbols: 0x3af1c0,
            slot: 8,
        },
        3 => Known {
            version: "3.3.8",
            exec: 0x27f860..0x284a8c,
            global_symbols: 0x460160,
            slot: 0x10,
        },
        _ => Known {
            version: "3.4.11",
            exec: 0x2b3520..0x2b8f7f,
            global_symbols: 0x4dc180,
            slot: 0x10,
        },
    }
}

/// Where the file `lib` is loaded in process `pid` (its first mapping).
fn base_of(pid: u32, lib: &Path) -> u64 {
    let lib = std::fs::canonicalize(lib).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines()
        .find(|l| {
            l.ends_with(lib.to_str().unwrap()) && l.split_whitespace().nth(2) == Some("00000000")
        })
        .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
        .unwrap_or_else(|| panic!("{} in {maps}", lib.display()))
}

/// Runs `ruby -e 'loop { 1 + 1 }'` and detects it until it is ready.
fn check_live(minor: u8) {
    let Some((exe, lib)) = ruby(minor, "amd64") else {
        return;
    };
    if cfg!(not(target_arch = "x86_64")) {
        return;
    }
    let child = Command::new(&exe)
        .args(["-e", "loop { 1 + 1 }"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    let child = Killed(child);
    let pid = child.0.id();
    std::thread::sleep(Duration::from_millis(300));
    let mut detector = Detector::new();
    let started = Instant::now();
    let p = loop {
        let maps = exec_mappings(pid).expect("its mappings");
        match detector.detect(pid, &maps, &ProcessMemory { pid }) {
            Found::Yes(p) => break p,
            Found::NotReady if started.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!("Ruby 3.{minor}: {other:?}"),
        }
    };
    let base = base_of(pid, &lib);
    let k = known(minor);
    eprintln!(
        "Ruby {}: modid {} slots {:x?} exec {:#x}..{:#x} (+{:#x}..+{:#x}) global_symbols {:x?}",
        p.version,
        p.tls.modid,
        p.tls.slots,
        p.exec.start,
        p.exec.end,
        p.exec.start - base,
        p.exec.end - base,
        p.global_symbols.map(|g| g - base)
    );
    assert!(
        p.version.starts_with(&format!("3.{minor}.")),
        "{}",
        p.version
    );
    assert_eq!(p.layout.cfp_size, if minor == 1 { 64 } else { 56 });
    assert!(p.tls.modid != 0);
    assert!(p.tls.slots.contains(&k.slot), "{:x?}", p.tls.slots);
    assert!(p.global_symbols.is_some());
    if p.version == k.version {
        // Debian's libruby is loaded with the program, after it: module 1.
        assert_eq!(p.tls.modid, 1);
        assert_eq!(p.exec, base + k.exec.start..base + k.exec.end);
        assert_eq!(p.global_symbols, Some(base + k.global_symbols));
    } else {
        eprintln!("Ruby {}: not the build the fact sheet read", p.version);
    }
    if minor == 1 {
        // The exported symbol's value, alone.
        assert_eq!(p.tls.slots, vec![8]);
    }
    // A second process of the same library: from what was kept.
    let maps = exec_mappings(pid).unwrap();
    let again = detector.detect(pid, &maps, &ProcessMemory { pid });
    assert_eq!(again, Found::Yes(p));
    // The `ruby` executable before its libruby is mapped: not ready.
    let before: Vec<ExecMapping> = maps
        .into_iter()
        .filter(|m| !matches!(&m.backing, Backing::File(f) if f.contains("libruby")))
        .collect();
    assert_eq!(
        detector.detect(pid, &before, &ProcessMemory { pid }),
        Found::NotReady
    );
}

#[test]
fn live_ruby_3_1() {
    check_live(1);
}

#[test]
fn live_ruby_3_3() {
    check_live(3);
}

#[test]
fn live_ruby_3_4() {
    check_live(4);
}

/// The files alone, amd64 and arm64: what they say of the loop and of
/// their thread-local storage.
#[test]
fn files_say_their_loop_and_tls() {
    for (minor, arch) in [
        (1, "amd64"),
        (3, "amd64"),
        (4, "amd64"),
        (3, "arm64"),
        (4, "arm64"),
    ] {
        let Some((_, lib)) = ruby(minor, arch) else {
            continue;
        };
        let f = ruby_file(&lib);
        assert!(
            f.version.starts_with(&format!("3.{minor}.")),
            "{}",
            f.version
        );
        let exec = f
            .exec
            .clone()
            .unwrap_or_else(|| panic!("3.{minor} {arch}: no loop"));
        assert!(exec.end - exec.start > 4096, "{exec:x?}");
        let k = known(minor);
        match (arch, f.machine) {
            ("amd64", Machine::X86_64) => {
                assert!(f.tls.slots.contains(&k.slot), "{:x?}", f.tls);
                assert!(!f.tls.modid_slots.is_empty());
                assert!(f.tls.descriptors.is_empty() && !f.tls.own);
                if f.version == k.version {
                    assert_eq!(exec, k.exec);
                }
                if minor != 1 && f.version == k.version {
                    // The DTPOFF words of the three GOT pairs.
                    assert_eq!(f.tls.slots, vec![0, 0x10, 8]);
                }
            }
            ("arm64", Machine::Aarch64) => {
                assert!(f.tls.modid_slots.is_empty() && !f.tls.own);
                let want: &[u64] = match f.version.as_str() {
                    "3.3.8" => &[0x45f2c8, 0x45f2d8],
                    "3.4.11" => &[0x4cf2e0, 0x4cf2f0],
                    _ => &[],
                };
                if !want.is_empty() {
                    assert_eq!(f.tls.descriptors, want);
                }
                assert_eq!(f.tls.descriptors.len(), 2);
            }
            other => panic!("{other:?}"),
        }
        eprintln!("{} {arch}: exec {exec:x?} tls {:x?}", f.version, f.tls);
    }
}

/// A process that is not Ruby, and one named like it that is not.
#[test]
fn not_ruby() {
    let pid = std::process::id();
    let maps = exec_mappings(pid).unwrap();
    let mem = ProcessMemory { pid };
    assert_eq!(Detector::new().detect(pid, &maps, &mem), Found::No);
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("rubyish");
    std::fs::copy("/bin/sleep", &fake).unwrap();
    let child = Killed(Command::new(&fake).arg("30").spawn().unwrap());
    let pid = child.0.id();
    let started = Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .contains("rubyish")
    {
        assert!(started.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    let maps = exec_mappings(pid).unwrap();
    let mut d = Detector::new();
    assert_eq!(d.detect(pid, &maps, &ProcessMemory { pid }), Found::No);
    assert!(matches!(d.objects.values().next(), Some(Object::Other)));
}

#[test]
fn library_names() {
    for yes in [
        "libruby.so",
        "libruby.so.3.3",
        "libruby.so.3.4.1",
        "libruby-3.1.so.3.1",
        "libruby-3.3.so.3.3.8",
    ] {
        assert!(is_libruby(yes), "{yes}");
    }
    for no in [
        "libruby-static.a",
        "librubyx.so",
        "ruby3.3",
        "libpython3.so",
    ] {
        assert!(!is_libruby(no), "{no}");
    }
}

#[test]
fn relr_entries() {
    // An address, then a bitmap of words 1, 2 and 63 after it, then one
    // of the next 63 words' first.
    let words = [0x1000, 1 | 1 << 1 | 1 << 2 | 1 << 63, 1 | 1 << 1];
    assert_eq!(
        relr_offsets(words),
        vec![0x1000, 0x1008, 0x1010, 0x1000 + 8 * 63, 0x1000 + 8 * 64]
    );
}

#[test]
fn the_longest_table_inside_one_function() {
    let functions = vec![0x1000..0x2000, 0x2000..0x9000, 0x9000..0x9100];
    let mut relative: Vec<(u64, u64)> = Vec::new();
    // A table of functions (their starts): never the loop's.
    relative.extend((0..300).map(|i| (0x10000 + 8 * i, [0x1000, 0x2000, 0x9000][i as usize % 3])));
    // The labels of the second function, 150 of them...
    relative.extend((0..150).map(|i| (0x20000 + 8 * i, 0x2010 + 16 * i)));
    // ...and a shorter table of the first's.
    relative.extend((0..120).map(|i| (0x30000 + 8 * i, 0x1010 + 8 * i)));
    relative.sort_unstable();
    assert_eq!(longest_table(&relative, &functions), Some(0x2000..0x9000));
    // A gap breaks a run: two of 75 are not enough.
    let gapped: Vec<(u64, u64)> = relative
        .iter()
        .copied()
        .filter(|&(at, _)| at != 0x20000 + 8 * 75 && !(0x30000..0x31000).contains(&at))
        .collect();
    assert_eq!(longest_table(&gapped, &functions), None);
    assert_eq!(longest_table(&[], &functions), None);
}

fn x86_file(tls: FileTls) -> RubyFile {
    RubyFile {
        machine: Machine::X86_64,
        segments: Vec::new(),
        version: "3.3.8".into(),
        exec: Some(0x1000..0x2000),
        exec_caller: None,
        tls,
        data: None,
        object_class: None,
    }
}

#[test]
fn the_module_id_is_read_from_the_got() {
    let bias = 0x7f00_0000_0000;
    let mut mem = Buffer {
        base: bias + 0x4000,
        bytes: vec![0; 64],
    };
    let file = x86_file(FileTls {
        modid_slots: vec![0x4000, 0x4010],
        slots: vec![0, 0x10, 8],
        ..FileTls::default()
    });
    // Not relocated yet.
    assert_eq!(live_tls(&file, bias, &mem), Err(Found::NotReady));
    mem.bytes[0x10] = 2;
    assert_eq!(
        live_tls(&file, bias, &mem),
        Ok(Tls {
            modid: 2,
            slots: vec![0, 0x10, 8]
        })
    );
    // An executable's own block: module 1, nothing to read.
    let own = x86_file(FileTls {
        own: true,
        slots: vec![0],
        ..FileTls::default()
    });
    assert_eq!(live_tls(&own, bias, &Buffer::default()).unwrap().modid, 1);
}

#[test]
fn arm64_offsets_are_read_from_the_descriptors() {
    let bias = 0x5555_0000_0000;
    let mut file = x86_file(FileTls {
        descriptors: vec![0x100, 0x110],
        ..FileTls::default()
    });
    file.machine = Machine::Aarch64;
    let mut mem = Buffer {
        base: bias + 0x100,
        bytes: vec![0; 32],
    };
    assert_eq!(live_tls(&file, bias, &mem), Err(Found::NotReady));
    mem.bytes[8..16].copy_from_slice(&0x710u64.to_ne_bytes());
    mem.bytes[24..32].copy_from_slice(&0x718u64.to_ne_bytes());
    assert_eq!(
        live_tls(&file, bias, &mem),
        Ok(Tls {
            modid: 0,
            slots: vec![0x710, 0x718]
        })
    );
    // Pointers to the loader's data: not static TLS.
    mem.bytes[8..16].copy_from_slice(&0x5555_1234_0000u64.to_ne_bytes());
    mem.bytes[24..32].copy_from_slice(&0x5555_1234_0100u64.to_ne_bytes());
    assert!(matches!(
        live_tls(&file, bias, &mem),
        Err(Found::Unsupported(_))
    ));
}

/// A made-up process memory holding a `ruby_global_symbols` of Ruby
/// 3.`minor` in a `.data` at `data`, its objects after it.
fn symbols_memory(minor: u8, data: u64, at: u64, name: &[u8]) -> Buffer {
    const T_STRING: u64 = 5;
    const T_ARRAY: u64 = 7;
    const T_HASH: u64 = 8;
    const FL_USER1: u64 = 0x2000;
    let layout = Layout::for_version(&format!("3.{minor}.0")).unwrap();
    let mut b = Buffer {
        base: data,
        bytes: vec![0; 0x4000],
    };
    let mut put = |addr: u64, v: u64| {
        let o = (addr - data) as usize;
        b.bytes[o..o + 8].copy_from_slice(&v.to_ne_bytes());
    };
    let (ids_ary, chunk, elems, string) =
        (data + 0x1000, data + 0x1100, data + 0x1200, data + 0x3000);
    let dsym = data + 0x1180;
    // Decoys before it: a last_id too small, a pointer not aligned.
    put(data + 0x40, 100);
    put(data + 0x48, 0x1000);
    put(data + 0x50, ids_ary);
    put(data + 0x58, dsym);
    put(data + 0x80, 1000);
    put(data + 0x88, 0x1001);
    put(data + 0x90, ids_ary);
    put(data + 0x98, dsym);
    put(at, 5000);
    put(at + 8, data + 0x3800);
    put(at + 16, ids_ary);
    put(at + 24, dsym);
    // ids: an embedded Array of one chunk.
    put(ids_ary, T_ARRAY | FL_USER1 | 1 << 15);
    put(ids_ary + 16, chunk);
    put(dsym, T_HASH);
    // The chunk: a heap Array of 1024.
    put(chunk, T_ARRAY);
    put(chunk + 16, 1024);
    put(chunk + 32, elems);
    put(elems + (layout.each_id >> 4) * 16, string);
    // The name, embedded: 3.1 keeps its length in its flags.
    if minor == 1 {
        put(string, T_STRING | (name.len() as u64) << 14);
        let o = (string + 16 - data) as usize;
        b.bytes[o..o + name.len()].copy_from_slice(name);
    } else {
        put(string, T_STRING);
        put(string + 16, name.len() as u64);
        let o = (string + 24 - data) as usize;
        b.bytes[o..o + name.len()].copy_from_slice(name);
    }
    b
}

#[test]
fn global_symbols_are_found_by_the_name_of_each() {
    let data = 0x7f00_0010_0000;
    for minor in [1, 3, 4] {
        let layout = Layout::for_version(&format!("3.{minor}.9")).unwrap();
        let mem = symbols_memory(minor, data, data + 0x1c0, b"each");
        assert_eq!(
            find_global_symbols(&mem, data, 0x1000, &layout),
            Some(data + 0x1c0)
        );
        assert!(is_global_symbols(&mem, &layout, data + 0x1c0));
        // Not past the bytes scanned.
        assert_eq!(find_global_symbols(&mem, data, 0x1c0, &layout), None);
        let other = symbols_memory(minor, data, data + 0x1c0, b"eacH");
        assert_eq!(find_global_symbols(&other, data, 0x1000, &layout), None);
    }
}

/// A library named and versioned like libruby, built here: a version
/// flare does not read, and one it reads without the interpreter's loop.
#[test]
fn versions_and_builds_refused() {
    for (version, why) in [
        ("3.2.0", "Ruby 3.2.0: flare reads 3.1, 3.3 and 3.4"),
        (
            "3.3.9",
            "Ruby 3.3.9: its interpreter loop (vm_exec_core) was not found (not a direct-threaded build?)",
        ),
    ] {
        let src = format!("const char ruby_version[] = \"{version}\";\n");
        let (_dir, lib) =
            crate::testutil::cc_build("gcc", "libruby-3.x.so", &src, &["-shared", "-fPIC"]);
        let file = ruby_file(&lib);
        assert_eq!(file.version, version);
        assert_eq!(file.exec, None);
        let m = ExecMapping {
            start: 0x7f00_0000_1000,
            end: 0x7f00_0000_2000,
            offset: 0x1000,
            backing: Backing::File(lib.display().to_string()),
            dev_ino: (1, 2),
            opened: None,
        };
        let found = Detector::new().found(&file, &m, &Buffer::default());
        assert_eq!(found, Found::Unsupported(why.into()));
    }
}
