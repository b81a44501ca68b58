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
        &BTreeSet::from([address_of(&mappings, me, "libc.so.6", text)]),
    );
    let theirs = s.resolve_user(
        child.id(),
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
