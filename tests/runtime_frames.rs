//! A frame that is not a machine address, written by BPF into flare's
//! stack record and followed to the writers: under the test knob
//! `FLARE_TEST_RUNTIME_FRAME=1` every user stack ends (at its root) in a
//! runtime frame whose identifiers are the process id and the number of
//! native words below it. Both BPF paths that store user stacks write it
//! (`--unwind fp`: bpf_get_stack; `--unwind dwarf`: the table walker),
//! the decoder must find it after the native frames, and the symbolizer
//! must name it from the live process through its runtime's namer.

mod common;

use std::fs;
use std::path::PathBuf;

use common::bpf::{require_bpf, serial};
use common::receivers::decode_pprof;
use common::session::{parse_folded, Flare, Workload};
use flare::output::pprof::proto;

/// The namer names the frame after the process (its comm, cut to 15 bytes).
const ROOT: &str = "runtime_root_of_workload-twofun";

fn run(unwind: &str) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("runtime-frames-{unwind}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let pb = dir.join("cpu.pb.gz");
    let mut w = Workload::start("twofuncs", &["2", "25"]);
    let pid = w.pid.to_string();
    let flare = Flare::start_with_env(
        &[
            "profile",
            "-U",
            "-F",
            "199",
            "-p",
            &pid,
            "--unwind",
            unwind,
            "-f",
            "-o",
            pb.to_str().unwrap(),
        ],
        1,
        &[("FLARE_TEST_RUNTIME_FRAME", "1")],
    );
    w.go();
    w.wait_done();
    let (folded, stderr) = flare.stop();
    drop(w);

    let stacks = parse_folded(&folded);
    // A sample taken while the workload exits, after its memory is gone,
    // has no user stack at all (bpf_get_stack gives nothing; bcc prints
    // the comm alone too): no frame to end in a runtime frame.
    let (ours, bare): (Vec<&(Vec<String>, u64)>, Vec<_>) = stacks
        .iter()
        .filter(|(f, _)| f[0] == "workload-twofun")
        .partition(|(f, _)| f.len() > 1);
    let samples: u64 = ours.iter().map(|(_, n)| n).sum();
    let without_user_stack: u64 = bare.iter().map(|(_, n)| n).sum();
    assert!(
        without_user_stack * 10 <= samples,
        "{unwind}: {without_user_stack} samples without a user stack, {samples} with:\n{folded}"
    );
    // A floor, not a count: emulated guests' timers lag.
    assert!(
        samples >= 10,
        "{unwind}: {samples} samples:\n{folded}\n{stderr}"
    );
    // A stack the kernel's frame-pointer walk cut at its limit is marked
    // [truncated] at its root, above the runtime frame: a frame chain that
    // loops (a saved frame pointer pointing at itself, in code built
    // without them) fills it with one address. Rare; the runtime frame
    // still follows.
    let mut cut = 0;
    for (frames, n) in &ours {
        let at = if frames[1] == "[truncated]" {
            cut += n;
            2
        } else {
            1
        };
        assert_eq!(frames[at], ROOT, "{unwind}: the root frame: {frames:?}");
        assert!(
            frames[at + 1..].iter().all(|f| f != ROOT),
            "{unwind}: once, at the root: {frames:?}"
        );
    }
    assert!(
        cut * 10 <= samples,
        "{unwind}: {cut} of {samples} samples cut at the depth limit:\n{folded}"
    );
    let in_funcs = |name: &str| -> u64 {
        ours.iter()
            .filter(|(f, _)| f.last().is_some_and(|l| l == name))
            .map(|(_, n)| n)
            .sum()
    };
    assert!(
        in_funcs("func_a") + in_funcs("func_b") >= samples * 9 / 10,
        "{unwind}: the native frames are intact below it:\n{folded}"
    );

    // pprof: a function with the namer's file, whose line is the number
    // of native frames BPF stored below it.
    let p = decode_pprof(&fs::read(&pb).unwrap());
    let s = |i: i64| p.string_table[i as usize].as_str();
    let root = p
        .function
        .iter()
        .find(|f| s(f.name) == ROOT)
        .expect("the runtime frame's function");
    assert_eq!(s(root.filename), "<test-runtime>");
    let mut checked = 0;
    for sample in &p.sample {
        let locs: Vec<&proto::Location> = sample
            .location_id
            .iter()
            .map(|&id| &p.location[id as usize - 1])
            .collect();
        let name = |l: &proto::Location| {
            l.line
                .first()
                .and_then(|line| p.function.iter().find(|f| f.id == line.function_id))
                .map(|f| s(f.name))
        };
        // Cut at the depth limit (above): the marker is the root.
        let locs = match locs.split_last() {
            Some((last, rest)) if name(last) == Some("[truncated]") => rest,
            _ => &locs[..],
        };
        let Some((last, below)) = locs.split_last() else {
            continue; // no user stack (the workload exiting), as above
        };
        assert_eq!(
            last.line[0].function_id, root.id,
            "the root is the runtime frame"
        );
        let native_lines: usize = below.iter().map(|l| l.line.len()).sum();
        assert_eq!(
            last.line[0].line as usize, native_lines,
            "{unwind}: the identifiers BPF read: as many native frames as stored"
        );
        checked += 1;
    }
    assert!(checked > 0);
}

#[test]
fn frame_pointer_stacks_carry_a_runtime_frame() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    run("fp");
}

#[test]
fn table_walked_stacks_carry_a_runtime_frame() {
    if !require_bpf() {
        return;
    }
    let _serial = serial();
    run("dwarf");
}
