//! Arbitrary bytes never panic the decoders, never make them allocate more than the input
//! justifies, and produce precise errors.

use proptest::prelude::*;
use snapbus_schemas::builtin::{self, DurationSample, SpanStart};
use snapbus_schemas::{
    DecodeErrorKind, SchemaDescriptor, Snapshot, Tensor, TypeDesc, Wire, decode, decode_versioned,
};

use crate::fixtures::Everything;

/// Bytes a decode of `input_len` bytes may allocate: values are at most ~64 bytes per input
/// byte (a `Value` per one-byte bool), plus a constant.
fn allowance(input_len: usize) -> u64 {
    64 * input_len as u64 + 64 * 1024
}

fn descriptors() -> Vec<&'static SchemaDescriptor> {
    let mut d = builtin::all().to_vec();
    d.push(Everything::descriptor());
    d
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic_or_over_allocate(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        for d in descriptors() {
            let info = allocation_counter::measure(|| {
                if let Err(e) = decode(d.root(), &bytes) {
                    assert!(e.offset <= bytes.len(), "offset {} beyond input {}", e.offset, bytes.len());
                }
            });
            prop_assert!(info.bytes_total <= allowance(bytes.len()), "{} allocated {} for {} bytes", d.id(), info.bytes_total, bytes.len());
        }
        let info = allocation_counter::measure(|| {
            let _ = Everything::decode_exact(&bytes);
            let _ = decode_versioned::<SpanStart>(&bytes, 1);
            let _ = decode_versioned::<DurationSample>(&bytes, 9);
            let _ = Tensor::<f32>::decode_exact(&bytes);
            let _ = SchemaDescriptor::from_canonical_bytes(&bytes);
        });
        prop_assert!(info.bytes_total <= 8 * allowance(bytes.len()));
    }

    #[test]
    fn mutated_valid_payloads_never_panic(v in crate::fixtures::everything(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let mut bytes = v.encode_to_vec().expect("encode");
        for (i, x) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= x | 1;
        }
        let _ = decode(Everything::descriptor().root(), &bytes);
        let _ = Everything::decode_exact(&bytes);
    }
}

#[test]
fn huge_length_prefixes_are_refused_before_allocating() {
    let seq = TypeDesc::Seq {
        elem: Box::new(TypeDesc::U64),
    };
    for len in [u64::MAX, 1 << 40, 3] {
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0u8; 16]); // room for two u64s, not three
        let (res, info) = {
            let mut res = None;
            let info = allocation_counter::measure(|| res = Some(decode(&seq, &bytes)));
            (res.expect("ran"), info)
        };
        let err = res.expect_err("too long");
        assert_eq!(err.offset, 0);
        assert_eq!(
            err.kind,
            DecodeErrorKind::LengthTooLarge { len, remaining: 16 }
        );
        assert!(
            info.bytes_total < 1024,
            "allocated {} bytes",
            info.bytes_total
        );
        assert!(Vec::<u64>::decode_exact(&bytes).is_err());
    }
}

#[test]
fn tensor_with_lying_shape_is_refused() {
    // shape [2, 3] but 5 elements.
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&2u64.to_le_bytes());
    bytes.extend_from_slice(&2u64.to_le_bytes());
    bytes.extend_from_slice(&3u64.to_le_bytes());
    bytes.extend_from_slice(&5u64.to_le_bytes());
    bytes.extend_from_slice(&[0u8; 5]);
    let desc = Tensor::<u8>::type_desc();
    let err = decode(&desc, &bytes).expect_err("shape");
    assert!(
        matches!(
            err.kind,
            DecodeErrorKind::TensorShape {
                expected: 6,
                found: 5,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.offset, 24);
    assert!(Tensor::<u8>::decode_exact(&bytes).is_err());

    // Rank 1000 is refused without reading the dimensions.
    let mut deep = 1000u64.to_le_bytes().to_vec();
    deep.extend_from_slice(&[0u8; 64]);
    let err = decode(&desc, &deep).expect_err("rank");
    assert!(
        matches!(err.kind, DecodeErrorKind::TensorRank { rank: 1000, .. }),
        "{err}"
    );

    // Overflowing shape product.
    let mut overflow = 2u64.to_le_bytes().to_vec();
    overflow.extend_from_slice(&u64::MAX.to_le_bytes());
    overflow.extend_from_slice(&u64::MAX.to_le_bytes());
    overflow.extend_from_slice(&0u64.to_le_bytes());
    assert!(decode(&desc, &overflow).is_err());
}

#[test]
fn errors_name_offset_field_and_cause() {
    let v = crate::fixtures::sample();
    let bytes = v.encode_to_vec().expect("encode");
    // Corrupt the bool that opens `scalars`.
    let mut bad = bytes.clone();
    bad[0] = 7;
    let err = decode(Everything::descriptor().root(), &bad).expect_err("bool");
    assert_eq!(err.kind, DecodeErrorKind::InvalidBool { byte: 7 });
    assert_eq!((err.offset, err.path.as_str()), (0, "scalars.b"));
    assert_eq!(
        err.to_string(),
        "invalid bool byte 0x07 at byte offset 0 (in field `scalars.b`)"
    );
    let typed = Everything::decode_exact(&bad).expect_err("typed bool");
    assert_eq!((typed.offset, typed.path.as_str()), (0, "scalars.b"));

    // Invalid UTF-8 in `text` (after the 1+1+2+4+8+16+1+2+4+8+16+4+8 = 75 scalar bytes and the
    // 8-byte length).
    let mut bad = bytes.clone();
    bad[75 + 8] = 0xff;
    let err = decode(Everything::descriptor().root(), &bad).expect_err("utf8");
    assert_eq!(
        (err.kind, err.offset, err.path.as_str()),
        (DecodeErrorKind::InvalidUtf8, 83, "text")
    );
}

#[test]
fn invalid_enum_index_and_option_tag_are_reported() {
    let desc = crate::fixtures::Mode::type_desc();
    let err = decode(&desc, &9u32.to_le_bytes()).expect_err("variant");
    assert_eq!(
        err.kind,
        DecodeErrorKind::InvalidVariant { index: 9, count: 5 }
    );
    let err = crate::fixtures::Mode::decode_exact(&9u32.to_le_bytes()).expect_err("typed variant");
    assert_eq!(
        err.kind,
        DecodeErrorKind::InvalidVariant { index: 9, count: 5 }
    );
    let opt = Option::<u8>::type_desc();
    let err = decode(&opt, &[2, 0]).expect_err("tag");
    assert_eq!(err.kind, DecodeErrorKind::InvalidOptionTag { tag: 2 });
}

/// Fuzzer finding: nested arrays of zero-sized elements made a ~100-byte payload decode to
/// 16^8 values. The value budget refuses it quickly, with bounded allocation.
#[test]
fn nested_zero_sized_arrays_cannot_amplify() {
    let mut desc = TypeDesc::Tuple { elems: vec![] };
    for _ in 0..8 {
        desc = TypeDesc::Array {
            len: 16,
            elem: Box::new(desc),
        };
    }
    let bytes = [0u8; 100];
    let mut res = None;
    let info = allocation_counter::measure(|| res = Some(decode(&desc, &bytes)));
    let err = res.expect("ran").expect_err("amplification refused");
    assert!(
        matches!(err.kind, DecodeErrorKind::TooManyValues { .. })
            || matches!(err.kind, DecodeErrorKind::LengthTooLarge { .. }),
        "{err}"
    );
    assert!(
        info.bytes_total <= allowance(bytes.len()) * 16,
        "allocated {}",
        info.bytes_total
    );

    // A wide struct of zero-sized fields as a sequence element: bounded too.
    let wide = TypeDesc::Struct {
        fields: (0..4096)
            .map(|i| {
                snapbus_schemas::Field::new(format!("f{i}"), TypeDesc::Tuple { elems: vec![] })
            })
            .collect(),
    };
    let seq = TypeDesc::Seq {
        elem: Box::new(wide),
    };
    let mut bytes = 64u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(&[0u8; 64]);
    let err = decode(&seq, &bytes).expect_err("refused");
    assert!(
        matches!(err.kind, DecodeErrorKind::TooManyValues { .. }),
        "{err}"
    );
}

/// Fuzzer finding: a map with a duplicate key decoded into a `BTreeMap` silently kept only
/// the last value. It is now an error naming the offset.
#[test]
fn duplicate_map_keys_are_refused_not_dropped() {
    use snapbus_schemas::builtin::SpanEnd;
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&1u64.to_le_bytes()); // span_id
    bytes.extend_from_slice(&2u64.to_le_bytes()); // duration_nanos
    bytes.extend_from_slice(&2u64.to_le_bytes()); // two attributes
    for v in [1u8, 0] {
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.push(b'a'); // key "a" both times
        bytes.extend_from_slice(&0u32.to_le_bytes()); // AttrValue::Bool
        bytes.push(v);
    }
    let second_entry = 8 * 3 + (8 + 1 + 4 + 1);
    let err = SpanEnd::decode_exact(&bytes).expect_err("duplicate key");
    assert_eq!(err.kind, DecodeErrorKind::DuplicateMapKey);
    assert_eq!(
        (err.offset, err.path.as_str()),
        (second_entry, "attributes")
    );
    // The dynamic decoder keeps both entries (a list of pairs): nothing is lost there either.
    let value = decode(SpanEnd::descriptor().root(), &bytes).expect("dynamic");
    let Some(snapbus_schemas::Value::Map(entries)) = value.field("attributes") else {
        panic!("map")
    };
    assert_eq!(entries.len(), 2);
}

/// Maps are unordered: keys that arrive unsorted (a Python or C++ producer writes them in
/// insertion order) decode into the typed map, which re-encodes them sorted; the dynamic
/// decoder keeps the wire order. Both see the same entries.
#[test]
fn unsorted_map_keys_decode_to_the_same_entries() {
    use snapbus_schemas::builtin::{AttrValue, SpanEnd};
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&1u64.to_le_bytes()); // span_id
    bytes.extend_from_slice(&2u64.to_le_bytes()); // duration_nanos
    bytes.extend_from_slice(&2u64.to_le_bytes()); // two attributes, "b" before "a"
    for (key, v) in [(b'b', 1u8), (b'a', 0)] {
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.push(key);
        bytes.extend_from_slice(&0u32.to_le_bytes()); // AttrValue::Bool
        bytes.push(v);
    }
    let typed = SpanEnd::decode_exact(&bytes).expect("unsorted keys are accepted");
    let entries: Vec<_> = typed.attributes.iter().collect();
    assert_eq!(
        entries,
        [
            (&"a".to_owned(), &AttrValue::Bool(false)),
            (&"b".to_owned(), &AttrValue::Bool(true))
        ]
    );
    let again = SpanEnd::decode_exact(&typed.encode_to_vec().expect("encode")).expect("decode");
    assert_eq!(again, typed, "the sorted re-encoding is stable");
    let value = decode(SpanEnd::descriptor().root(), &bytes).expect("dynamic");
    let Some(snapbus_schemas::Value::Map(wire_order)) = value.field("attributes") else {
        panic!("map")
    };
    let keys: Vec<_> = wire_order.iter().map(|(k, _)| format!("{k:?}")).collect();
    assert_eq!(keys, [r#"Str("b")"#, r#"Str("a")"#]);
}

/// Fuzzer finding: `get_f64` with an index near `usize::MAX` overflowed computing the end of
/// the element (a panic with overflow checks on) instead of returning `None`.
#[test]
fn numeric_views_refuse_indices_near_usize_max() {
    let bytes = [3u8, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3];
    let desc = TypeDesc::Seq {
        elem: Box::new(TypeDesc::U8),
    };
    let value = decode(&desc, &bytes).expect("decode");
    let snapbus_schemas::Value::Packed(p) = &value else {
        panic!("a packed u8 array, got {value:?}")
    };
    assert_eq!(p.get_f64(2), Some(3.0));
    for i in [3, usize::MAX / 2, usize::MAX - 1, usize::MAX] {
        assert_eq!(p.get_f64(i), None, "index {i}");
    }
    let t = Tensor::<u8>::new(vec![3], vec![1, 2, 3]).expect("tensor");
    let bytes = t.encode_to_vec().expect("encode");
    let desc = Tensor::<u8>::type_desc();
    let value = decode(&desc, &bytes).expect("decode");
    let snapbus_schemas::Value::Tensor(view) = &value else {
        panic!("a tensor, got {value:?}")
    };
    assert_eq!(view.get_f64(0), Some(1.0));
    for i in [3, usize::MAX / 2, usize::MAX] {
        assert_eq!(view.get_f64(i), None, "index {i}");
    }
}
