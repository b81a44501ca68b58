//! `flare profile --serve` over plain HTTP against twofuncs: the JSON
//! snapshot's windows add up exactly, the sampled CPU matches what the
//! workload really got, the usual output still comes at the end, and the
//! server refuses anything but reading its fixed pages from loopback.
//! Against burst: the timeline puts a burst where the workload says it
//! was, and the burst's range is the burst's function.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::bpf::{process_cpu, require_bpf, serial, spawn_with_stdin, Reaper};
use common::serve;
use common::session::Workload;
use common::webdriver::{http, http_as, wait_for};
use serde_json::Value;

const HZ: f64 = 199.0;
const SHARE_A: f64 = 0.25;

fn snapshot(served: &serve::Served, query: &str) -> Value {
    let (code, body) = http(
        served.port,
        "GET",
        &served.path(&format!("api/profile?{query}")),
        None,
    );
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("snapshot JSON")
}

/// Sum of a function's frames in a snapshot's graph.
fn value_of(v: &Value, name: &str) -> u64 {
    let names = v["graph"]["names"].as_array().unwrap();
    fn walk(n: &Value, names: &[Value], name: &str) -> u64 {
        let here = if names[n[0].as_u64().unwrap() as usize][0] == name {
            n[1].as_u64().unwrap()
        } else {
            0
        };
        let kids = n.get(2).and_then(Value::as_array);
        here + kids.map_or(0, |k| k.iter().map(|c| walk(c, names, name)).sum())
    }
    walk(&v["graph"]["root"], names, name)
}

#[test]
fn serve_windows_add_up_and_match_cpu_time() {
    if !require_bpf() {
        return;
    }
    let _cpu = serial();
    let work = serve::twofuncs("30", "25");
    let pid = work.pid;
    let cpu_before = process_cpu(pid);
    let mut served = serve::serve(
        &["-F", "199", "-f", "-p", &pid.to_string(), "5", "--serve"]
            .into_iter()
            .chain(["--serve-interval", "0.5", "--serve-keep", "60"])
            .collect::<Vec<_>>(),
    );
    let port = served.port;
    let mut stdout = served.stdout.take().expect("flare stdout");

    // Wait for a few intervals, then compare windows of one snapshot time.
    wait_for("four intervals", Duration::from_secs(20), || {
        (snapshot(&served, "")["seq"].as_u64().unwrap_or(0) >= 4).then_some(())
    });
    let whole = snapshot(&served, "");
    let kept = snapshot(&served, "last=60");
    let seq = whole["seq"].as_u64().unwrap();
    if kept["seq"].as_u64() == Some(seq) {
        // Every interval is kept, so the longest window is the whole run.
        assert_eq!(kept["total"], whole["total"]);
    }
    let last = snapshot(&served, "last=1");
    // The nearest whole half-second intervals to 1 s.
    let span = last["span"].as_f64().unwrap();
    assert!((0.74..=1.26).contains(&span), "{span}");
    assert!(last["total"].as_u64() < whole["total"].as_u64());
    let filtered = snapshot(&served, &format!("pid={pid}"));
    assert_eq!(filtered["procs"][0][0].as_u64(), Some(pid as u64));

    // Reading only: fixed routes, loopback hosts, GET.
    let api = served.path("api/profile");
    assert_eq!(http(port, "POST", &api, Some("{}")).0, 405);
    // A page elsewhere reaching loopback through DNS rebinding.
    let rebound = http_as(&format!("attacker.example:{port}"), port, "GET", &api, None);
    assert_eq!(rebound.0, 403);
    let page = served.path("");
    assert_eq!(
        http_as(&format!("localhost:{port}"), port, "GET", &page, None).0,
        200
    );
    // Without the URL's token, another local user reads nothing.
    assert_eq!(http(port, "GET", "/", None).0, 404);
    assert_eq!(http(port, "GET", "/api/profile", None).0, 404);
    assert_eq!(
        http(port, "GET", &served.path("../../etc/passwd"), None).0,
        404
    );
    assert_eq!(
        http(port, "GET", &served.path("download/flare.pb.gz"), None).0,
        200
    );
    let (code, folded) = http(
        port,
        "GET",
        &served.path("download/flare.folded?last=2"),
        None,
    );
    assert_eq!(code, 200);
    assert!(folded.contains(";func_a "), "{folded}");

    // The run ends as usual: folded stacks on stdout.
    let mut text = String::new();
    stdout.read_to_string(&mut text).expect("flare output");
    let status = served.flare.0.wait().expect("waiting for flare");
    assert!(status.success(), "flare failed: {status}");
    let cpu = process_cpu(pid) - cpu_before;
    let count = |needle: &str| -> u64 {
        text.lines()
            .filter(|l| l.contains(needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let total = count("");
    let (a, b) = (count(";func_a"), count(";func_b"));
    assert!(total as f64 >= whole["total"].as_f64().unwrap());
    // Samples stand for CPU time: flare covered most of the workload's
    // CPU time between our two readings (less its own start-up).
    let ratio = total as f64 / (cpu * HZ);
    eprintln!("{total} samples, {cpu:.2} s CPU, ratio {ratio:.3}, func_a {a}, func_b {b}");
    assert!(
        (0.7..=1.1).contains(&ratio),
        "{total} samples at {HZ} Hz vs {cpu:.2} s of CPU: ratio {ratio:.2}"
    );
    let share = a as f64 / (a + b) as f64;
    assert!(
        (share - SHARE_A).abs() < 0.06,
        "func_a's share {share:.3} vs {SHARE_A}"
    );
    // The same share in the live view's whole-run snapshot.
    let (la, lb) = (value_of(&whole, "func_a"), value_of(&whole, "func_b"));
    let live_share = la as f64 / (la + lb) as f64;
    assert!(
        (live_share - SHARE_A).abs() < 0.08,
        "live func_a share {live_share:.3} vs {SHARE_A}"
    );
}

#[test]
fn serve_reports_a_taken_port_in_one_line() {
    if !require_bpf() {
        return;
    }
    let _cpu = serial();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("binding");
    let port = taken.local_addr().unwrap().port();
    let out = Command::new(env!("CARGO_BIN_EXE_flare"))
        .args(["profile", "1", "--serve", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .output()
        .expect("running flare");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot serve the live view on 127.0.0.1:{port}")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    drop(taken);
}

#[test]
fn offcputime_serves_blocked_time_live() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    // 40 rounds of 50 ms: about 2 s blocked in block_in_read.
    let (child, mut stdin) = spawn_with_stdin("pipeblock", &["40", "50"]);
    let child = Reaper(child);
    let pid = child.0.id().to_string();
    let served = serve::serve_tool("offcputime", &["-p", &pid, "--serve"]);
    stdin.write_all(b"go\n").expect("starting pipeblock");
    stdin.flush().expect("starting pipeblock");
    // Half a second of blocked time (in microseconds) shows up live.
    let v = wait_for(
        "blocked time in block_in_read",
        Duration::from_secs(20),
        || {
            let v = snapshot(&served, "");
            (value_of(&v, "block_in_read") >= 500_000).then_some(v)
        },
    );
    assert_eq!(v["unit"], "us", "{v}");
    let names = v["graph"]["names"].as_array().unwrap();
    for n in names {
        let name = n[0].as_str().unwrap_or("");
        assert!(
            !(name.starts_with("bpf_prog_")
                || name.starts_with("bpf_trace_run")
                || name.starts_with("__bpf_trace_")),
            "tracing frame {name} in the live off-CPU view"
        );
    }
    drop(served);
}

#[test]
fn stackcount_serves_exact_counts_live() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    const CALLS: u64 = serve::LEAF_CALLS;
    let (_work, mut served) = serve::leafcalls_counted(&["--serve-interval", "0.5"]);
    let mut stdout = served.stdout.take().expect("flare stdout");
    // Every call through each caller arrives, exactly.
    let v = wait_for("all calls counted", Duration::from_secs(30), || {
        let v = snapshot(&served, "");
        (v["total"].as_u64() == Some(CALLS)).then_some(v)
    });
    assert_eq!(v["unit"], "events", "{v}");
    assert_eq!(v["tool"], "stackcount", "{v}");
    assert_eq!(value_of(&v, "caller_a"), CALLS / 2, "{v}");
    assert_eq!(value_of(&v, "caller_b"), CALLS / 2, "{v}");
    // Ctrl-C: the usual text report of the whole run comes at the end.
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc_kill(served.flare.0.id() as i32, SIGINT) };
    let mut out = String::new();
    stdout.read_to_string(&mut out).expect("flare stdout");
    assert!(out.ends_with("Detaching...\n"), "{out}");
    let total: u64 = out
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .sum();
    assert_eq!(total, CALLS, "{out}");
}

#[test]
fn offcputime_serve_reports_untracked_threads() {
    if !require_bpf() {
        return;
    }
    let _g = serial();
    // Room for two blocked threads: on any machine more than two block at
    // once, and the periods that find the map full are not tracked.
    let mut served = serve::serve_tool(
        "offcputime",
        &["--blocked-storage-size", "2", "3", "--serve"],
    );
    // A process filter that matches nothing keeps the graph (whose depth
    // a system-wide off-CPU profile makes too deep for serde_json) empty;
    // the totals still count everything.
    let v = wait_for("untracked periods", Duration::from_secs(20), || {
        let v = snapshot(&served, "pid=4294967295");
        (v["lost"]["untracked"].as_u64().unwrap_or(0) > 0).then_some(v)
    });
    assert!(v["lost"]["untracked"].as_u64() > Some(0), "{v}");
    // The end of the run says so too, with the option that avoids it.
    let mut stdout = served.stdout.take().expect("flare stdout");
    let mut out = String::new();
    stdout.read_to_string(&mut out).expect("flare stdout");
    let err = served.stderr_rest();
    assert!(
        err.contains("off-CPU periods were not tracked") && err.contains("--blocked-storage-size"),
        "{err}"
    );
}

fn get_json(served: &serve::Served, route: &str) -> Value {
    let (code, body) = http(served.port, "GET", &served.path(route), None);
    assert_eq!(code, 200, "{route}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

/// burst spins in spin_base, then in burst_func for 500 ms, then in
/// spin_base again, and says when the burst was: the timeline's slices
/// with burst_func lie within one slice of it, the range of the burst is
/// burst_func, the rest of the run is not.
#[test]
fn timeline_finds_a_burst_where_it_happened() {
    if !require_bpf() {
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
        "30",
        "--serve",
        "--serve-interval",
        "0.5",
    ]);
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
    // Wait until the store holds an interval past the burst's end.
    let q = format!("api/timeline?slice=50&pid={pid}&search=burst_func");
    let tl = wait_for("the burst in the timeline", Duration::from_secs(20), || {
        let tl = get_json(&served, &q);
        let origin = tl["origin_ns"].as_u64()?;
        let end_ms = (burst[1] - origin) as f64 / 1e6;
        (tl["kept"][1].as_f64()? > end_ms + 1200.0).then_some(tl)
    });
    assert_eq!(tl["timed"], true, "{tl}");
    let origin = tl["origin_ns"].as_u64().unwrap();
    let (b0, b1) = (
        (burst[0] - origin) as f64 / 1e6,
        (burst[1] - origin) as f64 / 1e6,
    );
    let slice = tl["slice"].as_f64().unwrap();
    let from = tl["from"].as_f64().unwrap();
    let counts: Vec<u64> = tl["counts"]
        .as_array()
        .expect("filtered counts")
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    let hot: Vec<f64> = counts
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, _)| from + i as f64 * slice)
        .collect();
    eprintln!("burst {b0:.1}..{b1:.1} ms; slices with burst_func at {hot:?}");
    assert!(
        hot.len() >= 8,
        "a 500 ms burst fills ten 50 ms slices: {hot:?}"
    );
    for &t in &hot {
        assert!(
            t + slice > b0 - slice && t < b1 + slice,
            "burst_func at {t}..{} ms, the burst was {b0:.1}..{b1:.1} ms",
            t + slice
        );
    }
    // At least 60 % of 199 Hz over the CPU time the burst got (500 ms on
    // an idle machine, less beside other work).
    let matched = tl["matched"].as_u64().unwrap();
    let burst_cpu: f64 = work
        .reports
        .iter()
        .find_map(|l| l.strip_prefix("burstcpu "))
        .and_then(|s| s.trim().parse().ok())
        .expect("the workload's burstcpu line");
    assert!(
        matched as f64 >= 0.6 * 199.0 * burst_cpu,
        "{matched} burst_func samples in the burst's {burst_cpu:.3} s of CPU at 199 Hz"
    );

    // The range of the burst is burst_func; the rest of the run is not.
    let range = |a: f64, b: f64, extra: &str| {
        get_json(
            &served,
            &format!(
                "api/range?from={}&to={}&pid={pid}&min=0{extra}",
                a.max(0.0) as u64,
                b.ceil() as u64
            ),
        )
    };
    let inside = range(b0, b1, "");
    let share = value_of(&inside, "burst_func") as f64 / inside["total"].as_f64().unwrap();
    eprintln!("burst range: {share:.3} burst_func of {}", inside["total"]);
    assert!(
        share >= 0.9,
        "burst_func is {share:.3} of the burst's range"
    );
    let end = tl["kept"][1].as_f64().unwrap();
    let (before, after) = (range(0.0, b0 - 1.0, ""), range(b1 + 1.0, end, ""));
    let outside = (value_of(&before, "burst_func") + value_of(&after, "burst_func")) as f64;
    let out_total = before["total"].as_f64().unwrap() + after["total"].as_f64().unwrap();
    eprintln!("outside: {outside} burst_func of {out_total}");
    assert!(out_total >= 150.0, "{out_total} samples outside the burst");
    assert!(
        outside / out_total < 0.05,
        "burst_func is {:.3} outside the burst",
        outside / out_total
    );
    // Compared with the rest of the run, burst_func is new.
    let cmp = range(b0, b1, "&compare=1");
    assert_eq!(cmp["compare"], true);
    fn node<'a>(n: &'a Value, names: &[Value], name: &str) -> Option<&'a Value> {
        if names[n[0].as_u64()? as usize][0] == name {
            return Some(n);
        }
        n[2].as_array()?.iter().find_map(|c| node(c, names, name))
    }
    let names = cmp["graph"]["names"].as_array().unwrap();
    let b = node(&cmp["graph"]["root"], names, "burst_func").expect("burst_func in the diff");
    let (now, rest) = (b[1].as_u64().unwrap(), b[3].as_u64().unwrap());
    assert!(
        rest * 10 < now,
        "burst_func: {now} in the range, {rest} (scaled) in the rest"
    );
}

const SIGINT: i32 = 2;

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
