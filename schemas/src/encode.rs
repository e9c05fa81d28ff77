//! Dynamic encoding: a [`Value`] written back as the bytes of its descriptor (the inverse of
//! [`decode`](crate::decode)).

use crate::desc::{Field, TypeDesc, VariantKind};
use crate::error::EncodeError;
use crate::tensor::element_count;
use crate::value::Value;

/// Encodes a dynamic value as type `desc`, appending to `out` (the inverse of
/// [`decode`](crate::decode)).
///
/// Used where values are built without Rust types (language bindings, transformations). The
/// value must match the descriptor exactly: same scalar widths, same field names in order,
/// array lengths equal to the descriptor's.
pub fn encode_value(
    desc: &TypeDesc,
    value: &Value<'_>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    encode_at(desc, value, out, "")
}

fn mismatch(path: &str, desc: &TypeDesc, value: &Value<'_>) -> EncodeError {
    EncodeError::TypeMismatch {
        path: if path.is_empty() {
            "<root>".into()
        } else {
            path.to_owned()
        },
        expected: desc.to_string(),
        found: value.kind_name().to_owned(),
    }
}

fn sub(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u64).to_le_bytes());
}

fn encode_fields(
    fields: &[Field],
    value: &Value<'_>,
    desc: &TypeDesc,
    out: &mut Vec<u8>,
    path: &str,
) -> Result<(), EncodeError> {
    let Value::Struct(vals) = value else {
        return Err(mismatch(path, desc, value));
    };
    if vals.len() != fields.len() {
        return Err(mismatch(path, desc, value));
    }
    for (f, (name, v)) in fields.iter().zip(vals) {
        let p = sub(path, &f.name);
        if f.name != *name {
            return Err(EncodeError::TypeMismatch {
                path: p,
                expected: format!("field `{}`", f.name),
                found: format!("field `{name}`"),
            });
        }
        encode_at(&f.ty, v, out, &p)?;
    }
    Ok(())
}

fn encode_elems(
    elem: &TypeDesc,
    value: &Value<'_>,
    desc: &TypeDesc,
    out: &mut Vec<u8>,
    path: &str,
    expected_len: Option<u64>,
) -> Result<(), EncodeError> {
    let n = match value {
        Value::Packed(p) if elem.as_dtype() == Some(p.dtype) => p.len(),
        Value::Seq(items) => items.len(),
        _ => return Err(mismatch(path, desc, value)),
    };
    match expected_len {
        Some(len) if len != n as u64 => return Err(mismatch(path, desc, value)),
        Some(_) => {}
        None => put_len(out, n),
    }
    match value {
        Value::Packed(p) => out.extend_from_slice(&p.bytes),
        Value::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                encode_at(elem, item, out, &sub(path, &i.to_string()))?;
            }
        }
        _ => return Err(mismatch(path, desc, value)),
    }
    Ok(())
}

fn encode_at(
    desc: &TypeDesc,
    value: &Value<'_>,
    out: &mut Vec<u8>,
    path: &str,
) -> Result<(), EncodeError> {
    match (desc, value) {
        (TypeDesc::Bool, Value::Bool(v)) => out.push(u8::from(*v)),
        (TypeDesc::U8, Value::U8(v)) => out.push(*v),
        (TypeDesc::U16, Value::U16(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (TypeDesc::U32, Value::U32(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (TypeDesc::U64, Value::U64(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (TypeDesc::U128, Value::U128(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (TypeDesc::I8, Value::I8(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (TypeDesc::I16, Value::I16(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (TypeDesc::I32, Value::I32(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (TypeDesc::I64, Value::I64(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (TypeDesc::I128, Value::I128(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (TypeDesc::F32, Value::F32(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (TypeDesc::F64, Value::F64(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (TypeDesc::String, Value::Str(s)) => {
            put_len(out, s.len());
            out.extend_from_slice(s.as_bytes());
        }
        (TypeDesc::Bytes, Value::Bytes(b)) => {
            put_len(out, b.len());
            out.extend_from_slice(b);
        }
        (TypeDesc::Option { some }, Value::Option(o)) => match o {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                encode_at(some, v, out, path)?;
            }
        },
        (TypeDesc::Seq { elem }, v) => encode_elems(elem, v, desc, out, path, None)?,
        (TypeDesc::Array { len, elem }, v) => encode_elems(elem, v, desc, out, path, Some(*len))?,
        (TypeDesc::Tuple { elems }, Value::Seq(items)) if items.len() == elems.len() => {
            for (i, (e, item)) in elems.iter().zip(items).enumerate() {
                encode_at(e, item, out, &sub(path, &i.to_string()))?;
            }
        }
        (TypeDesc::Struct { fields }, v) => encode_fields(fields, v, desc, out, path)?,
        (TypeDesc::Enum { variants }, Value::Variant { index, name, value }) => {
            let Some(variant) = variants.get(*index as usize).filter(|v| v.name == *name) else {
                return Err(mismatch(path, desc, value));
            };
            out.extend_from_slice(&index.to_le_bytes());
            let p = sub(path, name);
            match (&variant.kind, &**value) {
                (VariantKind::Unit, Value::Unit) => {}
                (VariantKind::Tuple { elems }, Value::Seq(items)) if items.len() == elems.len() => {
                    for (i, (e, item)) in elems.iter().zip(items).enumerate() {
                        encode_at(e, item, out, &sub(&p, &i.to_string()))?;
                    }
                }
                (VariantKind::Struct { fields }, v) => encode_fields(fields, v, desc, out, &p)?,
                (_, v) => return Err(mismatch(&p, desc, v)),
            }
        }
        (TypeDesc::Map { key, value: vdesc }, Value::Map(entries)) => {
            put_len(out, entries.len());
            for (k, v) in entries {
                encode_at(key, k, out, path)?;
                encode_at(vdesc, v, out, path)?;
            }
        }
        (TypeDesc::Tensor { dtype }, Value::Tensor(t))
            if t.dtype == *dtype
                && element_count(&t.shape) == Some(t.len() as u64)
                && t.data.len() % dtype.size_bytes() == 0 =>
        {
            put_len(out, t.shape.len());
            for d in &t.shape {
                out.extend_from_slice(&d.to_le_bytes());
            }
            put_len(out, t.len());
            out.extend_from_slice(&t.data);
        }
        (d, v) => return Err(mismatch(path, d, v)),
    }
    Ok(())
}
