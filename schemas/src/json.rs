//! JSON rendering of [`Value`]s ([`Value::to_json`]) and JSON Schemas of descriptors
//! ([`SchemaDescriptor::to_json_schema`]).
//!
//! The mapping (what `snapbus echo` prints):
//!
//! | value | JSON |
//! |---|---|
//! | integers | numbers; 64-bit values beyond ±2^53 stay exact; 128-bit values beyond the 64-bit range become decimal strings |
//! | floats | numbers; NaN and ±infinity become the strings `"NaN"`, `"inf"`, `"-inf"` (never silently `null`) |
//! | string | string |
//! | bytes | array of numbers 0–255 |
//! | option | `null` or the value |
//! | sequence, array, tuple, packed array | array |
//! | struct | object, fields in order |
//! | enum | `"Name"` for unit variants, `{"Name": payload}` otherwise (serde's external tagging) |
//! | map | object when every key is a string, otherwise an array of `[key, value]` pairs |
//! | tensor | `{"dtype": "f32", "shape": [..], "data": [..]}` (data flat, row-major) |

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value as Json, json};

use crate::desc::{Field, TypeDesc, VariantKind};
use crate::dtype::DType;
use crate::element::Scalar;
use crate::schema::SchemaDescriptor;
use crate::value::Value;

/// A float as JSON: NaN and ±infinity as strings, never `null`.
fn put_float<S: Serializer>(v: f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_nan() {
        s.serialize_str("NaN")
    } else if v.is_infinite() {
        s.serialize_str(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        s.serialize_f64(v)
    }
}

/// An f32 as the shortest decimal that round-trips through f32 ("0.1", not "0.10000000149").
fn put_f32<S: Serializer>(v: f32, s: S) -> Result<S::Ok, S::Error> {
    let wide = if v.is_finite() {
        v.to_string().parse::<f64>().unwrap_or(f64::from(v))
    } else {
        f64::from(v)
    };
    put_float(wide, s)
}

/// Packed little-endian numbers of `dtype`, as a JSON array written element by element.
struct PackedJson<'v> {
    dtype: DType,
    bytes: &'v [u8],
}

/// One packed element.
struct ScalarJson(Scalar);

impl Serialize for ScalarJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Scalar::Unsigned(v) => s.serialize_u64(v),
            Scalar::Signed(v) => s.serialize_i64(v),
            Scalar::F32(v) => put_f32(v, s),
            Scalar::F64(v) => put_float(v, s),
        }
    }
}

impl Serialize for PackedJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let size = self.dtype.size_bytes();
        let mut seq = s.serialize_seq(Some(self.bytes.len() / size))?;
        for c in self.bytes.chunks_exact(size) {
            seq.serialize_element(&ScalarJson(Scalar::read(self.dtype, c)))?;
        }
        seq.end()
    }
}

/// A [`Value`] as JSON, written as it is serialized ([`Value::as_json`]): however large the
/// value, no JSON tree of it is built (`serde_json::to_writer(out, &v.as_json())`).
#[derive(Clone, Copy)]
pub struct ValueJson<'v, 'a>(&'v Value<'a>);

impl Serialize for ValueJson<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Bool(v) => s.serialize_bool(*v),
            Value::U8(v) => s.serialize_u8(*v),
            Value::U16(v) => s.serialize_u16(*v),
            Value::U32(v) => s.serialize_u32(*v),
            Value::U64(v) => s.serialize_u64(*v),
            Value::I8(v) => s.serialize_i8(*v),
            Value::I16(v) => s.serialize_i16(*v),
            Value::I32(v) => s.serialize_i32(*v),
            Value::I64(v) => s.serialize_i64(*v),
            Value::U128(v) => match u64::try_from(*v) {
                Ok(v) => s.serialize_u64(v),
                Err(_) => s.serialize_str(&v.to_string()),
            },
            Value::I128(v) => match i64::try_from(*v) {
                Ok(v) => s.serialize_i64(v),
                Err(_) => s.serialize_str(&v.to_string()),
            },
            Value::F32(v) => put_f32(*v, s),
            Value::F64(v) => put_float(*v, s),
            Value::Str(v) => s.serialize_str(v),
            Value::Bytes(b) => s.collect_seq(b.iter()),
            Value::Option(None) | Value::Unit => s.serialize_unit(),
            Value::Option(Some(v)) => v.as_json().serialize(s),
            Value::Seq(items) => s.collect_seq(items.iter().map(Value::as_json)),
            Value::Packed(p) => PackedJson {
                dtype: p.dtype,
                bytes: &p.bytes,
            }
            .serialize(s),
            Value::Struct(fields) => {
                s.collect_map(fields.iter().map(|(k, v)| (k.as_ref(), v.as_json())))
            }
            Value::Variant { name, value, .. } => match **value {
                Value::Unit => s.serialize_str(name),
                ref v => s.collect_map(std::iter::once((name.as_ref(), v.as_json()))),
            },
            Value::Map(entries) => {
                if entries.iter().all(|(k, _)| matches!(k, Value::Str(_))) {
                    s.collect_map(entries.iter().map(|(k, v)| match k {
                        Value::Str(k) => (k.as_ref(), v.as_json()),
                        _ => ("", v.as_json()),
                    }))
                } else {
                    s.collect_seq(entries.iter().map(|(k, v)| (k.as_json(), v.as_json())))
                }
            }
            Value::Tensor(t) => {
                let mut m = s.serialize_map(Some(3))?;
                m.serialize_entry("dtype", t.dtype.name())?;
                m.serialize_entry("shape", &t.shape)?;
                let data = PackedJson {
                    dtype: t.dtype,
                    bytes: &t.data,
                };
                m.serialize_entry("data", &data)?;
                m.end()
            }
        }
    }
}

impl Value<'_> {
    /// The value as JSON (see the module docs for the mapping).
    pub fn to_json(&self) -> Json {
        serde_json::to_value(self.as_json()).unwrap_or(Json::Null)
    }

    /// The value as JSON to serialize straight to a writer (the same mapping as
    /// [`to_json`](Self::to_json), without building a tree of it).
    pub fn as_json(&self) -> ValueJson<'_, '_> {
        ValueJson(self)
    }
}

fn number_schema(int: bool) -> Json {
    // Non-finite floats are rendered as strings, so float schemas admit those strings too.
    if int {
        json!({"type": "integer"})
    } else {
        json!({"anyOf": [{"type": "number"}, {"enum": ["NaN", "inf", "-inf"]}]})
    }
}

fn fields_schema(fields: &[Field]) -> Json {
    let props: Map<String, Json> = fields
        .iter()
        .map(|f| (f.name.clone(), json_schema(&f.ty)))
        .collect();
    let required: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    json!({"type": "object", "properties": props, "required": required})
}

/// The JSON Schema of the JSON form of values of `desc`.
fn json_schema(desc: &TypeDesc) -> Json {
    match desc {
        TypeDesc::Bool => json!({"type": "boolean"}),
        TypeDesc::U128 | TypeDesc::I128 => {
            json!({"anyOf": [{"type": "integer"}, {"type": "string"}]})
        }
        TypeDesc::String => json!({"type": "string"}),
        TypeDesc::Bytes => json!({"type": "array", "items": {"type": "integer"}}),
        TypeDesc::Option { some } => json!({"anyOf": [{"type": "null"}, json_schema(some)]}),
        TypeDesc::Seq { elem } => json!({"type": "array", "items": json_schema(elem)}),
        TypeDesc::Array { len, elem } => json!({
            "type": "array", "items": json_schema(elem), "minItems": len, "maxItems": len
        }),
        TypeDesc::Tuple { elems } => json!({
            "type": "array",
            "prefixItems": elems.iter().map(json_schema).collect::<Vec<_>>(),
            "items": false,
        }),
        TypeDesc::Struct { fields } => fields_schema(fields),
        TypeDesc::Enum { variants } => {
            let options: Vec<Json> = variants
                .iter()
                .map(|v| match &v.kind {
                    VariantKind::Unit => json!({"const": v.name}),
                    VariantKind::Tuple { elems } => {
                        let inner = if elems.len() == 1 {
                            json_schema(&elems[0])
                        } else {
                            json_schema(&TypeDesc::Tuple {
                                elems: elems.clone(),
                            })
                        };
                        json!({"type": "object", "properties": {v.name.clone(): inner}, "required": [v.name]})
                    }
                    VariantKind::Struct { fields } => json!({
                        "type": "object",
                        "properties": {v.name.clone(): fields_schema(fields)},
                        "required": [v.name],
                    }),
                })
                .collect();
            json!({"oneOf": options})
        }
        TypeDesc::Map { value, .. } => json!({
            "anyOf": [
                {"type": "object", "additionalProperties": json_schema(value)},
                {"type": "array", "items": {"type": "array", "minItems": 2, "maxItems": 2}},
            ]
        }),
        TypeDesc::Tensor { dtype } => json!({
            "type": "object",
            "properties": {
                "dtype": {"const": dtype.name()},
                "shape": {"type": "array", "items": {"type": "integer"}},
                "data": {"type": "array", "items": number_schema(!matches!(dtype, DType::F32 | DType::F64))},
            },
            "required": ["dtype", "shape", "data"],
        }),
        // Any JSON value.
        TypeDesc::Dynamic => json!({}),
        scalar => number_schema(!matches!(scalar, TypeDesc::F32 | TypeDesc::F64)),
    }
}

impl SchemaDescriptor {
    /// A JSON Schema (draft 2020-12) describing the JSON form of this schema's values (the
    /// form [`Value::to_json`](crate::Value::to_json) produces), for tools such as Foxglove.
    pub fn to_json_schema(&self) -> serde_json::Value {
        let mut schema = json_schema(self.root());
        if let Some(obj) = schema.as_object_mut() {
            obj.insert(
                "$schema".into(),
                "https://json-schema.org/draft/2020-12/schema".into(),
            );
            obj.insert("title".into(), self.id().to_owned().into());
            obj.insert(
                "description".into(),
                format!("snapbus schema {} version {}", self.id(), self.version()).into(),
            );
        }
        schema
    }
}
