//! `flare agent` end to end against loopback receivers that decode what
//! arrives: Pyroscope's ingest (pprof), OTLP/HTTP profiles, Parca's
//! WriteRaw (gRPC) and the pprof directory. Ground truth is twofuncs,
//! whose worker spends 75 % of its CPU in func_b and 25 % in func_a.

mod common;

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::agent::{spool_files, summary, Agent};
use common::bpf::{require_bpf, serial};
use common::receivers::{
    decode_pprof, free_port, resolve, wait, HttpReceiver, ParcaReceiver, Request,
};
use common::session::Workload;
use flare::export::otlp_proto as otlp;
use prost::Message;

const LIMIT: Duration = Duration::from_secs(60);
/// The kernel's name for the workload's thread: its file name, cut to 15 bytes.
const COMM: &str = "workload-twofun";
/// The service name twofuncs is started with where the test says so.
const SERVICE: &str = "checkout-svc";

/// Samples of func_a and func_b in a pprof window, after checking that
/// every sample is twofuncs' and carries its labels.
fn hot_counts(p: &flare::output::pprof::proto::Profile, w: &Workload, exe: &str) -> (i64, i64) {
    hot_counts_of(p, w, exe, None)
}

/// [`hot_counts`], each sample labelled with `service` too where given.
fn hot_counts_of(
    p: &flare::output::pprof::proto::Profile,
    w: &Workload,
    exe: &str,
    service: Option<&str>,
) -> (i64, i64) {
    let (mut a, mut b) = (0, 0);
    for s in resolve(p) {
        if service.is_some() {
            assert_eq!(
                s.labels.get("service_name").map(String::as_str),
                service,
                "{s:?}"
            );
        }
        assert_eq!(s.labels.get("pid"), Some(&w.pid.to_string()), "{s:?}");
        assert_eq!(
            s.labels.get("comm").map(String::as_str),
            Some(COMM),
            "{s:?}"
        );
        assert_eq!(s.labels.get("exe").map(String::as_str), Some(exe), "{s:?}");
        assert!(
            s.labels.get("cgroup").is_some_and(|c| c.starts_with('/')),
            "{s:?}"
        );
        assert!(
            s.labels.get("hostname").is_some_and(|h| !h.is_empty()),
            "{s:?}"
        );
        if s.functions.iter().any(|f| f == "func_a") {
            a += s.value;
        }
        if s.functions.iter().any(|f| f == "func_b") {
            b += s.value;
        }
    }
    (a, b)
}

/// Checks a full window: func_b, the hot function, leads func_a.
fn check_window(what: &str, (a, b): (i64, i64)) {
    assert!(
        a + b >= 20,
        "{what}: only {} samples in twofuncs' functions",
        a + b
    );
    assert!(
        b > a,
        "{what}: func_b {b} samples, func_a {a}: the hot function must lead"
    );
}

fn otlp_hot_counts(req: &otlp::ExportProfilesServiceRequest, pid: u32) -> (i64, i64) {
    let d = req.dictionary.as_ref().expect("a dictionary");
    let s = |i: i32| d.string_table[i as usize].as_str();
    let (mut a, mut b) = (0, 0);
    let profile = &req.resource_profiles[0].scope_profiles[0].profiles[0];
    for sample in &profile.samples {
        let attrs: HashMap<&str, String> = sample
            .attribute_indices
            .iter()
            .map(|&i| {
                let kv = &d.attribute_table[i as usize];
                let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(otlp::any_value::Value::IntValue(n)) => n.to_string(),
                    Some(otlp::any_value::Value::StringValueStrindex(i)) => s(*i).to_string(),
                    other => format!("{other:?}"),
                };
                (s(kv.key_strindex), v)
            })
            .collect();
        assert_eq!(
            attrs.get("process.pid"),
            Some(&pid.to_string()),
            "{attrs:?}"
        );
        assert_eq!(attrs.get("thread.name").map(String::as_str), Some(COMM));
        assert_eq!(attrs.get("service.name").map(String::as_str), Some(SERVICE));
        let names: Vec<&str> = d.stack_table[sample.stack_index as usize]
            .location_indices
            .iter()
            .flat_map(|&l| d.location_table[l as usize].lines.iter())
            .map(|line| s(d.function_table[line.function_index as usize].name_strindex))
            .collect();
        let v = sample.values.iter().sum::<i64>();
        if names.contains(&"func_a") {
            a += v;
        }
        if names.contains(&"func_b") {
            b += v;
        }
    }
    (a, b)
}

/// Every sample of an OTLP window carries one timestamp per value, in
/// the window's span (the agent keeps times when it pushes to OTLP).
fn check_timestamps(what: &str, req: &otlp::ExportProfilesServiceRequest) {
    let profile = &req.resource_profiles[0].scope_profiles[0].profiles[0];
    let (from, len) = (profile.time_unix_nano, profile.duration_nano);
    assert!(!profile.samples.is_empty(), "{what}: no samples");
    for sample in &profile.samples {
        assert_eq!(
            sample.timestamps_unix_nano.len(),
            sample.values.len(),
            "{what}: one timestamp per value"
        );
        for &t in &sample.timestamps_unix_nano {
            // A second of slack: the window's bounds are read from the
            // wall clock when it is reported.
            assert!(
                t + 1_000_000_000 >= from && t <= from + len + 1_000_000_000,
                "{what}: a sample at {t} outside the window [{from}, +{len}]"
            );
        }
    }
}

#[test]
fn every_destination_gets_the_hot_function_and_labels_in_each_window() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    // Started with its service's name in its environment, as
    // OpenTelemetry's SDKs take it (the variable wins over the list).
    let service = format!("OTEL_SERVICE_NAME={SERVICE}");
    let mut w = Workload::start_with(
        &[
            "env",
            &service,
            "OTEL_RESOURCE_ATTRIBUTES=service.name=other,team=a",
        ],
        "twofuncs",
        &["12", "25", "1"],
    );
    let exe = fs::canonicalize(common::bpf::workload("twofuncs")).unwrap();
    let exe = exe.to_str().unwrap().to_string();
    w.go();
    let pyroscope = HttpReceiver::start(0);
    let collector = HttpReceiver::start(0);
    let parca = ParcaReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let pid = w.pid.to_string();
    let parca_addr = parca.addr.to_string();
    let agent = Agent::start(&[
        "-p",
        &pid,
        "-F",
        "99",
        "--interval",
        "2",
        "--app-name",
        "twofuncs-app",
        "--pyroscope",
        &pyroscope.url(),
        "--otlp",
        &collector.url(),
        "--parca",
        &parca_addr,
        "-o",
        dir.path().to_str().unwrap(),
    ]);
    // Three full windows at each destination.
    pyroscope.wait_for(3, LIMIT);
    collector.wait_for(3, LIMIT);
    parca.wait_for(3, LIMIT);
    let err = agent.terminate();

    let got: Vec<Request> = pyroscope.requests();
    assert!(got.len() >= 4, "three full windows and the last: {err}");
    let full = &got[..3];
    for (i, r) in full.iter().enumerate() {
        assert_eq!(r.path, "/ingest");
        assert_eq!(r.query["format"], "pprof");
        // The service's own application, not --app-name's.
        assert!(
            r.query["name"].starts_with(&format!("{SERVICE}{{hostname=")),
            "{:?}",
            r.query
        );
        let from: u64 = r.query["from"].parse().unwrap();
        let until: u64 = r.query["until"].parse().unwrap();
        assert!(until > from);
        check_window(
            &format!("pyroscope window {i}"),
            hot_counts_of(&decode_pprof(&r.body), &w, &exe, Some(SERVICE)),
        );
    }

    let otlp_reqs = collector.requests();
    for (i, r) in otlp_reqs.iter().take(3).enumerate() {
        assert_eq!(r.path, "/v1development/profiles");
        assert_eq!(r.headers["content-type"], "application/x-protobuf");
        let req =
            otlp::ExportProfilesServiceRequest::decode(r.body.as_slice()).expect("OTLP protobuf");
        let resource = req.resource_profiles[0].resource.as_ref().unwrap();
        let service = resource
            .attributes
            .iter()
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref()?.value.as_ref());
        assert_eq!(
            service,
            Some(&otlp::any_value::Value::StringValue(SERVICE.into()))
        );
        check_window(&format!("otlp window {i}"), otlp_hot_counts(&req, w.pid));
        check_timestamps(&format!("otlp window {i}"), &req);
    }

    for (i, r) in parca.requests().iter().take(3).enumerate() {
        let series = &r.series[0];
        let labels: HashMap<&str, &str> = series
            .labels
            .as_ref()
            .unwrap()
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(labels["__name__"], "flare_cpu");
        assert_eq!(labels["service_name"], SERVICE);
        assert!(labels.contains_key("hostname"));
        let p = decode_pprof(&series.samples[0].raw_profile);
        check_window(
            &format!("parca window {i}"),
            hot_counts_of(&p, &w, &exe, Some(SERVICE)),
        );
    }

    let files = flare::export::dir::Dir::files(dir.path()).unwrap();
    assert!(files.len() >= 4, "{files:?}");
    for f in &files[..3] {
        let name = f.file_name().unwrap().to_string_lossy();
        assert!(name.ends_with(&format!(".{SERVICE}.pb.gz")), "{name}");
        let top = common::pprof::top(f);
        let row = |name: &str| {
            top.rows
                .iter()
                .find(|r| r.last().map(String::as_str) == Some(name))
                .map(|r| seconds(&r[0]))
                .unwrap_or(0.0)
        };
        assert!(
            row("func_b") > row("func_a"),
            "go tool pprof -top {}:\n{}",
            f.display(),
            top.text
        );
    }
}

/// A duration as pprof prints it (`1.28s`, `310ms`), in seconds.
fn seconds(s: &str) -> f64 {
    let (n, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e-6)
    } else {
        (s.trim_end_matches('s'), 1.0)
    };
    n.parse::<f64>().map_or(0.0, |v| v * scale)
}

/// Windows of a receiver, by their pprof start and duration.
fn spans(reqs: &[Request]) -> Vec<(i64, i64)> {
    reqs.iter()
        .map(|r| {
            let p = decode_pprof(&r.body);
            (p.time_nanos, p.duration_nanos)
        })
        .collect()
}

#[test]
fn a_server_down_for_three_windows_loses_none_and_keeps_order() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let port = free_port();
    let spool = tempfile::tempdir().unwrap();
    let agent = Agent::start(&[
        "-F",
        "19",
        "--interval",
        "1",
        "--pyroscope",
        &format!("http://127.0.0.1:{port}"),
        "--spool-dir",
        spool.path().to_str().unwrap(),
    ]);
    // Three windows queue on disk while nothing listens.
    let spooled = |n: usize| {
        wait(LIMIT, || {
            let files = spool_files(spool.path()).len();
            (files >= n).then_some(files)
        })
    };
    spooled(3).expect("three windows spooled while the server was down");
    let server = HttpReceiver::start(port);
    let before = server.wait_for(5, LIMIT).len();
    let err = agent.terminate();
    let got = server.requests();
    assert!(got.len() >= before);
    let s = summary(&err);
    assert_eq!((s.dropped, s.left), (0, 0), "{err}");
    assert_eq!(s.delivered as usize, got.len(), "{err}");
    let spans = spans(&got);
    for pair in spans.windows(2) {
        let ((s0, d0), (s1, _)) = (pair[0], pair[1]);
        assert_eq!(s0 + d0, s1, "windows must tile, in order: {spans:?}");
    }
}

#[test]
fn the_spool_bound_holds_while_the_server_is_down() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let port = free_port();
    let spool = tempfile::tempdir().unwrap();
    // 16 KiB: a handful of system-wide windows at 99 Hz.
    let bound = 16 * 1024;
    let mut w = Workload::start("twofuncs", &["30", "25", "1"]);
    w.go();
    let agent = Agent::start(&[
        "-F",
        "99",
        "--interval",
        "0.5",
        "--pyroscope",
        &format!("http://127.0.0.1:{port}"),
        "--spool-dir",
        spool.path().to_str().unwrap(),
        "--spool-max-mb",
        &format!("{}", bound as f64 / (1 << 20) as f64),
    ]);
    // Every window file present now, by path, with its size.
    let files = || spool_files(spool.path());
    let size = || -> u64 { files().iter().map(|f| f.1).sum() };
    // Windows are as large as what the machine ran, so wait (by what was
    // spooled, not by the clock) until more was written than the bound
    // holds: then some window must have been dropped.
    let mut max = 0;
    let mut seen = HashMap::new();
    for _ in 0..600 {
        std::thread::sleep(Duration::from_millis(100));
        let now = files();
        max = max.max(now.iter().map(|f| f.1).sum());
        seen.extend(now);
        let written: u64 = seen.values().sum();
        if written > bound + 4096 {
            break;
        }
    }
    drop(w);
    let err = agent.terminate();
    let s = summary(&err);
    assert!(max <= bound, "spool held {max} bytes, bound {bound}");
    assert!(s.dropped > 0, "the bound must have been reached: {err}");
    assert!(s.left > 0, "windows stay spooled for the next run: {err}");
    assert!(size() <= bound);
}

#[test]
fn sigterm_sends_the_last_partial_window() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let mut w = Workload::start("twofuncs", &["30", "25", "1"]);
    let exe = fs::canonicalize(common::bpf::workload("twofuncs")).unwrap();
    w.go();
    let server = HttpReceiver::start(0);
    let pid = w.pid.to_string();
    let agent = Agent::start(&[
        "-p",
        &pid,
        "-F",
        "99",
        "--interval",
        "600",
        "--pyroscope",
        &server.url(),
    ]);
    // Sampling has begun once the agent holds its perf event.
    wait(LIMIT, || perf_events(agent.pid()).then_some(())).expect("the agent attaches");
    std::thread::sleep(Duration::from_secs(2));
    agent.terminate();
    let got = server.requests();
    assert_eq!(got.len(), 1, "one window, sent at exit");
    let p = decode_pprof(&got[0].body);
    assert!(p.duration_nanos < 600_000_000_000);
    check_window("last window", hot_counts(&p, &w, exe.to_str().unwrap()));
}

/// True when `pid` holds a perf event.
fn perf_events(pid: u32) -> bool {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .any(|l| Path::new(&l).to_string_lossy().contains("perf_event"))
}

#[test]
fn flare_profile_pushes_its_one_profile() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let mut w = Workload::start("twofuncs", &["30", "25", "1"]);
    let exe = fs::canonicalize(common::bpf::workload("twofuncs")).unwrap();
    w.go();
    let server = HttpReceiver::start(0);
    let pid = w.pid.to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_flare"))
        .args([
            "profile",
            "-p",
            &pid,
            "-F",
            "99",
            "--pyroscope",
            &server.url(),
            "2",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("running flare profile");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("1 window(s) delivered"), "{err}");
    let got = server.requests();
    assert_eq!(got.len(), 1);
    let p = decode_pprof(&got[0].body);
    check_window("flare profile", hot_counts(&p, &w, exe.to_str().unwrap()));
}
