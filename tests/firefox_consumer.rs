//! flare's Firefox Profiler files loaded by the Firefox Profiler's own
//! code: `profiler-cli` (npm `@firefox-devtools/profiler-cli`, which
//! bundles the profiler's loading and processing; scripts/deps.sh --test
//! installs it) opens the files and reports their threads, sample counts,
//! functions and markers. Skipped where it is missing, unless
//! `FLARE_REQUIRE_BPF=1`, when it fails.

mod common;

use std::path::Path;
use std::process::Command;

use common::timed;
use flare::output::{Format, StackStyle};
use flare::profile::Profile;

/// The profiler-cli to run, if any.
fn profiler_cli() -> Option<String> {
    let cli = std::env::var("FLARE_PROFILER_CLI").unwrap_or_else(|_| "profiler-cli".into());
    let found = Command::new(&cli)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(cli);
    }
    let why = format!("{cli} is not installed (scripts/deps.sh --test installs it)");
    if std::env::var("FLARE_REQUIRE_BPF").as_deref() == Ok("1") {
        panic!("the Firefox Profiler test is required (FLARE_REQUIRE_BPF=1) but cannot run: {why}");
    }
    eprintln!("skipping the Firefox Profiler test: {why}");
    None
}

/// A profiler-cli session of its own (its daemon is stopped on drop).
struct Session {
    cli: String,
    dir: tempfile::TempDir,
}

/// One session at a time: the daemon must start within profiler-cli's
/// fixed 500 ms, which two starting at once on a busy machine can miss.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Session {
    /// A session with `file` loaded. A daemon that was not ready within
    /// profiler-cli's 500 ms (a busy machine) is stopped by its pid and
    /// the load tried again, in a new session.
    fn load(cli: &str, file: &Path) -> Session {
        let mut last = String::new();
        for _ in 0..5 {
            let s = Session {
                cli: cli.to_string(),
                dir: tempfile::tempdir().unwrap(),
            };
            let out = s.command(&["load", &file.display().to_string()]);
            if out.status.success() {
                return s;
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            let Some(pid) = last
                .split("running as pid ")
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|p| p.parse::<i32>().ok())
            else {
                break;
            };
            // SAFETY: kill(2) on the pid of the daemon this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        panic!("profiler-cli load {}: {last}", file.display());
    }

    fn command(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.cli)
            .args(args)
            .env("PROFILER_CLI_SESSION_DIR", self.dir.path())
            .output()
            .expect("running profiler-cli")
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.command(args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "profiler-cli {args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new(&self.cli)
            .arg("stop")
            .env("PROFILER_CLI_SESSION_DIR", self.dir.path())
            .output();
    }
}

fn write(dir: &Path, name: &str, p: &Profile) -> std::path::PathBuf {
    let path = dir.join(name);
    let mut out = Vec::new();
    Format::Firefox
        .write(&mut out, p, StackStyle::default())
        .unwrap();
    std::fs::write(&path, out).unwrap();
    path
}

/// The handle (`t-N`) profiler-cli gives the thread with this tid.
fn thread_handle(info: &str, tid: u32) -> String {
    let needle = format!("[tid {tid}]");
    let line = info
        .lines()
        .find(|l| l.contains(&needle))
        .unwrap_or_else(|| panic!("no thread {tid} in:\n{info}"));
    let at = line.find("t-").unwrap();
    line[at..].split(':').next().unwrap().to_string()
}

#[test]
fn the_firefox_profiler_loads_flares_files() {
    let Some(cli) = profiler_cli() else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "cpu.json.gz", &timed::cpu());
    let s = Session::load(&cli, &file);
    let info = s.run(&["profile", "info"]);
    assert!(info.contains("6 threads across 6 processes"), "{info}");
    assert!(info.contains("flare profile: cpu-clock"), "{info}");

    // The app's thread: 11 samples, its functions named in their library,
    // the inlined one too.
    let app = thread_handle(&info, 4243);
    s.run(&["thread", "select", &app]);
    let thread = s.run(&["thread", "info"]);
    assert!(thread.contains("11 samples"), "{thread}");
    let functions = s.run(&["thread", "functions"]);
    for f in ["app!hash_buf", "app!main", "hash_step", "__libc_start_main"] {
        assert!(functions.contains(f), "{f} in:\n{functions}");
    }
    // Kernel frames in [kernel.kallsyms].
    let dd = thread_handle(&info, 25036);
    s.run(&["thread", "select", &dd]);
    let functions = s.run(&["thread", "functions"]);
    assert!(
        functions.contains("[kernel.kallsyms]!vfs_read"),
        "{functions}"
    );
}

#[test]
fn the_firefox_profiler_sees_off_cpu_markers_and_the_burst() {
    let Some(cli) = profiler_cli() else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let wall = write(dir.path(), "wall.json.gz", &timed::wall());
    let s = Session::load(&cli, &wall);
    let markers = s.run(&["thread", "markers", "--list"]);
    assert!(markers.contains("Off-CPU"), "{markers}");
    assert!(markers.contains("500"), "the 500 ms period:\n{markers}");
    drop(s);

    let burst = write(dir.path(), "burst.json.gz", &timed::burst());
    let s = Session::load(&cli, &burst);
    let thread = s.run(&["thread", "info"]);
    assert!(thread.contains("400 samples"), "{thread}");
    s.run(&["zoom", "push", "2.0,2.5"]);
    let functions = s.run(&["thread", "functions"]);
    let burst_line = functions
        .lines()
        .find(|l| l.contains("burst"))
        .unwrap_or_else(|| panic!("{functions}"));
    assert!(
        burst_line.contains("self: 50 (100.0% of view"),
        "{burst_line}"
    );
}
