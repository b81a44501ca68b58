use clap::Parser;

use super::*;
use flare::bpf::perf::Sampling;
use flare::collect::Target;
use flare::tools::profile::header;

fn parse(args: &[&str]) -> Result<profile::ProfileArgs, clap::Error> {
    let mut argv = vec!["flare", "profile"];
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv).map(|c| match c.command {
        Command::Profile(p) => p,
        other => unreachable!("parsed as another command: {other:?}"),
    })
}

fn head(args: &[&str]) -> String {
    header(&parse(args).expect("valid arguments").config())
}

#[test]
fn defaults_match_bcc() {
    let c = parse(&[]).unwrap().config();
    assert_eq!(c.sampling, Sampling::Frequency(49));
    assert_eq!(c.recording.hash_storage_size, 40960);
    assert_eq!(c.recording.stack_storage_size, 16384);
    assert_eq!(c.target, Target::All);
    assert!(c.recording.stacks.user && c.recording.stacks.kernel);
    assert_eq!(c.duration, None);
}

#[test]
fn headers_match_bcc() {
    assert_eq!(
        head(&[]),
        "Sampling at 49 Hertz of all threads by user + kernel stack... Hit Ctrl-C to end."
    );
    assert_eq!(
        head(&["-F", "99", "5"]),
        "Sampling at 99 Hertz of all threads by user + kernel stack for 5 secs."
    );
    assert_eq!(
        head(&["-c", "1000000", "-U"]),
        "Sampling at every 1000000 events of all threads by user stack... Hit Ctrl-C to end."
    );
    assert_eq!(
        head(&["-p", "2040,1316151", "-K"]),
        "Sampling at 49 Hertz of PID [2040, 1316151] by kernel stack... Hit Ctrl-C to end."
    );
    assert_eq!(
        head(&["-L", "185", "-C", "1", "3"]),
        "Sampling at 49 Hertz of TID [185] by user + kernel stack on CPU#1 for 3 secs."
    );
}

#[test]
fn exclusive_groups_are_enforced() {
    for bad in [
        &["-p", "1", "-L", "2"][..],
        &["-U", "-K"],
        &["-F", "99", "-c", "1000"],
    ] {
        let err = parse(bad).expect_err("conflicting options must be refused");
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::ArgumentConflict,
            "{bad:?}"
        );
    }
}

#[test]
fn bad_values_are_refused_with_a_reason() {
    for (bad, needle) in [
        (&["-F", "0"][..], "greater than zero"),
        (&["-c", "0"], "greater than zero"),
        (&["0"], "greater than zero"),
        (&["-p", "12,abc"], "'abc' is not a process or thread id"),
        (&["-p", ""], "is not a process or thread id"),
        (&["--stack-storage-size", "0"], "greater than zero"),
        (&["--hash-storage-size", "99999999999"], "too large"),
        (&["-F", "-5"], ""),
    ] {
        let err = parse(bad)
            .expect_err("bad value must be refused")
            .to_string();
        assert!(err.contains(needle), "{bad:?}: {err}");
    }
}

#[test]
fn id_lists_parse() {
    assert_eq!(id_list("1,22, 333").unwrap(), IdList(vec![1, 22, 333]));
    assert!(id_list("1,,2").is_err());
}

#[test]
fn outputs_pick_formats_by_extension_or_name() {
    use flare::output::Format;
    use output::Destination;
    use std::path::PathBuf;
    let d = parse(&["-o", "a.svg", "-o", "b.pb.gz", "-o", "c.json", "5"])
        .unwrap()
        .output
        .destinations()
        .unwrap();
    assert_eq!(
        d,
        [
            Destination::File(PathBuf::from("a.svg"), Format::Svg),
            Destination::File(PathBuf::from("b.pb.gz"), Format::Pprof),
            Destination::File(PathBuf::from("c.json"), Format::Speedscope),
        ]
    );
    let d = parse(&["--format", "pprof", "-o", "cpu.out"])
        .unwrap()
        .output
        .destinations()
        .unwrap();
    assert_eq!(
        d,
        [Destination::File(PathBuf::from("cpu.out"), Format::Pprof)]
    );
    let d = parse(&["--format", "svg"])
        .unwrap()
        .output
        .destinations()
        .unwrap();
    assert_eq!(d, [Destination::Stdout(Format::Svg)]);
    assert!(parse(&[])
        .unwrap()
        .output
        .destinations()
        .unwrap()
        .is_empty());
    let err = parse(&["-o", "cpu.out"])
        .unwrap()
        .output
        .destinations()
        .unwrap_err();
    assert!(err.contains("cannot tell the format of 'cpu.out'"), "{err}");
}

/// Every numeric option of every tool, and the positional durations:
/// a negative value is named negative and a word is named not a number,
/// each with what to give instead (never clap's "unexpected argument").
#[test]
fn negative_and_non_numeric_values_are_named() {
    // (subcommand, option or "" for a positional, trailing arguments)
    let cases: &[(&str, &str, &[&str])] = &[
        ("profile", "-F", &[]),
        ("profile", "-c", &[]),
        ("profile", "-p", &[]),
        ("profile", "-L", &[]),
        ("profile", "-C", &[]),
        ("profile", "--hash-storage-size", &[]),
        ("profile", "--stack-storage-size", &[]),
        ("profile", "", &[]),
        ("stackcount", "-p", &["f"]),
        ("stackcount", "-c", &["f"]),
        ("stackcount", "-i", &["f"]),
        ("stackcount", "-D", &["f"]),
        ("stackcount", "--stack-storage-size", &["f"]),
        ("offcputime", "-p", &[]),
        ("offcputime", "-t", &[]),
        ("offcputime", "-m", &[]),
        ("offcputime", "-M", &[]),
        ("offcputime", "--state", &[]),
        ("offcputime", "--stack-storage-size", &[]),
        ("offcputime", "--blocked-storage-size", &[]),
        ("offcputime", "", &[]),
        ("wakeuptime", "-p", &[]),
        ("wakeuptime", "--stack-storage-size", &[]),
        ("wakeuptime", "", &[]),
        ("offwaketime", "-p", &[]),
        ("offwaketime", "--stack-storage-size", &[]),
        ("offwaketime", "", &[]),
        ("wallclock", "-p", &[]),
        ("wallclock", "-F", &[]),
        ("wallclock", "-m", &[]),
        ("wallclock", "--state", &[]),
        ("wallclock", "--hash-storage-size", &[]),
        ("wallclock", "--stack-storage-size", &[]),
        ("wallclock", "", &[]),
        ("agent", "-F", &["--pyroscope", "http://127.0.0.1:1"]),
        ("agent", "-p", &["--pyroscope", "http://127.0.0.1:1"]),
        (
            "agent",
            "--interval",
            &["--pyroscope", "http://127.0.0.1:1"],
        ),
        (
            "agent",
            "--push-timeout",
            &["--pyroscope", "http://127.0.0.1:1"],
        ),
        (
            "agent",
            "--spool-max-mb",
            &["--pyroscope", "http://127.0.0.1:1"],
        ),
        ("agent", "--keep", &["--pyroscope", "http://127.0.0.1:1"]),
        ("top", "-n", &["x"]),
        ("flamegraph", "--minwidth", &["x"]),
    ];
    for (tool, opt, rest) in cases {
        for (value, says) in [("-5", "negative"), ("abc", "not a")] {
            let mut argv = vec!["flare", tool];
            if !opt.is_empty() {
                argv.push(opt);
            }
            argv.push(value);
            argv.extend_from_slice(rest);
            let err = match Cli::try_parse_from(&argv) {
                Ok(c) => panic!("{argv:?} parsed: {c:?}"),
                Err(e) => e.to_string(),
            };
            let first = err.lines().next().unwrap_or("");
            assert!(
                first.contains(&format!("invalid value '{value}'")) && first.contains(says)
                    || (says == "negative" && first.contains("is not a") && first.contains("-5")),
                "{argv:?}: {err}"
            );
        }
    }
}

#[test]
fn outputs_refuse_devices_and_links_and_take_dash_for_stdout() {
    use flare::output::Format;
    use output::Destination;
    let dests = |args: &[&str]| parse(args).unwrap().output.destinations();
    let err = dests(&["-o", "/dev/null", "5"]).unwrap_err();
    assert!(err.contains("'/dev/null' is a device"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("p.svg");
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    let err = dests(&["-o", link.to_str().unwrap(), "5"]).unwrap_err();
    assert!(err.contains("is a symbolic link"), "{err}");
    assert_eq!(
        dests(&["-o", "-", "--format", "folded", "5"]).unwrap(),
        vec![Destination::Stdout(Format::Folded)]
    );
    assert!(dests(&["-o", "-", "5"])
        .unwrap_err()
        .contains("add --format"));
    assert!(parse(&["-o", "-", "--format", "svg", "5"])
        .unwrap()
        .output
        .format_on_stdout());
}
