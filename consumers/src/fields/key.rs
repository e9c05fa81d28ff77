//! Key values: what a group-by (or window) field holds in one record, and its type.

use snapbus_schemas::{DType, TypeDesc, Wire};

use super::read::Scalar;

/// The value of a group-by or window field in one record.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyValue {
    /// A bool.
    Bool(bool),
    /// An unsigned integer (any width).
    U64(u64),
    /// A signed integer (any width).
    I64(i64),
    /// A float (`f32` widened).
    F64(f64),
    /// A string, or an enum's variant name.
    Str(String),
}

/// The tag of [`KeyValue::Str`] in [`KeyValue::encode_into`].
const STR_TAG: u8 = 4;

impl KeyValue {
    /// Appends a self-delimiting encoding (the group's identity within a producer).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            KeyValue::Bool(b) => out.extend_from_slice(&[0, u8::from(*b)]),
            KeyValue::U64(v) => {
                out.push(1);
                out.extend_from_slice(&v.to_le_bytes());
            }
            KeyValue::I64(v) => {
                out.push(2);
                out.extend_from_slice(&v.to_le_bytes());
            }
            KeyValue::F64(v) => {
                out.push(3);
                out.extend_from_slice(&v.to_bits().to_le_bytes());
            }
            KeyValue::Str(s) => encode_str(s.as_bytes(), out),
        }
    }

    /// The key of scalar `s` whose little-endian bytes are `b` (exactly its size).
    #[inline]
    pub(super) fn read(s: Scalar, b: &[u8]) -> KeyValue {
        match s {
            Scalar::Bool => KeyValue::Bool(b[0] != 0),
            Scalar::Num(d @ (DType::F32 | DType::F64)) => KeyValue::F64(d.to_f64(b)),
            Scalar::Num(d @ (DType::I8 | DType::I16 | DType::I32 | DType::I64)) => {
                KeyValue::I64(d.to_f64(b) as i64)
            }
            Scalar::Num(DType::U64) => {
                KeyValue::U64(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            }
            Scalar::Num(d) => KeyValue::U64(d.to_f64(b) as u64),
        }
    }
}

/// Appends a string key as [`KeyValue::encode_into`] encodes [`KeyValue::Str`].
pub(super) fn encode_str(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(STR_TAG);
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Appends a string key of `len` bytes as [`encode_str`] does, with zeros for its bytes; returns
/// where they are, for the caller to fill.
pub(super) fn reserve_str(len: usize, out: &mut Vec<u8>) -> std::ops::Range<usize> {
    out.push(STR_TAG);
    out.extend_from_slice(&(len as u64).to_le_bytes());
    let start = out.len();
    out.resize(start + len, 0);
    start..start + len
}

/// A group-by (or window) field's type, as it appears in a summary schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// A bool.
    Bool,
    /// An unsigned integer.
    U64,
    /// A signed integer.
    I64,
    /// A float.
    F64,
    /// A string or an enum (by variant name).
    Str,
}

impl KeyType {
    /// The type as a descriptor.
    pub fn desc(self) -> TypeDesc {
        match self {
            KeyType::Bool => bool::type_desc(),
            KeyType::U64 => u64::type_desc(),
            KeyType::I64 => i64::type_desc(),
            KeyType::F64 => f64::type_desc(),
            KeyType::Str => String::type_desc(),
        }
    }

    pub(super) fn of_scalar(s: Scalar) -> KeyType {
        match s {
            Scalar::Bool => KeyType::Bool,
            Scalar::Num(DType::F32 | DType::F64) => KeyType::F64,
            Scalar::Num(DType::I8 | DType::I16 | DType::I32 | DType::I64) => KeyType::I64,
            Scalar::Num(_) => KeyType::U64,
        }
    }
}

/// The group-by values of [`Extracted::group`](super::Extracted::group) in slot order (`None`
/// if malformed).
pub fn decode_group(mut bytes: &[u8], slots: usize) -> Option<Vec<KeyValue>> {
    let mut out: Vec<Option<KeyValue>> = vec![None; slots];
    while let Some((&slot, rest)) = bytes.split_first() {
        let (&tag, rest) = rest.split_first()?;
        let (v, rest) = match tag {
            0 => (KeyValue::Bool(*rest.first()? != 0), rest.get(1..)?),
            1..=3 => {
                let b: [u8; 8] = rest.get(..8)?.try_into().ok()?;
                let v = match tag {
                    1 => KeyValue::U64(u64::from_le_bytes(b)),
                    2 => KeyValue::I64(i64::from_le_bytes(b)),
                    _ => KeyValue::F64(f64::from_bits(u64::from_le_bytes(b))),
                };
                (v, rest.get(8..)?)
            }
            STR_TAG => {
                let n =
                    usize::try_from(u64::from_le_bytes(rest.get(..8)?.try_into().ok()?)).ok()?;
                let s = std::str::from_utf8(rest.get(8..8usize.checked_add(n)?)?).ok()?;
                (KeyValue::Str(s.to_owned()), rest.get(8 + n..)?)
            }
            _ => return None,
        };
        *out.get_mut(usize::from(slot))? = Some(v);
        bytes = rest;
    }
    out.into_iter().collect()
}
