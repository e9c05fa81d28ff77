//! Dynamic decoding: any payload read from its descriptor into a [`Value`], with no Rust type
//! (what `snapbus echo`, the plotter and the recorder use).

use std::borrow::Cow;

use crate::cursor::WireReader;
use crate::desc::{DType, Field, MAX_DESC_DEPTH, TypeDesc, Variant, VariantKind};
use crate::element::{Packed, TensorView};
use crate::error::{DecodeError, DecodeErrorKind};
use crate::tensor::{element_count, read_shape};
use crate::value::Value;

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
    r.finish()?;
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

/// Decodes one value of type `desc` at nesting `depth`: scalars here, composite types in the
/// helpers below (each recursing back here for its children).
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
        TypeDesc::Option { some } => decode_option(some, r, depth, budget)?,
        TypeDesc::Seq { elem } => {
            let n = read_count(r, elem.min_encoded_len())?;
            decode_elems(elem, n, r, depth, budget)?
        }
        TypeDesc::Array { len, elem } => decode_array(*len, elem, r, depth, budget)?,
        TypeDesc::Tuple { elems } => decode_tuple(elems, None, r, depth, budget)?,
        TypeDesc::Struct { fields } => decode_fields(fields, r, depth, budget)?,
        TypeDesc::Enum { variants } => decode_enum(variants, r, depth, budget)?,
        TypeDesc::Map { key, value } => decode_map(key, value, r, depth, budget)?,
        TypeDesc::Tensor { dtype } => decode_tensor(*dtype, r)?,
    })
}

fn decode_option<'a>(
    some: &'a TypeDesc,
    r: &mut WireReader<'a>,
    depth: usize,
    budget: &mut Budget,
) -> Result<Value<'a>, DecodeError> {
    let at = r.offset();
    match r.read_u8()? {
        0 => Ok(Value::Option(None)),
        1 => Ok(Value::Option(Some(Box::new(decode_at(
            some,
            r,
            depth + 1,
            budget,
        )?)))),
        tag => Err(DecodeError::new(
            at,
            DecodeErrorKind::InvalidOptionTag { tag },
        )),
    }
}

/// A fixed array: its `len` elements must fit in what remains before any is built.
fn decode_array<'a>(
    len: u64,
    elem: &'a TypeDesc,
    r: &mut WireReader<'a>,
    depth: usize,
    budget: &mut Budget,
) -> Result<Value<'a>, DecodeError> {
    let at = r.offset();
    let need = len.saturating_mul(elem.min_encoded_len().max(1));
    if need > r.remaining() as u64 {
        return Err(DecodeError::new(
            at,
            DecodeErrorKind::LengthTooLarge {
                len,
                remaining: r.remaining(),
            },
        ));
    }
    decode_elems(elem, len as usize, r, depth, budget)
}

/// The elements of a tuple (or of a tuple variant, whose name then prefixes error paths).
fn decode_tuple<'a>(
    elems: &'a [TypeDesc],
    variant: Option<&str>,
    r: &mut WireReader<'a>,
    depth: usize,
    budget: &mut Budget,
) -> Result<Value<'a>, DecodeError> {
    let mut out = Vec::with_capacity(elems.len());
    for (i, e) in elems.iter().enumerate() {
        out.push(
            decode_at(e, r, depth + 1, budget).map_err(|err| match variant {
                None => err.in_field(&i.to_string()),
                Some(name) => err.in_field(&format!("{name}.{i}")),
            })?,
        );
    }
    Ok(Value::Seq(out))
}

fn decode_enum<'a>(
    variants: &'a [Variant],
    r: &mut WireReader<'a>,
    depth: usize,
    budget: &mut Budget,
) -> Result<Value<'a>, DecodeError> {
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
        VariantKind::Tuple { elems } => decode_tuple(elems, Some(&variant.name), r, depth, budget)?,
        VariantKind::Struct { fields } => {
            decode_fields(fields, r, depth, budget).map_err(|e| e.in_field(&variant.name))?
        }
    };
    Ok(Value::Variant {
        index,
        name: Cow::Borrowed(variant.name.as_str()),
        value: Box::new(value),
    })
}

fn decode_map<'a>(
    key: &'a TypeDesc,
    value: &'a TypeDesc,
    r: &mut WireReader<'a>,
    depth: usize,
    budget: &mut Budget,
) -> Result<Value<'a>, DecodeError> {
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
    Ok(Value::Map(out))
}

/// A tensor: shape, then an element count that must equal the shape's product.
fn decode_tensor<'a>(dtype: DType, r: &mut WireReader<'a>) -> Result<Value<'a>, DecodeError> {
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
    Ok(Value::Tensor(TensorView {
        dtype,
        shape,
        data: Cow::Borrowed(data),
    }))
}
