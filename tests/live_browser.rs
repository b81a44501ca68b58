//! End to end: `flare profile --serve` against a workload with a known hot
//! function, driven in headless Chromium through chromedriver. The page
//! must show the function as a DOM frame, update its totals, highlight a
//! search with the right share, zoom, filter, pause, and offer an SVG
//! download that parses as SVG. A screenshot is kept under target/.
//! Against burst (a 500 ms burst in one function at a known time): the
//! timeline strip renders, a mouse drag over the burst turns the flame
//! graph into the burst's, compare and the heat map show, and clearing
//! the range brings the whole run back.

mod common;

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use common::bpf::{require_bpf, serial};
use common::serve;
use common::session::Workload;
use common::webdriver::{http, require_browser, wait_for, Browser};
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

/// The share of `name`'s frames in the page's graph (by their values).
fn page_share(b: &Browser, name: &str) -> f64 {
    page_number(
        b,
        &format!(
            "const t = Number(document.body.dataset.total);\
             const v = [...document.querySelectorAll('#graph g.frame[data-name=\"{name}\"]:not(.ancestor)')]\
               .reduce((a, g) => a + Number(g.dataset.value), 0);\
             return t > 0 ? v / t : -1;"
        ),
    )
}

#[test]
fn timeline_drag_selects_a_range_in_headless_chromium() {
    if !require_bpf() || !require_browser() {
        return;
    }
    let _cpu = serial();
    let mut work = Workload::start("burst", &["1500", "500", "1500"]);
    let pid = work.pid.to_string();
    let served = serve::serve(&[
        "-F",
        "199",
        "-p",
        &pid,
        "40",
        "--serve",
        "--serve-interval",
        "0.5",
    ]);
    let b = Browser::start();
    b.goto(&served.url);
    work.go();
    work.wait_done();
    let burst: Vec<u64> = work
        .reports
        .iter()
        .find_map(|l| l.strip_prefix("burst "))
        .expect("the workload's burst line")
        .split_whitespace()
        .map(|n| n.parse().expect("a time"))
        .collect();
    let (_, body) = http(served.port, "GET", &served.path("api/timeline"), None);
    let tl: Value = serde_json::from_str(&body).expect("timeline JSON");
    let origin = tl["origin_ns"].as_u64().expect("a timed run");
    let (b0, b1) = (
        (burst[0] - origin) as f64 / 1e6,
        (burst[1] - origin) as f64 / 1e6,
    );

    // The strip renders, past the burst, with something drawn on it.
    wait_for("the strip past the burst", LONG, || {
        let end = page_number(
            &b,
            "const c = document.getElementById('strip');\
             if (document.getElementById('time').hidden || !c.dataset.slices) return 0;\
             return Number(c.dataset.from) + Number(c.dataset.slices) * Number(c.dataset.slice);",
        );
        (end > b1 + 1000.0).then_some(())
    });
    let drawn = page_number(
        &b,
        "const c = document.getElementById('strip');\
         const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;\
         let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] < 200) n++; return n;",
    );
    assert!(drawn > 100.0, "{drawn} dark pixels on the strip");
    // The whole run is mostly spin_base.
    assert!(page_share(&b, "spin_base") > 0.5, "whole run");
    assert_eq!(
        b.exec("return document.body.dataset.range;", json!([])),
        json!("")
    );

    // Drag over the middle of the burst.
    let (from, to) = (b0 + 40.0, b1 - 40.0);
    b.exec(
        "const [a, z] = arguments;\
         const c = document.getElementById('strip'); const r = c.getBoundingClientRect();\
         const from = Number(c.dataset.from), span = Number(c.dataset.slices) * Number(c.dataset.slice);\
         const x = (t) => r.left + 1 + (t - from) / span * c.clientWidth;\
         const ev = (type, t) => c.dispatchEvent(new MouseEvent(type,\
           { clientX: x(t), clientY: r.top + 30, button: 0, bubbles: true }));\
         ev('mousedown', a); ev('mousemove', (a + z) / 2); ev('mousemove', z); ev('mouseup', z);",
        json!([from, to]),
    );
    let range = wait_for("the range's graph", LONG, || {
        let r = b.exec("return document.body.dataset.range;", json!([]));
        let r = r.as_str().unwrap_or("").to_string();
        (!r.is_empty()).then_some(r)
    });
    let (ra, rz) = range.split_once('-').expect("FROM-TO");
    let (ra, rz): (f64, f64) = (ra.parse().unwrap(), rz.parse().unwrap());
    eprintln!("burst {b0:.1}..{b1:.1} ms, dragged {from:.1}..{to:.1}, range {ra}..{rz}");
    let slice = page_number(
        &b,
        "return Number(document.getElementById('strip').dataset.slice);",
    );
    // The page snaps a drag outwards to whole slices; the pointer lands
    // within a pixel of the time asked for.
    let px = page_number(
        &b,
        "const c = document.getElementById('strip');\
         return Number(c.dataset.slices) * Number(c.dataset.slice) / c.clientWidth;",
    );
    assert!(
        ra >= from - slice - px && ra <= from + px && rz >= to - px && rz <= to + slice + px,
        "range {ra}..{rz} vs the drag {from:.1}..{to:.1} (slices of {slice} ms, {px:.1} ms a pixel)"
    );
    let share = wait_for("burst_func's graph", LONG, || {
        let s = page_share(&b, "burst_func");
        (s > 0.0).then_some(s)
    });
    assert!(
        share >= 0.9,
        "burst_func is {share:.3} of the range's graph"
    );
    assert!(page_share(&b, "spin_base") < 0.1);

    // Compare with the rest of the run: frames carry their baseline.
    b.click(&b.find("#compare"));
    let before = wait_for("the differential graph", LONG, || {
        let v = b.exec(
            "if (document.body.dataset.compare !== '1') return null;\
             const g = document.querySelector('#graph g.frame[data-name=\"burst_func\"]');\
             return g && g.dataset.before !== undefined ? [Number(g.dataset.value), Number(g.dataset.before)] : null;",
            json!([]),
        );
        v.as_array()
            .map(|a| (a[0].as_f64().unwrap_or(0.0), a[1].as_f64().unwrap_or(0.0)))
    });
    assert!(
        before.1 * 10.0 < before.0,
        "burst_func vs the rest: {before:?}"
    );

    // The thread filter lists the workload's thread by name.
    let threads = b.exec(
        "return [...document.querySelectorAll('#thread option')].map(o => [o.value, o.textContent]);",
        json!([]),
    );
    assert!(
        threads
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o[0] == json!(pid)
                && o[1].as_str().unwrap_or("").starts_with("workload-burst (")),
        "{threads}"
    );

    // The heat map: one column per second.
    b.click(&b.find("#heat-toggle"));
    wait_for("the heat map", LONG, || {
        let cols = page_number(
            &b,
            "const h = document.getElementById('heat');\
             return document.getElementById('heat-wrap').hidden ? 0 : Number(h.dataset.columns || 0);",
        );
        (cols >= 3.0).then_some(())
    });
    let png = b.screenshot();
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = tmp.parent().unwrap_or(&tmp).join("live-timeline.png");
    fs::write(&path, png).expect("saving the screenshot");
    eprintln!("screenshot: {}", path.display());

    // Clearing the range brings the whole run back.
    b.click(&b.find("#range-clear"));
    wait_for("the whole run again", LONG, || {
        let r = b.exec("return document.body.dataset.range;", json!([]));
        (r == json!("") && page_share(&b, "spin_base") > 0.5).then_some(())
    });

    // A drag on the heat map, cell to cell, selects the same way.
    b.exec(
        "const [a, z] = arguments;\
         const c = document.getElementById('heat'); const r = c.getBoundingClientRect();\
         const col0 = Number(c.dataset.col0), cw = Number(c.dataset.cw), rp = Number(c.dataset.rowPx);\
         const at = (t) => [r.left + 1 + (Math.floor(t / 1000) - col0) * cw + cw / 2,\
                            r.top + 1 + Math.floor((t % 1000) / 20) * rp + rp / 2];\
         const ev = (type, t) => { const [x, y] = at(t);\
           c.dispatchEvent(new MouseEvent(type, { clientX: x, clientY: y, button: 0, bubbles: true })); };\
         ev('mousedown', a); ev('mousemove', (a + z) / 2); ev('mousemove', z); ev('mouseup', z);",
        json!([from, to]),
    );
    let range = wait_for("the heat map's range", LONG, || {
        let r = b.exec("return document.body.dataset.range;", json!([]));
        let r = r.as_str().unwrap_or("").to_string();
        (!r.is_empty()).then_some(r)
    });
    let (ra, rz) = range.split_once('-').expect("FROM-TO");
    let (ra, rz): (f64, f64) = (ra.parse().unwrap(), rz.parse().unwrap());
    eprintln!("heat map drag {from:.1}..{to:.1}, range {ra}..{rz}");
    assert!(
        (ra - from).abs() <= 20.0 && (rz - to).abs() <= 20.0,
        "heat map range {ra}..{rz} vs the drag {from:.1}..{to:.1} (20 ms rows)"
    );
    let share = wait_for("burst_func's graph again", LONG, || {
        let s = page_share(&b, "burst_func");
        (s > 0.0).then_some(s)
    });
    assert!(
        share >= 0.9,
        "burst_func is {share:.3} of the heat map range's graph"
    );
}
