//! The quick start's story stays true: `scripts/quickstart` profiles
//! scripts/demo.py and tells the reader that its wide tower is
//! price_order, with discount inside, at the share the demo's own CPU
//! clock gives. This runs the same command (`flare profile -- python3
//! scripts/demo.py`) and holds flare's share of price_order to the
//! demo's within 5 points.

mod common;

use std::path::Path;

use common::bpf::{emulated, flare, require_bpf, serial};
use common::session::parse_folded;

/// The demo's own shares ("demo:   NAME  PERCENT %" lines), by name.
fn own_shares(stdout: &str) -> Vec<(String, f64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("demo:")?.split_whitespace();
            let name = w.next()?.to_string();
            let share = w.next()?.parse().ok()?;
            (w.next() == Some("%")).then_some((name, share))
        })
        .collect()
}

#[test]
fn the_demo_hot_path_has_its_own_clock_share() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/demo.py");
    let dir = tempfile::tempdir().expect("a directory for the profile");
    let folded = dir.path().join("demo.folded");
    let seconds = if emulated() { "8" } else { "4" };
    let out = flare()
        .args(["profile", "-F", "499", "-o"])
        .arg(&folded)
        .args(["--", "python3"])
        .arg(&demo)
        .arg(seconds)
        .output()
        .expect("running flare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let own = own_shares(&stdout);
    assert_eq!(own.len(), 3, "the demo's report: {stdout}");
    let stacks = parse_folded(&std::fs::read_to_string(&folded).expect("the folded file"));
    let has = |frames: &[String], name: &str| {
        frames
            .iter()
            .any(|f| f.split(' ').next() == Some(name) && f.contains("demo.py:"))
    };
    let samples = |name: &str| -> u64 {
        stacks
            .iter()
            .filter(|(f, _)| has(f, name))
            .map(|(_, n)| n)
            .sum()
    };
    let all: u64 = own.iter().map(|(name, _)| samples(name)).sum();
    assert!(
        all >= 500,
        "{all} samples in the demo's three steps: {stderr}"
    );
    let price = samples("price_order");
    let ours = 100.0 * price as f64 / all as f64;
    let theirs = own
        .iter()
        .find(|(name, _)| name == "price_order")
        .map(|(_, s)| *s)
        .expect("price_order in the demo's report");
    assert!(
        (ours - theirs).abs() <= 5.0,
        "price_order: {ours:.1} % of flare's samples, {theirs:.1} % by the demo's clock"
    );
    // The story's second half: discount is inside price_order.
    let under: u64 = stacks
        .iter()
        .filter(|(f, _)| has(f, "discount") && has(f, "price_order"))
        .map(|(_, n)| n)
        .sum();
    assert!(
        under * 2 >= price,
        "discount in {under} of price_order's {price} samples"
    );
}

#[test]
fn the_demo_report_is_read() {
    let got = own_shares("demo: 5 orders in 1.0 s; by its own CPU clock:\ndemo:   price_order      66.1 %\ndemo:   parse_order      17.0 %\n");
    assert_eq!(
        got,
        vec![
            ("price_order".to_string(), 66.1),
            ("parse_order".to_string(), 17.0)
        ]
    );
}
