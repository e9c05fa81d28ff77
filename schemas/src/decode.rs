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
    let v = Decoder::new(desc, &mut r).value(desc, 0)?;
    r.finish()?;
    Ok(v)
}

/// Decodes one value of type `desc` from the reader, leaving the rest unread.
pub fn decode_from<'a>(
    desc: &'a TypeDesc,
    r: &mut WireReader<'a>,
) -> Result<Value<'a>, DecodeError> {
    Decoder::new(desc, r).value(desc, 0)
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

/// One dynamic decode in progress: the reader and the value budget every nested value draws on.
struct Decoder<'a, 'r> {
    r: &'r mut WireReader<'a>,
    budget: Budget,
}

impl<'a, 'r> Decoder<'a, 'r> {
    fn new(desc: &TypeDesc, r: &'r mut WireReader<'a>) -> Decoder<'a, 'r> {
        let budget = Budget::for_payload(desc, r.remaining());
        Decoder { r, budget }
    }

    /// Decodes one value of type `desc` at nesting `depth`: scalars here, composite types in the
    /// helpers below (each recursing back here for its children).
    fn value(&mut self, desc: &'a TypeDesc, depth: usize) -> Result<Value<'a>, DecodeError> {
        self.budget.spend(self.r)?;
        if depth >= MAX_DESC_DEPTH {
            return Err(DecodeError::new(
                self.r.offset(),
                DecodeErrorKind::TooDeep {
                    max: MAX_DESC_DEPTH,
                },
            ));
        }
        macro_rules! num {
            ($t:ty, $v:ident) => {
                Value::$v(<$t>::from_le_bytes(self.r.take_array()?))
            };
        }
        Ok(match desc {
            TypeDesc::Bool => {
                let at = self.r.offset();
                match self.r.read_u8()? {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    byte => {
                        return Err(DecodeError::new(at, DecodeErrorKind::InvalidBool { byte }));
                    }
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
                let n = self.r.read_len(1)?;
                let at = self.r.offset();
                let bytes = self.r.take(n)?;
                let s = std::str::from_utf8(bytes)
                    .map_err(|_| DecodeError::new(at, DecodeErrorKind::InvalidUtf8))?;
                Value::Str(Cow::Borrowed(s))
            }
            TypeDesc::Bytes => {
                let n = self.r.read_len(1)?;
                Value::Bytes(Cow::Borrowed(self.r.take(n)?))
            }
            TypeDesc::Option { some } => self.option(some, depth)?,
            TypeDesc::Seq { elem } => {
                let n = read_count(self.r, elem.min_encoded_len())?;
                self.elems(elem, n, depth)?
            }
            TypeDesc::Array { len, elem } => self.array(*len, elem, depth)?,
            TypeDesc::Tuple { elems } => self.tuple(elems, None, depth)?,
            TypeDesc::Struct { fields } => self.fields(fields, depth)?,
            TypeDesc::Enum { variants } => self.enum_variant(variants, depth)?,
            TypeDesc::Map { key, value } => self.map(key, value, depth)?,
            TypeDesc::Tensor { dtype } => decode_tensor(*dtype, self.r)?,
        })
    }

    fn fields(&mut self, fields: &'a [Field], depth: usize) -> Result<Value<'a>, DecodeError> {
        let mut out = Vec::with_capacity(fields.len());
        for f in fields {
            let v = self
                .value(&f.ty, depth + 1)
                .map_err(|e| e.in_field(&f.name))?;
            out.push((Cow::Borrowed(f.name.as_str()), v));
        }
        Ok(Value::Struct(out))
    }

    fn elems(
        &mut self,
        elem: &'a TypeDesc,
        n: usize,
        depth: usize,
    ) -> Result<Value<'a>, DecodeError> {
        if let Some(dtype) = elem.as_dtype() {
            let bytes = self.r.take(n.saturating_mul(dtype.size_bytes()))?;
            return Ok(Value::Packed(Packed {
                dtype,
                bytes: Cow::Borrowed(bytes),
            }));
        }
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            out.push(
                self.value(elem, depth + 1)
                    .map_err(|e| e.in_field(&i.to_string()))?,
            );
        }
        Ok(Value::Seq(out))
    }

    fn option(&mut self, some: &'a TypeDesc, depth: usize) -> Result<Value<'a>, DecodeError> {
        let at = self.r.offset();
        match self.r.read_u8()? {
            0 => Ok(Value::Option(None)),
            1 => Ok(Value::Option(Some(Box::new(self.value(some, depth + 1)?)))),
            tag => Err(DecodeError::new(
                at,
                DecodeErrorKind::InvalidOptionTag { tag },
            )),
        }
    }

    /// A fixed array: its `len` elements must fit in what remains before any is built.
    fn array(
        &mut self,
        len: u64,
        elem: &'a TypeDesc,
        depth: usize,
    ) -> Result<Value<'a>, DecodeError> {
        let at = self.r.offset();
        let need = len.saturating_mul(elem.min_encoded_len().max(1));
        if need > self.r.remaining() as u64 {
            return Err(DecodeError::new(
                at,
                DecodeErrorKind::LengthTooLarge {
                    len,
                    remaining: self.r.remaining(),
                },
            ));
        }
        self.elems(elem, len as usize, depth)
    }

    /// The elements of a tuple (or of a tuple variant, whose name then prefixes error paths).
    fn tuple(
        &mut self,
        elems: &'a [TypeDesc],
        variant: Option<&str>,
        depth: usize,
    ) -> Result<Value<'a>, DecodeError> {
        let mut out = Vec::with_capacity(elems.len());
        for (i, e) in elems.iter().enumerate() {
            out.push(self.value(e, depth + 1).map_err(|err| match variant {
                None => err.in_field(&i.to_string()),
                Some(name) => err.in_field(&format!("{name}.{i}")),
            })?);
        }
        Ok(Value::Seq(out))
    }

    fn enum_variant(
        &mut self,
        variants: &'a [Variant],
        depth: usize,
    ) -> Result<Value<'a>, DecodeError> {
        let at = self.r.offset();
        let index = self.r.read_u32()?;
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
            VariantKind::Tuple { elems } => self.tuple(elems, Some(&variant.name), depth)?,
            VariantKind::Struct { fields } => self
                .fields(fields, depth)
                .map_err(|e| e.in_field(&variant.name))?,
        };
        Ok(Value::Variant {
            index,
            name: Cow::Borrowed(variant.name.as_str()),
            value: Box::new(value),
        })
    }

    fn map(
        &mut self,
        key: &'a TypeDesc,
        value: &'a TypeDesc,
        depth: usize,
    ) -> Result<Value<'a>, DecodeError> {
        let n = read_count(
            self.r,
            key.min_encoded_len()
                .saturating_add(value.min_encoded_len()),
        )?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let k = self.value(key, depth + 1)?;
            let v = self.value(value, depth + 1)?;
            out.push((k, v));
        }
        Ok(Value::Map(out))
    }
}

/// Reads a count of items of type `elem`, bounded by the remaining input.
fn read_count(r: &mut WireReader<'_>, elem_min: u64) -> Result<usize, DecodeError> {
    r.read_len(usize::try_from(elem_min).unwrap_or(usize::MAX))
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
