//! A real `flare profile` run against the twofuncs workload (func_b gets
//! 75% of its CPU time by construction) writing every file format at once,
//! each then read by the program people open it with: `go tool pprof`
//! must list func_b first, headless Chromium must load the SVG without a
//! script error and draw func_b's frame, and the speedscope file must match
//! speedscope's schema and account for the CPU time the workload reports.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::bpf::{require_bpf, serial};
use common::schema;
use common::session::{Flare, Workload};
use serde_json::Value;

/// Share of the workload's CPU time in func_b, by construction.
const FUNC_B_SHARE: f64 = 0.75;
/// How far a measured share may stray from it (about 2.5 standard
/// deviations of sampling noise at the ~400 samples of a 2 s run).
const SHARE_TOLERANCE: f64 = 0.06;

struct Run {
    dir: PathBuf,
    /// CPU seconds the workload reports for its work, all of which flare
    /// sampled.
    cpu: f64,
}

fn profile_twofuncs() -> Run {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bpf-formats");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();

    let mut w = Workload::start("twofuncs", &["2", "25"]);
    let pid = w.pid.to_string();
    let flare = Flare::start(
        &[
            "profile",
            "-F",
            "199",
            "-p",
            &pid,
            "-o",
            &path("cpu.svg"),
            "-o",
            &path("cpu.pb.gz"),
            "-o",
            &path("cpu.json"),
            "-o",
            &path("cpu.folded"),
        ],
        1,
    );
    w.go();
    let cpu = w.wait_done();
    let (stdout, stderr) = flare.stop();
    assert!(
        stdout.starts_with("Sampling at 199 Hertz") && stdout.lines().count() == 1,
        "with -o, stdout has the header only: {stdout}"
    );
    assert!(
        stderr.contains("wrote ") && stderr.contains("cpu.pb.gz (pprof)"),
        "{stderr}"
    );

    // A target that is not a regular file is refused before profiling.
    fs::create_dir(dir.join("taken.svg")).unwrap();
    let out = common::bpf::flare()
        .args(["profile", "-o", &path("taken.svg"), "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("is a directory"), "{err}");

    // A file that cannot be written fails the run, after the others are
    // written: here its directory is removed while flare profiles.
    fs::create_dir(dir.join("gone")).unwrap();
    let mut w = Workload::start("twofuncs", &["2", "25"]);
    w.go();
    let child = common::bpf::flare()
        .args(["profile", "-p", &w.pid.to_string()])
        .args([
            "-o",
            &path("gone/lost.svg"),
            "-o",
            &path("also.folded"),
            "1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    fs::remove_dir(dir.join("gone")).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a failed write must fail the run");
    assert!(
        err.contains(&format!("cannot write {} (svg)", path("gone/lost.svg"))),
        "{err}"
    );
    assert!(fs::read_to_string(dir.join("also.folded"))
        .unwrap()
        .contains("func_b"));
    Run { dir, cpu }
}

fn within(measured: f64, expected: f64, tolerance: f64, what: &str) {
    assert!(
        (measured - expected).abs() <= tolerance,
        "{what}: measured {measured:.3}, expected {expected:.3} ± {tolerance}"
    );
}

#[test]
fn profile_files_open_in_their_viewers() {
    if !require_bpf() {
        return;
    }
    let run = {
        let _guard = serial();
        profile_twofuncs()
    };
    check_pprof(&run);
    check_speedscope(&run);
    check_folded(&run);
    check_svg_in_chromium(&run);
}

fn check_pprof(run: &Run) {
    let top = common::pprof::top(&run.dir.join("cpu.pb.gz"));
    let text = &top.text;
    assert!(text.contains("Type: cpu"), "{text}");
    let first = top
        .rows
        .first()
        .unwrap_or_else(|| panic!("no rows:\n{text}"));
    assert_eq!(
        first.last().unwrap(),
        "func_b",
        "hottest function first:\n{text}"
    );
    let pct: f64 = first[1].trim_end_matches('%').parse().unwrap();
    within(
        pct / 100.0,
        FUNC_B_SHARE,
        SHARE_TOLERANCE,
        "func_b flat share in pprof",
    );
    assert_eq!(
        top.rows[1].last().unwrap(),
        "func_a",
        "func_a second:\n{text}"
    );
}

fn check_speedscope(run: &Run) {
    let doc: Value = serde_json::from_slice(&fs::read(run.dir.join("cpu.json")).unwrap()).unwrap();
    let schema_path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/speedscope-file-format-schema.json"
    );
    let schema: Value = serde_json::from_str(&fs::read_to_string(schema_path).unwrap()).unwrap();
    let errors = schema::validate(&schema, &doc);
    assert!(errors.is_empty(), "{errors:#?}");
    let frames = doc["shared"]["frames"].as_array().unwrap();
    let p = &doc["profiles"][0];
    assert_eq!(p["unit"], "nanoseconds");
    let (mut total, mut in_b) = (0.0, 0.0);
    for (stack, w) in p["samples"]
        .as_array()
        .unwrap()
        .iter()
        .zip(p["weights"].as_array().unwrap())
    {
        let w = w.as_f64().unwrap();
        total += w;
        let leaf = stack.as_array().unwrap().last().unwrap().as_u64().unwrap() as usize;
        if frames[leaf]["name"] == "func_b" {
            in_b += w;
        }
    }
    within(
        in_b / total,
        FUNC_B_SHARE,
        SHARE_TOLERANCE,
        "func_b share in speedscope",
    );
    // flare sampled all of the workload's work: the weights add up to the
    // CPU time it reports for itself (within 10 %, as bpf_profile allows).
    let sampled = total / 1e9;
    within(sampled / run.cpu, 1.0, 0.10, "sampled CPU / workload CPU");
}

fn check_folded(run: &Run) {
    let text = fs::read_to_string(run.dir.join("cpu.folded")).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("workload-twofun;") && l.contains(";func_b ")),
        "{text}"
    );
}

const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
    "--window-size=1000,700",
];

/// Runs headless Chromium on a file with a fresh profile directory.
fn chromium(dir: &Path, file: &Path, action: &str) -> Output {
    let profile = tempfile::tempdir_in(dir).unwrap();
    Command::new("timeout")
        .arg("120")
        .arg("chromium")
        .args(CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(action)
        .arg(format!("file://{}", file.display()))
        .output()
        .expect("running chromium (scripts/deps.sh installs chromium)")
}

/// Console errors Chromium logged while running the page's scripts.
fn script_errors(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE") && (l.contains("Uncaught") || l.contains("Error")))
        .map(str::to_string)
        .collect()
}

fn check_svg_in_chromium(run: &Run) {
    let svg_path = run.dir.join("cpu.svg");
    let svg = fs::read_to_string(&svg_path).unwrap();

    // The check must be able to fail: a page with a throwing script is caught.
    let broken = run.dir.join("broken.svg");
    fs::write(
        &broken,
        svg.replacen(
            "]]></script>",
            "]]></script><script>throw new Error('planted')</script>",
            1,
        ),
    )
    .unwrap();
    let out = chromium(&run.dir, &broken, "--dump-dom");
    assert!(
        script_errors(&out).iter().any(|e| e.contains("planted")),
        "a planted script error went unnoticed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = chromium(&run.dir, &svg_path, "--dump-dom");
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        script_errors(&out),
        Vec::<String>::new(),
        "script errors in the flame graph"
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let b = dom
        .find("<title>func_b (")
        .unwrap_or_else(|| panic!("no func_b frame in the DOM"));
    // The tooltip gives value and share; the share is func_b's.
    let title = &dom[b + 7..b + dom[b..].find("</title>").unwrap()];
    let pct: f64 = title[title.rfind(", ").unwrap() + 2..title.len() - 2]
        .parse()
        .unwrap();
    let pct_expected = 100.0 * FUNC_B_SHARE;
    assert!(
        (pct - pct_expected).abs() <= 100.0 * SHARE_TOLERANCE + 5.0,
        "{title}"
    );
    // inferno's init() ran: it moves the search button to the window width.
    let search_x = |s: &str| {
        let at = s.find("id=\"search\"").unwrap();
        let tag = &s[s[..at].rfind('<').unwrap()..at + s[at..].find('>').unwrap()];
        let x = &tag[tag.find(" x=\"").unwrap() + 4..];
        x[..x.find('"').unwrap()].to_string()
    };
    assert_ne!(
        search_x(&dom),
        search_x(&svg),
        "the flame graph's script did not run"
    );

    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("flare-profile-twofuncs.png");
    let _ = fs::remove_file(&shot);
    let out = chromium(
        &run.dir,
        &svg_path,
        &format!("--screenshot={}", shot.display()),
    );
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = fs::read(&shot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 5000,
        "a real screenshot"
    );
    eprintln!("flame graph screenshot: {}", shot.display());
}
