//! Golden tests of `flare stackcount`'s bcc multi-line format (with -v,
//! -d, and without process lines) and of its folded format, including
//! kernel stacks of all processes counted together, whose folded lines
//! start with the pattern.

mod common;

use common::{fixtures, golden};
use flare::output::stackcount::{self, Style};
use flare::output::{folded, StackStyle};
use flare::profile::{Profile, Trace};

fn text(p: &Profile, style: Style) -> String {
    let mut out = Vec::new();
    stackcount::write(&mut out, &p.samples, style).unwrap();
    String::from_utf8(out).unwrap()
}

fn fold(p: &Profile, delimited: bool) -> String {
    let mut out = Vec::new();
    let style = StackStyle {
        delimited,
        annotate_kernel: false,
        ..StackStyle::default()
    };
    folded::write(&mut out, &p.samples, style).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn stackcount_text_formats() {
    let p = fixtures::stack_counts();
    let base = Style {
        delimited: false,
        addresses: false,
        tasks: true,
        unknown_offsets: false,
    };
    golden::check("stackcount.txt", &text(&p, base));
    golden::check(
        "stackcount-v.txt",
        &text(
            &p,
            Style {
                addresses: true,
                ..base
            },
        ),
    );
    golden::check(
        "stackcount-d.txt",
        &text(
            &p,
            Style {
                delimited: true,
                ..base
            },
        ),
    );
    golden::check(
        "stackcount-pid.txt",
        &text(
            &p,
            Style {
                tasks: false,
                ..base
            },
        ),
    );
}

#[test]
fn stackcount_folded_formats() {
    let p = fixtures::stack_counts();
    golden::check("stackcount.folded", &fold(&p, false));
    golden::check("stackcount-d.folded", &fold(&p, true));
    // -K without -P: one root named after the pattern, never an empty one.
    let mut all = fixtures::stack_counts();
    for s in &mut all.samples {
        s.task.user = Trace::NotCollected;
        s.task.pid = None;
        s.task.comm = "t:syscalls:sys_enter_read".into();
    }
    let out = fold(&all, false);
    assert!(out.lines().all(|l| !l.starts_with(';')));
    golden::check("stackcount-kernel.folded", &out);
}
