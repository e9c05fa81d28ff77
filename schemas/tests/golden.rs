//! Golden bytes: the wire format and the descriptor canonical form, pinned byte for byte.
//! If one of these fails, the format changed: that breaks every recording and every running
//! consumer, so it needs a new layout version, not a new golden value.

use snapbus_schemas::builtin::{self, AttrValue, DurationSample, SpanEnd};
use snapbus_schemas::{SchemaDescriptor, Snapshot, Tensor, Wire};

/// Parses hex with whitespace and `|` separators ignored.
fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).expect("ascii"), 16).expect("hex"))
        .collect()
}

#[test]
fn duration_sample_bytes() {
    let v = DurationSample {
        label: "env.step".into(),
        duration_nanos: 1234,
        ..Default::default()
    };
    let expected = hex(
        "08 00 00 00 00 00 00 00 | 65 6e 76 2e 73 74 65 70 | d2 04 00 00 00 00 00 00 \
             00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 | 00 00 00 00 00 00 00 00 \
             00 00 00 00 00 00 00 00",
    );
    assert_eq!(v.encode_to_vec().expect("encode"), expected);
}

#[test]
fn span_end_with_enum_attributes_bytes() {
    let v = SpanEnd {
        span_id: 2,
        duration_nanos: 3,
        attributes: [
            ("ok".to_string(), AttrValue::Bool(true)),
            ("x".to_string(), AttrValue::I64(-1)),
        ]
        .into_iter()
        .collect(),
    };
    let expected = hex(
        "02 00 00 00 00 00 00 00 | 03 00 00 00 00 00 00 00 | 02 00 00 00 00 00 00 00 \
         02 00 00 00 00 00 00 00 6f 6b | 00 00 00 00 | 01 \
         01 00 00 00 00 00 00 00 78    | 01 00 00 00 | ff ff ff ff ff ff ff ff",
    );
    assert_eq!(v.encode_to_vec().expect("encode"), expected);
}

#[derive(Snapshot)]
#[snapshot(id = "golden.frame", version = 3)]
struct Frame {
    seq: u16,
    label: Option<String>,
    image: Tensor<u16>,
    corners: [i8; 2],
}

#[test]
fn tensor_option_and_array_bytes() {
    let v = Frame {
        seq: 0x0102,
        label: Some("a".into()),
        image: Tensor::new(vec![1, 2], vec![1, 513]).expect("shape"),
        corners: [-1, 2],
    };
    let expected = hex("02 01 \
         01 01 00 00 00 00 00 00 00 61 \
         02 00 00 00 00 00 00 00 | 01 00 00 00 00 00 00 00 | 02 00 00 00 00 00 00 00 \
         02 00 00 00 00 00 00 00 | 01 00 01 02 \
         ff 02");
    assert_eq!(v.encode_to_vec().expect("encode"), expected);
}

#[test]
fn descriptor_canonical_bytes() {
    let expected = hex("53 42 44 01 \
         10 00 00 00 00 00 00 00 | 73 6e 61 70 62 75 73 2e 64 75 72 61 74 69 6f 6e \
         02 00 00 00 \
         13 05 00 00 00 00 00 00 00 \
         05 00 00 00 00 00 00 00 6c 61 62 65 6c | 01 00 00 00 | 0d \
         0e 00 00 00 00 00 00 00 64 75 72 61 74 69 6f 6e 5f 6e 61 6e 6f 73 | 01 00 00 00 | 04 \
         08 00 00 00 00 00 00 00 74 72 61 63 65 5f 69 64 | 02 00 00 00 | 05 \
         07 00 00 00 00 00 00 00 73 70 61 6e 5f 69 64 | 02 00 00 00 | 04 \
         09 00 00 00 00 00 00 00 70 61 72 65 6e 74 5f 69 64 | 02 00 00 00 | 04");
    assert_eq!(DurationSample::descriptor().to_canonical_bytes(), expected);
    assert_eq!(
        SchemaDescriptor::from_canonical_bytes(&expected).expect("decode"),
        *DurationSample::descriptor()
    );
}

#[test]
fn frame_descriptor_canonical_bytes() {
    let expected = hex(
        "53 42 44 01 0c 00 00 00 00 00 00 00 | 67 6f 6c 64 65 6e 2e 66 72 61 6d 65 | 03 00 00 00 \
         13 04 00 00 00 00 00 00 00 \
         03 00 00 00 00 00 00 00 73 65 71 | 01 00 00 00 | 02 \
         05 00 00 00 00 00 00 00 6c 61 62 65 6c | 01 00 00 00 | 0f 0d \
         05 00 00 00 00 00 00 00 69 6d 61 67 65 | 01 00 00 00 | 16 01 \
         07 00 00 00 00 00 00 00 63 6f 72 6e 65 72 73 | 01 00 00 00 | 11 02 00 00 00 00 00 00 00 06",
    );
    assert_eq!(Frame::descriptor().to_canonical_bytes(), expected);
}

/// Fingerprints are XXH3-64 of the canonical bytes pinned above; pinning them catches a change
/// of hash function or of canonical form in any built-in.
#[test]
fn builtin_fingerprints_are_stable() {
    let pinned: Vec<(&str, u64)> = builtin::all()
        .iter()
        .map(|d| (d.id(), d.fingerprint()))
        .collect();
    assert_eq!(
        pinned,
        vec![
            ("snapbus.duration", PIN_DURATION),
            ("snapbus.resource", PIN_RESOURCE),
            ("snapbus.span.start", PIN_SPAN_START),
            ("snapbus.span.end", PIN_SPAN_END),
            ("snapbus.span.event", PIN_SPAN_EVENT),
        ]
    );
    for d in builtin::all() {
        assert_eq!(
            d.fingerprint(),
            xxhash_rust::xxh3::xxh3_64(&d.to_canonical_bytes())
        );
    }
}

// Version 2 (trace, span and parent ids appended); version 1 was 0x349b_f6d0_f055_0ba2.
const PIN_DURATION: u64 = 0x87ac_be0b_d5a1_abf9;
const PIN_RESOURCE: u64 = 0x4358_0cf2_d44f_8837;
const PIN_SPAN_START: u64 = 0x4fc2_ee25_a8c8_f918;
const PIN_SPAN_END: u64 = 0xc112_d254_c70d_ba0b;
const PIN_SPAN_EVENT: u64 = 0x0e09_8fe9_6174_0aac;
