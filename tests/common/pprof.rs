//! Reading flare's pprof files back with `go tool pprof -top` (Debian
//! golang-go, installed by scripts/deps.sh), as people will.

use std::path::Path;
use std::process::Command;

use flare::output::pprof::proto;

/// What `go tool pprof -top` printed.
pub struct Top {
    /// The whole output, for failure messages.
    pub text: String,
    /// The table's rows split on whitespace: flat, flat%, sum%, cum, cum%,
    /// then the function name.
    pub rows: Vec<Vec<String>>,
}

/// Runs `go tool pprof -top` on `file`, failing the test if it cannot.
pub fn top(file: &Path) -> Top {
    let home = tempfile::tempdir().expect("a home for go");
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-symbolize=none"])
        .arg(file)
        .env("HOME", home.path())
        .output()
        .expect("running go tool pprof (scripts/deps.sh installs golang-go)");
    assert!(
        out.status.success(),
        "go tool pprof failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    Top { text, rows }
}

/// pprof as readable text: the tables resolved, one sample per line.
pub fn text(p: &proto::Profile) -> String {
    let s = |i: i64| p.string_table[i as usize].as_str();
    let vt = |v: &proto::ValueType| format!("{}/{}", s(v.r#type), s(v.unit));
    let mut out = String::new();
    out.push_str(&format!(
        "sample_type: {}\n",
        p.sample_type.iter().map(vt).collect::<Vec<_>>().join(", ")
    ));
    out.push_str(&format!(
        "period: {} {}\nduration_nanos: {}\ndefault_sample_type: {}\n",
        p.period,
        vt(p.period_type.as_ref().unwrap()),
        p.duration_nanos,
        s(p.default_sample_type)
    ));
    for c in &p.comment {
        out.push_str(&format!("comment: {}\n", s(*c)));
    }
    for m in &p.mapping {
        out.push_str(&format!(
            "mapping {}: {} functions={} filenames={} lines={} inline={}\n",
            m.id,
            s(m.filename),
            m.has_functions,
            m.has_filenames,
            m.has_line_numbers,
            m.has_inline_frames
        ));
    }
    for sample in &p.sample {
        let labels: Vec<String> = sample
            .label
            .iter()
            .map(|l| {
                if l.str != 0 {
                    format!("{}={}", s(l.key), s(l.str))
                } else {
                    format!("{}={}", s(l.key), l.num)
                }
            })
            .collect();
        out.push_str(&format!("sample {:?} {}\n", sample.value, labels.join(" ")));
        for id in &sample.location_id {
            let loc = &p.location[*id as usize - 1];
            assert_eq!(loc.id, *id, "location ids are their index + 1");
            let lines: Vec<String> = loc
                .line
                .iter()
                .map(|l| {
                    let f = &p.function[l.function_id as usize - 1];
                    let file = s(f.filename);
                    if file.is_empty() {
                        s(f.name).to_string()
                    } else {
                        format!("{} {}:{}", s(f.name), file, l.line)
                    }
                })
                .collect();
            out.push_str(&format!(
                "    {:#x} m{} {}\n",
                loc.address,
                loc.mapping_id,
                lines.join(" | ")
            ));
        }
    }
    out
}
