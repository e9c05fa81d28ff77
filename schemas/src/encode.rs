//! Encoding dynamic values (the inverse of [`decode`](crate::decode)): measure first, then
//! write in place with the codec's own [`WireWriter`].
//!
//! One walk over descriptor and value serves both passes: [`value_encoded_len`] runs it over a
//! byte counter and checks that the value matches the descriptor; [`encode_value_into`] runs
//! it again over a [`WireWriter`] on a buffer of exactly that length. So a value that does not
//! match is refused before a byte is written, and a payload goes straight into its destination
//! (a lane's claimed frame) without an intermediate buffer.

use crate::cursor::WireWriter;
use crate::desc::{Field, TypeDesc, VariantKind};
use crate::error::EncodeError;
use crate::tensor::element_count;
use crate::value::Value;

/// Where an encoding walk puts its bytes: a counter (measuring) or a [`WireWriter`].
trait Sink {
    fn put(&mut self, bytes: &[u8]);

    fn put_len(&mut self, n: usize) {
        self.put(&(n as u64).to_le_bytes());
    }
}

/// Counts bytes.
struct Measure(usize);

impl Sink for Measure {
    fn put(&mut self, bytes: &[u8]) {
        self.0 = self.0.saturating_add(bytes.len());
    }
}

impl Sink for WireWriter<'_> {
    fn put(&mut self, bytes: &[u8]) {
        WireWriter::put(self, bytes);
    }
}

/// The exact number of bytes `value` encodes to as type `desc`, or why it does not match the
/// descriptor (same scalar widths, same field names in order, array lengths equal to the
/// descriptor's).
pub fn value_encoded_len(desc: &TypeDesc, value: &Value<'_>) -> Result<usize, EncodeError> {
    let mut m = Measure(0);
    encode_at(desc, value, &mut m, "")?;
    Ok(m.0)
}

/// Encodes `value` as type `desc` at the start of `buf`, without allocating a payload buffer;
/// returns the number of bytes written ([`value_encoded_len`]). Nothing is written if the
/// value does not match the descriptor or `buf` is too small.
pub fn encode_value_into(
    desc: &TypeDesc,
    value: &Value<'_>,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    ValueEncoder::new(desc, value)?.encode_into(buf)
}

/// A dynamic value checked against its descriptor and measured, ready to be written in place:
/// the two halves of [`encode_value_into`] for a caller that must know the length before it
/// has the destination (a lane claims exactly [`encoded_len`](Self::encoded_len) bytes).
///
/// ```
/// use snapbus_schemas::{TypeDesc, Field, Value, ValueEncoder, decode};
///
/// let desc = TypeDesc::Struct { fields: vec![Field::new("x", TypeDesc::F64)] };
/// let value = Value::Struct(vec![("x".into(), Value::F64(0.5))]);
/// let encoder = ValueEncoder::new(&desc, &value)?;
/// let mut frame = vec![0u8; encoder.encoded_len()];
/// encoder.encode_into(&mut frame)?;
/// assert_eq!(decode(&desc, &frame)?, value);
///
/// // A value that does not match is refused before anything is written.
/// let wrong = Value::Struct(vec![("x".into(), Value::U8(1))]);
/// assert!(ValueEncoder::new(&desc, &wrong).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ValueEncoder<'d, 'v, 'a> {
    desc: &'d TypeDesc,
    value: &'v Value<'a>,
    len: usize,
}

impl<'d, 'v, 'a> ValueEncoder<'d, 'v, 'a> {
    /// Checks `value` against `desc` and measures it.
    pub fn new(desc: &'d TypeDesc, value: &'v Value<'a>) -> Result<Self, EncodeError> {
        let len = value_encoded_len(desc, value)?;
        Ok(ValueEncoder { desc, value, len })
    }

    /// The exact number of bytes [`encode_into`](Self::encode_into) writes.
    pub fn encoded_len(&self) -> usize {
        self.len
    }

    /// Writes the value at the start of `buf` with a [`WireWriter`]; returns the bytes
    /// written. Fails only if `buf` is shorter than [`encoded_len`](Self::encoded_len).
    pub fn encode_into(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        write_exact(self.desc, self.value, self.len, buf)
    }
}

/// Writes `value` (already measured as `needed` bytes) into `buf[..needed]`.
fn write_exact(
    desc: &TypeDesc,
    value: &Value<'_>,
    needed: usize,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let available = buf.len();
    let Some(dst) = buf.get_mut(..needed) else {
        return Err(EncodeError::BufferTooSmall { needed, available });
    };
    let mut w = WireWriter::new(dst);
    encode_at(desc, value, &mut w, "")?;
    if w.overflowed() || w.position() != needed {
        return Err(EncodeError::LengthMismatch {
            promised: needed,
            written: w.position(),
        });
    }
    Ok(needed)
}

/// Encodes a dynamic value as type `desc`, appending to `out` (the inverse of
/// [`decode`](crate::decode)).
///
/// Used where values are built without Rust types (language bindings, transformations). The
/// value must match the descriptor exactly: same scalar widths, same field names in order,
/// array lengths equal to the descriptor's. On a mismatch `out` is left as it was. To encode
/// straight into a destination buffer instead, see [`value_encoded_len`] and
/// [`encode_value_into`].
pub fn encode_value(
    desc: &TypeDesc,
    value: &Value<'_>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let needed = value_encoded_len(desc, value)?;
    let start = out.len();
    out.resize(start + needed, 0);
    let (_, buf) = out.split_at_mut(start);
    let written = write_exact(desc, value, needed, buf).map(|_| ());
    if written.is_err() {
        out.truncate(start);
    }
    written
}

fn mismatch(path: &str, desc: &TypeDesc, value: &Value<'_>) -> EncodeError {
    mismatch_of(path, desc, value)
}

/// A [`EncodeError::TypeMismatch`] at `path` (the root if empty): `expected`, found `value`.
pub(crate) fn mismatch_of(
    path: &str,
    expected: &dyn std::fmt::Display,
    value: &Value<'_>,
) -> EncodeError {
    EncodeError::TypeMismatch {
        path: if path.is_empty() {
            "<root>".into()
        } else {
            path.to_owned()
        },
        expected: expected.to_string(),
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

fn encode_fields(
    fields: &[Field],
    value: &Value<'_>,
    desc: &TypeDesc,
    out: &mut impl Sink,
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
    out: &mut impl Sink,
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
        None => out.put_len(n),
    }
    match value {
        Value::Packed(p) => out.put(&p.bytes),
        Value::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                encode_at(elem, item, out, &sub(path, &i.to_string()))?;
            }
        }
        _ => return Err(mismatch(path, desc, value)),
    }
    Ok(())
}

fn encode_variant(
    desc: &TypeDesc,
    variants: &[crate::desc::Variant],
    (index, name, value): (u32, &str, &Value<'_>),
    out: &mut impl Sink,
    path: &str,
) -> Result<(), EncodeError> {
    let Some(variant) = variants.get(index as usize).filter(|v| v.name == *name) else {
        return Err(mismatch(path, desc, value));
    };
    out.put(&index.to_le_bytes());
    let p = sub(path, name);
    match (&variant.kind, value) {
        (VariantKind::Unit, Value::Unit) => {}
        (VariantKind::Tuple { elems }, Value::Seq(items)) if items.len() == elems.len() => {
            for (i, (e, item)) in elems.iter().zip(items).enumerate() {
                encode_at(e, item, out, &sub(&p, &i.to_string()))?;
            }
        }
        (VariantKind::Struct { fields }, v) => encode_fields(fields, v, desc, out, &p)?,
        (_, v) => return Err(mismatch(&p, desc, v)),
    }
    Ok(())
}

fn encode_at(
    desc: &TypeDesc,
    value: &Value<'_>,
    out: &mut impl Sink,
    path: &str,
) -> Result<(), EncodeError> {
    match (desc, value) {
        (TypeDesc::Bool, Value::Bool(v)) => out.put(&[u8::from(*v)]),
        (TypeDesc::U8, Value::U8(v)) => out.put(&[*v]),
        (TypeDesc::U16, Value::U16(v)) => out.put(&v.to_le_bytes()),
        (TypeDesc::U32, Value::U32(v)) => out.put(&v.to_le_bytes()),
        (TypeDesc::U64, Value::U64(v)) => out.put(&v.to_le_bytes()),
        (TypeDesc::U128, Value::U128(v)) => out.put(&v.to_le_bytes()),
        (TypeDesc::I8, Value::I8(v)) => out.put(&v.to_le_bytes()),
        (TypeDesc::I16, Value::I16(v)) => out.put(&v.to_le_bytes()),
        (TypeDesc::I32, Value::I32(v)) => out.put(&v.to_le_bytes()),
        (TypeDesc::I64, Value::I64(v)) => out.put(&v.to_le_bytes()),
        (TypeDesc::I128, Value::I128(v)) => out.put(&v.to_le_bytes()),
        (TypeDesc::F32, Value::F32(v)) => out.put(&v.to_le_bytes()),
        (TypeDesc::F64, Value::F64(v)) => out.put(&v.to_le_bytes()),
        (TypeDesc::String, Value::Str(s)) => {
            out.put_len(s.len());
            out.put(s.as_bytes());
        }
        (TypeDesc::Bytes, Value::Bytes(b)) => {
            out.put_len(b.len());
            out.put(b);
        }
        (TypeDesc::Option { some }, Value::Option(o)) => match o {
            None => out.put(&[0]),
            Some(v) => {
                out.put(&[1]);
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
            encode_variant(desc, variants, (*index, name, value), out, path)?;
        }
        (TypeDesc::Map { key, value: vdesc }, Value::Map(entries)) => {
            out.put_len(entries.len());
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
            out.put_len(t.shape.len());
            for d in &t.shape {
                out.put(&d.to_le_bytes());
            }
            out.put_len(t.len());
            out.put(&t.data);
        }
        (TypeDesc::Dynamic, v) => crate::dynamic::encode(v, &mut AsPut(out), path, 0)?,
        (d, v) => return Err(mismatch(path, d, v)),
    }
    Ok(())
}

/// A [`Sink`] as the dynamic encoder's output.
struct AsPut<'a, S>(&'a mut S);

impl<S: Sink> crate::dynamic::Put for AsPut<'_, S> {
    fn put(&mut self, bytes: &[u8]) {
        self.0.put(bytes);
    }
}
