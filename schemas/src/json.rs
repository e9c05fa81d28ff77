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

use serde_json::{Map, Value as Json, json};

use crate::desc::{Field, TypeDesc, VariantKind};
use crate::dtype::DType;
use crate::element::Scalar;
use crate::schema::SchemaDescriptor;
use crate::value::Value;

fn float(v: f64) -> Json {
    if v.is_nan() {
        Json::from("NaN")
    } else if v.is_infinite() {
        Json::from(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        Json::from(v)
    }
}

fn f32_json(v: f32) -> Json {
    // Render the shortest decimal that round-trips through f32 ("0.1", not "0.10000000149").
    if v.is_finite() {
        v.to_string()
            .parse::<f64>()
            .map_or_else(|_| float(f64::from(v)), float)
    } else {
        float(f64::from(v))
    }
}

fn packed_json(dtype: DType, bytes: &[u8]) -> Json {
    let items = bytes
        .chunks_exact(dtype.size_bytes())
        .map(|c| match Scalar::read(dtype, c) {
            Scalar::Unsigned(v) => Json::from(v),
            Scalar::Signed(v) => Json::from(v),
            Scalar::F32(v) => f32_json(v),
            Scalar::F64(v) => float(v),
        });
    Json::Array(items.collect())
}

impl Value<'_> {
    /// The value as JSON (see the module docs for the mapping).
    pub fn to_json(&self) -> Json {
        match self {
            Value::Bool(v) => Json::from(*v),
            Value::U8(v) => Json::from(*v),
            Value::U16(v) => Json::from(*v),
            Value::U32(v) => Json::from(*v),
            Value::U64(v) => Json::from(*v),
            Value::I8(v) => Json::from(*v),
            Value::I16(v) => Json::from(*v),
            Value::I32(v) => Json::from(*v),
            Value::I64(v) => Json::from(*v),
            Value::U128(v) => {
                u64::try_from(*v).map_or_else(|_| Json::from(v.to_string()), Json::from)
            }
            Value::I128(v) => {
                i64::try_from(*v).map_or_else(|_| Json::from(v.to_string()), Json::from)
            }
            Value::F32(v) => f32_json(*v),
            Value::F64(v) => float(*v),
            Value::Str(s) => Json::from(s.as_ref()),
            Value::Bytes(b) => Json::Array(b.iter().map(|&x| Json::from(x)).collect()),
            Value::Option(None) | Value::Unit => Json::Null,
            Value::Option(Some(v)) => v.to_json(),
            Value::Seq(items) => Json::Array(items.iter().map(Value::to_json).collect()),
            Value::Packed(p) => packed_json(p.dtype, &p.bytes),
            Value::Struct(fields) => Json::Object(
                fields
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_json()))
                    .collect::<Map<_, _>>(),
            ),
            Value::Variant { name, value, .. } => match **value {
                Value::Unit => Json::from(name.as_ref()),
                ref v => {
                    let mut m = Map::new();
                    m.insert(name.to_string(), v.to_json());
                    Json::Object(m)
                }
            },
            Value::Map(entries) => {
                if entries.iter().all(|(k, _)| matches!(k, Value::Str(_))) {
                    Json::Object(
                        entries
                            .iter()
                            .map(|(k, v)| match k {
                                Value::Str(s) => (s.to_string(), v.to_json()),
                                _ => (String::new(), v.to_json()),
                            })
                            .collect(),
                    )
                } else {
                    Json::Array(
                        entries
                            .iter()
                            .map(|(k, v)| Json::Array(vec![k.to_json(), v.to_json()]))
                            .collect(),
                    )
                }
            }
            Value::Tensor(t) => json!({
                "dtype": t.dtype.name(),
                "shape": t.shape,
                "data": packed_json(t.dtype, &t.data),
            }),
        }
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
