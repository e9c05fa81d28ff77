//! The walk itself: one value of a plan read from a source, handed to a visitor.

use super::layout::{Kind, LayoutPlan, NodeId, VariantShape, range};
use super::source::{ByteSource, Scalar, WalkError};
use super::visit::Visit;
use crate::desc::MAX_DESC_DEPTH;
use crate::dtype::DType;
use crate::dynamic::Tag;
use crate::error::{DecodeError, DecodeErrorKind};
use crate::tensor::MAX_TENSOR_RANK;

/// One walk in progress: the plan, the source, the visitor and the value budget.
pub(super) struct Walker<'p, 'd, S: ?Sized, V> {
    pub(super) plan: &'p LayoutPlan<'d>,
    pub(super) src: &'p mut S,
    pub(super) v: &'p mut V,
    pub(super) left: u64,
    pub(super) max: u64,
}

impl<'p, 'd, S, V> Walker<'p, 'd, S, V>
where
    S: ByteSource + ?Sized,
    V: Visit<'d, S>,
{
    /// One value of node `id`: the budget and depth checks, then its body.
    #[inline]
    pub(super) fn value(&mut self, id: NodeId) -> Result<V::Out, V::Error> {
        if self.left == 0 {
            return Err(self.err(DecodeErrorKind::TooManyValues { max: self.max }));
        }
        self.left -= 1;
        self.body(id)
    }

    fn err(&self, kind: DecodeErrorKind) -> V::Error {
        DecodeError::new(self.src.offset(), kind).into()
    }

    /// Scalars here, composite values in the helpers below (each recursing back to
    /// [`value`](Walker::value) for its children).
    fn body(&mut self, id: NodeId) -> Result<V::Out, V::Error> {
        let plan = self.plan;
        let node = plan.node(id);
        if V::SKIPS_FIXED {
            if let Some(n) = node.fixed {
                self.src.skip(n)?;
                // What a skipping visitor makes of a value is not looked at.
                return self.v.scalar(Scalar::Bool(false));
            }
        }
        macro_rules! num {
            ($t:ty, $v:ident) => {
                Scalar::$v(<$t>::from_le_bytes(self.src.read_array()?))
            };
        }
        let scalar = match node.kind {
            Kind::Bool => self.bool()?,
            Kind::Num(DType::U8) => num!(u8, U8),
            Kind::Num(DType::U16) => num!(u16, U16),
            Kind::Num(DType::U32) => num!(u32, U32),
            Kind::Num(DType::U64) => num!(u64, U64),
            Kind::Num(DType::I8) => num!(i8, I8),
            Kind::Num(DType::I16) => num!(i16, I16),
            Kind::Num(DType::I32) => num!(i32, I32),
            Kind::Num(DType::I64) => num!(i64, I64),
            Kind::Num(DType::F32) => num!(f32, F32),
            Kind::Num(DType::F64) => num!(f64, F64),
            Kind::U128 => num!(u128, U128),
            Kind::I128 => num!(i128, I128),
            Kind::Str => return self.string(),
            Kind::Bytes => return self.bytes(),
            Kind::Option => return self.option(id),
            Kind::Seq => {
                let elem = plan.node(node.children.0);
                let min = usize::try_from(elem.min_len).unwrap_or(usize::MAX);
                let n = self.src.read_len(min)?;
                return self.elems(id, n);
            }
            Kind::Array { len } => return self.array(id, len),
            Kind::Tuple | Kind::Variant(VariantShape::Tuple) => return self.tuple(id),
            Kind::Struct | Kind::Variant(_) => return self.record(id),
            Kind::Enum => return self.enumeration(id),
            Kind::Map => return self.map(id),
            Kind::Tensor(dtype) => return self.tensor(dtype),
            Kind::Dynamic => return self.dynamic(id, 0),
            Kind::TooDeep => {
                return Err(self.err(DecodeErrorKind::TooDeep {
                    max: MAX_DESC_DEPTH,
                }));
            }
        };
        self.v.scalar(scalar)
    }

    /// One byte, 0 or 1.
    fn bool(&mut self) -> Result<Scalar, V::Error> {
        let at = self.src.offset();
        match self.src.read_u8()? {
            0 => Ok(Scalar::Bool(false)),
            1 => Ok(Scalar::Bool(true)),
            byte => Err(DecodeError::new(at, DecodeErrorKind::InvalidBool { byte }).into()),
        }
    }

    /// A `u64` length, then that many UTF-8 bytes (checked by the visitor).
    fn string(&mut self) -> Result<V::Out, V::Error> {
        let n = self.src.read_len(1)?;
        let at = self.src.skip(n)?;
        self.v.string(self.src, at, n)
    }

    /// A `u64` length, then that many bytes.
    fn bytes(&mut self) -> Result<V::Out, V::Error> {
        let n = self.src.read_len(1)?;
        let at = self.src.skip(n)?;
        self.v.bytes(self.src, at, n)
    }

    fn option(&mut self, id: NodeId) -> Result<V::Out, V::Error> {
        let at = self.src.offset();
        match self.src.read_u8()? {
            0 => self.v.option(None),
            1 => {
                let some = self.value(self.plan.node(id).children.0)?;
                self.v.option(Some(some))
            }
            tag => Err(DecodeError::new(at, DecodeErrorKind::InvalidOptionTag { tag }).into()),
        }
    }

    /// `n` elements of a sequence or array: packed numbers in one span, others one by one.
    fn elems(&mut self, id: NodeId, n: usize) -> Result<V::Out, V::Error> {
        let plan = self.plan;
        let elem_id = plan.node(id).children.0;
        let elem = plan.node(elem_id);
        if let Kind::Num(dtype) = elem.kind {
            let at = self.src.skip(n.saturating_mul(dtype.size_bytes()))?;
            return self.v.packed(self.src, dtype, at, n);
        }
        if V::SKIPS_FIXED {
            if let Some(size) = elem.fixed {
                self.src.skip(n.saturating_mul(size))?;
                // What a skipping visitor makes of a value is not looked at.
                return self.v.scalar(Scalar::Bool(false));
            }
        }
        let node = plan.node(id);
        let mut seq = self.v.seq_begin(node, n)?;
        for i in 0..n {
            let item = self
                .value(elem_id)
                .map_err(|e| e.in_field(&i.to_string()))?;
            self.v.seq_item(&mut seq, item)?;
        }
        self.v.seq_end(node, seq)
    }

    /// A fixed array: its `len` elements must fit in what remains before any is visited.
    fn array(&mut self, id: NodeId, len: u64) -> Result<V::Out, V::Error> {
        let elem = self.plan.node(self.plan.node(id).children.0);
        let need = len.saturating_mul(elem.min_len.max(1));
        let remaining = self.src.remaining();
        if need > remaining as u64 {
            return Err(self.err(DecodeErrorKind::LengthTooLarge { len, remaining }));
        }
        self.elems(id, len as usize)
    }

    /// A tuple or a tuple variant's payload.
    fn tuple(&mut self, id: NodeId) -> Result<V::Out, V::Error> {
        let node = self.plan.node(id);
        let kids = range(node.children);
        let mut seq = self.v.seq_begin(node, kids.len())?;
        for (i, c) in kids.enumerate() {
            let item = self.value(c).map_err(|e| e.in_field(&i.to_string()))?;
            self.v.seq_item(&mut seq, item)?;
        }
        self.v.seq_end(node, seq)
    }

    /// A struct or a struct variant's payload.
    fn record(&mut self, id: NodeId) -> Result<V::Out, V::Error> {
        let plan = self.plan;
        let node = plan.node(id);
        let kids = range(node.children);
        let mut rec = self.v.record_begin(id, node, kids.len())?;
        for c in kids {
            let field = plan.node(c);
            let value = self.value(c).map_err(|e| e.in_field(field.name()))?;
            self.v.field(&mut rec, c, field, value)?;
        }
        self.v.record_end(id, node, rec)
    }

    fn enumeration(&mut self, id: NodeId) -> Result<V::Out, V::Error> {
        let plan = self.plan;
        let at = self.src.offset();
        let index = self.src.read_u32()?;
        let kids = range(plan.node(id).children);
        let count = kids.len();
        let Some(vid) = kids.clone().nth(index as usize) else {
            return Err(
                DecodeError::new(at, DecodeErrorKind::InvalidVariant { index, count }).into(),
            );
        };
        let variant = plan.node(vid);
        let payload = match variant.kind {
            Kind::Variant(VariantShape::Unit) => None,
            _ => Some(self.body(vid).map_err(|e| e.in_field(variant.name()))?),
        };
        self.v.variant(index, vid, variant, payload)
    }

    fn map(&mut self, id: NodeId) -> Result<V::Out, V::Error> {
        let plan = self.plan;
        let (k, v) = (plan.child(id, 0), plan.child(id, 1));
        let min = plan.node(k).min_len.saturating_add(plan.node(v).min_len);
        let n = self
            .src
            .read_len(usize::try_from(min).unwrap_or(usize::MAX))?;
        let mut map = self.v.map_begin(n)?;
        for _ in 0..n {
            let key = self.value(k)?;
            let value = self.value(v)?;
            self.v.map_entry(&mut map, key, value)?;
        }
        self.v.map_end(map)
    }

    /// A dynamic value at dynamic nesting `depth` (node `id` is its plan node, handed to the
    /// visitor for its lists): its tag, then its body (see [`crate::dynamic`]).
    fn dynamic(&mut self, id: NodeId, depth: usize) -> Result<V::Out, V::Error> {
        if depth >= MAX_DESC_DEPTH {
            return Err(self.err(DecodeErrorKind::TooDeep {
                max: MAX_DESC_DEPTH,
            }));
        }
        let at = self.src.offset();
        let byte = self.src.read_u8()?;
        let tag = Tag::from_byte(byte)
            .ok_or_else(|| DecodeError::new(at, DecodeErrorKind::InvalidTag { tag: byte }))?;
        let scalar = match tag {
            Tag::None => return self.v.option(None),
            Tag::Bool => self.bool()?,
            Tag::I64 => Scalar::I64(i64::from_le_bytes(self.src.read_array()?)),
            Tag::U64 => Scalar::U64(u64::from_le_bytes(self.src.read_array()?)),
            Tag::F64 => Scalar::F64(f64::from_le_bytes(self.src.read_array()?)),
            Tag::Str => return self.string(),
            Tag::Bytes => return self.bytes(),
            Tag::List => return self.dynamic_list(id, depth),
            Tag::Map => return self.dynamic_map(id, depth),
            Tag::NdArray => {
                let at = self.src.offset();
                let code = self.src.read_u8()?;
                let dtype = DType::from_code(code).ok_or_else(|| {
                    DecodeError::new(at, DecodeErrorKind::InvalidTag { tag: code })
                })?;
                return self.tensor(dtype);
            }
        };
        self.v.scalar(scalar)
    }

    /// One item of a dynamic list or map, paid for from the value budget.
    fn dynamic_item(&mut self, id: NodeId, depth: usize) -> Result<V::Out, V::Error> {
        if self.left == 0 {
            return Err(self.err(DecodeErrorKind::TooManyValues { max: self.max }));
        }
        self.left -= 1;
        self.dynamic(id, depth)
    }

    fn dynamic_list(&mut self, id: NodeId, depth: usize) -> Result<V::Out, V::Error> {
        let n = self.src.read_len(1)?;
        let node = self.plan.node(id);
        let mut seq = self.v.seq_begin(node, n)?;
        for i in 0..n {
            let item = self
                .dynamic_item(id, depth + 1)
                .map_err(|e| e.in_field(&i.to_string()))?;
            self.v.seq_item(&mut seq, item)?;
        }
        self.v.seq_end(node, seq)
    }

    /// A dynamic map: string keys (an error names the entry by its index: the key is not yet
    /// known to be text when the value fails).
    fn dynamic_map(&mut self, id: NodeId, depth: usize) -> Result<V::Out, V::Error> {
        // A key's length prefix and a value's tag at least.
        let n = self.src.read_len(9)?;
        let mut map = self.v.map_begin(n)?;
        for i in 0..n {
            let len = self.src.read_len(1)?;
            let at = self.src.skip(len)?;
            let key = self.v.string(self.src, at, len)?;
            let value = self
                .dynamic_item(id, depth + 1)
                .map_err(|e| e.in_field(&i.to_string()))?;
            self.v.map_entry(&mut map, key, value)?;
        }
        self.v.map_end(map)
    }

    /// A tensor: rank, dimensions, then an element count that must equal their product.
    fn tensor(&mut self, dtype: DType) -> Result<V::Out, V::Error> {
        let mut dims = [0u64; MAX_TENSOR_RANK];
        let rank = read_shape(self.src, &mut dims).map_err(|e| e.in_field("shape"))?;
        let shape = &dims[..rank];
        let at = self.src.offset();
        let n = self.src.read_len(dtype.size_bytes())?;
        let expected = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX);
        if expected != n as u64 {
            return Err(DecodeError::new(
                at,
                DecodeErrorKind::TensorShape {
                    shape: shape.to_vec(),
                    expected,
                    found: n as u64,
                },
            )
            .into());
        }
        let data = self.src.skip(n * dtype.size_bytes())?;
        self.v.tensor(self.src, dtype, shape, data)
    }
}

/// Reads a tensor's rank and dimensions into `dims`, refusing ranks above
/// [`MAX_TENSOR_RANK`]; returns the rank.
pub(crate) fn read_shape<S: ByteSource + ?Sized>(
    src: &mut S,
    dims: &mut [u64; MAX_TENSOR_RANK],
) -> Result<usize, DecodeError> {
    let at = src.offset();
    let rank = src.read_u64()?;
    if rank > MAX_TENSOR_RANK as u64 {
        return Err(DecodeError::new(
            at,
            DecodeErrorKind::TensorRank {
                rank,
                max: MAX_TENSOR_RANK,
            },
        ));
    }
    let rank = rank as usize;
    let need = rank * 8;
    if need > src.remaining() {
        return Err(DecodeError::new(
            src.offset(),
            DecodeErrorKind::UnexpectedEnd {
                needed: need,
                remaining: src.remaining(),
            },
        ));
    }
    for d in &mut dims[..rank] {
        *d = src.read_u64()?;
    }
    Ok(rank)
}
