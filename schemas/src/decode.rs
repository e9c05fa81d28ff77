//! Dynamic decoding: any payload read from its descriptor into a [`Value`], with no Rust type
//! (what `snapbus echo`, the plotter and the recorder use).

use std::borrow::Cow;

use crate::cursor::WireReader;
use crate::desc::TypeDesc;
use crate::dtype::DType;
use crate::element::{Packed, TensorView};
use crate::error::{DecodeError, DecodeErrorKind};
use crate::value::Value;
use crate::walk::{Kind, LayoutPlan, Node, NodeId, Scalar, Visit, walk};

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
///
/// Compiles a [`LayoutPlan`] on every call: to decode many payloads of one schema, use
/// [`SchemaDescriptor::decode`](crate::SchemaDescriptor::decode) or [`decode_with`].
pub fn decode<'a>(desc: &'a TypeDesc, bytes: &'a [u8]) -> Result<Value<'a>, DecodeError> {
    decode_all(
        &LayoutPlan::compile(desc),
        bytes,
        ValueVisitor { names: None },
    )
}

/// [`decode`] with a [`LayoutPlan`] compiled once (for many payloads of one type); the value's
/// field names borrow from the plan.
pub fn decode_with<'a>(
    plan: &'a LayoutPlan<'a>,
    bytes: &'a [u8],
) -> Result<Value<'a>, DecodeError> {
    decode_all(plan, bytes, ValueVisitor { names: Some(plan) })
}

/// Walks the whole of `bytes` with `v`.
fn decode_all<'a>(
    plan: &LayoutPlan<'a>,
    bytes: &'a [u8],
    mut v: ValueVisitor<'a>,
) -> Result<Value<'a>, DecodeError> {
    let mut r = WireReader::new(bytes);
    let v = walk(plan, &mut r, &mut v)?;
    r.finish()?;
    Ok(v)
}

/// Decodes one value of type `desc` from the reader, leaving the rest unread.
pub fn decode_from<'a>(
    desc: &'a TypeDesc,
    r: &mut WireReader<'a>,
) -> Result<Value<'a>, DecodeError> {
    walk(
        &LayoutPlan::compile(desc),
        r,
        &mut ValueVisitor { names: None },
    )
}

/// The [`Visit`]or that builds [`Value`]s borrowing from the payload and the descriptor.
struct ValueVisitor<'a> {
    /// A plan that outlives the value, to borrow field names from even where it owns them
    /// (`None`: the names are the nodes' own, borrowed from the descriptor).
    names: Option<&'a LayoutPlan<'a>>,
}

/// The `len` bytes at `at` (the walk has checked they are there).
#[inline]
fn span<'a>(r: &WireReader<'a>, at: usize, len: usize) -> Result<&'a [u8], DecodeError> {
    r.slice(at, len).ok_or_else(|| {
        DecodeError::new(
            at,
            DecodeErrorKind::UnexpectedEnd {
                needed: len,
                remaining: r.remaining(),
            },
        )
    })
}

impl<'a> Visit<'a, WireReader<'a>> for ValueVisitor<'a> {
    type Out = Value<'a>;
    type Error = DecodeError;
    type Seq = Vec<Value<'a>>;
    type Record = Vec<(Cow<'a, str>, Value<'a>)>;
    type Map = Vec<(Value<'a>, Value<'a>)>;

    #[inline]
    fn scalar(&mut self, v: Scalar) -> Result<Value<'a>, DecodeError> {
        Ok(match v {
            Scalar::Bool(v) => Value::Bool(v),
            Scalar::U8(v) => Value::U8(v),
            Scalar::U16(v) => Value::U16(v),
            Scalar::U32(v) => Value::U32(v),
            Scalar::U64(v) => Value::U64(v),
            Scalar::U128(v) => Value::U128(v),
            Scalar::I8(v) => Value::I8(v),
            Scalar::I16(v) => Value::I16(v),
            Scalar::I32(v) => Value::I32(v),
            Scalar::I64(v) => Value::I64(v),
            Scalar::I128(v) => Value::I128(v),
            Scalar::F32(v) => Value::F32(v),
            Scalar::F64(v) => Value::F64(v),
        })
    }

    #[inline]
    fn string(
        &mut self,
        r: &WireReader<'a>,
        at: usize,
        len: usize,
    ) -> Result<Value<'a>, DecodeError> {
        let s = std::str::from_utf8(span(r, at, len)?)
            .map_err(|_| DecodeError::new(at, DecodeErrorKind::InvalidUtf8))?;
        Ok(Value::Str(Cow::Borrowed(s)))
    }

    #[inline]
    fn bytes(
        &mut self,
        r: &WireReader<'a>,
        at: usize,
        len: usize,
    ) -> Result<Value<'a>, DecodeError> {
        Ok(Value::Bytes(Cow::Borrowed(span(r, at, len)?)))
    }

    #[inline]
    fn packed(
        &mut self,
        r: &WireReader<'a>,
        dtype: DType,
        at: usize,
        count: usize,
    ) -> Result<Value<'a>, DecodeError> {
        let bytes = span(r, at, count.saturating_mul(dtype.size_bytes()))?;
        Ok(Value::Packed(Packed {
            dtype,
            bytes: Cow::Borrowed(bytes),
        }))
    }

    #[inline]
    fn tensor(
        &mut self,
        r: &WireReader<'a>,
        dtype: DType,
        shape: &[u64],
        at: usize,
    ) -> Result<Value<'a>, DecodeError> {
        let n = shape.iter().product::<u64>() as usize;
        let data = span(r, at, n.saturating_mul(dtype.size_bytes()))?;
        Ok(Value::Tensor(TensorView {
            dtype,
            shape: shape.to_vec(),
            data: Cow::Borrowed(data),
        }))
    }

    #[inline]
    fn option(&mut self, value: Option<Value<'a>>) -> Result<Value<'a>, DecodeError> {
        Ok(Value::Option(value.map(Box::new)))
    }

    #[inline]
    fn seq_begin(&mut self, _: &Node<'a>, len: usize) -> Result<Self::Seq, DecodeError> {
        Ok(Vec::with_capacity(len))
    }

    #[inline]
    fn seq_item(&mut self, seq: &mut Self::Seq, item: Value<'a>) -> Result<(), DecodeError> {
        seq.push(item);
        Ok(())
    }

    #[inline]
    fn seq_end(&mut self, _: &Node<'a>, seq: Self::Seq) -> Result<Value<'a>, DecodeError> {
        Ok(Value::Seq(seq))
    }

    #[inline]
    fn record_begin(
        &mut self,
        _: NodeId,
        _: &Node<'a>,
        len: usize,
    ) -> Result<Self::Record, DecodeError> {
        Ok(Vec::with_capacity(len))
    }

    #[inline]
    fn field(
        &mut self,
        record: &mut Self::Record,
        id: NodeId,
        field: &Node<'a>,
        value: Value<'a>,
    ) -> Result<(), DecodeError> {
        let name = match self.names {
            Some(plan) => Cow::Borrowed(plan.node(id).name()),
            None => field.name_cow(),
        };
        record.push((name, value));
        Ok(())
    }

    #[inline]
    fn record_end(
        &mut self,
        _: NodeId,
        _: &Node<'a>,
        record: Self::Record,
    ) -> Result<Value<'a>, DecodeError> {
        Ok(Value::Struct(record))
    }

    #[inline]
    fn variant(
        &mut self,
        index: u32,
        _: NodeId,
        variant: &Node<'a>,
        payload: Option<Value<'a>>,
    ) -> Result<Value<'a>, DecodeError> {
        debug_assert!(matches!(variant.kind(), Kind::Variant(_)));
        Ok(Value::Variant {
            index,
            name: variant.name_cow(),
            value: Box::new(payload.unwrap_or(Value::Unit)),
        })
    }

    #[inline]
    fn map_begin(&mut self, len: usize) -> Result<Self::Map, DecodeError> {
        Ok(Vec::with_capacity(len))
    }

    #[inline]
    fn map_entry(
        &mut self,
        map: &mut Self::Map,
        key: Value<'a>,
        value: Value<'a>,
    ) -> Result<(), DecodeError> {
        map.push((key, value));
        Ok(())
    }

    #[inline]
    fn map_end(&mut self, map: Self::Map) -> Result<Value<'a>, DecodeError> {
        Ok(Value::Map(map))
    }
}
