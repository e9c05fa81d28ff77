//! Fuzzes every decoder of `snapbus-schemas` that reads untrusted bytes.
//!
//! The first input byte picks a mode (`byte % 4`):
//!
//! - **A** (`0`): the next two bytes (little-endian `u16`, bounded by what remains) give the
//!   length of a descriptor, parsed with `SchemaDescriptor::from_canonical_bytes`; the rest is a
//!   payload decoded with that descriptor.
//! - **A'** (`1`): like A, but the harness supplies the descriptor header (magic, a fixed id,
//!   version 1) and the input only the root node, so the fuzzer spends its bytes on the type tree.
//! - **B** (`2`): the next byte picks one of a fixed set of descriptors (the built-ins, a rich
//!   hand-built struct covering every `TypeDesc` variant, and small single-variant ones); the
//!   rest is a payload decoded with it.
//! - **C** (`3`): the next byte picks a typed decoder (the built-in snapshots via `decode_exact`
//!   and `decode_versioned` with an arbitrary writer version taken from the input, and
//!   `Tensor<_>` of several dtypes via `decode_exact`).
//!
//! Properties checked (any violation panics, which libFuzzer reports as a crash):
//!
//! - no decoder panics, and error offsets stay inside the input;
//! - a successful dynamic `decode` re-encodes with `encode_value` to exactly the input, and
//!   `Value::to_json` / `into_owned` work on the result;
//! - a successful `from_canonical_bytes` re-encodes with `to_canonical_bytes` to exactly the
//!   input, decodes again to an equal descriptor with the same fingerprint, validates, displays,
//!   renders a JSON Schema and registers;
//! - a successful typed `decode_exact` re-encodes with `Wire::encode_to_vec` to exactly the
//!   input and agrees with the dynamic decoder (`to_value`); `decode_versioned` agrees with
//!   `decode_exact` for the schema's own version, fails for version 0 and reads a prefix for
//!   newer versions;
//! - the peak heap growth of one decode stays within a budget linear in the input size (a
//!   counting global allocator measures it), so a length prefix cannot make the decoder
//!   allocate more than the input justifies. Run with `-malloc_limit_mb` / `-rss_limit_mb` as
//!   well, to catch a single huge allocation or a leak.

#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::borrow::Cow;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;
use snapbus_schemas::builtin::{DurationSample, ResourceSample, SpanEnd, SpanEvent, SpanStart};
use snapbus_schemas::{
    DESCRIPTOR_MAGIC, DType, DecodeErrorKind, Field, SchemaDescriptor, SchemaRegistry, Snapshot,
    Tensor, ToValue, TypeDesc, Value, Variant, Wire, check_compatible, decode, decode_from,
    decode_versioned, encode_value,
};

mod fixed;
mod heap;

use fixed::FIXED;
use heap::{descriptor_budget, measure, payload_budget};

// ---------------------------------------------------------------------------------------------
// Checks.

/// Decodes `payload` with `desc` and checks the dynamic-decode properties.
fn check_payload(desc: &TypeDesc, desc_len: usize, payload: &[u8]) {
    let budget = payload_budget(payload.len(), desc_len, desc.depth());
    let (res, peak) = measure(budget, || decode(desc, payload));
    assert!(
        peak <= budget,
        "decode of {} payload bytes (descriptor {} bytes) peaked at {peak} heap bytes, budget {budget}: {desc}",
        payload.len(),
        desc_len,
    );
    let value = match res {
        Ok(v) => v,
        Err(e) => {
            assert!(
                e.offset <= payload.len(),
                "error offset {} beyond {}: {e}",
                e.offset,
                payload.len()
            );
            let _ = e.to_string();
            return;
        }
    };

    // Round trip: re-encoding reproduces exactly the input.
    let mut out = Vec::with_capacity(payload.len());
    if let Err(e) = encode_value(desc, &value, &mut out) {
        panic!("decoded value does not re-encode: {e}\n  desc: {desc}\n  value: {value:?}");
    }
    assert!(
        out == payload,
        "re-encode differs from the input\n  desc: {desc}\n  in:  {payload:02x?}\n  out: {out:02x?}"
    );

    // decode_from reads the same value and consumes everything.
    let mut r = snapbus_schemas::WireReader::new(payload);
    let again = decode_from(desc, &mut r).expect("decode_from agrees with decode");
    assert_eq!(r.remaining(), 0);
    assert_eq!(format!("{again:?}"), format!("{value:?}"));

    // JSON and owned copies do not panic and keep the value.
    let json = value.to_json();
    let _ = json.to_string();
    let owned = value.clone().into_owned();
    assert_eq!(format!("{owned:?}"), format!("{value:?}"));
    let _ = value.as_f64();
    let _ = value.kind_name();
    let _ = value.path("a.b");
    check_numeric_views(&value);
}

/// The element accessors of packed arrays and tensors stay in bounds for any index.
fn check_numeric_views(v: &Value<'_>) {
    let check = |len: usize, get: &dyn Fn(usize) -> Option<f64>| {
        if len > 0 {
            assert!(get(len - 1).is_some(), "last element missing");
        }
        assert!(get(len).is_none(), "element past the end");
        assert!(get(usize::MAX).is_none(), "element usize::MAX");
        assert!(get(usize::MAX / 2).is_none(), "element usize::MAX / 2");
    };
    match v {
        Value::Packed(p) => {
            check(p.len(), &|i| p.get_f64(i));
            let _ = p.is_empty();
            let _ = p.to_vec::<u8>();
            let _ = p.to_vec::<f64>();
        }
        Value::Tensor(t) => {
            check(t.len(), &|i| t.get_f64(i));
            let _ = t.to_vec::<f32>();
            let _ = t.to_vec::<i16>();
        }
        Value::Option(Some(x)) => check_numeric_views(x),
        Value::Seq(items) => items.iter().for_each(check_numeric_views),
        Value::Struct(fields) => fields.iter().for_each(|(_, x)| check_numeric_views(x)),
        Value::Variant { value, .. } => check_numeric_views(value),
        Value::Map(entries) => entries.iter().for_each(|(k, x)| {
            check_numeric_views(k);
            check_numeric_views(x);
        }),
        _ => {}
    }
}

/// Parses a descriptor and checks its round-trip properties; returns it when valid.
fn check_descriptor(bytes: &[u8]) -> Option<SchemaDescriptor> {
    let budget = descriptor_budget(bytes.len());
    let (res, peak) = measure(budget, || SchemaDescriptor::from_canonical_bytes(bytes));
    assert!(
        peak <= budget,
        "from_canonical_bytes of {} bytes peaked at {peak} heap bytes, budget {budget}",
        bytes.len()
    );
    let d = match res {
        Ok(d) => d,
        Err(e) => {
            let _ = e.to_string();
            return None;
        }
    };
    let canon = d.to_canonical_bytes();
    assert!(
        canon == bytes,
        "canonical bytes differ from the input\n  in:  {bytes:02x?}\n  out: {canon:02x?}"
    );
    let again =
        SchemaDescriptor::from_canonical_bytes(&canon).expect("canonical bytes decode again");
    assert!(
        again == d,
        "re-decoded descriptor differs: {d:?} vs {again:?}"
    );
    assert_eq!(again.fingerprint(), d.fingerprint());
    d.validate().expect("a decoded descriptor validates");
    let _ = d.to_string();
    let _ = d.root().depth();
    let _ = d.root().min_encoded_len();
    let _ = d.to_json_schema().to_string();
    check_compatible(&d, &again).expect("a descriptor is compatible with itself");
    let mut reg = SchemaRegistry::new();
    reg.register(d.clone())
        .expect("a valid descriptor registers");
    reg.register(again)
        .expect("an equal descriptor registers again");
    Some(d)
}

/// Whether a decoded value holds a map whose keys are not strictly increasing (duplicates or
/// out of order), i.e. not what a `BTreeMap` would have written.
fn has_noncanonical_map(v: &Value<'_>) -> bool {
    use Value as V;
    match v {
        V::Map(entries) => {
            let keys_ok = entries.windows(2).all(|w| match (&w[0].0, &w[1].0) {
                (V::Str(a), V::Str(b)) => a < b,
                _ => false,
            });
            !keys_ok
                || entries
                    .iter()
                    .any(|(k, v)| has_noncanonical_map(k) || has_noncanonical_map(v))
        }
        V::Option(Some(x)) => has_noncanonical_map(x),
        V::Seq(items) => items.iter().any(has_noncanonical_map),
        V::Struct(fields) => fields.iter().any(|(_, x)| has_noncanonical_map(x)),
        V::Variant { value, .. } => has_noncanonical_map(value),
        _ => false,
    }
}

/// Typed decode of a built-in snapshot, cross-checked with the dynamic decoder and
/// `decode_versioned`.
fn check_snapshot<T: Snapshot + std::fmt::Debug + PartialEq>(payload: &[u8], writer_version: u32) {
    let id = T::SCHEMA_ID;
    let budget = 8 * payload_budget(payload.len(), 0, 1);
    let (res, peak) = measure(budget, || T::decode_exact(payload));
    assert!(
        peak <= budget,
        "{id}: typed decode peaked at {peak}, budget {budget}"
    );
    let desc = T::descriptor().root();
    let dynamic = decode(desc, payload);
    // Maps are unordered: a typed decode accepts keys in any order (a Python or C++ producer
    // writes them in insertion order) and a `BTreeMap` re-encodes them sorted, so inputs with
    // unsorted maps get the order-insensitive checks (no panic, typed and dynamic agree on
    // success, re-encoding is stable) instead of byte-exact ones.
    let lenient = dynamic.as_ref().is_ok_and(has_noncanonical_map);
    match &res {
        Ok(v) => {
            let bytes = v.encode_to_vec().expect("typed re-encode");
            assert_eq!(v.encoded_len(), bytes.len());
            let dv = dynamic
                .as_ref()
                .unwrap_or_else(|e| panic!("{id}: typed decode ok, dynamic failed: {e}"));
            if lenient {
                let again = T::decode_exact(&bytes).expect("re-encoding decodes");
                assert!(
                    again == *v || format!("{again:?}") == format!("{v:?}"),
                    "{id}: re-encoding is not stable"
                );
            } else {
                assert!(
                    bytes == payload,
                    "{id}: typed decode_exact succeeded but encode_to_vec differs from the input\n  in:  {payload:02x?}\n  out: {bytes:02x?}"
                );
                assert_eq!(
                    format!("{:?}", v.to_value()),
                    format!("{dv:?}"),
                    "{id}: to_value differs from decode"
                );
            }
        }
        Err(e) => {
            assert!(e.offset <= payload.len());
            // The dynamic decoder keeps a map's entries as they are on the wire, duplicates
            // included; the typed one refuses duplicate keys. Otherwise they agree.
            if e.kind != DecodeErrorKind::DuplicateMapKey {
                assert!(
                    dynamic.is_err(),
                    "{id}: typed decode failed ({e}) but dynamic decode succeeded"
                );
            }
        }
    }

    // decode_versioned: own version = decode_exact; 0 = error; newer = reads a prefix.
    let own = decode_versioned::<T>(payload, T::VERSION);
    assert_eq!(
        own.is_ok(),
        res.is_ok(),
        "{id}: decode_versioned(own version) and decode_exact disagree"
    );
    if let (Ok(a), Ok(b)) = (&own, &res) {
        assert_eq!(
            format!("{a:?}"),
            format!("{b:?}"),
            "{id}: decode_versioned(own version) != decode_exact"
        );
    }
    assert!(decode_versioned::<T>(payload, 0).is_err());
    let (vres, peak) = measure(budget, || decode_versioned::<T>(payload, writer_version));
    assert!(
        peak <= budget,
        "{id}: decode_versioned peaked at {peak}, budget {budget}"
    );
    match vres {
        Ok(v) => {
            let bytes = v.encode_to_vec().expect("typed re-encode");
            if writer_version > T::VERSION {
                // The fields T knows were read and the rest skipped: re-encoding gives a prefix
                // of the input (when the maps in it are canonical).
                let lenient_prefix =
                    decode_from(desc, &mut snapbus_schemas::WireReader::new(payload))
                        .is_ok_and(|v| has_noncanonical_map(&v));
                if !lenient_prefix {
                    assert!(
                        payload.starts_with(&bytes),
                        "{id}: newer-version read is not a prefix of the input"
                    );
                }
            } else if !lenient && writer_version == T::VERSION {
                assert!(bytes == payload, "{id}: versioned re-encode differs");
            } else if !lenient {
                // An older writer: the fields added since are re-encoded after its own, with
                // their defaults.
                assert!(
                    bytes.starts_with(payload),
                    "{id}: an older version's re-encode does not start with its input"
                );
            }
        }
        Err(e) => {
            assert!(e.offset <= payload.len());
            if writer_version > T::VERSION {
                // A prefix read fails only if the strict read of the known prefix fails too.
                assert!(
                    res.is_err(),
                    "{id}: strict decode ok but newer-version read failed: {e}"
                );
            }
        }
    }
}

/// Typed tensor decode, cross-checked with the dynamic decoder.
fn check_tensor<T: snapbus_schemas::Element + std::fmt::Debug>(payload: &[u8]) {
    let budget = 8 * payload_budget(payload.len(), 0, 1);
    let (res, peak) = measure(budget, || Tensor::<T>::decode_exact(payload));
    assert!(
        peak <= budget,
        "Tensor<{}>: typed decode peaked at {peak}, budget {budget}",
        T::DTYPE
    );
    let desc = Tensor::<T>::type_desc();
    let dynamic = decode(&desc, payload);
    match res {
        Ok(t) => {
            let bytes = t.encode_to_vec().expect("tensor re-encode");
            assert!(bytes == payload, "Tensor<{}>: re-encode differs", T::DTYPE);
            let dv = dynamic
                .unwrap_or_else(|e| panic!("Tensor<{}>: typed ok, dynamic failed: {e}", T::DTYPE));
            assert_eq!(format!("{:?}", t.to_value()), format!("{dv:?}"));
            // Rebuilding from parts validates the same shape.
            let (shape, data) = t.into_parts();
            Tensor::new(shape, data).expect("decoded tensor has a consistent shape");
        }
        Err(e) => {
            assert!(e.offset <= payload.len());
            assert!(
                dynamic.is_err(),
                "Tensor<{}>: typed failed ({e}), dynamic ok",
                T::DTYPE
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Entry point.

/// Header of a descriptor with id `fuzz.a` and version 1, for mode A'.
fn header() -> Vec<u8> {
    let mut h = DESCRIPTOR_MAGIC.to_vec();
    h.extend_from_slice(&6u64.to_le_bytes());
    h.extend_from_slice(b"fuzz.a");
    h.extend_from_slice(&1u32.to_le_bytes());
    h
}

fn split_descriptor(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = data.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    Some(rest.split_at(len))
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => {
            let Some((desc_bytes, payload)) = split_descriptor(data) else {
                return;
            };
            if let Some(d) = check_descriptor(desc_bytes) {
                check_payload(d.root(), desc_bytes.len(), payload);
            }
        }
        1 => {
            let Some((node_bytes, payload)) = split_descriptor(data) else {
                return;
            };
            let mut desc_bytes = header();
            desc_bytes.extend_from_slice(node_bytes);
            if let Some(d) = check_descriptor(&desc_bytes) {
                check_payload(d.root(), desc_bytes.len(), payload);
            }
        }
        2 => {
            let Some((&which, payload)) = data.split_first() else {
                return;
            };
            let (desc, len) = &FIXED[usize::from(which) % FIXED.len()];
            check_payload(desc, *len, payload);
        }
        _ => {
            let Some((&which, rest)) = data.split_first() else {
                return;
            };
            let Some((version, payload)) = rest.split_first_chunk::<4>() else {
                return;
            };
            let writer_version = u32::from_le_bytes(*version);
            match which % 9 {
                0 => check_snapshot::<DurationSample>(payload, writer_version),
                1 => check_snapshot::<ResourceSample>(payload, writer_version),
                2 => check_snapshot::<SpanStart>(payload, writer_version),
                3 => check_snapshot::<SpanEnd>(payload, writer_version),
                4 => check_snapshot::<SpanEvent>(payload, writer_version),
                5 => check_tensor::<f32>(payload),
                6 => check_tensor::<u8>(payload),
                7 => check_tensor::<f64>(payload),
                _ => check_tensor::<i16>(payload),
            }
        }
    }
});
