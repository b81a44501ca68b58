//! End to end: `flare profile --serve` against a workload with a known hot
//! function, driven in headless Chromium through chromedriver. The page
//! must show the function as a DOM frame, update its totals, highlight a
//! search with the right share, zoom, filter, pause, and offer an SVG
//! download that parses as SVG. A screenshot is kept under target/.

mod common;

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use common::bpf::{require_bpf, serial};
use common::serve;
use common::webdriver::{require_browser, wait_for, Browser};
use serde_json::{json, Value};

/// twofuncs spends this share of its CPU time in func_a, the rest in func_b.
const SHARE_A: f64 = 0.25;
/// Allowed error of the sampled share (a few hundred samples).
const TOLERANCE: f64 = 0.08;

const LONG: Duration = Duration::from_secs(30);

fn page_number(b: &Browser, script: &str) -> f64 {
    b.exec(script, json!([])).as_f64().unwrap_or(f64::NAN)
}

#[test]
fn live_page_in_headless_chromium() {
    if !require_bpf() || !require_browser() {
        return;
    }
    let _cpu = serial();

    // The workload, and the profiler serving it on a free loopback port.
    let work = serve::twofuncs("40", "25");
    let pid = work.pid;
    let served = serve::serve(&["-F", "199", "-p", &pid.to_string(), "35", "--serve"]);
    let url = served.url.clone();

    let b = Browser::start();
    b.goto(&url);

    // The hot functions appear as frames whose names are in the DOM.
    wait_for("func_a and func_b frames", LONG, || {
        let n = page_number(
            &b,
            "return document.querySelectorAll('#graph g.frame[data-name=\"func_a\"] text, \
             #graph g.frame[data-name=\"func_b\"] text').length;",
        );
        (n >= 2.0).then_some(())
    });
    let text = b.exec(
        "return [...document.querySelectorAll('#graph text')].map(t => t.textContent);",
        json!([]),
    );
    assert!(
        text.as_array().unwrap().iter().any(|t| t == "func_a"),
        "func_a is a text element: {text}"
    );

    // Two snapshots a few updates apart differ in total (whole run grows).
    let total = |b: &Browser| page_number(b, "return Number(document.body.dataset.total);");
    let seq = |b: &Browser| page_number(b, "return Number(document.body.dataset.seq);");
    let (t1, s1) = (total(&b), seq(&b));
    wait_for("two more updates", LONG, || {
        (seq(&b) >= s1 + 2.0).then_some(())
    });
    let t2 = total(&b);
    assert!(t2 > t1, "total grew between snapshots: {t1} -> {t2}");

    // Search highlights func_a and only it, with its known share.
    let search = b.find("#search");
    b.type_into(&search, "func_a");
    let matched = b.exec(
        "return [...document.querySelectorAll('#graph g.frame.match')].map(g => g.dataset.name);",
        json!([]),
    );
    let matched: Vec<&str> = matched
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(!matched.is_empty(), "search highlighted nothing");
    assert!(matched.iter().all(|n| *n == "func_a"), "{matched:?}");
    let share = page_number(
        &b,
        "return Number(document.getElementById('match').dataset.share);",
    );
    assert!(
        (share - SHARE_A).abs() < TOLERANCE,
        "func_a's matched share {share:.3} vs the workload's {SHARE_A} (±{TOLERANCE})"
    );
    let label = b.exec(
        "return document.getElementById('match').textContent;",
        json!([]),
    );
    assert!(
        label.as_str().unwrap_or("").starts_with("matched "),
        "{label}"
    );

    // Click-zoom into func_b: it spans the width; the breadcrumb leads back.
    b.click_css("#graph g.frame[data-name=\"func_b\"] rect");
    let crumbs = b.exec(
        "return [...document.querySelectorAll('#crumbs button')].map(x => x.textContent);",
        json!([]),
    );
    assert_eq!(
        crumbs.as_array().unwrap().last().unwrap(),
        "func_b",
        "{crumbs}"
    );
    let widths = b.exec(
        "const svg = document.getElementById('graph');\
         const r = svg.querySelector('g.frame[data-name=\"func_b\"]:not(.ancestor) rect');\
         return [Number(r.getAttribute('width')), svg.viewBox.baseVal.width];",
        json!([]),
    );
    let (w, full) = (widths[0].as_f64().unwrap(), widths[1].as_f64().unwrap());
    assert!(w > full * 0.99, "zoomed frame {w} of {full}");
    b.click_css("#crumbs button");
    let crumbs = page_number(
        &b,
        "return document.querySelectorAll('#crumbs button').length;",
    );
    assert_eq!(crumbs, 1.0, "back at the root");

    // The process filter lists the workload.
    let options = b.exec(
        "return [...document.querySelectorAll('#process option')].map(o => o.value);",
        json!([]),
    );
    assert!(
        options
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o == &json!(pid.to_string())),
        "{options}"
    );

    // Pause holds the view; resume brings updates back.
    b.click(&b.find("#pause"));
    let held = seq(&b);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(seq(&b), held, "paused view changed");
    b.click(&b.find("#pause"));
    wait_for("updates after resume", LONG, || {
        (seq(&b) > held).then_some(())
    });

    // The SVG download parses as SVG and holds the hot function.
    let svg = b.exec_async(
        "const done = arguments[arguments.length - 1];\
         fetch(document.getElementById('dl-svg').href).then(r => r.text()).then(t => {\
           const doc = new DOMParser().parseFromString(t, 'image/svg+xml');\
           done([doc.documentElement.nodeName, doc.getElementsByTagName('parsererror').length,\
                 [...doc.querySelectorAll('title')].some(x => x.textContent.startsWith('func_a '))]);\
         }).catch(e => done(['error: ' + e, 1, false]));",
    );
    assert_eq!(svg, json!(["svg", 0, true]), "SVG download");

    // Download links follow what the build can write.
    let links = b.exec(
        "return fetch('api/profile').then(r => r.json()).then(d => ['svg', 'folded', 'pprof']\
           .every(f => document.getElementById('dl-' + f).hidden === !d.downloads.includes(f)));",
        json!([]),
    );
    assert_eq!(
        links,
        json!(true),
        "download links match the server's formats"
    );

    // The screenshot is the test's artefact.
    let png = b.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "screenshot is a PNG");
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = tmp.parent().unwrap_or(&tmp).join("live-flamegraph.png");
    fs::write(&path, png).expect("saving the screenshot");
    eprintln!("screenshot: {}", path.display());
}

/// stackcount's live page: the callers of a probed function appear as
/// frames, with their exact counts as the frames' values.
#[test]
fn stackcount_live_page_in_headless_chromium() {
    if !require_bpf() || !require_browser() {
        return;
    }
    let _g = serial();
    const CALLS: u64 = serve::LEAF_CALLS;
    let (_work, served) = serve::leafcalls_counted(&[]);
    let b = Browser::start();
    b.goto(&served.url);
    let values = wait_for("caller_a and caller_b frames", LONG, || {
        let v = b.exec(
            "return ['caller_a', 'caller_b'].map(n => {\
               const g = document.querySelector('#graph g.frame[data-name=\"' + n + '\"]');\
               return g ? Number(g.dataset.value) : 0; });",
            json!([]),
        );
        let v: Vec<u64> = v
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        (v == [CALLS / 2, CALLS / 2]).then_some(v)
    });
    assert_eq!(values, [CALLS / 2, CALLS / 2]);
    let unit = b.exec(
        "return document.getElementById('total-label').textContent;",
        json!([]),
    );
    assert_eq!(unit, json!("events"));
}
