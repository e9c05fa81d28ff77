//! The JSON mapping (what `snapbus echo` prints).

use serde_json::json;
use snapbus_schemas::{Snapshot, Wire, decode};

use crate::fixtures::sample;

#[test]
fn sample_renders_as_documented() {
    let v = sample();
    let bytes = v.encode_to_vec().expect("encode");
    let j = decode(crate::fixtures::Everything::descriptor().root(), &bytes)
        .expect("decode")
        .to_json();
    assert_eq!(
        j["scalars"]["u128"],
        json!("340282366920938463463374607431768211455")
    );
    assert_eq!(
        j["scalars"]["i128"],
        json!("-170141183460469231731687303715884105728")
    );
    assert_eq!(
        j["scalars"]["f32"],
        json!(0.1),
        "f32 renders as its shortest decimal"
    );
    assert_eq!(j["text"], json!("héllo"));
    assert_eq!(j["blob"], json!([0, 255]));
    assert_eq!(
        j["maybe"],
        json!({"id": 7, "name": "in", "flags": [true, false]})
    );
    assert_eq!(j["floats"], json!([1.0, "inf"]));
    assert_eq!(j["fixed_inner"], json!([null, 9]));
    assert_eq!(j["tuple"], json!([5, "t", 0.5]));
    assert_eq!(j["pair"], json!([-7, 1.5]));
    assert_eq!(
        j["mode"],
        json!({"Scheduled": {"at_step": 10, "lr": 0.001}})
    );
    assert_eq!(j["modes"], json!(["Train", {"Custom": [3, "x"]}, "Eval"]));
    assert_eq!(j["by_name"], json!({"a": 1, "b": -2}));
    assert_eq!(j["by_id"], json!([[42, [1, 2, 3]]]));
    assert_eq!(
        j["image"],
        json!({"dtype": "u8", "shape": [2, 3], "data": [0, 1, 2, 3, 4, 5]})
    );
    assert_eq!(
        j["counts"],
        json!({"dtype": "i64", "shape": [], "data": [99]})
    );
    let keys: Vec<&String> = j.as_object().expect("object").keys().collect();
    assert_eq!(
        keys[..3],
        ["scalars", "text", "blob"],
        "field order is kept"
    );
}

#[test]
fn nan_is_never_silently_null() {
    #[derive(Snapshot)]
    #[snapshot(id = "json.nan", version = 1)]
    struct N {
        a: f64,
        b: f32,
        c: Vec<f64>,
    }
    let bytes = N {
        a: f64::NAN,
        b: f32::NEG_INFINITY,
        c: vec![f64::NAN],
    }
    .encode_to_vec()
    .expect("encode");
    let j = decode(N::descriptor().root(), &bytes)
        .expect("decode")
        .to_json();
    assert_eq!(j, json!({"a": "NaN", "b": "-inf", "c": ["NaN"]}));
}

/// `as_json` streams the same text `to_json` renders (one mapping, two ways to write it).
#[test]
fn the_streamed_json_is_the_json() {
    let bytes = sample().encode_to_vec().expect("encode");
    let v = decode(crate::fixtures::Everything::descriptor().root(), &bytes).expect("decode");
    let streamed = serde_json::to_string(&v.as_json()).expect("serialize");
    assert_eq!(streamed, v.to_json().to_string());
    let reparsed: serde_json::Value = serde_json::from_str(&streamed).expect("JSON");
    assert_eq!(reparsed, v.to_json());
}
