use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use prost::Message;

use super::sender::{Options, Sender};
use super::spool::Spool;
use super::*;
use crate::profile::{Event, Frame, FrameKind, Kind, Meta, Sample, TaskStack, Timeline, Trace};

fn payload(n: u64, size: usize) -> Payload {
    Payload {
        start_ns: n,
        end_ns: n + 1,
        kind: Kind::Cpu,
        service: None,
        body: vec![n as u8; size],
    }
}

fn drain(s: &mut Spool) -> Vec<u64> {
    let mut out = Vec::new();
    while let Some((seq, p)) = s.front() {
        out.push(p.start_ns);
        s.remove(seq);
    }
    out
}

/// Pushes, expecting the window to be stored where the spool keeps them.
fn push(s: &mut Spool, p: Payload) {
    if let Some(e) = s.push(p) {
        panic!("{e}");
    }
}

#[test]
fn memory_spool_is_fifo_and_bounded() {
    // Each entry is 36 bytes of header + 100 of body: three fit in 420.
    let mut s = Spool::memory(420);
    for n in 0..5 {
        push(&mut s, payload(n, 100));
        assert!(s.bytes() <= 420);
    }
    assert_eq!(s.dropped, 2);
    assert_eq!(drain(&mut s), vec![2, 3, 4]);
    push(&mut s, payload(9, 1000));
    assert!(s.is_empty(), "a window larger than the bound is dropped");
    assert_eq!(s.dropped, 3);
}

#[test]
fn disk_spool_is_bounded_and_survives_a_restart() {
    // Each window takes 36 bytes of header on disk beside its body.
    let dir = tempfile::tempdir().unwrap();
    let mut s = Spool::disk(dir.path(), 450).unwrap();
    for n in 0..5 {
        push(&mut s, payload(n, 100));
    }
    let on_disk: u64 = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(on_disk <= 450, "{on_disk} bytes on disk");
    assert_eq!(s.dropped, 2);
    drop(s);
    let mut s = Spool::disk(dir.path(), 450).unwrap();
    assert_eq!(s.len(), 3);
    push(&mut s, payload(7, 0));
    let first = s.front().unwrap().1;
    assert_eq!(first, payload(2, 100));
    assert_eq!(drain(&mut s), vec![2, 3, 4, 7]);
    // A restart with a smaller bound trims the oldest.
    let mut s = Spool::disk(dir.path(), 450).unwrap();
    for n in 10..13 {
        push(&mut s, payload(n, 100));
    }
    drop(s);
    let mut s = Spool::disk(dir.path(), 140).unwrap();
    assert_eq!(drain(&mut s), vec![12]);
}

#[test]
fn disk_spool_keeps_each_windows_kind_and_service_and_reads_version_1() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Spool::disk(dir.path(), 1 << 20).unwrap();
    let wall = Payload {
        kind: Kind::Wall,
        ..payload(1, 10)
    };
    let off = Payload {
        kind: Kind::OffCpu,
        service: Some("checkout".into()),
        ..payload(2, 10)
    };
    push(&mut s, wall.clone());
    push(&mut s, off.clone());
    drop(s);
    // A window spooled by an earlier flare: no kind, CPU samples.
    let mut v1 = b"FLARESP1".to_vec();
    v1.extend(3u64.to_le_bytes());
    v1.extend(4u64.to_le_bytes());
    v1.extend([7u8; 5]);
    std::fs::write(dir.path().join(format!("{:020}.win", 99)), v1).unwrap();
    let mut s = Spool::disk(dir.path(), 1 << 20).unwrap();
    let mut got = Vec::new();
    while let Some((seq, p)) = s.front() {
        got.push(p);
        s.remove(seq);
    }
    let old = Payload {
        start_ns: 3,
        end_ns: 4,
        kind: Kind::Cpu,
        service: None,
        body: vec![7; 5],
    };
    assert_eq!(got, vec![wall, off, old]);
}

/// A destination that fails while `down` is set and records what it got.
struct Fake {
    down: Arc<Mutex<bool>>,
    got: Arc<Mutex<Vec<u64>>>,
}

/// Ten bytes of body per window.
struct FakeEncoder;

impl Encode for FakeEncoder {
    fn encode(&mut self, w: &Window) -> std::io::Result<Payload> {
        Ok(Payload::of(w, vec![0; 10]))
    }
}

impl Destination for Fake {
    fn name(&self) -> String {
        "fake".into()
    }
    fn encoder(&self) -> Box<dyn Encode> {
        Box::new(FakeEncoder)
    }
    fn deliver(&mut self, p: &Payload, _: Duration) -> Result<(), DeliveryError> {
        if *self.down.lock().unwrap() {
            return Err(DeliveryError::Retry("down".into()));
        }
        self.got.lock().unwrap().push(p.start_ns);
        Ok(())
    }
}

fn window(n: u64) -> Window<'static> {
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(n);
    Window {
        profile: std::borrow::Cow::Owned(Profile::new(Meta::new(Kind::Cpu, "cpu-clock"))),
        start: t,
        end: t + Duration::from_secs(1),
        host: "h".into(),
        processes: HashMap::new(),
        service: None,
    }
}

#[test]
fn sender_keeps_every_window_in_order_across_an_outage() {
    let down = Arc::new(Mutex::new(true));
    let got = Arc::new(Mutex::new(Vec::new()));
    let fake = Fake {
        down: down.clone(),
        got: got.clone(),
    };
    let options = Options {
        backoff_min: Duration::from_millis(5),
        backoff_max: Duration::from_millis(20),
        ..Options::default()
    };
    let mut sender = Sender::start(Box::new(fake), Spool::memory(1 << 20), options).unwrap();
    for n in 1..=3 {
        sender.submit(&window(n));
    }
    std::thread::sleep(Duration::from_millis(50));
    assert!(got.lock().unwrap().is_empty());
    *down.lock().unwrap() = false;
    for n in 4..=5 {
        sender.submit(&window(n));
    }
    let report = sender.finish(Duration::from_secs(10));
    let secs: Vec<u64> = got
        .lock()
        .unwrap()
        .iter()
        .map(|ns| ns / 1_000_000_000)
        .collect();
    assert_eq!(secs, vec![1, 2, 3, 4, 5]);
    assert_eq!((report.delivered, report.dropped, report.left), (5, 0, 0));
}

#[test]
fn finish_gives_up_at_the_deadline_with_a_memory_spool() {
    let fake = Fake {
        down: Arc::new(Mutex::new(true)),
        got: Arc::new(Mutex::new(Vec::new())),
    };
    let mut sender =
        Sender::start(Box::new(fake), Spool::memory(1 << 20), Options::default()).unwrap();
    sender.submit(&window(1));
    let report = sender.finish(Duration::from_millis(50));
    assert_eq!((report.delivered, report.left), (0, 1));
}

fn sample_window() -> Window<'static> {
    let frame = |name: &str, kind| Frame {
        addr: 0x1000,
        ..Frame::named(name, kind)
    };
    let mut profile = Profile::new(Meta::new(Kind::Cpu, "cpu-clock"));
    profile.meta.period_ns = Some(1_000_000_000 / 19);
    profile.samples.push(Sample::new(
        TaskStack {
            pid: Some(42),
            tid: None,
            comm: "work".into(),
            user: Trace::of(vec![
                frame("hot", FrameKind::Native),
                frame("main", FrameKind::Native),
            ]),
            kernel: Trace::of(Vec::new()),
        },
        None,
        7,
    ));
    let mut processes = HashMap::new();
    processes.insert(
        42,
        ProcessLabels {
            exe: Some("/usr/bin/work".into()),
            cgroup: Some("/system.slice/docker-abc.scope".into()),
            container_id: Some("abc".into()),
            service: Some("checkout".into()),
            pod_uid: Some("0f2e5a7c-1b2d-4e3f-8a9b-0c1d2e3f4a5b".into()),
            unit: Some("docker-abc.scope".into()),
        },
    );
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
    Window {
        profile: std::borrow::Cow::Owned(profile),
        start,
        end: start + Duration::from_secs(10),
        host: "node1".into(),
        processes,
        service: None,
    }
}

#[test]
fn pprof_window_carries_process_and_host_labels() {
    let p = pprof::Encoder::new().build(&sample_window());
    let s = |i: i64| p.string_table[i as usize].as_str();
    let labels: HashMap<&str, String> = p.sample[0]
        .label
        .iter()
        .map(|l| {
            (
                s(l.key),
                if l.str != 0 {
                    s(l.str).to_string()
                } else {
                    l.num.to_string()
                },
            )
        })
        .collect();
    for (k, v) in [
        ("pid", "42"),
        ("comm", "work"),
        ("exe", "/usr/bin/work"),
        ("container_id", "abc"),
        ("cgroup", "/system.slice/docker-abc.scope"),
        ("service_name", "checkout"),
        ("pod_uid", "0f2e5a7c-1b2d-4e3f-8a9b-0c1d2e3f4a5b"),
        ("systemd_unit", "docker-abc.scope"),
        ("hostname", "node1"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "label {k}");
    }
    assert_eq!(p.sample[0].value, vec![7, 7 * (1_000_000_000 / 19)]);
}

/// Mappings the symbolizer knew no build id for get their file's; one it
/// knew keeps it, and a file that cannot be read has none.
#[test]
fn pprof_mappings_without_build_ids_are_read_from_their_files() {
    let env = "/usr/bin/env";
    let expected = super::buildid::read(std::path::Path::new(env)).expect("env has a build id");
    let object = |path: &str, build_id: Option<&[u8]>| {
        Some(Arc::new(crate::profile::ObjectRef {
            path: path.into(),
            build_id: build_id.map(Arc::from),
        }))
    };
    let frame = |name: &str, addr: u64, object| Frame {
        addr,
        object,
        file_offset: 0x1100,
        ..Frame::named(name, FrameKind::Native)
    };
    let mut w = sample_window();
    let user = Trace::of(vec![
        frame("a", 0x5500_0000_1100, object(env, None)),
        frame(
            "b",
            0x7f00_0000_1100,
            object("/usr/lib/known.so", Some(&[0xab, 0xcd])),
        ),
        frame(
            "c",
            0x7f10_0000_1100,
            object("/nonexistent/flare-test.so", None),
        ),
    ]);
    w.profile.to_mut().samples[0].task.user = user;
    let p = pprof::Encoder::new().build(&w);
    let s = |i: i64| p.string_table[i as usize].as_str();
    let ids: HashMap<&str, &str> = p
        .mapping
        .iter()
        .map(|m| (s(m.filename), s(m.build_id)))
        .collect();
    assert_eq!(ids[env], expected);
    assert_eq!(ids["/usr/lib/known.so"], "abcd");
    assert_eq!(ids["/nonexistent/flare-test.so"], "");
}

#[test]
fn otlp_request_resolves_to_the_same_stack_and_attributes() {
    let w = sample_window();
    let p = pprof::Encoder::new().build(&w);
    let req = otlp::from_pprof(p, &w, "svc");
    // Round trip through the wire format, as a collector sees it.
    let req =
        otlp_proto::ExportProfilesServiceRequest::decode(req.encode_to_vec().as_slice()).unwrap();
    let d = req.dictionary.unwrap();
    assert_eq!(d.string_table[0], "");
    assert_eq!(d.mapping_table[0], otlp_proto::Mapping::default());
    let prof = &req.resource_profiles[0].scope_profiles[0].profiles[0];
    let sample = &prof.samples[0];
    assert_eq!(sample.values, vec![7]);
    let names: Vec<&str> = d.stack_table[sample.stack_index as usize]
        .location_indices
        .iter()
        .map(|&l| {
            let f = d.location_table[l as usize].lines[0].function_index;
            d.string_table[d.function_table[f as usize].name_strindex as usize].as_str()
        })
        .collect();
    assert_eq!(names, vec!["hot", "main"]);
    let attrs: HashMap<&str, String> = sample
        .attribute_indices
        .iter()
        .map(|&i| {
            let a = &d.attribute_table[i as usize];
            let v = match a.value.as_ref().and_then(|v| v.value.clone()) {
                Some(otlp_proto::any_value::Value::StringValueStrindex(s)) => {
                    d.string_table[s as usize].clone()
                }
                Some(otlp_proto::any_value::Value::IntValue(n)) => n.to_string(),
                other => format!("{other:?}"),
            };
            (d.string_table[a.key_strindex as usize].as_str(), v)
        })
        .collect();
    assert_eq!(attrs["process.pid"], "42");
    assert_eq!(attrs["thread.name"], "work");
    assert_eq!(attrs["container.id"], "abc");
    assert_eq!(attrs["process.executable.path"], "/usr/bin/work");
    assert_eq!(attrs["service.name"], "checkout");
    assert_eq!(attrs["k8s.pod.uid"], "0f2e5a7c-1b2d-4e3f-8a9b-0c1d2e3f4a5b");
    assert_eq!(attrs["systemd.unit"], "docker-abc.scope");
    assert_eq!(prof.time_unix_nano, 1000 * 1_000_000_000);
    assert_eq!(prof.duration_nano, 10 * 1_000_000_000);
    let host = &req.resource_profiles[0]
        .resource
        .as_ref()
        .unwrap()
        .attributes[0];
    assert_eq!(host.key, "host.name");
}

#[test]
fn otlp_samples_carry_their_times_where_the_run_kept_them() {
    let mut w = sample_window();
    // Seven samples: four at 1.5 s, three at 2.25 s into the window.
    let origin_unix_ns = 1000 * 1_000_000_000;
    let event = |offset_ns: u64, value| Event {
        time_ns: 50_000 + offset_ns,
        value,
        sample: 0,
        tid: 42,
        cpu: 0,
    };
    w.profile.to_mut().timeline = Some(Timeline {
        origin_ns: 50_000,
        origin_unix_ns,
        events: vec![event(2_250_000_000, 3), event(1_500_000_000, 4)],
    });
    let p = pprof::Encoder::new().build(&w);
    let req = otlp::from_pprof(p, &w, "svc");
    let req =
        otlp_proto::ExportProfilesServiceRequest::decode(req.encode_to_vec().as_slice()).unwrap();
    let prof = &req.resource_profiles[0].scope_profiles[0].profiles[0];
    let sample = &prof.samples[0];
    assert_eq!(
        sample.timestamps_unix_nano,
        vec![
            origin_unix_ns + 1_500_000_000,
            origin_unix_ns + 2_250_000_000
        ],
        "in time order"
    );
    assert_eq!(sample.values, vec![4, 3], "one value per timestamp");
    for t in &sample.timestamps_unix_nano {
        assert!((prof.time_unix_nano..prof.time_unix_nano + prof.duration_nano).contains(t));
    }
}

#[test]
fn server_text_is_escaped_and_bounded() {
    assert_eq!(
        server_text("\u{1b}[31mred\u{7}\r\n\u{202e}ok"),
        r"\u{1b}[31mred\u{7}\r\n\u{202e}ok"
    );
    let long = server_text(&"A".repeat(1000));
    assert_eq!(long.len(), SERVER_TEXT_MAX + 3);
}

#[test]
fn a_redirect_is_a_refusal_naming_its_target() {
    match http_status("x", 302, "http://elsewhere/\u{1b}") {
        Err(DeliveryError::Rejected(m)) => {
            assert!(m.contains(r"redirect to http://elsewhere/\u{1b}"), "{m}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_disk_spool_that_cannot_write_keeps_windows_in_memory() {
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("spool");
    let mut s = Spool::disk(&dir, 400).unwrap();
    push(&mut s, payload(1, 10));
    std::fs::remove_dir_all(&dir).unwrap();
    let e = s.push(payload(2, 10)).expect("the write fails");
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert!(!s.all_on_disk());
    // The window on disk went with the directory; the one in memory is
    // delivered.
    assert_eq!(drain(&mut s), vec![2]);
    assert_eq!((s.lost, s.dropped), (1, 0));
}

#[test]
fn a_window_dropped_for_room_while_in_flight_is_not_counted_twice() {
    let mut s = Spool::memory(300);
    push(&mut s, payload(1, 100));
    let (seq, _) = s.front().unwrap();
    push(&mut s, payload(2, 100));
    push(&mut s, payload(3, 100));
    assert_eq!(s.dropped, 1);
    // Delivered after all: no longer a dropped window.
    s.remove(seq);
    assert_eq!(s.dropped, 0);
    assert_eq!(drain(&mut s), vec![2, 3]);
}
