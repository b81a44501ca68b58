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
    let record: Vec<u8> = [4u64, 0xabcd, h, 1, 2, 3, 0xdead]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .collect();
    assert_eq!(frames(&record), Some(vec![runtime([1, 2], 3)]));
    assert_eq!(frames(&record[..5 * 8]), None, "shorter than its length");
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
    assert_eq!(
        define("FLARE_RUNTIME_FRAME_WORDS"),
        RUNTIME_FRAME_WORDS as u64
    );
    for (name, runtime) in [
        ("FLARE_FRAME_PYTHON", Runtime::Python),
        ("FLARE_FRAME_JAVA", Runtime::Java),
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
