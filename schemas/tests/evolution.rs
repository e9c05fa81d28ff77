//! Evolution rules: append-only fields with defaults, readable in both directions; anything
//! else is refused with an error naming the difference.

use snapbus_schemas::{
    DecodeErrorKind, Field, IncompatibleSchema, RegisterError, Registered, SchemaDescriptor,
    SchemaRegistry, Snapshot, TypeDesc, Wire, check_compatible, decode, decode_versioned,
};

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "evo.step", version = 1)]
struct StepV1 {
    step: u32,
    reward: f64,
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "evo.step", version = 2)]
struct StepV2 {
    step: u32,
    reward: f64,
    #[snapshot(since = 2, default = 1.5)]
    gain: f64,
    #[snapshot(since = 2)]
    tags: Vec<String>,
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "evo.step", version = 3)]
struct StepV3 {
    step: u32,
    reward: f64,
    #[snapshot(since = 2, default = 1.5)]
    gain: f64,
    #[snapshot(since = 2)]
    tags: Vec<String>,
    #[snapshot(since = 3, default = Some(7))]
    seed: Option<u64>,
}

fn v1() -> StepV1 {
    StepV1 {
        step: 4,
        reward: -0.5,
    }
}
fn v2() -> StepV2 {
    StepV2 {
        step: 5,
        reward: 0.25,
        gain: 2.0,
        tags: vec!["a".into()],
    }
}
fn v3() -> StepV3 {
    StepV3 {
        step: 6,
        reward: 1.0,
        gain: 3.0,
        tags: vec![],
        seed: None,
    }
}

#[test]
fn newer_reader_fills_defaults_for_older_payloads() {
    let old = v1().encode_to_vec().expect("encode");
    assert_eq!(
        decode_versioned::<StepV2>(&old, 1).expect("v2 reads v1"),
        StepV2 {
            step: 4,
            reward: -0.5,
            gain: 1.5,
            tags: vec![]
        }
    );
    assert_eq!(
        decode_versioned::<StepV3>(&old, 1).expect("v3 reads v1"),
        StepV3 {
            step: 4,
            reward: -0.5,
            gain: 1.5,
            tags: vec![],
            seed: Some(7)
        }
    );
    let mid = v2().encode_to_vec().expect("encode");
    assert_eq!(
        decode_versioned::<StepV3>(&mid, 2).expect("v3 reads v2"),
        StepV3 {
            step: 5,
            reward: 0.25,
            gain: 2.0,
            tags: vec!["a".into()],
            seed: Some(7)
        }
    );
}

#[test]
fn older_reader_skips_appended_fields_of_newer_payloads() {
    let mid = v2().encode_to_vec().expect("encode");
    assert_eq!(
        decode_versioned::<StepV1>(&mid, 2).expect("v1 reads v2"),
        StepV1 {
            step: 5,
            reward: 0.25
        }
    );
    let new = v3().encode_to_vec().expect("encode");
    assert_eq!(
        decode_versioned::<StepV1>(&new, 3).expect("v1 reads v3"),
        StepV1 {
            step: 6,
            reward: 1.0
        }
    );
    assert_eq!(
        decode_versioned::<StepV2>(&new, 3).expect("v2 reads v3"),
        StepV2 {
            step: 6,
            reward: 1.0,
            gain: 3.0,
            tags: vec![]
        }
    );
}

#[test]
fn same_version_payload_must_be_exact() {
    let mut bytes = v1().encode_to_vec().expect("encode");
    bytes.push(0);
    let err = decode_versioned::<StepV1>(&bytes, 1).expect_err("trailing byte");
    assert_eq!(err.kind, DecodeErrorKind::TrailingBytes { count: 1 });
    // An older payload claimed as the reader's own version is too short and is refused.
    let old = v1().encode_to_vec().expect("encode");
    let err = decode_versioned::<StepV2>(&old, 2).expect_err("v1 bytes labelled v2");
    assert_eq!(err.path, "gain");
    assert!(
        decode_versioned::<StepV1>(&old, 0).is_err(),
        "version 0 does not exist"
    );
}

#[test]
fn dynamic_decode_uses_the_writers_descriptor() {
    let new = v3().encode_to_vec().expect("encode");
    let value = decode(StepV3::descriptor().root(), &new).expect("dynamic");
    assert_eq!(
        value.to_json().to_string(),
        r#"{"step":6,"reward":1.0,"gain":3.0,"tags":[],"seed":null}"#
    );
}

#[test]
fn append_only_versions_are_compatible_both_ways() {
    for (a, b) in [
        (StepV1::descriptor(), StepV2::descriptor()),
        (StepV2::descriptor(), StepV3::descriptor()),
        (StepV1::descriptor(), StepV3::descriptor()),
    ] {
        check_compatible(a, b).expect("reader older");
        check_compatible(b, a).expect("reader newer");
    }
    check_compatible(StepV2::descriptor(), StepV2::descriptor()).expect("identical");
}

fn root_fields(d: &SchemaDescriptor) -> Vec<Field> {
    match d.root() {
        TypeDesc::Struct { fields } => fields.clone(),
        _ => unreachable!("struct root"),
    }
}

fn variant(version: u32, edit: impl FnOnce(&mut Vec<Field>)) -> SchemaDescriptor {
    let mut fields = root_fields(StepV2::descriptor());
    edit(&mut fields);
    SchemaDescriptor::new("evo.step", version, TypeDesc::Struct { fields }).expect("valid")
}

#[test]
fn incompatible_changes_are_refused_with_the_difference() {
    let v2 = StepV2::descriptor();
    let cases: Vec<(SchemaDescriptor, &str)> = vec![
        (
            variant(3, |f| {
                f.remove(1);
            }),
            "reward",
        ),
        (variant(3, |f| f[1].name = "score".into()), "score"),
        (variant(3, |f| f[0].ty = TypeDesc::U64), "step"),
        (variant(3, |f| f.swap(2, 3)), "tags"),
        (
            variant(3, |f| f.push(Field::since("late", TypeDesc::U8, 2))),
            "late",
        ),
    ];
    for (bad, needle) in cases {
        let err = check_compatible(v2, &bad).expect_err("incompatible");
        assert!(
            matches!(err, IncompatibleSchema::NotAppendOnly { .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains(needle), "{msg} should name {needle}");
        assert!(
            msg.contains("new schema id") || msg.contains("since"),
            "{msg}"
        );
    }
    let other = SchemaDescriptor::new("evo.other", 2, v2.root().clone()).expect("valid");
    assert!(matches!(
        check_compatible(v2, &other),
        Err(IncompatibleSchema::DifferentId { .. })
    ));
}

#[test]
fn two_producers_disagreeing_about_id_and_version_are_detected() {
    let mut registry = SchemaRegistry::new();
    assert_eq!(
        registry.register(StepV2::descriptor().clone()),
        Ok(Registered::New)
    );
    assert_eq!(
        registry.register(StepV2::descriptor().clone()),
        Ok(Registered::Known)
    );
    let impostor = variant(2, |f| {
        f[3].ty = TypeDesc::Seq {
            elem: Box::new(TypeDesc::U8),
        }
    });
    assert_ne!(impostor.fingerprint(), StepV2::descriptor().fingerprint());
    let err = registry.register(impostor).expect_err("conflict");
    let RegisterError::Incompatible(IncompatibleSchema::Conflict {
        version,
        difference,
        ..
    }) = &err
    else {
        panic!("expected a conflict, got {err:?}");
    };
    assert_eq!(*version, 2);
    assert!(difference.contains("tags"), "{difference}");
    assert!(
        err.to_string().contains("evo.step v2 is defined twice"),
        "{err}"
    );
}

#[test]
fn registry_accepts_evolutions_and_refuses_breaking_versions() {
    let mut registry = SchemaRegistry::new();
    registry.register(StepV1::descriptor().clone()).expect("v1");
    registry.register(StepV3::descriptor().clone()).expect("v3");
    registry
        .register(StepV2::descriptor().clone())
        .expect("v2 between");
    assert_eq!(
        registry
            .versions_of("evo.step")
            .map(SchemaDescriptor::version)
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let breaking = variant(4, |f| f[0].name = "index".into());
    assert!(registry.register(breaking).is_err());
    assert_eq!(registry.len(), 3);
}
