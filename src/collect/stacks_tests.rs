use super::*;

const TEST: u8 = 255;

fn runtime(ids: [u64; 2], cookie: u64) -> RawFrame {
    RawFrame::Runtime(Box::new(RuntimeFrame {
        runtime: Runtime::Test,
        ids,
        cookie,
    }))
}

#[test]
fn native_words_are_addresses() {
    let user = [0x5555_0000_1234, 0x7f00_0000_0010];
    let kernel = [0xffff_ffff_8100_0000];
    assert_eq!(
        decode(&user),
        [RawFrame::Addr(user[0]), RawFrame::Addr(user[1])]
    );
    assert_eq!(decode(&kernel), [RawFrame::Addr(kernel[0])]);
}

#[test]
fn runtime_frames_keep_their_place_among_native_ones() {
    let h = frame_header(TEST, RUNTIME_FRAME_WORDS as u8);
    let words = [0x1000, h, 7, 8, 9, 0x2000, h, 10, 11, 12];
    assert_eq!(
        decode(&words),
        [
            RawFrame::Addr(0x1000),
            runtime([7, 8], 9),
            RawFrame::Addr(0x2000),
            runtime([10, 11], 12),
        ]
    );
}

#[test]
fn a_cut_frame_ends_the_stack_and_an_unknown_type_keeps_its_room() {
    let h = frame_header(TEST, RUNTIME_FRAME_WORDS as u8);
    assert_eq!(decode(&[0x1000, h, 7]), [RawFrame::Addr(0x1000)]);
    let odd = frame_header(99, 2);
    assert_eq!(
        decode(&[odd, 1, 2, 0x3000]),
        [
            RawFrame::label("[unknown frame type 99]"),
            RawFrame::Addr(0x3000)
        ]
    );
}

#[test]
fn a_record_is_length_hash_words() {
    let h = frame_header(TEST, RUNTIME_FRAME_WORDS as u8);
    let stored = bytes(&[4u64, 0xabcd, h, 1, 2, 3, 0xdead]);
    let frames = |bytes: &[u8]| record(bytes, |_| None).map(|r| r.frames);
    assert_eq!(frames(&stored), Some(vec![runtime([1, 2], 3)]));
    assert_eq!(frames(&stored[..5 * 8]), None, "shorter than its length");
}

fn bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// The head of a stack of `total` native frames (its first CHUNK_WORDS
/// stored), cut or not, and its tail's chunks.
fn deep(total: usize, cut: bool) -> (Vec<u8>, Vec<Vec<u8>>) {
    let all: Vec<u64> = (0..total as u64).map(|i| 0x1000 + i).collect();
    let len = total as u64 | (total as u64) << LEN_FRAMES_SHIFT | if cut { LEN_CUT } else { 0 };
    let mut head = vec![len, 0xabcd];
    head.extend(&all[..total.min(CHUNK_WORDS)]);
    head.resize(2 + CHUNK_WORDS, 0);
    let chunks = all[total.min(CHUNK_WORDS)..]
        .chunks(CHUNK_WORDS)
        .map(|c| {
            let mut c = c.to_vec();
            c.resize(CHUNK_WORDS, 0);
            bytes(&c)
        })
        .collect();
    (bytes(&head), chunks)
}

#[test]
fn a_deep_stack_is_its_head_then_its_tail_chunks() {
    let (head, chunks) = deep(600, false);
    let r = record(&head, |k| chunks.get(k - 1).cloned()).expect("a record");
    assert!(r.whole);
    assert_eq!(r.frames.len(), 600);
    assert_eq!(r.frames[0], RawFrame::Addr(0x1000));
    assert_eq!(r.frames[599], RawFrame::Addr(0x1000 + 599));
    assert!(
        !r.frames.contains(&truncated(None)),
        "a whole stack is not marked"
    );
}

#[test]
fn a_stack_the_walk_cut_ends_in_one_truncated_frame() {
    let (head, chunks) = deep(1024, true);
    let r = record(&head, |k| chunks.get(k - 1).cloned()).expect("a record");
    assert_eq!(r.frames.len(), 1025);
    assert_eq!(r.frames[1024], RawFrame::label(TRUNCATED));
    // Shallow ones that were cut too (the kernel's own walk at its limit).
    let (head, _) = deep(127, true);
    let r = record(&head, |_| None).expect("a record");
    assert_eq!(r.frames.last(), Some(&RawFrame::label("[truncated]")));
}

#[test]
fn a_missing_tail_chunk_says_how_many_frames_are_lost_and_is_not_kept() {
    let (head, chunks) = deep(400, false);
    let r = record(&head, |k| (k == 1).then(|| chunks[0].clone())).expect("a record");
    assert!(
        !r.whole,
        "read again later: another CPU may still be storing it"
    );
    assert_eq!(r.frames.len(), 2 * CHUNK_WORDS + 1);
    assert_eq!(
        r.frames.last(),
        Some(&RawFrame::label("[truncated: 146 more frames]"))
    );
}

/// The header's layout and the frame types are the C header's: a change
/// on one side only fails here.
#[test]
fn the_encoding_matches_bpf_common_h() {
    let c = include_str!("../../bpf/common.h");
    let define = |name: &str| -> u64 {
        let line = c
            .lines()
            .find(|l| l.starts_with(&format!("#define {name}")))
            .unwrap_or_else(|| panic!("{name} not in common.h"));
        let v = line.split_whitespace().nth(2).expect("a value");
        let v = v.trim_end_matches("ULL");
        match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).expect("hex"),
            None => v.parse().expect("decimal"),
        }
    };
    assert_eq!(define("FLARE_FRAME_TAG"), FRAME_TAG);
    assert_eq!(define("FLARE_MAX_STACK_DEPTH"), CHUNK_WORDS as u64);
    assert_eq!(define("FLARE_STACK_CHUNKS"), STACK_CHUNKS as u64);
    assert_eq!(define("FLARE_MAX_FRAMES"), MAX_FRAMES as u64);
    assert_eq!(define("FLARE_LEN_WORDS"), LEN_WORDS);
    assert_eq!(
        define("FLARE_LEN_FRAMES_SHIFT"),
        u64::from(LEN_FRAMES_SHIFT)
    );
    assert!(c.contains("#define FLARE_LEN_CUT\t\t(1ULL << 32)"));
    assert_eq!(LEN_CUT, 1 << 32);
    assert!(c.contains("#define FLARE_LEN_KERNEL_CAP\t(1ULL << 33)"));
    assert_eq!(LEN_KERNEL_CAP, 1 << 33);
    assert_eq!(
        define("FLARE_RUNTIME_FRAME_WORDS"),
        RUNTIME_FRAME_WORDS as u64
    );
    for (name, runtime) in [
        ("FLARE_FRAME_PYTHON", Runtime::Python),
        ("FLARE_FRAME_JAVA", Runtime::Java),
        ("FLARE_FRAME_V8", Runtime::V8),
        ("FLARE_FRAME_RUBY", Runtime::Ruby),
        ("FLARE_FRAME_TEST", Runtime::Test),
    ] {
        assert_eq!(
            Runtime::from_frame_type(define(name) as u8),
            Some(runtime),
            "{name}"
        );
        assert_eq!(u64::from(runtime.frame_type()), define(name), "{name}");
    }
    assert!(c.contains(
        "((FLARE_FRAME_TAG << 48) | ((__u64)(type) << 40) | ((__u64)(flags) << 32) | (__u64)(words))"
    ));
}

#[test]
fn stacks_not_met_in_two_reads_are_dropped() {
    let trace = |n: u64| RawTrace::Frames(Arc::from(vec![RawFrame::Addr(n)]));
    let mut c = StackCache::default();
    c.insert(1, trace(1));
    c.insert(2, trace(2));
    c.insert(3, trace(3));
    c.end_read();
    // Read 2 meets 1; read 3 meets 2: each is kept, and 3 (met in
    // neither) goes after read 3.
    assert_eq!(c.get(1), Some(trace(1)));
    c.end_read();
    assert_eq!(c.get(2), Some(trace(2)), "kept over one read without it");
    let dropped = c.end_read();
    assert_eq!(dropped.into_keys().collect::<Vec<_>>(), [3], "returned");
    assert_eq!(c.get(3), None, "dropped after two reads without it");
    assert_eq!(c.get(1), Some(trace(1)));
    assert_eq!(c.len(), 2);
    // Met twice in one read: one entry.
    assert_eq!(c.get(1), Some(trace(1)));
    c.end_read();
    c.end_read();
    c.end_read();
    assert_eq!(c.len(), 0);
}

#[test]
fn stacks_stored_and_never_met_go_after_two_reads() {
    let trace = RawTrace::Frames(Arc::from(vec![RawFrame::Addr(1)]));
    let mut c = StackCache::default();
    let mut unmet = Unmet::default();
    // 1: never met; 2: met at the next read; 3: stored again when met
    // already (kept by the cache, not here).
    c.insert(3, trace.clone());
    unmet.announce(1, 300, &c);
    unmet.announce(2, 5, &c);
    unmet.announce(3, 5, &c);
    c.end_read();
    assert!(unmet.age(&c).is_empty(), "none goes at its first read");
    c.insert(2, trace);
    c.end_read();
    assert_eq!(unmet.age(&c), [(1, 300)], "the unmet one, with its words");
    c.end_read();
    c.end_read();
    assert!(unmet.age(&c).is_empty(), "met ones are the cache's to drop");
    assert!(unmet.0.is_empty());
}

/// A BPF hash map of `key`-byte keys and `value`-byte values; `None`
/// without the right to make one (not root), which fails under
/// FLARE_REQUIRE_BPF=1.
fn hash_map(key: u32, value: u32, entries: u32) -> Option<libbpf_rs::MapHandle> {
    map(libbpf_rs::MapType::Hash, key, value, entries)
}

/// A BPF map of `kind`, as [`hash_map`] makes one.
fn map(
    kind: libbpf_rs::MapType,
    key: u32,
    value: u32,
    entries: u32,
) -> Option<libbpf_rs::MapHandle> {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    let map = libbpf_rs::MapHandle::create(kind, Some("flare_test"), key, value, entries, &opts);
    match map {
        Ok(m) => Some(m),
        Err(e) => {
            assert!(
                std::env::var("FLARE_REQUIRE_BPF").as_deref() != Ok("1"),
                "creating a BPF map: {e}"
            );
            eprintln!("skipped: creating a BPF map: {e}");
            None
        }
    }
}

#[test]
fn a_forgetting_reader_deletes_stacks_it_no_longer_meets_with_their_tails() {
    let head_size = (2 + CHUNK_WORDS) as u32 * 8;
    let chunk_size = CHUNK_WORDS as u32 * 8;
    let (Some(stacks), Some(tails)) = (hash_map(8, head_size, 16), hash_map(16, chunk_size, 16))
    else {
        return;
    };
    // Stack 1: 300 frames, a head and two tail chunks; 2: one frame;
    // 3: one frame, met at every read.
    let (head, chunks) = deep(300, false);
    stacks
        .update(&1u64.to_ne_bytes(), &head, MapFlags::ANY)
        .unwrap();
    for (k, c) in chunks.iter().enumerate() {
        tails
            .update(&tail_key(1, k as u64 + 1), c, MapFlags::ANY)
            .unwrap();
    }
    let (short, _) = deep(1, false);
    stacks
        .update(&2u64.to_ne_bytes(), &short, MapFlags::ANY)
        .unwrap();
    stacks
        .update(&3u64.to_ne_bytes(), &short, MapFlags::ANY)
        .unwrap();
    let read = |periodic: &mut Periodic, ids: &[i64]| {
        let mut reader = periodic.reader(Storage {
            stacks: &stacks,
            tails: &tails,
        });
        for &id in ids {
            assert!(matches!(reader.read(id, true), RawTrace::Frames(_)));
        }
        periodic.done(reader, true);
    };
    let there = |id: u64| {
        stacks
            .lookup(&id.to_ne_bytes(), MapFlags::ANY)
            .unwrap()
            .is_some()
    };
    let tail_there = |chunk| {
        tails
            .lookup(&tail_key(1, chunk), MapFlags::ANY)
            .unwrap()
            .is_some()
    };

    // A reader that keeps: nothing is deleted.
    let mut keeping = Periodic::default();
    read(&mut keeping, &[1, 2, 3]);
    for _ in 0..3 {
        read(&mut keeping, &[3]);
    }
    assert!(there(1) && there(2) && tail_there(1) && tail_there(2));

    // No program writes this ring: only the stacks read are deleted.
    let Some(news) = map(libbpf_rs::MapType::RingBuf, 0, 0, 4096) else {
        return;
    };
    let mut forgetting = Periodic::forgetting(&news).unwrap();
    read(&mut forgetting, &[1, 2, 3]);
    read(&mut forgetting, &[3]);
    assert!(there(1) && there(2), "kept over one read without them");
    read(&mut forgetting, &[3]);
    assert!(!there(1) && !there(2), "deleted after two");
    assert!(!tail_there(1) && !tail_there(2), "with the tail");
    assert!(there(3), "met at every read");
}
