//! Golden tests of bcc's text and folded formats as `flare profile` prints
//! them, for every combination of -d, -a, -U and -K.

mod common;

use common::{fixtures, golden};
use flare::output::{folded, text, StackStyle};
use flare::profile::Profile;

fn render(p: &Profile, style: StackStyle, fold: bool) -> String {
    let mut out = Vec::new();
    if fold {
        folded::write(&mut out, &p.samples, style).unwrap();
    } else {
        text::write(&mut out, &p.samples, style).unwrap();
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn profile_formats() {
    let full = fixtures::cpu_profile();
    let cases = [
        ("", full.clone()),
        ("user", fixtures::only(&full, true, false)),
        ("kernel", fixtures::only(&full, false, true)),
    ];
    for (stacks, p) in &cases {
        for (flags, style) in [
            ("", StackStyle::default()),
            (
                "d",
                StackStyle {
                    delimited: true,
                    annotate_kernel: false,
                    ..StackStyle::default()
                },
            ),
            (
                "a",
                StackStyle {
                    delimited: false,
                    annotate_kernel: true,
                    ..StackStyle::default()
                },
            ),
            (
                "da",
                StackStyle {
                    delimited: true,
                    annotate_kernel: true,
                    ..StackStyle::default()
                },
            ),
        ] {
            for (ext, fold) in [("txt", false), ("folded", true)] {
                let name = format!(
                    "profile{}{}.{ext}",
                    if stacks.is_empty() {
                        String::new()
                    } else {
                        format!("-{stacks}")
                    },
                    if flags.is_empty() {
                        String::new()
                    } else {
                        format!("-{flags}")
                    },
                );
                golden::check(&name, &render(p, style, fold));
            }
        }
    }
}
