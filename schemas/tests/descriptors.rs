//! Descriptors: shape of derived descriptors, canonical form, fingerprints, validation of
//! untrusted descriptor bytes.

use snapbus_schemas::{
    DType, DescriptorError, Field, MAX_DESC_DEPTH, SchemaDescriptor, Snapshot, TypeDesc, Variant,
    Wire, builtin,
};

use crate::fixtures::{Everything, Mode};

#[test]
fn derived_descriptor_describes_the_rust_type() {
    let d = Everything::descriptor();
    assert_eq!((d.id(), d.version()), ("test.everything", 1));
    let TypeDesc::Struct { fields } = d.root() else {
        panic!("struct root")
    };
    let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names[..4], ["scalars", "text", "blob", "maybe"]);
    let ty = |name: &str| &fields.iter().find(|f| f.name == name).expect("field").ty;
    assert_eq!(ty("image"), &TypeDesc::Tensor { dtype: DType::U8 });
    assert_eq!(
        ty("fixed"),
        &TypeDesc::Array {
            len: 4,
            elem: Box::new(TypeDesc::U16)
        }
    );
    assert_eq!(ty("blob"), &TypeDesc::Bytes);
    assert_eq!(ty("unit"), &TypeDesc::Tuple { elems: vec![] });
    assert_eq!(
        ty("by_name"),
        &TypeDesc::Map {
            key: Box::new(TypeDesc::String),
            value: Box::new(TypeDesc::I64)
        }
    );
    assert_eq!(
        Mode::type_desc(),
        TypeDesc::Enum {
            variants: vec![
                Variant::unit("Train"),
                Variant::unit("Eval"),
                Variant::tuple("Custom", vec![TypeDesc::U16, TypeDesc::String]),
                Variant::structure(
                    "Scheduled",
                    vec![
                        Field::new("at_step", TypeDesc::U64),
                        Field::new("lr", TypeDesc::F64)
                    ]
                ),
                Variant::tuple("Wrapped", vec![crate::fixtures::Inner::type_desc()]),
            ]
        }
    );
    // Raw identifiers lose their `r#`.
    let TypeDesc::Struct { fields: scalars } = ty("scalars") else {
        panic!("struct")
    };
    assert_eq!(scalars[1].name, "u8");
}

#[test]
fn canonical_bytes_round_trip_for_every_descriptor() {
    let mut all: Vec<&SchemaDescriptor> = builtin::all().to_vec();
    all.push(Everything::descriptor());
    for d in all {
        let bytes = d.to_canonical_bytes();
        let back = SchemaDescriptor::from_canonical_bytes(&bytes).expect("decode");
        assert_eq!(&back, d);
        assert_eq!(back.fingerprint(), d.fingerprint());
        // serde (JSON) round trip recomputes the same fingerprint.
        let json = serde_json::to_string(d).expect("json");
        let from_json: SchemaDescriptor = serde_json::from_str(&json).expect("from json");
        assert_eq!(from_json.fingerprint(), d.fingerprint());
    }
}

#[test]
fn fingerprint_changes_with_any_field_name_type_or_version() {
    let base = SchemaDescriptor::new(
        "fp.test",
        1,
        TypeDesc::Struct {
            fields: vec![Field::new("a", TypeDesc::U32)],
        },
    )
    .expect("valid");
    let renamed = SchemaDescriptor::new(
        "fp.test",
        1,
        TypeDesc::Struct {
            fields: vec![Field::new("b", TypeDesc::U32)],
        },
    )
    .expect("valid");
    let retyped = SchemaDescriptor::new(
        "fp.test",
        1,
        TypeDesc::Struct {
            fields: vec![Field::new("a", TypeDesc::I32)],
        },
    )
    .expect("valid");
    let bumped = SchemaDescriptor::new("fp.test", 2, base.root().clone()).expect("valid");
    let same = SchemaDescriptor::new("fp.test", 1, base.root().clone()).expect("valid");
    assert_eq!(base.fingerprint(), same.fingerprint());
    for other in [&renamed, &retyped, &bumped] {
        assert_ne!(base.fingerprint(), other.fingerprint());
    }
}

#[test]
fn invalid_descriptors_are_refused() {
    let s = |fields| TypeDesc::Struct { fields };
    for id in ["bad id!", "", "a..b"] {
        assert!(
            matches!(
                SchemaDescriptor::new(id, 1, s(vec![])),
                Err(DescriptorError::BadSchemaId { .. })
            ),
            "{id:?}"
        );
    }
    assert!(matches!(
        SchemaDescriptor::new("ok", 0, s(vec![])),
        Err(DescriptorError::ZeroVersion { .. })
    ));
    assert!(matches!(
        SchemaDescriptor::new(
            "ok",
            1,
            s(vec![
                Field::new("x", TypeDesc::U8),
                Field::new("x", TypeDesc::U8)
            ])
        ),
        Err(DescriptorError::DuplicateName { .. })
    ));
    assert!(matches!(
        SchemaDescriptor::new(
            "ok",
            2,
            s(vec![
                Field::since("x", TypeDesc::U8, 2),
                Field::new("y", TypeDesc::U8)
            ])
        ),
        Err(DescriptorError::BadSince { .. })
    ));
    assert!(matches!(
        SchemaDescriptor::new("ok", 1, s(vec![Field::since("x", TypeDesc::U8, 2)])),
        Err(DescriptorError::BadSince { .. })
    ));
    let mut deep = TypeDesc::U8;
    for _ in 0..MAX_DESC_DEPTH {
        deep = TypeDesc::Option {
            some: Box::new(deep),
        };
    }
    assert!(matches!(
        SchemaDescriptor::new("ok", 1, deep),
        Err(DescriptorError::TooDeep { .. })
    ));
}

fn canonical_prefix() -> Vec<u8> {
    let mut b = b"SBD\x01".to_vec();
    b.extend_from_slice(&2u64.to_le_bytes());
    b.extend_from_slice(b"ok");
    b.extend_from_slice(&1u32.to_le_bytes());
    b
}

#[test]
fn hostile_descriptor_bytes_get_precise_errors() {
    // Wrong magic.
    let err = SchemaDescriptor::from_canonical_bytes(b"XYZ\x01rest").expect_err("magic");
    assert!(matches!(err, DescriptorError::BadMagic { .. }), "{err}");

    // 100 000 nested options: refused at the depth limit without recursing further.
    let mut deep = canonical_prefix();
    deep.extend(std::iter::repeat_n(15u8, 100_000));
    deep.push(1);
    let err = SchemaDescriptor::from_canonical_bytes(&deep).expect_err("deep");
    assert!(matches!(err, DescriptorError::TooDeep { .. }), "{err}");

    // A struct claiming 2^60 fields in a few bytes.
    let mut wide = canonical_prefix();
    wide.push(19);
    wide.extend_from_slice(&(1u64 << 60).to_le_bytes());
    let err = SchemaDescriptor::from_canonical_bytes(&wide).expect_err("wide");
    assert!(err.to_string().contains("length prefix"), "{err}");

    // Unknown node tag, with its offset.
    let mut unknown = canonical_prefix();
    let at = unknown.len();
    unknown.push(200);
    let err = SchemaDescriptor::from_canonical_bytes(&unknown).expect_err("tag");
    assert!(
        err.to_string().contains(&format!("byte offset {at}")),
        "{err}"
    );

    // Bad dtype code.
    let mut dtype = canonical_prefix();
    dtype.extend_from_slice(&[22, 99]);
    assert!(SchemaDescriptor::from_canonical_bytes(&dtype).is_err());

    // Trailing bytes.
    let mut trailing = canonical_prefix();
    trailing.extend_from_slice(&[0, 0]);
    let err = SchemaDescriptor::from_canonical_bytes(&trailing).expect_err("trailing");
    assert!(err.to_string().contains("trailing"), "{err}");

    // Invalid schema id inside valid framing.
    let mut bad_id = b"SBD\x01".to_vec();
    bad_id.extend_from_slice(&3u64.to_le_bytes());
    bad_id.extend_from_slice(b"a b");
    bad_id.extend_from_slice(&1u32.to_le_bytes());
    bad_id.push(0);
    assert!(matches!(
        SchemaDescriptor::from_canonical_bytes(&bad_id),
        Err(DescriptorError::BadSchemaId { .. })
    ));
}

#[test]
fn display_is_compact_and_readable() {
    assert_eq!(
        builtin::DurationSample::descriptor().root().to_string(),
        "struct { label: string, duration_nanos: u64, trace_id: u128, span_id: u64, parent_id: u64 }"
    );
    let s = builtin::DurationSample::descriptor().to_string();
    assert!(s.starts_with("snapbus.duration v2 ["), "{s}");
}

#[test]
fn json_schema_names_the_schema_and_its_fields() {
    let js = builtin::SpanStart::descriptor().to_json_schema();
    assert_eq!(js["title"], "snapbus.span.start");
    assert_eq!(js["type"], "object");
    assert_eq!(
        js["required"],
        serde_json::json!(["span_id", "parent_id", "name", "attributes"])
    );
    assert_eq!(js["properties"]["span_id"]["type"], "integer");
}
