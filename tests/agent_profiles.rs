//! `flare agent --profiles cpu,off-cpu,wall` end to end: every
//! destination (Pyroscope's ingest, OTLP/HTTP, Parca's WriteRaw, the
//! pprof directory) gets a window of each profile, with its own sample
//! type. Ground truth is wallwork, which computes in compute() for half
//! of each 100 ms cycle and sleeps in rest() for the other half (50 ms
//! blocked at a time), and says on exit how long it spent in each.
//! Tolerances: off-CPU and wall-clock time in rest() within 10 % of the
//! workload's own figure; compute() holds at least 90 % of the CPU
//! samples and its wall-clock time is within 10 % of its own (here
//! within 0.5 % of each, in two runs).

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::agent::Agent;
use common::bpf::{require_bpf, serial, workload};
use common::receivers::{decode_pprof, resolve, HttpReceiver, ParcaReceiver};
use flare::export::otlp_proto as otlp;
use flare::output::pprof::proto;
use prost::Message;

const LIMIT: Duration = Duration::from_secs(60);

/// Nanoseconds (or samples) of one profile kind: in compute(), in
/// rest(), in all of the workload's stacks.
#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    compute: i64,
    rest: i64,
    all: i64,
}

impl Sums {
    fn add(&mut self, names: &[&str], v: i64) {
        self.all += v;
        if names.contains(&"compute") {
            self.compute += v;
        }
        if in_rest(names) {
            self.rest += v;
        }
    }
}

/// Whether a stack is wallwork's sleep in rest().
fn in_rest(names: &[&str]) -> bool {
    // Where no table walk runs (5.10: frame pointers only), libc's
    // clock_nanosleep, which keeps no frame pointer, hides rest(): the
    // sleep is then counted by its libc leaf.
    let sleep = match common::bpf::kernel_can("unwind") {
        Some(false) => names.iter().any(|n| n.contains("nanosleep")),
        _ => names.contains(&"rest"),
    };
    sleep && !names.contains(&"compute")
}

/// The first sample type of a pprof profile, as "type/unit".
fn pprof_type(p: &proto::Profile) -> String {
    let t = &p.sample_type[0];
    let s = |i: i64| p.string_table[i as usize].clone();
    format!("{}/{}", s(t.r#type), s(t.unit))
}

/// Adds a pprof window's samples of `pid` to the sums of its type.
fn add_pprof(sums: &mut HashMap<String, Sums>, p: &proto::Profile, pid: u32) {
    let entry = sums.entry(pprof_type(p)).or_default();
    for r in resolve(p) {
        if r.labels.get("pid") == Some(&pid.to_string()) {
            let names: Vec<&str> = r.functions.iter().map(String::as_str).collect();
            entry.add(&names, r.value);
        }
    }
}

/// Adds an OTLP request's samples of `pid` to the sums of its type.
fn add_otlp(sums: &mut HashMap<String, Sums>, req: &otlp::ExportProfilesServiceRequest, pid: u32) {
    let d = req.dictionary.as_ref().expect("a dictionary");
    let s = |i: i32| d.string_table[i as usize].as_str();
    for rp in &req.resource_profiles {
        for sp in &rp.scope_profiles {
            for profile in &sp.profiles {
                let t = profile.sample_type.as_ref().expect("a sample type");
                let key = format!("{}/{}", s(t.type_strindex), s(t.unit_strindex));
                let entry = sums.entry(key).or_default();
                for sample in &profile.samples {
                    let ours = sample.attribute_indices.iter().any(|&i| {
                        let kv = &d.attribute_table[i as usize];
                        s(kv.key_strindex) == "process.pid"
                            && matches!(
                                kv.value.as_ref().and_then(|v| v.value.as_ref()),
                                Some(otlp::any_value::Value::IntValue(n)) if *n == pid as i64
                            )
                    });
                    if !ours {
                        continue;
                    }
                    let names: Vec<&str> = d.stack_table[sample.stack_index as usize]
                        .location_indices
                        .iter()
                        .flat_map(|&l| d.location_table[l as usize].lines.iter())
                        .map(|line| s(d.function_table[line.function_index as usize].name_strindex))
                        .collect();
                    entry.add(&names, sample.values.iter().sum());
                }
            }
        }
    }
}

/// wallwork, started by a shell that waits for a line first: the pid the
/// agent is given is the workload's from its first instruction.
fn held_wallwork(args: &str) -> Child {
    held_wallwork_by("", args)
}

/// [`held_wallwork`], exec'd through `prefix` (`taskset -c 0`), which
/// execs it in turn.
fn held_wallwork_by(prefix: &str, args: &str) -> Child {
    let exe = workload("wallwork");
    Command::new("sh")
        .arg("-c")
        .arg(format!("read _ && exec {prefix} {} {args}", exe.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting sh")
}

/// Lets a held wallwork go.
fn go(w: &mut Child) {
    w.stdin
        .take()
        .expect("sh's stdin")
        .write_all(b"go\n")
        .expect("starting wallwork");
}

/// Waits for wallwork to end, successfully: its figures.
fn figures_of(w: &mut Child) -> (f64, f64, f64) {
    let status = w.wait().expect("waiting for wallwork");
    let mut err = String::new();
    w.stderr
        .take()
        .expect("wallwork's stderr")
        .read_to_string(&mut err)
        .expect("reading wallwork's stderr");
    assert!(status.success(), "wallwork: {err}");
    common::bpf::wallwork_figures(&err)
}

/// Waits until `pyroscope` holds a window of each of `kinds` profiles
/// (sample types): every collector is attached, not only the first.
fn wait_for_kinds(pyroscope: &HttpReceiver, kinds: usize) {
    let seen = || {
        pyroscope
            .requests()
            .iter()
            .map(|r| pprof_type(&decode_pprof(&r.body)))
            .collect::<std::collections::BTreeSet<_>>()
    };
    common::receivers::wait(LIMIT, || (seen().len() >= kinds).then_some(()))
        .unwrap_or_else(|| panic!("windows of {:?}, not of {kinds} profiles", seen()));
}

/// Checks one destination's sums against the workload's figures.
fn check(what: &str, sums: &HashMap<String, Sums>, truth: (f64, f64, f64)) {
    let (_, wall, in_compute) = truth;
    let rest_ns = (wall - in_compute) * 1e9;
    let why = format!(
        "{what}: the workload spent {in_compute:.3} s in compute() and {:.3} s in rest(); \
         flare: {sums:?}",
        wall - in_compute
    );
    let get = |t: &str| {
        *sums
            .get(t)
            .unwrap_or_else(|| panic!("no {t} profile; {why}"))
    };
    let off = get("offcpu/nanoseconds");
    assert!(
        (off.rest as f64 - rest_ns).abs() <= 0.1 * rest_ns,
        "off-CPU time in rest(); {why}"
    );
    // Emulated guests' timers lose most ticks (6 % of them kept before):
    // there the samples on the CPU prove the profile arrives, not the
    // time they stand for, and start-up (sh, exec, ld.so) holds more of
    // them (66 of 84 in compute() in one arm64 run). Off-CPU time is
    // traced, not sampled. Wall-clock time in rest() came 23 % short
    // there (2.04 s of 2.67; off-CPU's 2.64): not yet explained, so
    // bounded at 30 % emulated.
    let emulated = common::bpf::emulated();
    let cpu = get("samples/count");
    let (share, least, wall_bound) = match emulated {
        true => (0.5, 5, 0.3),
        false => (0.9, 50, 0.1),
    };
    assert!(
        cpu.compute as f64 >= share * cpu.all as f64 && cpu.compute > least,
        "CPU samples in compute(); {why}"
    );
    let w = get("wall/nanoseconds");
    assert!(
        (w.rest as f64 - rest_ns).abs() <= wall_bound * rest_ns,
        "wall-clock time in rest(); {why}"
    );
    let compute_ns = in_compute * 1e9;
    assert!(
        emulated || (w.compute as f64 - compute_ns).abs() <= 0.1 * compute_ns,
        "wall-clock time in compute(); {why}"
    );
}

#[test]
fn every_destination_gets_cpu_off_cpu_and_wall_windows() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    // Emulated, compute() takes twice its CPU time in wall time and more
    // (the guest's one CPU runs the agent too), which left rest() little
    // to block: there 50 ms of CPU in 250 ms cycles, sampled at 49 Hz.
    let emulated = common::bpf::emulated();
    let (args, hz) = match emulated {
        true => ("6 20 250", "49"),
        false => ("6 50 100", "199"),
    };
    let mut w = held_wallwork(args);
    let pid = w.id();
    let pyroscope = HttpReceiver::start(0);
    let collector = HttpReceiver::start(0);
    let parca = ParcaReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let pid_arg = pid.to_string();
    let parca_addr = parca.addr.to_string();
    let agent = Agent::start(&[
        "-p",
        &pid_arg,
        "-F",
        hz,
        "--interval",
        "1",
        "--profiles",
        "cpu,off-cpu,wall",
        "--pyroscope",
        &pyroscope.url(),
        "--otlp",
        &collector.url(),
        "--parca",
        &parca_addr,
        "-o",
        dir.path().to_str().unwrap(),
    ]);
    wait_for_kinds(&pyroscope, 3);
    go(&mut w);
    let truth = figures_of(&mut w);
    // The window holding wallwork's end is whole before the agent stops.
    std::thread::sleep(Duration::from_millis(1500));
    let agent_err = agent.terminate();

    let mut sums = HashMap::new();
    for r in pyroscope.requests() {
        add_pprof(&mut sums, &decode_pprof(&r.body), pid);
    }
    check("pyroscope", &sums, truth);

    let mut sums = HashMap::new();
    for r in collector.requests() {
        let req =
            otlp::ExportProfilesServiceRequest::decode(r.body.as_slice()).expect("OTLP protobuf");
        add_otlp(&mut sums, &req, pid);
    }
    check("otlp", &sums, truth);

    let mut sums = HashMap::new();
    let mut names = HashMap::new();
    for r in parca.requests() {
        for series in &r.series {
            let labels = series.labels.as_ref().expect("labels");
            let name = labels
                .labels
                .iter()
                .find(|l| l.name == "__name__")
                .map(|l| l.value.clone())
                .expect("a __name__");
            for s in &series.samples {
                let p = decode_pprof(&s.raw_profile);
                names.insert(pprof_type(&p), name.clone());
                add_pprof(&mut sums, &p, pid);
            }
        }
    }
    check("parca", &sums, truth);
    assert_eq!(names["samples/count"], "flare_cpu");
    assert_eq!(names["offcpu/nanoseconds"], "flare_offcpu");
    assert_eq!(names["wall/nanoseconds"], "flare_wall");

    let mut sums = HashMap::new();
    let files = flare::export::dir::Dir::files(dir.path()).unwrap();
    for f in &files {
        let p = decode_pprof(&std::fs::read(f).unwrap());
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let suffix = match pprof_type(&p).as_str() {
            "offcpu/nanoseconds" => "-offcpu.pb.gz",
            "wall/nanoseconds" => "-wall.pb.gz",
            _ => ".pb.gz",
        };
        assert!(name.ends_with(suffix), "{name}: {}", pprof_type(&p));
        add_pprof(&mut sums, &p, pid);
    }
    check("-o directory", &sums, truth);
    assert!(
        agent_err.contains("(cpu, off-cpu, wall)"),
        "the agent names its profiles: {agent_err}"
    );
}

/// Each wallwork's figures (cpu, wall, in compute()) and pid.
type Figures = Vec<((f64, f64, f64), u32)>;

/// wallworks (`held_wallwork_by` children) run to their end beside an
/// agent with `args` on their pids, pushing to Pyroscope: each one's
/// figures and pid, and the windows received.
fn wallworks_beside_agent(mut works: Vec<Child>, args: &[&str]) -> (Figures, Vec<proto::Profile>) {
    let pyroscope = HttpReceiver::start(0);
    let pid_arg = works
        .iter()
        .map(|w| w.id().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let url = pyroscope.url();
    let mut all = vec!["-p", &pid_arg, "--interval", "1", "--pyroscope", &url];
    all.extend_from_slice(args);
    let agent = Agent::start(&all);
    let profiles = args
        .iter()
        .skip_while(|a| **a != "--profiles")
        .nth(1)
        .map_or(1, |list| list.split(',').count());
    wait_for_kinds(&pyroscope, profiles);
    works.iter_mut().for_each(go);
    let figures = works.iter_mut().map(|w| (figures_of(w), w.id())).collect();
    std::thread::sleep(Duration::from_millis(1500));
    agent.terminate();
    let windows = pyroscope
        .requests()
        .iter()
        .map(|r| decode_pprof(&r.body))
        .collect();
    (figures, windows)
}

/// Sleeps of 2.4 ms, 2,000 of them, sampled over 20.4 ms (49 Hz): each is
/// kept with probability 0.12 and counted as 20.4 ms, so that rest()'s
/// off-CPU and wall-clock sums stay the workload's own (within 25 %,
/// about four standard deviations of the 235 kept), and its off-CPU
/// values per window are whole sampling periods, which sums of the true
/// lengths are not. (Here: within 8 % in 2 runs; every period counted
/// as it is, 1.6 % short and no whole periods.)
#[test]
fn short_blocked_periods_are_sampled_and_sum_true() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    // Emulated, wallwork's cycle stretches with its CPU time: longer
    // cycles there, sleeps of 12 ms, so that a wakeup late by up to
    // 8 ms still ends within a period. (Sleeps of 8 ms, twice as many,
    // came out 18 % short twice in three runs: each sleep's system calls
    // run slowly there, on the CPU but in rest().)
    let emulated = common::bpf::emulated();
    let workload = match emulated {
        true => "6 40 20",
        false => "6 20 3",
    };
    let (figures, windows) = wallworks_beside_agent(
        vec![held_wallwork(workload)],
        &["-F", "49", "--profiles", "off-cpu,wall"],
    );
    let ((_, wall, in_compute), pid) = figures[0];
    let rest_ns = (wall - in_compute) * 1e9;
    let period_ns = 1_000_000 / 49 * 1000;
    let mut sums: HashMap<String, Sums> = HashMap::new();
    let (mut whole, mut values) = (0usize, 0usize);
    for p in &windows {
        add_pprof(&mut sums, p, pid);
        if pprof_type(p) != "offcpu/nanoseconds" {
            continue;
        }
        for r in resolve(p) {
            let names: Vec<&str> = r.functions.iter().map(String::as_str).collect();
            if r.labels.get("pid") == Some(&pid.to_string()) && in_rest(&names) {
                values += 1;
                whole += usize::from(r.value % period_ns == 0);
            }
        }
    }
    let why = format!(
        "rest() slept {:.3} s by the workload's clock; {whole} of {values} off-CPU values \
         in rest() were whole periods of {period_ns} ns; flare: {sums:?}",
        rest_ns / 1e9
    );
    println!("{why}");
    // Emulated, wall-clock time in rest() came 23 % short before
    // sampling (every_destination_gets_cpu_off_cpu_and_wall_windows).
    let wall_bound = if emulated { 0.35 } else { 0.25 };
    for (kind, bound) in [
        ("offcpu/nanoseconds", 0.25),
        ("wall/nanoseconds", wall_bound),
    ] {
        let got = sums.get(kind).map_or(0, |s| s.rest) as f64;
        assert!(
            (got - rest_ns).abs() <= bound * rest_ns,
            "{kind} in rest(); {why}"
        );
    }
    // A sum of true lengths is a whole number of periods about once in
    // 20 million. Emulated, one wakeup late past the period in a window
    // makes that window's sum a true length (2 of 6 whole with 16 ms
    // sleeps in a 6.12 guest), so there one whole window is the proof.
    let needed = if emulated { 1 } else { values.div_ceil(2) };
    assert!(values > 0 && whole >= needed, "{why}");
}

/// Two wallworks computing 3 s each on one CPU, all the time: each is
/// preempted for about half of its 6 s, in slices of a few ms. Sampled over 20.4 ms
/// (49 Hz), one preemption in 5 is tracked and stands for 5: the time
/// the two spend preempted in compute() (their wall time there less
/// their CPU time) is their off-CPU time there within 25 % (about four
/// standard deviations of the 290 periods kept), and their wall-clock
/// time in compute() their own within 25 %. (Here, with 6 s each: +5 %
/// and -0.1 %.)
#[test]
fn preemptions_tracked_one_in_many_sum_true() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let works = (0..2)
        .map(|_| held_wallwork_by("taskset -c 0", "3 100"))
        .collect();
    let (figures, windows) =
        wallworks_beside_agent(works, &["-F", "49", "--profiles", "off-cpu,wall"]);
    let (mut off, mut wall) = (0i64, 0i64);
    for p in &windows {
        for r in resolve(p) {
            let ours = figures
                .iter()
                .any(|(_, pid)| r.labels.get("pid") == Some(&pid.to_string()));
            if !ours || !r.functions.iter().any(|f| f == "compute") {
                continue;
            }
            match pprof_type(p).as_str() {
                "offcpu/nanoseconds" => off += r.value,
                "wall/nanoseconds" => wall += r.value,
                _ => {}
            }
        }
    }
    let in_compute: f64 = figures.iter().map(|((_, _, c), _)| c).sum::<f64>() * 1e9;
    let cpu: f64 = figures.iter().map(|((c, _, _), _)| c).sum::<f64>() * 1e9;
    let preempted = in_compute - cpu;
    let why = format!(
        "the two spent {:.3} s in compute(), {:.3} s of it on the CPU; flare: off-CPU {:.3} s, \
         wall-clock {:.3} s there",
        in_compute / 1e9,
        cpu / 1e9,
        off as f64 / 1e9,
        wall as f64 / 1e9
    );
    println!("{why}");
    assert!(
        preempted > 0.25 * in_compute,
        "one CPU shared by two: {why}"
    );
    assert!(
        (off as f64 - preempted).abs() <= 0.25 * preempted,
        "off-CPU time in compute(); {why}"
    );
    // Emulated guests' timers lose most ticks: the time on the CPU,
    // sampled, is not the truth there (the preempted time is traced).
    assert!(
        common::bpf::emulated() || (wall as f64 - in_compute).abs() <= 0.25 * in_compute,
        "wall-clock time in compute(); {why}"
    );
}

#[test]
fn cgroupmap_with_off_cpu_is_refused_by_name() {
    let out = Command::new(env!("CARGO_BIN_EXE_flare"))
        .args([
            "agent",
            "--profiles",
            "cpu,off-cpu",
            "--cgroupmap",
            "/sys/fs/bpf/none",
            "-o",
            "/nonexistent/flare-windows",
        ])
        .output()
        .expect("running flare");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--cgroupmap and --mntnsmap filter the cpu profile only"),
        "{err}"
    );
}

/// The pids of every sample of a pprof window.
fn pids(p: &proto::Profile) -> std::collections::BTreeSet<String> {
    resolve(p)
        .into_iter()
        .filter_map(|r| r.labels.get("pid").cloned())
        .collect()
}

#[test]
fn each_service_is_its_own_application_and_resource() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    let start = |env: &[&str]| {
        let mut w = common::session::Workload::start_with(env, "twofuncs", &["60", "25", "1"]);
        w.go();
        w
    };
    let a = start(&["env", "OTEL_SERVICE_NAME=svc-a"]);
    let b = start(&["env", "OTEL_RESOURCE_ATTRIBUTES=team=x,service.name=svc-b"]);
    let none = start(&[]);
    let pyroscope = HttpReceiver::start(0);
    let collector = HttpReceiver::start(0);
    let pid_list = format!("{},{},{}", a.pid, b.pid, none.pid);
    let agent = Agent::start(&[
        "-p",
        &pid_list,
        "-F",
        "99",
        "--interval",
        "1",
        "--app-name",
        "fallback",
        "--pyroscope",
        &pyroscope.url(),
        "--otlp",
        &collector.url(),
    ]);
    // Until each service's application and resource has a sample (an
    // emulated guest takes seconds to attach, and its first windows are
    // empty), then the whole run's windows.
    let pyroscope_apps = || {
        let mut by_app: HashMap<String, std::collections::BTreeSet<String>> = HashMap::new();
        for r in pyroscope.requests() {
            let name = &r.query["name"];
            let app = name.split('{').next().unwrap_or(name).to_string();
            by_app
                .entry(app)
                .or_default()
                .extend(pids(&decode_pprof(&r.body)));
        }
        by_app
    };
    let otlp_resources = || {
        let mut by_resource: HashMap<String, std::collections::BTreeSet<String>> = HashMap::new();
        for r in collector.requests() {
            let req = otlp::ExportProfilesServiceRequest::decode(r.body.as_slice())
                .expect("OTLP protobuf");
            let resource = req.resource_profiles[0]
                .resource
                .as_ref()
                .expect("a resource");
            let service = resource
                .attributes
                .iter()
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    otlp::any_value::Value::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
                .expect("a service.name");
            for pid in [a.pid, b.pid, none.pid] {
                let mut sums = HashMap::new();
                add_otlp(&mut sums, &req, pid);
                if sums.values().any(|s: &Sums| s.all > 0) {
                    by_resource
                        .entry(service.clone())
                        .or_default()
                        .insert(pid.to_string());
                }
            }
        }
        by_resource
    };
    let all_three = |m: &HashMap<String, std::collections::BTreeSet<String>>| {
        ["svc-a", "svc-b", "fallback"]
            .iter()
            .all(|k| m.get(*k).is_some_and(|p| !p.is_empty()))
    };
    common::receivers::wait(LIMIT, || {
        (all_three(&pyroscope_apps()) && all_three(&otlp_resources())).then_some(())
    });
    let err = agent.terminate();
    let by_app = pyroscope_apps();
    let one = |pid: u32| std::collections::BTreeSet::from([pid.to_string()]);
    assert_eq!(by_app.get("svc-a"), Some(&one(a.pid)), "{by_app:?}; {err}");
    assert_eq!(by_app.get("svc-b"), Some(&one(b.pid)), "{by_app:?}; {err}");
    assert_eq!(
        by_app.get("fallback"),
        Some(&one(none.pid)),
        "{by_app:?}; {err}"
    );
    let by_resource = otlp_resources();
    assert_eq!(
        by_resource.get("svc-a"),
        Some(&one(a.pid)),
        "{by_resource:?}"
    );
    assert_eq!(
        by_resource.get("svc-b"),
        Some(&one(b.pid)),
        "{by_resource:?}"
    );
    assert_eq!(
        by_resource.get("fallback"),
        Some(&one(none.pid)),
        "{by_resource:?}"
    );
}
