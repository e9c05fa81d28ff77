//! Dynamic values: the wire form of [`TypeDesc::Dynamic`], a value
//! whose type is known only at run time (a Python `dict`, `Any` or pydantic extra field).
//!
//! A dynamic value is one [`Tag`] byte, then its body:
//!
//! | tag | value | body |
//! |---|---|---|
//! | 0 | none | nothing |
//! | 1 | bool | 1 byte, `0x00` or `0x01` |
//! | 2 | `i64` | 8 bytes, little-endian |
//! | 3 | `u64` (a Rust `u64`; from Python, integers above `i64::MAX`) | 8 bytes, little-endian |
//! | 4 | `f64` | 8 bytes, little-endian |
//! | 5 | string | `u64` byte length, UTF-8 |
//! | 6 | bytes | `u64` length, the bytes |
//! | 7 | list | `u64` count, then that many dynamic values |
//! | 8 | map | `u64` count, then per entry a key (`u64` length, UTF-8) and a dynamic value |
//! | 9 | n-dimensional array | a dtype code byte ([`DType::code`]), then a tensor's layout |
//!
//! Decoded ([`decode`](crate::decode), the walk), a dynamic value is the
//! [`Value`] it was: [`Value::Option`]`(None)`, [`Value::Bool`], [`Value::I64`],
//! [`Value::U64`], [`Value::F64`], [`Value::Str`], [`Value::Bytes`], [`Value::Seq`],
//! [`Value::Map`] with [`Value::Str`] keys, or [`Value::Tensor`]. Nesting is bounded by
//! [`MAX_DESC_DEPTH`] like a descriptor's.
//!
//! Two records of one schema whose dynamic fields hold different shapes (an int here, a map
//! there) share a descriptor; a consumer tells them apart by the values themselves. Records
//! whose dynamic *fields* differ (a pydantic model's extras) have descriptors of their own, each
//! with its own fingerprint.
//!
//! # Example
//!
//! ```
//! use snapbus_schemas::{decode, encode_value, TypeDesc, Value};
//!
//! let v = Value::Map(vec![
//!     (Value::Str("is_done".into()), Value::Bool(true)),
//!     (Value::Str("steps".into()), Value::I64(77)),
//! ]);
//! let mut bytes = Vec::new();
//! encode_value(&TypeDesc::Dynamic, &v, &mut bytes)?;
//! assert_eq!(bytes[0], 8); // a map
//! assert_eq!(decode(&TypeDesc::Dynamic, &bytes)?, v);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::cursor::{WireReader, WireWriter};
use crate::desc::{MAX_DESC_DEPTH, TypeDesc};
use crate::dtype::DType;
use crate::error::{DecodeError, EncodeError};
use crate::value::{ToValue, Value};
use crate::walk::{LayoutPlan, skip};
use crate::wire::Wire;

/// A field of a Rust snapshot whose type is known only at run time: a [`Value`] checked and
/// encoded once, when it is made ([`Dynamic::new`]), so emitting it is a copy.
///
/// ```
/// use snapbus_schemas::dynamic::Dynamic;
/// use snapbus_schemas::{Snapshot, Value, Wire};
///
/// #[derive(Snapshot)]
/// #[snapshot(id = "doc.dynamic", version = 1)]
/// struct Step { step: u32, extra: Dynamic }
///
/// let extra = Dynamic::new(&Value::Map(vec![(Value::Str("steps".into()), Value::I64(77))]))?;
/// let bytes = Step { step: 1, extra }.encode_to_vec()?;
/// let back = Step::decode_exact(&bytes)?;
/// assert_eq!(back.extra.value().to_json().to_string(), r#"{"steps":77}"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Dynamic {
    /// The encoding: a tag byte, then the value.
    bytes: Vec<u8>,
}

impl Dynamic {
    /// Checks and encodes `value` (see [`TypeDesc::Dynamic`] for what a dynamic value holds).
    pub fn new(value: &Value<'_>) -> Result<Dynamic, EncodeError> {
        let mut bytes = Vec::new();
        encode(value, &mut bytes, "", 0)?;
        Ok(Dynamic { bytes })
    }

    /// The value (decoded from the encoding, which was checked when it was made or read).
    pub fn value(&self) -> Value<'_> {
        crate::decode(&TypeDesc::Dynamic, &self.bytes).unwrap_or(Value::Option(None))
    }

    /// The encoding: a tag byte, then the value.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Default for Dynamic {
    /// None.
    fn default() -> Dynamic {
        Dynamic {
            bytes: vec![Tag::None as u8],
        }
    }
}

impl Put for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Wire for Dynamic {
    const MIN_ENCODED_LEN: usize = 1;

    fn type_desc() -> TypeDesc {
        TypeDesc::Dynamic
    }

    fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    fn encode(&self, w: &mut WireWriter<'_>) {
        w.put(&self.bytes);
    }

    fn decode(r: &mut WireReader<'_>) -> Result<Dynamic, DecodeError> {
        let start = r.offset();
        let desc = TypeDesc::Dynamic;
        // Decoded fully (not only skipped): `value` relies on the bytes being well formed.
        let mut probe = r.clone();
        skip(&LayoutPlan::compile(&desc), LayoutPlan::ROOT, r)?;
        let bytes = probe.take(r.offset() - start)?;
        crate::decode(&desc, bytes)?;
        Ok(Dynamic {
            bytes: bytes.to_vec(),
        })
    }
}

impl ToValue for Dynamic {
    fn to_value(&self) -> Value<'_> {
        self.value()
    }
}

/// The tag byte of a dynamic value (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// No value.
    None = 0,
    /// A bool.
    Bool = 1,
    /// A signed integer.
    I64 = 2,
    /// An unsigned integer above `i64::MAX`.
    U64 = 3,
    /// A float.
    F64 = 4,
    /// A string.
    Str = 5,
    /// A byte buffer.
    Bytes = 6,
    /// A list of dynamic values.
    List = 7,
    /// A map from strings to dynamic values.
    Map = 8,
    /// An n-dimensional numeric array.
    NdArray = 9,
}

impl Tag {
    /// The tag of a byte, if it is one.
    pub fn from_byte(b: u8) -> Option<Tag> {
        Some(match b {
            0 => Tag::None,
            1 => Tag::Bool,
            2 => Tag::I64,
            3 => Tag::U64,
            4 => Tag::F64,
            5 => Tag::Str,
            6 => Tag::Bytes,
            7 => Tag::List,
            8 => Tag::Map,
            9 => Tag::NdArray,
            _ => return None,
        })
    }
}

/// Where an encoding puts its bytes (a byte counter or a writer).
pub(crate) trait Put {
    fn put(&mut self, bytes: &[u8]);
}

/// Encodes `value` as a dynamic value: `u64`s as `u64`, other integers as `i64` (or `u64` above
/// `i64::MAX`), floats as
/// `f64`, structs as maps, packed numbers as 1-dimensional arrays, unit variants as their
/// names. A map with a non-string key, a variant with a payload, or an integer beyond 64 bits
/// is a [`EncodeError::TypeMismatch`] at `path`.
pub(crate) fn encode(
    value: &Value<'_>,
    out: &mut impl Put,
    path: &str,
    depth: usize,
) -> Result<(), EncodeError> {
    if depth >= MAX_DESC_DEPTH {
        return Err(mismatch(path, value, "a value nested less deep"));
    }
    match value {
        Value::Option(None) | Value::Unit => out.put(&[Tag::None as u8]),
        Value::Option(Some(v)) => return encode(v, out, path, depth),
        Value::Bool(b) => out.put(&[Tag::Bool as u8, u8::from(*b)]),
        Value::U8(v) => int(out, i128::from(*v)),
        Value::U16(v) => int(out, i128::from(*v)),
        Value::U32(v) => int(out, i128::from(*v)),
        // Kept unsigned whatever its size: a decoded `u64` re-encodes to the bytes it came from.
        Value::U64(v) => {
            out.put(&[Tag::U64 as u8]);
            out.put(&v.to_le_bytes());
        }
        Value::I8(v) => int(out, i128::from(*v)),
        Value::I16(v) => int(out, i128::from(*v)),
        Value::I32(v) => int(out, i128::from(*v)),
        Value::I64(v) => int(out, i128::from(*v)),
        Value::U128(_) | Value::I128(_) => {
            let v = match value {
                Value::U128(v) => i128::try_from(*v).unwrap_or(i128::MAX),
                Value::I128(v) => *v,
                _ => 0,
            };
            if !fits_64(v) {
                return Err(mismatch(path, value, "an integer of at most 64 bits"));
            }
            int(out, v);
        }
        Value::F32(v) => float(out, f64::from(*v)),
        Value::F64(v) => float(out, *v),
        Value::Str(s) => {
            out.put(&[Tag::Str as u8]);
            len_bytes(out, s.as_bytes());
        }
        Value::Bytes(b) => {
            out.put(&[Tag::Bytes as u8]);
            len_bytes(out, b);
        }
        Value::Seq(items) => {
            out.put(&[Tag::List as u8]);
            out.put(&(items.len() as u64).to_le_bytes());
            for (i, item) in items.iter().enumerate() {
                encode(item, out, &format!("{path}[{i}]"), depth + 1)?;
            }
        }
        Value::Packed(p) => {
            let n = (p.bytes.len() / p.dtype.size_bytes()) as u64;
            array(out, p.dtype, &[n], &p.bytes);
        }
        Value::Tensor(t) => array(out, t.dtype, &t.shape, &t.data),
        Value::Struct(fields) => {
            out.put(&[Tag::Map as u8]);
            out.put(&(fields.len() as u64).to_le_bytes());
            for (k, v) in fields {
                len_bytes(out, k.as_bytes());
                encode(v, out, &join(path, k), depth + 1)?;
            }
        }
        Value::Map(entries) => {
            out.put(&[Tag::Map as u8]);
            out.put(&(entries.len() as u64).to_le_bytes());
            for (k, v) in entries {
                let Value::Str(k) = k else {
                    return Err(mismatch(path, k, "a map with string keys"));
                };
                len_bytes(out, k.as_bytes());
                encode(v, out, &join(path, k), depth + 1)?;
            }
        }
        Value::Variant { name, value: v, .. } => {
            if **v != Value::Unit {
                return Err(mismatch(path, value, "a unit variant"));
            }
            out.put(&[Tag::Str as u8]);
            len_bytes(out, name.as_bytes());
        }
    }
    Ok(())
}

fn fits_64(v: i128) -> bool {
    i64::try_from(v).is_ok() || u64::try_from(v).is_ok()
}

/// An integer known to fit 64 bits: `i64`, else `u64`.
fn int(out: &mut impl Put, v: i128) {
    if let Ok(i) = i64::try_from(v) {
        out.put(&[Tag::I64 as u8]);
        out.put(&i.to_le_bytes());
    } else {
        out.put(&[Tag::U64 as u8]);
        out.put(&(v as u64).to_le_bytes());
    }
}

fn float(out: &mut impl Put, v: f64) {
    out.put(&[Tag::F64 as u8]);
    out.put(&v.to_le_bytes());
}

fn len_bytes(out: &mut impl Put, bytes: &[u8]) {
    out.put(&(bytes.len() as u64).to_le_bytes());
    out.put(bytes);
}

/// An n-dimensional array: tag, dtype code, rank, dimensions, element count, elements.
fn array(out: &mut impl Put, dtype: DType, shape: &[u64], data: &[u8]) {
    out.put(&[Tag::NdArray as u8, dtype.code()]);
    out.put(&(shape.len() as u64).to_le_bytes());
    for d in shape {
        out.put(&d.to_le_bytes());
    }
    out.put(&((data.len() / dtype.size_bytes()) as u64).to_le_bytes());
    out.put(data);
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn mismatch(path: &str, value: &Value<'_>, expected: &str) -> EncodeError {
    crate::encode::mismatch_of(path, &expected, value)
}
