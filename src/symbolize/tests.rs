//! The symbolizer on real processes: per-object caching across processes.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use super::*;

/// Where `pid` maps the code at file offset `offset` of the object whose
/// path ends with `suffix`.
fn address_of(mappings: &Mappings, pid: u32, suffix: &str, offset: u64) -> u64 {
    let space = mappings.space(pid, None).expect("a live process");
    let m = space
        .mappings
        .iter()
        .find(|m| m.name().ends_with(suffix) && m.offset <= offset)
        .expect("libc is mapped");
    m.start + (offset - m.offset)
}

#[test]
fn libc_of_two_processes_is_one_object() {
    let mut child = Command::new("sleep")
        .arg("30")
        .stdout(Stdio::null())
        .spawn()
        .expect("starting sleep");
    // Until the dynamic loader has mapped libc, the child has none.
    let maps = format!("/proc/{}/maps", child.id());
    for _ in 0..500 {
        if std::fs::read_to_string(&maps).is_ok_and(|m| m.contains("libc.so")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mappings = Mappings::on_demand();
    let mut s = Symbolizer::with_mappings(Options::default(), mappings.clone());
    let me = std::process::id();
    // Some code in libc's text.
    let space = mappings.space(me, None).expect("own mappings");
    let text = space
        .mappings
        .iter()
        .find(|m| m.name().contains("libc.so"))
        .expect("libc is mapped")
        .offset
        + 0x100;
    let mine = s.resolve_user(
        me,
        0,
        &BTreeSet::from([address_of(&mappings, me, "libc.so.6", text)]),
    );
    let theirs = s.resolve_user(
        child.id(),
        0,
        &BTreeSet::from([address_of(&mappings, child.id(), "libc.so.6", text)]),
    );
    let _ = child.kill();
    let _ = child.wait();
    let (a, b) = (
        &mine.values().next().expect("one")[0],
        &theirs.values().next().expect("one")[0],
    );
    assert_eq!(a.name, b.name);
    assert_eq!(a.file_offset, text);
    assert!(a.module().is_some_and(|m| m.contains("libc.so")));
    assert_eq!(
        s.objects.objects(),
        1,
        "libc is named through one cache for both processes"
    );
}

/// The value of the dynamic symbol `name` in an ELF image (64-bit, little
/// endian), read by hand: the test must not trust the code under test.
fn dynamic_symbol(image: &[u8], name: &str) -> Option<u64> {
    let u64_at = |o: usize| Some(u64::from_le_bytes(image.get(o..o + 8)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(image.get(o..o + 4)?.try_into().ok()?));
    let u16_at = |o: usize| Some(u16::from_le_bytes(image.get(o..o + 2)?.try_into().ok()?));
    let (shoff, shentsize, shnum) = (u64_at(40)? as usize, u16_at(58)? as usize, u16_at(60)?);
    let section = |i: usize| shoff + i * shentsize;
    for i in 0..shnum as usize {
        // SHT_DYNSYM
        if u32_at(section(i) + 4)? != 11 {
            continue;
        }
        let (off, size) = (u64_at(section(i) + 24)?, u64_at(section(i) + 32)?);
        let strtab = u64_at(section(u32_at(section(i) + 40)? as usize) + 24)? as usize;
        for sym in (off..off + size).step_by(24) {
            let sym = sym as usize;
            let at = strtab + u32_at(sym)? as usize;
            let end = at + image.get(at..)?.iter().position(|&b| b == 0)?;
            if &image[at..end] == name.as_bytes() {
                return u64_at(sym + 8);
            }
        }
    }
    None
}

#[test]
fn vdso_functions_are_named() {
    let image = crate::procmaps::vdso_image().expect("this process has a vDSO");
    let value = dynamic_symbol(image, "__vdso_clock_gettime").expect("the vDSO exports it");
    let mappings = Mappings::on_demand();
    let me = std::process::id();
    let space = mappings.space(me, None).expect("own mappings");
    let vdso = space
        .mappings
        .iter()
        .find(|m| m.name() == "[vdso]")
        .expect("[vdso] is mapped");
    let addr = vdso.start + value + 4;
    let mut s = Symbolizer::with_mappings(Options::default(), mappings.clone());
    let named = s.resolve_user(me, 0, &BTreeSet::from([addr]));
    let frame = &named[&addr][0];
    assert!(
        frame.name.ends_with("clock_gettime"),
        "a vDSO address is named: {frame:?}"
    );
}

/// The kernel's address of `name` in `/proc/kallsyms` (None where
/// addresses are hidden).
fn kernel_symbol(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (addr, _, n) = (f.next()?, f.next()?, f.next()?);
        let addr = u64::from_str_radix(addr, 16).ok()?;
        (n == name && addr != 0).then_some(addr)
    })
}

/// A core kernel address is named through this boot's copy of the
/// kernel's symbols, as from /proc/kallsyms itself.
#[test]
fn kernel_frames_are_named_from_the_boot_copy() {
    let Some(schedule) = kernel_symbol("schedule") else {
        println!("kallsyms hides addresses from this user: nothing to check");
        return;
    };
    let mut s = Symbolizer::new(Options::default());
    let copy = s.kallsyms().map(|c| c.path.clone());
    let got = s.resolve_kernel(&BTreeSet::from([schedule + 1]));
    assert_eq!(&*got[&(schedule + 1)][0].name, "schedule");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let copy = copy.expect("root keeps a copy in /run/flare");
        let text = std::fs::read_to_string(copy).expect("the copy");
        assert!(text.lines().any(|l| l.ends_with(" schedule")));
    }
}

/// flare's index of the boot copy names every kernel address as
/// blazesym's parse of the same copy does: each function's first byte,
/// the next, and a byte further in, and addresses every 4 KiB over what
/// the copy covers (past a range's last function, between functions).
/// One difference is blazesym's: see `lowest` below.
#[test]
fn the_boot_copy_index_names_as_blazesym_does() {
    if kernel_symbol("schedule").is_none() {
        println!("kallsyms hides addresses from this user: nothing to check");
        return;
    }
    let mut s = Symbolizer::new(Options::default());
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let Some((path, covers)) = s.kallsyms().map(|c| (c.path.clone(), c.covers.clone())) else {
        assert!(!root, "root keeps a copy in /run/flare");
        return;
    };
    let table = ksyms::Table::read(&path).expect("the copy indexed");
    let text = std::fs::read_to_string(&path).expect("the copy");
    let mut addrs: Vec<u64> = text
        .lines()
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
        .flat_map(|a| [a, a + 1, a + 9])
        .collect();
    for r in &covers {
        addrs.extend((r.start.saturating_sub(8)..r.end.saturating_add(8)).step_by(4096));
    }
    assert!(
        table.len() > 1000 && addrs.len() > 3 * table.len(),
        "{path:?}"
    );
    let blazesym = blazesym::symbolize::Symbolizer::new();
    let src = Source::Kernel(Kernel {
        kallsyms: MaybeDefault::Some(path.clone()),
        vmlinux: MaybeDefault::None,
        kaslr_offset: None,
        debug_syms: false,
        ..Default::default()
    });
    let want = blazesym
        .symbolize(&src, Input::AbsAddr(&addrs))
        .expect("blazesym names the copy");
    // Of several functions at the copy's lowest start, blazesym names an
    // address past it by the last (its search back through equal starts
    // stops short of the slice's first), elsewhere by the first.
    let lowest = addrs
        .iter()
        .filter_map(|&a| table.find(a))
        .map(|f| f.0)
        .min();
    let mut differ = Vec::new();
    for (a, w) in addrs.iter().zip(want) {
        let w = w.as_sym().map(|s| (s.addr, s.name.to_string()));
        let got = table.find(*a);
        let quirk = |f: &Option<(u64, String)>| f.as_ref().map(|f| f.0) == lowest;
        if got != w && !(quirk(&got) && quirk(&w)) {
            differ.push(format!("{a:#x}: {got:?}, blazesym {w:?}"));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} differ: {:?}",
        differ.len(),
        addrs.len(),
        &differ[..differ.len().min(10)]
    );
}

#[test]
fn arm64_mapping_symbols_name_no_function() {
    // An arm64 program (cross-built) keeps `$x`/`$d` markers in .symtab;
    // at an address past a `$x` with no function symbol between (start-up
    // code, the PLT), blazesym answers `$x`, which is no function name.
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("p.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n",
    )
    .unwrap();
    let exe = dir.path().join("p");
    let status = Command::new("aarch64-linux-gnu-gcc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("running aarch64-linux-gnu-gcc (scripts/deps.sh --test installs it)");
    assert!(status.success());
    // nm hides mapping symbols; readelf lists them.
    let out = Command::new("aarch64-linux-gnu-readelf")
        .arg("-sW")
        .arg(&exe)
        .output()
        .expect("running aarch64-linux-gnu-readelf");
    let text = String::from_utf8_lossy(&out.stdout);
    let syms: Vec<(u64, &str)> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((u64::from_str_radix(f.get(1)?, 16).ok()?, *f.get(7)?))
        })
        .filter(|&(a, _)| a != 0)
        .collect();
    // `$x` markers that no other symbol shares an address with.
    let lone: Vec<u64> = syms
        .iter()
        .filter(|(a, n)| *n == "$x" && syms.iter().filter(|(b, _)| b == a).count() == 1)
        .map(|(a, _)| *a)
        .collect();
    assert!(!lone.is_empty(), "no lone $x in {text}");
    let symbolizer = blazesym::symbolize::Symbolizer::new();
    let source = Source::Elf(blazesym::symbolize::source::Elf::new(&exe));
    let found = symbolizer
        .symbolize(&source, Input::VirtOffset(&lone))
        .expect("symbolizing");
    let mut named_x = 0;
    for (addr, sym) in lone.iter().zip(found) {
        if sym.as_sym().is_some_and(|s| s.name == "$x") {
            named_x += 1;
        }
        let frames = convert(*addr, sym, FrameKind::Native, Options::default());
        for f in frames.iter().flatten() {
            assert!(!f.name.starts_with('$'), "{addr:#x} named {}", f.name);
        }
    }
    // blazesym does name them so: this test would see the fix undone.
    assert!(named_x > 0, "blazesym named no lone $x address $x");
}

/// The frame below an interrupt's entry is the interrupted instruction,
/// looked up as it is: at a function's first byte it names that
/// function, where a caller's return address there names the one before.
#[test]
fn the_interrupted_instruction_is_named_exactly() {
    let entry = ["asm_sysvec_apic_timer_interrupt", "el1h_64_irq", "el1_irq"]
        .into_iter()
        .find_map(kernel_symbol);
    let (Some(entry), Some(schedule)) = (entry, kernel_symbol("schedule")) else {
        println!("kallsyms hides addresses from this user: nothing to check");
        return;
    };
    let sample = |frames: Vec<RawFrame>| RawSample {
        task: RawTask {
            pid: None,
            start: 0,
            tid: None,
            comm: "t".into(),
            user: RawTrace::NotCollected,
            kernel: RawTrace::Frames(frames.into()),
        },
        waker: None,
        value: 1,
    };
    let names = |s: &Sample| match &s.task.kernel {
        Trace::Frames(f) => f.iter().map(|f| f.name.to_string()).collect::<Vec<_>>(),
        other => panic!("no frames: {other:?}"),
    };
    let mut s = Symbolizer::new(Options::default());
    let got = s.resolve(vec![
        sample(vec![
            RawFrame::Addr(schedule + 4),
            RawFrame::Addr(entry + 8),
            RawFrame::Addr(schedule),
        ]),
        sample(vec![RawFrame::Addr(schedule + 4), RawFrame::Addr(schedule)]),
    ]);
    let interrupted = names(&got[0]);
    assert_eq!(interrupted[2], "schedule", "{interrupted:?}");
    // A return address at a function's first byte is the call that ended
    // the function before it.
    let called = names(&got[1]);
    assert_ne!(called[1], "schedule", "{called:?}");
}
