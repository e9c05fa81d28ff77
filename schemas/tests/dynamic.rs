//! Dynamic values: every kind round-trips through encode and decode, golden bytes pin the
//! format, and bad bytes are precise errors.

use std::borrow::Cow;

use proptest::prelude::*;
use snapbus_schemas::walk::{LayoutPlan, skip};
use snapbus_schemas::{
    DType, DecodeErrorKind, Field, Packed, SchemaDescriptor, TensorView, TypeDesc, Value,
    WireReader, decode, encode_value,
};

fn s(v: &str) -> Value<'static> {
    Value::Str(Cow::Owned(v.to_owned()))
}

fn encoded(v: &Value<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&TypeDesc::Dynamic, v, &mut out).expect("encode");
    out
}

/// A value of every kind a dynamic holds, nested.
fn every_kind() -> Value<'static> {
    let image = TensorView {
        dtype: DType::U8,
        shape: vec![2, 3],
        data: Cow::Owned(vec![0, 1, 2, 253, 254, 255]),
    };
    Value::Map(vec![
        (s("none"), Value::Option(None)),
        (s("yes"), Value::Bool(true)),
        (s("int"), Value::I64(-77)),
        (s("big"), Value::U64(u64::MAX)),
        (s("x"), Value::F64(0.25)),
        (s("name"), s("GlobalMatchingStep")),
        (s("raw"), Value::Bytes(Cow::Owned(vec![0, 255, 7]))),
        (
            s("list"),
            Value::Seq(vec![Value::I64(1), s("two"), Value::Seq(vec![])]),
        ),
        (
            s("model"),
            Value::Map(vec![(s("is_done"), Value::Bool(false))]),
        ),
        (s("image"), Value::Tensor(image)),
    ])
}

#[test]
fn every_kind_round_trips_as_the_value_it_was() {
    let v = every_kind();
    let bytes = encoded(&v);
    assert_eq!(decode(&TypeDesc::Dynamic, &bytes).expect("decode"), v);
    // In a struct, beside static fields, through a descriptor's canonical bytes.
    let desc = SchemaDescriptor::new(
        "t.dynamic",
        1,
        TypeDesc::Struct {
            fields: vec![
                Field::new("step", TypeDesc::U32),
                Field::new("extra", TypeDesc::Dynamic),
            ],
        },
    )
    .expect("descriptor");
    let again = SchemaDescriptor::from_canonical_bytes(&desc.to_canonical_bytes()).expect("read");
    assert_eq!(again, desc);
    let mut payload = 9u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&bytes);
    let decoded = decode(again.root(), &payload).expect("decode");
    assert_eq!(decoded.field("extra"), Some(&v));
    let mut r = WireReader::new(&payload);
    skip(&LayoutPlan::compile(again.root()), LayoutPlan::ROOT, &mut r).expect("skip");
    assert_eq!(r.remaining(), 0);
}

#[test]
fn typed_values_encode_as_their_dynamic_kinds() {
    let cases: Vec<(Value<'_>, Value<'_>)> = vec![
        (Value::U8(7), Value::I64(7)),
        (Value::I32(-3), Value::I64(-3)),
        (Value::F32(1.5), Value::F64(1.5)),
        (Value::U128(5), Value::I64(5)),
        // A u64 stays one: decoded, it re-encodes to the same bytes.
        (Value::U64(5), Value::U64(5)),
        (
            Value::Option(Some(Box::new(Value::Bool(true)))),
            Value::Bool(true),
        ),
        (Value::Unit, Value::Option(None)),
        (
            Value::Struct(vec![(Cow::Borrowed("a"), Value::U16(2))]),
            Value::Map(vec![(s("a"), Value::I64(2))]),
        ),
        (
            Value::Variant {
                index: 1,
                name: Cow::Borrowed("EVAL"),
                value: Box::new(Value::Unit),
            },
            s("EVAL"),
        ),
        (
            Value::Packed(Packed::from_slice(&[1.0f32, 2.0])),
            Value::Tensor(TensorView {
                dtype: DType::F32,
                shape: vec![2],
                data: Cow::Owned([1.0f32.to_le_bytes(), 2.0f32.to_le_bytes()].concat()),
            }),
        ),
    ];
    for (typed, want) in cases {
        let bytes = encoded(&typed);
        let got = decode(&TypeDesc::Dynamic, &bytes).expect("decode");
        assert_eq!(got, want, "{typed:?}");
    }
}

#[test]
fn what_a_dynamic_cannot_hold_is_refused_with_its_path() {
    let bad = Value::Map(vec![(
        s("stats"),
        Value::Map(vec![(Value::I64(1), Value::Bool(true))]),
    )]);
    let err = encode_value(&TypeDesc::Dynamic, &bad, &mut Vec::new()).expect_err("int key");
    assert!(err.to_string().contains("stats"), "{err}");
    let huge = Value::U128(u128::MAX);
    assert!(encode_value(&TypeDesc::Dynamic, &huge, &mut Vec::new()).is_err());
}

#[test]
fn golden_bytes_pin_the_format() {
    let v = Value::Map(vec![(
        s("k"),
        Value::Seq(vec![Value::Bool(true), Value::I64(2)]),
    )]);
    let mut want = vec![8u8];
    want.extend_from_slice(&1u64.to_le_bytes());
    want.extend_from_slice(&1u64.to_le_bytes());
    want.push(b'k');
    want.push(7);
    want.extend_from_slice(&2u64.to_le_bytes());
    want.extend_from_slice(&[1, 1, 2]);
    want.extend_from_slice(&2i64.to_le_bytes());
    assert_eq!(encoded(&v), want);
}

#[test]
fn bad_bytes_are_precise_errors() {
    let err = decode(&TypeDesc::Dynamic, &[42]).expect_err("tag");
    assert_eq!(
        (err.offset, &err.kind),
        (0, &DecodeErrorKind::InvalidTag { tag: 42 })
    );
    let err = decode(&TypeDesc::Dynamic, &[9, 200]).expect_err("dtype");
    assert_eq!(
        (err.offset, &err.kind),
        (1, &DecodeErrorKind::InvalidTag { tag: 200 })
    );
    let err = decode(&TypeDesc::Dynamic, &[1, 2]).expect_err("bool");
    assert_eq!(err.kind, DecodeErrorKind::InvalidBool { byte: 2 });
    // A list claiming more items than bytes remain.
    let mut list = vec![7u8];
    list.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        decode(&TypeDesc::Dynamic, &list).expect_err("len").kind,
        DecodeErrorKind::LengthTooLarge { .. }
    ));
    // Lists nested beyond the limit.
    let mut deep = Vec::new();
    for _ in 0..100 {
        deep.push(7u8);
        deep.extend_from_slice(&1u64.to_le_bytes());
    }
    deep.push(0);
    assert!(matches!(
        decode(&TypeDesc::Dynamic, &deep).expect_err("deep").kind,
        DecodeErrorKind::TooDeep { .. }
    ));
    // A map value that fails names its entry.
    let mut map = vec![8u8];
    map.extend_from_slice(&1u64.to_le_bytes());
    map.extend_from_slice(&1u64.to_le_bytes());
    map.extend_from_slice(b"k");
    map.push(99);
    let err = decode(&TypeDesc::Dynamic, &map).expect_err("value");
    assert_eq!(err.kind, DecodeErrorKind::InvalidTag { tag: 99 });
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Err(e) = decode(&TypeDesc::Dynamic, &bytes) {
            prop_assert!(e.offset <= bytes.len());
        }
    }
}

#[derive(snapbus_schemas::Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "t.dynamic.rust", version = 1)]
struct WithDynamic {
    step: u32,
    extra: snapbus_schemas::dynamic::Dynamic,
    after: String,
}

#[test]
fn a_rust_snapshot_carries_a_dynamic_field() {
    use snapbus_schemas::dynamic::Dynamic;
    use snapbus_schemas::{Snapshot, ToValue, Wire};

    let v = every_kind();
    let event = WithDynamic {
        step: 4,
        extra: Dynamic::new(&v).expect("dynamic"),
        after: "end".into(),
    };
    let bytes = event.encode_to_vec().expect("encode");
    assert_eq!(WithDynamic::decode_exact(&bytes).expect("decode"), event);
    let generic = decode(WithDynamic::descriptor().root(), &bytes).expect("generic");
    assert_eq!(generic.field("extra"), Some(&v));
    assert_eq!(event.to_value(), generic);
    // A typed decode checks the dynamic bytes as the generic one does.
    let mut bad = bytes.clone();
    bad[4] = 77;
    assert!(WithDynamic::decode_exact(&bad).is_err());
    assert_eq!(Dynamic::default().value(), Value::Option(None));
}
