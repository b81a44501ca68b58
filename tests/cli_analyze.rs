//! The analysis subcommands driven through the real binary in a temporary
//! directory: `flare flamegraph`, `flare diff` and `flare top` on saved
//! folded stacks, and the checks `-o` makes before a profile is taken.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::bpf::flare;
use common::golden;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn run(args: &[&str]) -> Output {
    flare().args(args).output().expect("running flare")
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "flare {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails(args: &[&str]) -> String {
    let out = run(args);
    assert!(!out.status.success(), "flare {args:?} should fail");
    assert!(out.stdout.is_empty(), "nothing on stdout when failing");
    String::from_utf8(out.stderr).unwrap()
}

fn titles(svg: &str) -> Vec<&str> {
    svg.split("<title>")
        .skip(1)
        .filter_map(|t| t.split("</title>").next())
        .collect()
}

/// The y coordinate of the first frame with this name.
fn y(svg: &str, name: &str) -> f64 {
    let at = svg
        .find(&format!("<title>{name} ("))
        .unwrap_or_else(|| panic!("no frame {name}"));
    let rest = &svg[at..];
    let v = &rest[rest.find(" y=\"").unwrap() + 4..];
    v[..v.find('"').unwrap()].parse().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn flamegraph_from_bcc_folded_stacks() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("a.svg");
    let input = data("profile-a.folded");
    ok(&[
        "flamegraph",
        s(&input),
        "-o",
        s(&out),
        "--title",
        "bcc -a stacks",
    ]);
    let svg = fs::read_to_string(&out).unwrap();
    golden::check("flamegraph-profile-a.svg", &svg);
    assert!(svg.contains(">bcc -a stacks<"));
    assert!(titles(&svg).contains(&"vfs_read (7 samples, 38.89%)"));
    // `_[k]` frames are drawn orange (no blue), user frames red.
    let rect = |name: &str| {
        let at = svg.find(&format!("<title>{name} (")).unwrap();
        let fill = &svg[at..][svg[at..].find("fill=\"rgb(").unwrap() + 10..];
        let rgb: Vec<u32> = fill[..fill.find(')').unwrap()]
            .split(',')
            .map(|c| c.parse().unwrap())
            .collect();
        rgb
    };
    assert_eq!(rect("vfs_read")[2], 0, "kernel frames are orange");
    assert!(rect("func_a")[2] > 0, "user frames are not orange");
}

#[test]
fn flamegraph_options_change_the_drawing() {
    let dir = tempfile::tempdir().unwrap();
    let input = data("profile-a.folded");
    let plain = ok(&["flamegraph", s(&input)]);
    assert!(plain.starts_with("<?xml"), "SVG on stdout without -o");
    // Reversed: merged from the leaves and drawn top down, so the leaf
    // __clear_user sits right below "all" and its process (dd) further down.
    let rev = ok(&["flamegraph", "--reverse", s(&input)]);
    assert!(y(&plain, "__clear_user") < y(&plain, "all"));
    assert_eq!(y(&rev, "__clear_user"), y(&rev, "all") + 16.0);
    assert!(y(&rev, "dd") > y(&rev, "__clear_user"));
    // Inverted only: top down, not merged from the leaves.
    let inv = ok(&["flamegraph", "--inverted", s(&input)]);
    assert!(y(&inv, "dd") == y(&inv, "all") + 16.0);
    // A huge minimum width leaves only the widest frames.
    let narrow = ok(&["flamegraph", "--minwidth", "300", s(&input)]);
    assert!(titles(&narrow).len() < titles(&plain).len());
    let out = dir.path().join("x.svg");
    let err = fails(&["flamegraph", "--minwidth=-1", s(&input), "-o", s(&out)]);
    assert!(err.contains("not a width"), "{err}");
}

#[test]
fn malformed_input_names_file_and_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.folded");
    fs::write(&bad, "a;b 3\na;c 4\na;d four\n").unwrap();
    let out = dir.path().join("out.svg");
    fs::write(&out, "previous result").unwrap();
    let err = fails(&["flamegraph", s(&bad), "-o", s(&out)]);
    assert!(err.contains(&format!("{}:3:", bad.display())), "{err}");
    assert!(err.contains("'four' is not a whole-number count"), "{err}");
    assert_eq!(fs::read_to_string(&out).unwrap(), "previous result");

    let good = data("profile.folded");
    let diff_out = dir.path().join("diff.svg");
    let err = fails(&["diff", s(&good), s(&bad), "-o", s(&diff_out)]);
    assert!(err.contains(&format!("{}:3:", bad.display())), "{err}");
    assert!(!diff_out.exists());
    let err = fails(&["top", s(&bad)]);
    assert!(err.contains(":3:"), "{err}");
    let missing = dir.path().join("missing.folded");
    let err = fails(&["top", s(&missing)]);
    assert!(
        err.contains("cannot read") && err.contains("missing.folded"),
        "{err}"
    );
    // No temporary files are left behind.
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn write_errors_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    // The target is a directory: the final rename must fail.
    let target = dir.path().join("taken.svg");
    fs::create_dir(&target).unwrap();
    let input = data("profile-a.folded");
    let err = fails(&["flamegraph", s(&input), "-o", s(&target)]);
    assert!(
        err.contains(&format!("cannot write {}", target.display())),
        "{err}"
    );
    let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "no temporary file left");
}

/// A full standard output is named once, with what was being written
/// (regression: "No space left on device (os error 28)" alone from these
/// commands; the profiling tools said the cause twice).
#[test]
fn a_full_standard_output_is_said_once() {
    let input = data("profile-a.folded");
    for sub in ["flamegraph", "top"] {
        let out = flare()
            .args([sub, s(&input)])
            .stdout(fs::File::create("/dev/full").expect("/dev/full"))
            .output()
            .expect("running flare");
        assert!(!out.status.success(), "flare {sub} into /dev/full");
        let err = String::from_utf8_lossy(&out.stderr);
        let full = std::io::Error::from_raw_os_error(28).to_string();
        assert_eq!(err.matches(&full).count(), 1, "{sub}: {err}");
        assert!(
            err.starts_with("flare: error: writing to standard output: "),
            "{sub}: {err}"
        );
    }
}

#[test]
fn diff_shows_growth_red_and_shrinkage_blue() {
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before.folded");
    let after = dir.path().join("after.folded");
    // After has twice the samples; normalised, c's share grew from 50% to
    // 75% and b's fell from 50% to 25%; a is unchanged at 100%.
    fs::write(&before, "p;a;b 100\np;a;c 100\n").unwrap();
    fs::write(&after, "p;a;b 100\np;a;c 300\n").unwrap();
    let out = dir.path().join("diff.svg");
    // Relative names, as the subtitle shows them.
    let status = flare()
        .current_dir(dir.path())
        .args(["diff", "before.folded", "after.folded", "-o", "diff.svg"])
        .status()
        .unwrap();
    assert!(status.success());
    let svg = fs::read_to_string(&out).unwrap();
    golden::check("diff-known.svg", &svg);
    let t = titles(&svg);
    assert!(t.contains(&"c (300 samples, 75.00%; +25.00%)"), "{t:?}");
    assert!(t.contains(&"b (100 samples, 25.00%; -25.00%)"), "{t:?}");
    assert!(t.contains(&"a (400 samples, 100.00%; 0.00%)"), "{t:?}");
    let fill = |name: &str| {
        let at = svg.find(&format!("<title>{name} (")).unwrap();
        let rest = &svg[at..];
        let f = &rest[rest.find("fill=\"").unwrap() + 6..];
        f[..f.find('"').unwrap()].to_string()
    };
    assert_eq!(fill("c"), "rgb(255,100,100)", "grew: red");
    assert_eq!(fill("b"), "rgb(100,100,255)", "shrank: blue");
    assert_eq!(fill("a"), "rgb(250,250,250)", "unchanged: white");
}

#[test]
fn top_ranks_self_and_total() {
    let input = data("profile-a.folded");
    let table = ok(&["top", s(&input)]);
    golden::check("top-profile-a.txt", &table);
    let first = table.lines().nth(1).unwrap();
    assert!(
        first.trim_start().starts_with("7 ") && first.ends_with("__clear_user_[k]"),
        "{first}"
    );
    let by_total = ok(&["top", "--total", "-n", "1", s(&input)]);
    assert_eq!(by_total.lines().count(), 2);
    assert!(
        by_total.lines().nth(1).unwrap().ends_with("[unknown]"),
        "{by_total}"
    );
}

#[test]
fn outputs_are_checked_before_profiling() {
    let err = fails(&["profile", "-o", "cpu.png", "1"]);
    assert!(err.contains("cannot tell the format of 'cpu.png'"), "{err}");
    assert!(err.contains(".pb.gz"), "{err}");
    let err = fails(&["profile", "-o", "/nonexistent-dir/cpu.svg", "1"]);
    assert!(
        err.contains("directory '/nonexistent-dir' does not exist"),
        "{err}"
    );
    let err = fails(&["profile", "--format", "png", "1"]);
    assert!(err.contains("unknown format 'png'"), "{err}");
}

/// `-o` replaces regular files only: a device (/dev/null, as root) or a
/// symbolic link stays what it is, with a clear error; an existing file
/// keeps its mode.
#[test]
fn output_files_replace_regular_files_only() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let input = data("profile-a.folded");
    let err = fails(&["flamegraph", s(&input), "-o", "/dev/null"]);
    assert!(err.contains("'/dev/null' is a device"), "{err}");
    assert!(fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    fs::write(&target, "keep").unwrap();
    let link = dir.path().join("g.svg");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = fails(&["flamegraph", s(&input), "-o", s(&link)]);
    assert!(err.contains("is a symbolic link"), "{err}");
    assert_eq!(fs::read_to_string(&target).unwrap(), "keep");
    let file = dir.path().join("mine.svg");
    fs::write(&file, "old").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).unwrap();
    ok(&["flamegraph", s(&input), "-o", s(&file)]);
    assert!(fs::read_to_string(&file).unwrap().contains("<svg"));
    assert_eq!(
        fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o640
    );
}
