//! From snapbus values to OTLP ones: decoded payloads as `AnyValue`s, producers as resources,
//! levels as severities.

use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use snapbus_bus::Level;
use snapbus_schemas::{DType, Value};

use crate::runtime::Producer;

/// Packed arrays and sequences longer than this go into a log body as a short description
/// (`"u8[4096]"`, `"seq[5000]"`), not element by element; tensor data never does (only dtype
/// and shape).
pub const MAX_BODY_ELEMENTS: usize = 256;
/// Strings longer than this are cut in a log body (at a character boundary, with
/// `"…(N bytes)"` after); byte buffers longer than it become `"bytes[N]"`. A record's body is
/// so bounded by its schema's shape, not by what a producer puts in it.
pub const MAX_BODY_TEXT_BYTES: usize = 4096;

/// The OpenTelemetry semantic conventions the exporter's names and attributes follow (the
/// process metrics, `service.*`, `host.name`): the `schema_url` of every resource and scope.
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.27.0";

/// A string attribute.
pub(crate) fn kv_str(key: &str, v: impl Into<String>) -> KeyValue {
    kv(key, any_value::Value::StringValue(v.into()))
}

/// An integer attribute.
pub(crate) fn kv_int(key: &str, v: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(v))
}

/// A float attribute.
pub(crate) fn kv_f64(key: &str, v: f64) -> KeyValue {
    kv(key, any_value::Value::DoubleValue(v))
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn any(v: any_value::Value) -> AnyValue {
    AnyValue { value: Some(v) }
}

/// A decoded payload as an `AnyValue`: structs as kvlists, sequences as arrays, integers as
/// ints (beyond `i64`: strings), unit enum variants as their name, other variants as
/// `{name: payload}`, tensors as `{dtype, shape}` without their data.
pub fn any_value(v: &Value<'_>) -> AnyValue {
    use any_value::Value as A;
    match v {
        Value::Bool(b) => any(A::BoolValue(*b)),
        Value::U8(x) => any(A::IntValue(i64::from(*x))),
        Value::U16(x) => any(A::IntValue(i64::from(*x))),
        Value::U32(x) => any(A::IntValue(i64::from(*x))),
        Value::U64(x) => match i64::try_from(*x) {
            Ok(i) => any(A::IntValue(i)),
            Err(_) => any(A::StringValue(x.to_string())),
        },
        Value::U128(x) => any(A::StringValue(x.to_string())),
        Value::I8(x) => any(A::IntValue(i64::from(*x))),
        Value::I16(x) => any(A::IntValue(i64::from(*x))),
        Value::I32(x) => any(A::IntValue(i64::from(*x))),
        Value::I64(x) => any(A::IntValue(*x)),
        Value::I128(x) => any(A::StringValue(x.to_string())),
        Value::F32(x) => any(A::DoubleValue(f64::from(*x))),
        Value::F64(x) => any(A::DoubleValue(*x)),
        Value::Str(s) if s.len() > MAX_BODY_TEXT_BYTES => {
            let mut end = MAX_BODY_TEXT_BYTES;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            any(A::StringValue(format!("{}…({} bytes)", &s[..end], s.len())))
        }
        Value::Str(s) => any(A::StringValue(s.to_string())),
        Value::Bytes(b) if b.len() > MAX_BODY_TEXT_BYTES => {
            any(A::StringValue(format!("bytes[{}]", b.len())))
        }
        Value::Bytes(b) => any(A::BytesValue(b.to_vec())),
        Value::Option(None) | Value::Unit => AnyValue { value: None },
        Value::Option(Some(x)) => any_value(x),
        Value::Seq(items) if items.len() > MAX_BODY_ELEMENTS => {
            any(A::StringValue(format!("seq[{}]", items.len())))
        }
        Value::Seq(items) => array(items.iter().map(any_value).collect()),
        Value::Packed(p) => {
            let n = p.len();
            if n > MAX_BODY_ELEMENTS {
                any(A::StringValue(format!("{}[{n}]", dtype_name(p.dtype))))
            } else {
                array(
                    (0..n)
                        .map(|i| number(p.dtype, p.get_f64(i).unwrap_or(f64::NAN)))
                        .collect(),
                )
            }
        }
        Value::Struct(fields) => kvlist(
            fields
                .iter()
                .map(|(k, v)| KeyValue {
                    key: k.to_string(),
                    value: Some(any_value(v)),
                    ..Default::default()
                })
                .collect(),
        ),
        Value::Variant { name, value, .. } => match value.as_ref() {
            Value::Unit => any(A::StringValue(name.to_string())),
            inner => kvlist(vec![KeyValue {
                key: name.to_string(),
                value: Some(any_value(inner)),
                ..Default::default()
            }]),
        },
        Value::Map(entries) => {
            if entries.iter().all(|(k, _)| matches!(k, Value::Str(_))) {
                kvlist(
                    entries
                        .iter()
                        .map(|(k, v)| KeyValue {
                            key: match k {
                                Value::Str(s) => s.to_string(),
                                _ => String::new(),
                            },
                            value: Some(any_value(v)),
                            ..Default::default()
                        })
                        .collect(),
                )
            } else {
                array(
                    entries
                        .iter()
                        .map(|(k, v)| array(vec![any_value(k), any_value(v)]))
                        .collect(),
                )
            }
        }
        Value::Tensor(t) => kvlist(vec![
            kv_str("dtype", dtype_name(t.dtype)),
            KeyValue {
                key: "shape".into(),
                value: Some(array(
                    t.shape
                        .iter()
                        .map(|d| any(A::IntValue(i64::try_from(*d).unwrap_or(i64::MAX))))
                        .collect(),
                )),
                ..Default::default()
            },
        ]),
    }
}

fn number(d: DType, x: f64) -> AnyValue {
    match d {
        DType::F32 | DType::F64 => any(any_value::Value::DoubleValue(x)),
        _ => any(any_value::Value::IntValue(x as i64)),
    }
}

fn array(values: Vec<AnyValue>) -> AnyValue {
    any(any_value::Value::ArrayValue(ArrayValue { values }))
}

fn kvlist(values: Vec<KeyValue>) -> AnyValue {
    any(any_value::Value::KvlistValue(KeyValueList { values }))
}

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::U8 => "u8",
        DType::I8 => "i8",
        DType::U16 => "u16",
        DType::I16 => "i16",
        DType::U32 => "u32",
        DType::I32 => "i32",
        DType::U64 => "u64",
        DType::I64 => "i64",
        DType::F32 => "f32",
        DType::F64 => "f64",
    }
}

/// The OTLP severity number and text of a level (TRACE 1, DEBUG 5, INFO 9, WARN 13, ERROR 17).
pub fn severity(level: Level) -> (i32, &'static str) {
    match level {
        Level::TRACE => (1, "TRACE"),
        Level::DEBUG => (5, "DEBUG"),
        Level::INFO => (9, "INFO"),
        Level::WARN => (13, "WARN"),
        _ => (17, "ERROR"),
    }
}

/// The resource of a producer: `service.name` (its name), `service.instance.id` (its lane,
/// which stays the same across broker restarts), `process.pid`, `host.name`, and
/// `snapbus.session_tag` / `snapbus.perf_tag` when set.
pub fn producer_resource(p: &Producer<'_>, host: &str) -> Resource {
    let mut attributes = vec![
        kv_str("service.name", p.name),
        kv_str("service.instance.id", format!("{:016x}", p.lane_id)),
        kv_int("process.pid", i64::from(p.pid)),
        kv_str("host.name", host),
    ];
    if let Some(t) = p.session_tag {
        attributes.push(kv_str("snapbus.session_tag", t));
    }
    if let Some(t) = p.perf_tag {
        attributes.push(kv_str("snapbus.perf_tag", t));
    }
    Resource {
        attributes,
        ..Default::default()
    }
}

/// The resource of a producer known only by name, pid and lane (the source of an aggregator
/// summary whose records this exporter did not read itself).
pub(crate) fn summary_source_resource(name: &str, pid: u32, lane: u64, host: &str) -> Resource {
    Resource {
        attributes: vec![
            kv_str("service.name", name),
            kv_str("service.instance.id", format!("{lane:016x}")),
            kv_int("process.pid", i64::from(pid)),
            kv_str("host.name", host),
        ],
        ..Default::default()
    }
}

/// The resource of the exporter itself (for its data-gap records).
pub(crate) fn exporter_resource(host: &str) -> Resource {
    Resource {
        attributes: vec![
            kv_str("service.name", "snapbus-otlp"),
            kv_int("process.pid", i64::from(std::process::id())),
            kv_str("host.name", host),
        ],
        ..Default::default()
    }
}

/// The instrumentation scope of everything the exporter sends.
pub(crate) fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: "snapbus".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    }
}

/// This machine's host name (`/proc/sys/kernel/hostname`; `localhost` if unreadable).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Now, CLOCK_REALTIME nanoseconds since the epoch.
pub(crate) fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn text(v: &AnyValue) -> &str {
        match &v.value {
            Some(any_value::Value::StringValue(s)) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    #[test]
    fn long_strings_bytes_and_sequences_are_bounded_in_a_body() {
        let long = "é".repeat(MAX_BODY_TEXT_BYTES);
        let v = any_value(&Value::Str(Cow::Owned(long.clone())));
        let t = text(&v);
        assert!(t.len() <= MAX_BODY_TEXT_BYTES + 32, "{}", t.len());
        assert!(t.ends_with(&format!("…({} bytes)", long.len())), "{t:.40}");
        let v = any_value(&Value::Bytes(Cow::Owned(vec![1; MAX_BODY_TEXT_BYTES + 1])));
        assert_eq!(text(&v), format!("bytes[{}]", MAX_BODY_TEXT_BYTES + 1));
        let v = any_value(&Value::Seq(vec![Value::U8(1); MAX_BODY_ELEMENTS + 1]));
        assert_eq!(text(&v), format!("seq[{}]", MAX_BODY_ELEMENTS + 1));
        let short = any_value(&Value::Str(Cow::Borrowed("ok")));
        assert_eq!(text(&short), "ok");
    }
}
