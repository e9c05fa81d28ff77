//! The layout claim: our bytes equal bincode 1.x bytes and bincode 2 (legacy config) bytes for
//! the same values. bincode is a dev-dependency only.

use proptest::prelude::*;
use snapbus_schemas::Wire;
use snapbus_schemas::builtin::{AttrValue, DurationSample, ResourceSample, SpanStart};

use crate::fixtures::{everything, sample};

fn bincode2_legacy<T: serde::Serialize>(v: &T) -> Vec<u8> {
    bincode2::serde::encode_to_vec(v, bincode2::config::legacy()).expect("bincode2")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn bytes_equal_bincode_1_and_2_legacy(v in everything()) {
        let ours = v.encode_to_vec().expect("encode");
        prop_assert_eq!(&ours, &bincode1::serialize(&v).expect("bincode1"));
        prop_assert_eq!(&ours, &bincode2_legacy(&v));
    }
}

#[test]
fn builtins_equal_bincode_bytes() {
    let d = DurationSample {
        label: "env.step".into(),
        duration_nanos: 1234,
        ..Default::default()
    };
    let r = ResourceSample {
        rss_bytes: 1 << 30,
        cpu_user_nanos: 5,
        cpu_sys_nanos: 6,
        minor_faults: 7,
        major_faults: 8,
        threads: 9,
    };
    let s = SpanStart {
        span_id: 1,
        parent_id: Some(0),
        name: "episode".into(),
        attributes: [
            ("lr".to_string(), AttrValue::F64(0.1)),
            ("tag".to_string(), AttrValue::Str("a".into())),
        ]
        .into_iter()
        .collect(),
    };
    // The built-ins do not derive serde; compare against mirror structs that do.
    #[derive(serde::Serialize)]
    struct D<'a>(&'a str, u64, u128, u64, u64);
    #[derive(serde::Serialize)]
    enum A<'a> {
        #[allow(dead_code)]
        Bool(bool),
        #[allow(dead_code)]
        I64(i64),
        #[allow(dead_code)]
        U64(u64),
        F64(f64),
        Str(&'a str),
    }
    #[derive(serde::Serialize)]
    struct S<'a>(u64, Option<u64>, &'a str, Vec<(&'a str, A<'a>)>);
    assert_eq!(
        d.encode_to_vec().expect("encode"),
        bincode1::serialize(&D("env.step", 1234, 0, 0, 0)).expect("b1")
    );
    assert_eq!(
        r.encode_to_vec().expect("encode"),
        bincode1::serialize(&(1u64 << 30, 5u64, 6u64, 7u64, 8u64, 9u32)).expect("b1")
    );
    // A map serializes as u64 count + entries, like a Vec of pairs.
    assert_eq!(
        s.encode_to_vec().expect("encode"),
        bincode1::serialize(&S(
            1,
            Some(0),
            "episode",
            vec![("lr", A::F64(0.1)), ("tag", A::Str("a"))]
        ))
        .expect("b1")
    );
}

#[test]
fn sample_equals_bincode_bytes() {
    let v = sample();
    assert_eq!(
        v.encode_to_vec().expect("encode"),
        bincode1::serialize(&v).expect("bincode1")
    );
}
