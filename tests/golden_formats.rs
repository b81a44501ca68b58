//! Golden tests of the file writers (SVG flame graph, pprof, speedscope)
//! on CPU, off-CPU and count profiles, the pprof bytes decoded back, and
//! the speedscope files checked against speedscope's published schema
//! (vendored from the speedscope 1.25.0 npm package, MIT licence, as
//! tests/data/speedscope-file-format-schema.json).

mod common;

use std::io::Read;

use common::{golden, rich, schema};
use flare::output::pprof::{self, proto};
use flare::output::{speedscope, svg, Format, StackStyle};
use flare::profile::Profile;
use prost::Message;
use serde_json::Value;

fn cases() -> [(&'static str, Profile); 3] {
    [
        ("cpu", rich::cpu()),
        ("offcpu", rich::offcpu()),
        ("counts", rich::counts()),
    ]
}

fn render(p: &Profile, f: Format) -> Vec<u8> {
    let mut out = Vec::new();
    f.write(&mut out, p, StackStyle::default()).unwrap();
    out
}

#[test]
fn svg_flame_graphs() {
    for (name, p) in cases() {
        let out = String::from_utf8(render(&p, Format::Svg)).unwrap();
        golden::check(&format!("formats-{name}.svg"), &out);
    }
}

#[test]
fn svg_titles_units_and_palettes() {
    let cpu = String::from_utf8(render(&rich::cpu(), Format::Svg)).unwrap();
    assert!(cpu.contains("flare profile: cpu-clock, 5.0 s, all threads"));
    // Kernel frames are annotated (orange), labels are not.
    assert!(
        cpu.contains("<title>vfs_read (7 samples, "),
        "kernel frame tooltip"
    );
    assert!(!cpu.contains(">vfs_read_[k]<"));
    let off = String::from_utf8(render(&rich::offcpu(), Format::Svg)).unwrap();
    assert!(off.contains("<title>schedule (1,000,000 us, 80.00%)</title>"));
    assert!(off.contains("flare offwaketime: sched_switch, 3.0 s, all threads"));
    // The blue background of off-CPU graphs (FlameGraph's "--bgcolors blue").
    assert!(
        off.contains("#eeeeee") && off.contains("#e0e0ff"),
        "blue background"
    );
}

/// An empty profile (an interval of stackcount -i without an event) is
/// an empty graph that says so: a file rewritten at every interval holds
/// the last one, and the run goes on (it ended with an error).
#[test]
fn empty_profiles_are_an_empty_graph_that_says_so() {
    let mut p = rich::cpu();
    p.samples.clear();
    let mut out = Vec::new();
    svg::write(&mut out, &p).expect("an empty graph");
    let svg = String::from_utf8(out).unwrap();
    assert!(
        svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    assert!(
        svg.contains("No samples were recorded in this profile"),
        "{svg}"
    );
    assert!(svg.contains("flare profile: "), "the title: {svg}");
}

#[test]
fn pprof_profiles() {
    for (name, p) in cases() {
        let built = pprof::build(&p, 1_700_000_000_000_000_000);
        assert_eq!(built.string_table[0], "", "string 0 must be empty");
        golden::check(
            &format!("formats-{name}.pprof.txt"),
            &common::pprof::text(&built),
        );

        // The file is that message, gzipped.
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&render(&p, Format::Pprof)[..])
            .read_to_end(&mut raw)
            .expect("pprof output is gzip");
        let decoded = proto::Profile::decode(&raw[..]).expect("pprof output decodes");
        assert!(decoded.time_nanos > 1_700_000_000_000_000_000);
        assert_eq!(
            proto::Profile {
                time_nanos: built.time_nanos,
                ..decoded
            },
            built
        );
    }
}

#[test]
fn pprof_values_have_units() {
    let p = pprof::build(&rich::cpu(), 0);
    // 7 samples of 10101010 ns each.
    let dd = p.sample.iter().find(|s| s.value[0] == 7).unwrap();
    assert_eq!(dd.value, [7, 70_707_070]);
    let p = pprof::build(&rich::offcpu(), 0);
    assert_eq!(
        p.sample[0].value,
        [1_000_000_000],
        "microseconds -> nanoseconds"
    );
}

fn speedscope_json(p: &Profile) -> Value {
    let mut out = Vec::new();
    speedscope::write(&mut out, p).unwrap();
    serde_json::from_slice(&out).expect("speedscope output is JSON")
}

fn speedscope_schema() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/speedscope-file-format-schema.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn speedscope_files() {
    let schema = speedscope_schema();
    for (name, p) in cases() {
        let doc = speedscope_json(&p);
        let errors = schema::validate(&schema, &doc);
        assert!(errors.is_empty(), "{name}: {errors:#?}");
        let pretty = serde_json::to_string_pretty(&doc).unwrap() + "\n";
        golden::check(&format!("formats-{name}.speedscope.json"), &pretty);
    }
    let doc = speedscope_json(&rich::cpu());
    // Heaviest process first; weights in CPU nanoseconds.
    assert_eq!(doc["profiles"][0]["name"], "app (4242)");
    assert_eq!(doc["profiles"][0]["unit"], "nanoseconds");
    assert_eq!(doc["profiles"][0]["endValue"], 11 * 10_101_010u64);
    assert_eq!(doc["profiles"][1]["name"], "dd (25036)");
}

#[test]
fn the_schema_check_catches_broken_files() {
    let schema = speedscope_schema();
    let good = speedscope_json(&rich::offcpu());
    assert!(schema::validate(&schema, &good).is_empty());
    let mut bad = good.clone();
    bad["profiles"][0]["unit"] = "furlongs".into();
    assert!(!schema::validate(&schema, &bad).is_empty());
    let mut bad = good.clone();
    bad["shared"]["frames"][0]
        .as_object_mut()
        .unwrap()
        .remove("name");
    assert!(!schema::validate(&schema, &bad).is_empty());
    let mut bad = good;
    bad["profiles"][0]["samples"][0][0] = "x".into();
    assert!(!schema::validate(&schema, &bad).is_empty());
}

/// `-o x.folded` / `-o x.txt --format text` write the layout of the tool
/// that made the profile: an offwaketime file keeps the waker's side.
#[test]
fn text_and_folded_files_follow_the_tools_layout() {
    let p = rich::offcpu();
    let style = StackStyle::default();
    let mut via_format = Vec::new();
    Format::Folded.write(&mut via_format, &p, style).unwrap();
    let mut direct = Vec::new();
    flare::output::offcpu::offwaketime_folded(&mut direct, &p.samples, style).unwrap();
    assert_eq!(
        String::from_utf8(via_format).unwrap(),
        String::from_utf8(direct).unwrap()
    );

    let mut via_format = Vec::new();
    Format::Text.write(&mut via_format, &p, style).unwrap();
    let mut direct = Vec::new();
    flare::output::offcpu::offwaketime_text(&mut direct, &p.samples, style).unwrap();
    let text = String::from_utf8(via_format).unwrap();
    assert_eq!(text, String::from_utf8(direct).unwrap());
    assert!(text.contains("waker:"), "{text}");
}
