//! Every descriptor-covered type round-trips: typed encode → typed decode, typed encode →
//! dynamic decode (equal to `to_value`), dynamic decode → dynamic encode (same bytes).

use proptest::prelude::*;
use snapbus_schemas::{
    DecodeErrorKind, EncodeError, Snapshot, ToValue, Wire, decode, decode_versioned, encode_value,
};

use crate::fixtures::{Everything, everything, sample};

fn check_round_trips(v: &Everything) -> Result<(), TestCaseError> {
    let bytes = v.encode_to_vec().expect("encode");
    prop_assert_eq!(bytes.len(), v.encoded_len());

    // Typed round trip, both entry points.
    prop_assert_eq!(&Everything::decode_exact(&bytes).expect("typed decode"), v);
    prop_assert_eq!(
        &decode_versioned::<Everything>(&bytes, Everything::VERSION).expect("versioned decode"),
        v
    );

    // Dynamic decode equals the typed value's own dynamic view.
    let desc = Everything::descriptor();
    let dynamic = decode(desc.root(), &bytes).expect("dynamic decode");
    prop_assert_eq!(&dynamic, &v.to_value());

    // Dynamic re-encode reproduces the bytes exactly.
    let mut again = Vec::new();
    encode_value(desc.root(), &dynamic, &mut again).expect("dynamic encode");
    prop_assert_eq!(&again, &bytes);

    // Detached values still re-encode identically.
    let owned = dynamic.into_owned();
    let mut owned_bytes = Vec::new();
    encode_value(desc.root(), &owned, &mut owned_bytes).expect("owned encode");
    prop_assert_eq!(&owned_bytes, &bytes);

    // JSON rendering is valid JSON.
    let json = owned.to_json().to_string();
    prop_assert!(serde_json::from_str::<serde_json::Value>(&json).is_ok());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_type_round_trips(v in everything()) {
        check_round_trips(&v)?;
    }

    #[test]
    fn every_strict_prefix_fails_cleanly(v in everything()) {
        let bytes = v.encode_to_vec().expect("encode");
        let desc = Everything::descriptor();
        // Every byte of a payload is needed, so every strict prefix must be refused.
        for cut in [0, 1, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
            let prefix = &bytes[..cut];
            prop_assert!(Everything::decode_exact(prefix).is_err(), "typed accepted a {cut}-byte prefix");
            let err = decode(desc.root(), prefix).expect_err("dynamic accepted a prefix");
            prop_assert!(err.offset <= cut);
        }
    }

    #[test]
    fn trailing_bytes_are_refused(v in everything(), extra in prop::collection::vec(any::<u8>(), 1..8)) {
        let mut bytes = v.encode_to_vec().expect("encode");
        let len = bytes.len();
        bytes.extend_from_slice(&extra);
        let err = decode(Everything::descriptor().root(), &bytes).expect_err("trailing accepted");
        prop_assert_eq!(err.offset, len);
        prop_assert_eq!(err.kind, DecodeErrorKind::TrailingBytes { count: extra.len() });
        prop_assert!(Everything::decode_exact(&bytes).is_err());
    }
}

#[test]
fn empty_and_zero_sized_cases_round_trip() {
    let mut v = sample();
    v.text.clear();
    v.blob.0.clear();
    v.maybe = None;
    v.inners.clear();
    v.floats.clear();
    v.modes.clear();
    v.by_name.clear();
    v.by_id.clear();
    v.nested.clear();
    v.image = snapbus_schemas::Tensor::new(vec![0, 5], vec![]).expect("empty tensor");
    v.features = snapbus_schemas::Tensor::new(vec![0], vec![]).expect("empty tensor");
    let bytes = v.encode_to_vec().expect("encode");
    assert_eq!(Everything::decode_exact(&bytes).expect("decode"), v);
    assert_eq!(
        decode(Everything::descriptor().root(), &bytes).expect("dynamic"),
        v.to_value()
    );
}

#[test]
fn encode_into_writes_exactly_encoded_len_and_refuses_short_buffers() {
    let v = sample();
    let n = v.encoded_len();
    let mut buf = vec![0xAAu8; n + 16];
    assert_eq!(v.encode_into(&mut buf).expect("fits"), n);
    assert!(
        buf[n..].iter().all(|&b| b == 0xAA),
        "wrote past encoded_len"
    );
    assert_eq!(&buf[..n], v.encode_to_vec().expect("encode").as_slice());

    let mut short = vec![0u8; n - 1];
    assert_eq!(
        v.encode_into(&mut short),
        Err(EncodeError::BufferTooSmall {
            needed: n,
            available: n - 1
        })
    );
}

#[test]
fn encode_into_does_not_allocate() {
    let v = sample();
    let mut buf = vec![0u8; v.encoded_len()];
    let info = allocation_counter::measure(|| {
        std::hint::black_box(v.encode_into(&mut buf).expect("fits"));
    });
    assert_eq!(info.count_total, 0, "encode_into allocated: {info:?}");
}

#[test]
fn nan_payloads_survive_the_round_trip_bit_for_bit() {
    let mut v = sample();
    let odd_nan = f64::from_bits(0x7ff8_dead_beef_0001);
    v.floats = vec![odd_nan, f64::NAN, -f64::NAN];
    v.scalars.r#f32 = f32::from_bits(0x7fc0_1234);
    let bytes = v.encode_to_vec().expect("encode");
    let back = Everything::decode_exact(&bytes).expect("decode");
    assert_eq!(back.floats[0].to_bits(), odd_nan.to_bits());
    assert_eq!(back.scalars.r#f32.to_bits(), 0x7fc0_1234);
    let dynamic = decode(Everything::descriptor().root(), &bytes).expect("dynamic");
    let mut again = Vec::new();
    encode_value(Everything::descriptor().root(), &dynamic, &mut again).expect("encode");
    assert_eq!(again, bytes);
}

#[test]
fn dynamic_encode_reports_mismatches_with_a_path() {
    let desc = Everything::descriptor();
    let v = sample();
    let mut value = v.to_value().into_owned();
    if let snapbus_schemas::Value::Struct(fields) = &mut value {
        fields[1].1 = snapbus_schemas::Value::U32(3); // `text` must be a string
    }
    let err = encode_value(desc.root(), &value, &mut Vec::new()).expect_err("mismatch");
    let msg = err.to_string();
    assert!(
        msg.contains("`text`") && msg.contains("string") && msg.contains("u32"),
        "{msg}"
    );
}
