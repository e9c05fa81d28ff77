//! Dynamic values: decoding any payload from its descriptor (encoding back: `encode.rs`).

use std::borrow::Cow;

use crate::desc::{DType, Field, MAX_DESC_DEPTH, TypeDesc, VariantKind};
use crate::error::{DecodeError, DecodeErrorKind};
use crate::tensor::{element_count, read_shape};
use crate::wire::{Element, WireReader};

/// A decoded value, borrowing strings, byte buffers and numeric arrays from the payload where
/// it can (zero copy on little-endian machines).
///
/// Sequences, arrays and tuples all become [`Value::Seq`], except sequences and arrays of
/// numeric scalars, which become [`Value::Packed`] views; tensors become [`Value::Tensor`].
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// `bool`.
    Bool(bool),
    /// `u8`.
    U8(u8),
    /// `u16`.
    U16(u16),
    /// `u32`.
    U32(u32),
    /// `u64`.
    U64(u64),
    /// `u128`.
    U128(u128),
    /// `i8`.
    I8(i8),
    /// `i16`.
    I16(i16),
    /// `i32`.
    I32(i32),
    /// `i64`.
    I64(i64),
    /// `i128`.
    I128(i128),
    /// `f32`.
    F32(f32),
    /// `f64`.
    F64(f64),
    /// A string.
    Str(Cow<'a, str>),
    /// A byte buffer ([`TypeDesc::Bytes`]).
    Bytes(Cow<'a, [u8]>),
    /// An option.
    Option(Option<Box<Value<'a>>>),
    /// A sequence, fixed array or tuple of non-numeric (or mixed) elements.
    Seq(Vec<Value<'a>>),
    /// A sequence or fixed array of numeric scalars, as little-endian bytes.
    Packed(Packed<'a>),
    /// A struct: field names and values in order.
    Struct(Vec<(Cow<'a, str>, Value<'a>)>),
    /// An enum variant.
    Variant {
        /// Variant index (its position in the declaration).
        index: u32,
        /// Variant name.
        name: Cow<'a, str>,
        /// The payload: [`Value::Unit`], a [`Value::Seq`] for tuple variants or a
        /// [`Value::Struct`] for struct variants.
        value: Box<Value<'a>>,
    },
    /// The payload of a unit enum variant.
    Unit,
    /// A map's entries in wire order.
    Map(Vec<(Value<'a>, Value<'a>)>),
    /// A tensor.
    Tensor(TensorView<'a>),
}

/// A packed numeric array: `count` elements of `dtype` as little-endian bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed<'a> {
    /// Element type.
    pub dtype: DType,
    /// The elements as little-endian bytes (`len = count × dtype size`).
    pub bytes: Cow<'a, [u8]>,
}

impl<'a> Packed<'a> {
    /// A view of `items` (borrowed on little-endian machines).
    pub fn from_slice<T: Element>(items: &'a [T]) -> Packed<'a> {
        let bytes = if cfg!(target_endian = "little") {
            Cow::Borrowed(bytemuck::cast_slice(items))
        } else {
            let mut out = Vec::with_capacity(size_of_val(items));
            for x in items {
                out.extend_from_slice(&x.encode_to_vec().unwrap_or_default());
            }
            Cow::Owned(out)
        };
        Packed {
            dtype: T::DTYPE,
            bytes,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / self.dtype.size_bytes()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Copies the elements out as `T`; `None` if `T` is not the dtype.
    pub fn to_vec<T: Element>(&self) -> Option<Vec<T>> {
        (T::DTYPE == self.dtype).then(|| le_to_vec(&self.bytes))
    }

    /// Element `i` widened to `f64` (for plotting and statistics).
    pub fn get_f64(&self, i: usize) -> Option<f64> {
        get_f64(self.dtype, &self.bytes, i)
    }
}

fn le_to_vec<T: Element>(bytes: &[u8]) -> Vec<T> {
    let mut r = WireReader::new(bytes);
    T::decode_vec(&mut r, bytes.len() / size_of::<T>()).unwrap_or_default()
}

fn get_f64(dtype: DType, bytes: &[u8], i: usize) -> Option<f64> {
    let size = dtype.size_bytes();
    let start = i.checked_mul(size)?;
    let chunk = bytes.get(start..start.checked_add(size)?)?;
    let mut b8 = [0u8; 8];
    b8[..size].copy_from_slice(chunk);
    Some(match dtype {
        DType::U8 => f64::from(chunk[0]),
        DType::I8 => f64::from(chunk[0] as i8),
        DType::U16 => f64::from(u16::from_le_bytes([b8[0], b8[1]])),
        DType::I16 => f64::from(i16::from_le_bytes([b8[0], b8[1]])),
        DType::U32 => f64::from(u32::from_le_bytes([b8[0], b8[1], b8[2], b8[3]])),
        DType::I32 => f64::from(i32::from_le_bytes([b8[0], b8[1], b8[2], b8[3]])),
        DType::F32 => f64::from(f32::from_le_bytes([b8[0], b8[1], b8[2], b8[3]])),
        DType::U64 => u64::from_le_bytes(b8) as f64,
        DType::I64 => i64::from_le_bytes(b8) as f64,
        DType::F64 => f64::from_le_bytes(b8),
    })
}

/// A tensor viewed in a payload.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorView<'a> {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first.
    pub shape: Vec<u64>,
    /// The elements as little-endian bytes, row-major.
    pub data: Cow<'a, [u8]>,
}

impl TensorView<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.size_bytes()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Copies the elements out as `T`; `None` if `T` is not the dtype.
    pub fn to_vec<T: Element>(&self) -> Option<Vec<T>> {
        (T::DTYPE == self.dtype).then(|| le_to_vec(&self.data))
    }

    /// Element `i` (row-major) widened to `f64`.
    pub fn get_f64(&self, i: usize) -> Option<f64> {
        get_f64(self.dtype, &self.data, i)
    }
}

impl Value<'_> {
    /// Copies every borrowed part, detaching the value from the payload buffer.
    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::Bool(v) => Value::Bool(v),
            Value::U8(v) => Value::U8(v),
            Value::U16(v) => Value::U16(v),
            Value::U32(v) => Value::U32(v),
            Value::U64(v) => Value::U64(v),
            Value::U128(v) => Value::U128(v),
            Value::I8(v) => Value::I8(v),
            Value::I16(v) => Value::I16(v),
            Value::I32(v) => Value::I32(v),
            Value::I64(v) => Value::I64(v),
            Value::I128(v) => Value::I128(v),
            Value::F32(v) => Value::F32(v),
            Value::F64(v) => Value::F64(v),
            Value::Str(s) => Value::Str(Cow::Owned(s.into_owned())),
            Value::Bytes(b) => Value::Bytes(Cow::Owned(b.into_owned())),
            Value::Option(o) => Value::Option(o.map(|v| Box::new(v.into_owned()))),
            Value::Seq(items) => Value::Seq(items.into_iter().map(Value::into_owned).collect()),
            Value::Packed(p) => Value::Packed(Packed {
                dtype: p.dtype,
                bytes: Cow::Owned(p.bytes.into_owned()),
            }),
            Value::Struct(fields) => Value::Struct(
                fields
                    .into_iter()
                    .map(|(k, v)| (Cow::Owned(k.into_owned()), v.into_owned()))
                    .collect(),
            ),
            Value::Variant { index, name, value } => Value::Variant {
                index,
                name: Cow::Owned(name.into_owned()),
                value: Box::new(value.into_owned()),
            },
            Value::Unit => Value::Unit,
            Value::Map(entries) => Value::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect(),
            ),
            Value::Tensor(t) => Value::Tensor(TensorView {
                dtype: t.dtype,
                shape: t.shape,
                data: Cow::Owned(t.data.into_owned()),
            }),
        }
    }

    /// The field `name` of a struct value.
    pub fn field(&self, name: &str) -> Option<&Value<'_>> {
        match self {
            Value::Struct(fields) => fields.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Follows a dotted path of struct fields (`"pose.position"`).
    pub fn path(&self, dotted: &str) -> Option<&Value<'_>> {
        dotted.split('.').try_fold(self, |v, name| v.field(name))
    }

    /// A scalar number widened to `f64` (`None` for non-numeric values).
    pub fn as_f64(&self) -> Option<f64> {
        Some(match *self {
            Value::U8(v) => f64::from(v),
            Value::U16(v) => f64::from(v),
            Value::U32(v) => f64::from(v),
            Value::U64(v) => v as f64,
            Value::U128(v) => v as f64,
            Value::I8(v) => f64::from(v),
            Value::I16(v) => f64::from(v),
            Value::I32(v) => f64::from(v),
            Value::I64(v) => v as f64,
            Value::I128(v) => v as f64,
            Value::F32(v) => f64::from(v),
            Value::F64(v) => v,
            Value::Bool(v) => f64::from(u8::from(v)),
            _ => return None,
        })
    }

    /// A short name of the value's kind, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Bool(_) => "bool",
            Value::U8(_) => "u8",
            Value::U16(_) => "u16",
            Value::U32(_) => "u32",
            Value::U64(_) => "u64",
            Value::U128(_) => "u128",
            Value::I8(_) => "i8",
            Value::I16(_) => "i16",
            Value::I32(_) => "i32",
            Value::I64(_) => "i64",
            Value::I128(_) => "i128",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Str(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::Option(_) => "option",
            Value::Seq(_) => "sequence",
            Value::Packed(_) => "packed array",
            Value::Struct(_) => "struct",
            Value::Variant { .. } => "enum variant",
            Value::Unit => "unit",
            Value::Map(_) => "map",
            Value::Tensor(_) => "tensor",
        }
    }
}

/// Decodes `bytes` as a value of type `desc`. The whole input must be consumed.
///
/// `bytes` is treated as untrusted: every length is checked against what remains before
/// anything is allocated, and every failure is a [`DecodeError`] with the offset and field path.
/// Never panics.
///
/// ```
/// use snapbus_schemas::{decode, Snapshot, Value, Wire};
///
/// #[derive(Snapshot)]
/// #[snapshot(id = "doc.step", version = 1)]
/// struct Step { step: u32, reward: f64 }
///
/// let bytes = Step { step: 7, reward: 0.5 }.encode_to_vec()?;
/// let value = decode(Step::descriptor().root(), &bytes)?;
/// assert_eq!(value.field("step"), Some(&Value::U32(7)));
/// assert_eq!(value.to_json().to_string(), r#"{"step":7,"reward":0.5}"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn decode<'a>(desc: &'a TypeDesc, bytes: &'a [u8]) -> Result<Value<'a>, DecodeError> {
    let mut r = WireReader::new(bytes);
    let mut budget = Budget::for_payload(desc, bytes.len());
    let v = decode_at(desc, &mut r, 0, &mut budget)?;
    if r.remaining() != 0 {
        return Err(DecodeError::new(
            r.offset(),
            DecodeErrorKind::TrailingBytes {
                count: r.remaining(),
            },
        ));
    }
    Ok(v)
}

/// Decodes one value of type `desc` from the reader, leaving the rest unread.
pub fn decode_from<'a>(
    desc: &'a TypeDesc,
    r: &mut WireReader<'a>,
) -> Result<Value<'a>, DecodeError> {
    let mut budget = Budget::for_payload(desc, r.remaining());
    decode_at(desc, r, 0, &mut budget)
}

/// Bounds the number of values one decode may build. A value that consumes input bytes is
/// paid for by them, but zero-sized values (`()`, empty structs) cost nothing, so a hostile
/// descriptor (`[[[(); 16]; 16]; …]`) could otherwise make a 100-byte payload build billions
/// of values. Legitimate payloads build at most about one value per byte per nesting level.
struct Budget {
    left: u64,
    max: u64,
}

impl Budget {
    fn for_payload(desc: &TypeDesc, len: usize) -> Budget {
        let depth = desc.depth().min(MAX_DESC_DEPTH) as u64;
        let max = (depth + 1)
            .saturating_mul(len as u64 + 1)
            .saturating_add(4096);
        Budget { left: max, max }
    }

    #[inline]
    fn spend(&mut self, r: &WireReader<'_>) -> Result<(), DecodeError> {
        if self.left == 0 {
            return Err(DecodeError::new(
                r.offset(),
                DecodeErrorKind::TooManyValues { max: self.max },
            ));
        }
        self.left -= 1;
        Ok(())
    }
}

fn decode_fields<'a>(
    fields: &'a [Field],
    r: &mut WireReader<'a>,
    depth: usize,
    budget: &mut Budget,
) -> Result<Value<'a>, DecodeError> {
    let mut out = Vec::with_capacity(fields.len());
    for f in fields {
        let v = decode_at(&f.ty, r, depth + 1, budget).map_err(|e| e.in_field(&f.name))?;
        out.push((Cow::Borrowed(f.name.as_str()), v));
    }
    Ok(Value::Struct(out))
}

fn decode_elems<'a>(
    elem: &'a TypeDesc,
    n: usize,
    r: &mut WireReader<'a>,
    depth: usize,
    budget: &mut Budget,
) -> Result<Value<'a>, DecodeError> {
    if let Some(dtype) = elem.as_dtype() {
        let bytes = r.take(n.saturating_mul(dtype.size_bytes()))?;
        return Ok(Value::Packed(Packed {
            dtype,
            bytes: Cow::Borrowed(bytes),
        }));
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(decode_at(elem, r, depth + 1, budget).map_err(|e| e.in_field(&i.to_string()))?);
    }
    Ok(Value::Seq(out))
}

/// Reads a count of items of type `elem`, bounded by the remaining input.
fn read_count(r: &mut WireReader<'_>, elem_min: u64) -> Result<usize, DecodeError> {
    r.read_len(usize::try_from(elem_min).unwrap_or(usize::MAX))
}

fn decode_at<'a>(
    desc: &'a TypeDesc,
    r: &mut WireReader<'a>,
    depth: usize,
    budget: &mut Budget,
) -> Result<Value<'a>, DecodeError> {
    budget.spend(r)?;
    if depth >= MAX_DESC_DEPTH {
        return Err(DecodeError::new(
            r.offset(),
            DecodeErrorKind::TooDeep {
                max: MAX_DESC_DEPTH,
            },
        ));
    }
    macro_rules! num {
        ($t:ty, $v:ident) => {
            Value::$v(<$t>::from_le_bytes(r.take_array()?))
        };
    }
    Ok(match desc {
        TypeDesc::Bool => {
            let at = r.offset();
            match r.read_u8()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                byte => return Err(DecodeError::new(at, DecodeErrorKind::InvalidBool { byte })),
            }
        }
        TypeDesc::U8 => num!(u8, U8),
        TypeDesc::U16 => num!(u16, U16),
        TypeDesc::U32 => num!(u32, U32),
        TypeDesc::U64 => num!(u64, U64),
        TypeDesc::U128 => num!(u128, U128),
        TypeDesc::I8 => num!(i8, I8),
        TypeDesc::I16 => num!(i16, I16),
        TypeDesc::I32 => num!(i32, I32),
        TypeDesc::I64 => num!(i64, I64),
        TypeDesc::I128 => num!(i128, I128),
        TypeDesc::F32 => num!(f32, F32),
        TypeDesc::F64 => num!(f64, F64),
        TypeDesc::String => {
            let n = r.read_len(1)?;
            let at = r.offset();
            let bytes = r.take(n)?;
            let s = std::str::from_utf8(bytes)
                .map_err(|_| DecodeError::new(at, DecodeErrorKind::InvalidUtf8))?;
            Value::Str(Cow::Borrowed(s))
        }
        TypeDesc::Bytes => {
            let n = r.read_len(1)?;
            Value::Bytes(Cow::Borrowed(r.take(n)?))
        }
        TypeDesc::Option { some } => {
            let at = r.offset();
            match r.read_u8()? {
                0 => Value::Option(None),
                1 => Value::Option(Some(Box::new(decode_at(some, r, depth + 1, budget)?))),
                tag => {
                    return Err(DecodeError::new(
                        at,
                        DecodeErrorKind::InvalidOptionTag { tag },
                    ));
                }
            }
        }
        TypeDesc::Seq { elem } => {
            let n = read_count(r, elem.min_encoded_len())?;
            decode_elems(elem, n, r, depth, budget)?
        }
        TypeDesc::Array { len, elem } => {
            let at = r.offset();
            let need = len.saturating_mul(elem.min_encoded_len().max(1));
            if need > r.remaining() as u64 {
                return Err(DecodeError::new(
                    at,
                    DecodeErrorKind::LengthTooLarge {
                        len: *len,
                        remaining: r.remaining(),
                    },
                ));
            }
            decode_elems(elem, *len as usize, r, depth, budget)?
        }
        TypeDesc::Tuple { elems } => {
            let mut out = Vec::with_capacity(elems.len());
            for (i, e) in elems.iter().enumerate() {
                out.push(
                    decode_at(e, r, depth + 1, budget)
                        .map_err(|err| err.in_field(&i.to_string()))?,
                );
            }
            Value::Seq(out)
        }
        TypeDesc::Struct { fields } => decode_fields(fields, r, depth, budget)?,
        TypeDesc::Enum { variants } => {
            let at = r.offset();
            let index = r.read_u32()?;
            let Some(variant) = variants.get(index as usize) else {
                return Err(DecodeError::new(
                    at,
                    DecodeErrorKind::InvalidVariant {
                        index,
                        count: variants.len(),
                    },
                ));
            };
            let value = match &variant.kind {
                VariantKind::Unit => Value::Unit,
                VariantKind::Tuple { elems } => {
                    let mut out = Vec::with_capacity(elems.len());
                    for (i, e) in elems.iter().enumerate() {
                        out.push(
                            decode_at(e, r, depth + 1, budget)
                                .map_err(|err| err.in_field(&format!("{}.{i}", variant.name)))?,
                        );
                    }
                    Value::Seq(out)
                }
                VariantKind::Struct { fields } => decode_fields(fields, r, depth, budget)
                    .map_err(|e| e.in_field(&variant.name))?,
            };
            Value::Variant {
                index,
                name: Cow::Borrowed(variant.name.as_str()),
                value: Box::new(value),
            }
        }
        TypeDesc::Map { key, value } => {
            let n = read_count(
                r,
                key.min_encoded_len()
                    .saturating_add(value.min_encoded_len()),
            )?;
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                let k = decode_at(key, r, depth + 1, budget)?;
                let v = decode_at(value, r, depth + 1, budget)?;
                out.push((k, v));
            }
            Value::Map(out)
        }
        TypeDesc::Tensor { dtype } => {
            let shape = read_shape(r).map_err(|e| e.in_field("shape"))?;
            let at = r.offset();
            let n = r.read_len(dtype.size_bytes())?;
            let expected = element_count(&shape).unwrap_or(u64::MAX);
            if expected != n as u64 {
                return Err(DecodeError::new(
                    at,
                    DecodeErrorKind::TensorShape {
                        shape,
                        expected,
                        found: n as u64,
                    },
                ));
            }
            let data = r.take(n * dtype.size_bytes())?;
            Value::Tensor(TensorView {
                dtype: *dtype,
                shape,
                data: Cow::Borrowed(data),
            })
        }
    })
}
