//! The one walk of the wire format: a [`TypeDesc`] compiled once into a [`LayoutPlan`], read
//! from any [`ByteSource`] by [`walk`], which hands what it reads to a [`Visit`]or.
//!
//! Every reader of payloads is a visitor of this walk: [`decode`](crate::decode) builds
//! [`Value`](crate::Value)s, the Python binding builds Python objects, the field extractors
//! read numbers where the payload lies in the ring. The walk owns the wire format's rules —
//! length prefixes checked against what remains before anything is built, tags and variant
//! indices checked, tensor shapes checked against their element counts, nesting depth and the
//! number of values bounded — so a visitor only says what each value becomes.
//!
//! # Guarantees
//!
//! - **Untrusted bytes never panic.** Every failure is a [`DecodeError`] with the byte offset
//!   and (for visitors whose error keeps one, see [`WalkError`]) the field path, exactly as
//!   [`decode`](crate::decode) reports it.
//! - **No dynamic dispatch.** [`walk`] is generic over the source and the visitor, so each
//!   use is compiled for its own types.
//! - **Variable-size data is not copied.** Strings, bytes, packed numbers and tensor elements
//!   reach the visitor as a span (offset and length) in the source, already bounds-checked:
//!   a visitor of a slice borrows them, a visitor of a ring payload reads them a piece at a
//!   time.
//!
//! # Example
//!
//! A plan compiled once knows where the fixed-size fields are; [`skip`] moves past a value
//! using only the framing, [`decode_with`](crate::decode_with) walks it into a
//! [`Value`](crate::Value) (its visitor, in `decode.rs`, is the reference implementation of
//! [`Visit`]).
//!
//! ```
//! use snapbus_schemas::walk::{skip, Kind, LayoutPlan};
//! use snapbus_schemas::{decode_with, DType, Snapshot, Value, Wire, WireReader};
//!
//! #[derive(Snapshot)]
//! #[snapshot(id = "doc.walk", version = 1)]
//! struct Step { step: u32, pos: [f32; 2], name: String }
//!
//! let desc = Step::descriptor();
//! let plan = LayoutPlan::compile(desc.root());
//! let pos = plan.child(LayoutPlan::ROOT, 1);
//! assert_eq!(plan.node(pos).name(), "pos");
//! assert_eq!(plan.node(pos).kind(), Kind::Array { len: 2 });
//! assert_eq!((plan.node(pos).offset(), plan.node(pos).fixed_size()), (Some(4), Some(8)));
//! assert_eq!(plan.node(plan.child(pos, 0)).dtype(), Some(DType::F32));
//!
//! let bytes = Step { step: 3, pos: [0.5, 1.5], name: "x".into() }.encode_to_vec()?;
//! let mut r = WireReader::new(&bytes);
//! skip(&plan, LayoutPlan::ROOT, &mut r)?;
//! assert_eq!(r.remaining(), 0);
//! assert_eq!(decode_with(&plan, &bytes)?.field("step"), Some(&Value::U32(3)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::borrow::Cow;

use crate::cursor::WireReader;
use crate::desc::{MAX_DESC_DEPTH, TypeDesc, Variant, VariantKind};
use crate::dtype::DType;
use crate::error::{DecodeError, DecodeErrorKind};
use crate::tensor::MAX_TENSOR_RANK;

/// The index of a node in a [`LayoutPlan`]; the root is [`LayoutPlan::ROOT`]. Indices are
/// stable: the same descriptor always compiles to the same numbering, so a visitor may keep
/// per-node state (the Python binding's record classes) in a vector indexed by it.
pub type NodeId = u32;

/// What a node of a [`LayoutPlan`] is: the [`TypeDesc`] variant, with scalars grouped by
/// [`DType`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One byte, 0 or 1.
    Bool,
    /// A number of a [`DType`].
    Num(DType),
    /// `u128`.
    U128,
    /// `i128`.
    I128,
    /// A UTF-8 string.
    Str,
    /// A byte buffer.
    Bytes,
    /// An option; its one child is the value's type.
    Option,
    /// A sequence; its one child is the element type.
    Seq,
    /// A fixed array of `len` elements; its one child is the element type.
    Array {
        /// Number of elements.
        len: u64,
    },
    /// A tuple; its children are the elements.
    Tuple,
    /// A struct; its children are the fields (each [named](Node::name)).
    Struct,
    /// An enum; its children are the variants ([`Kind::Variant`] nodes, named).
    Enum,
    /// One variant of an enum; its children are the payload's elements or fields.
    Variant(VariantShape),
    /// A map; its two children are the key and value types.
    Map,
    /// A tensor of a [`DType`].
    Tensor(DType),
    /// A node nested [`MAX_DESC_DEPTH`] deep: walking it is an error.
    TooDeep,
}

/// The shape of an enum variant's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VariantShape {
    /// No payload.
    Unit,
    /// Positional fields (a newtype variant has one).
    Tuple,
    /// Named fields.
    Struct,
}

/// One node of a [`LayoutPlan`]: its kind, its name where it has one, and the layout facts
/// every walker would otherwise recompute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node<'d> {
    kind: Kind,
    name: Cow<'d, str>,
    fixed: Option<usize>,
    min_len: u64,
    offset: Option<usize>,
    children: (NodeId, NodeId),
}

impl<'d> Node<'d> {
    /// What the node is.
    #[inline]
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The field's or variant's name (`""` for other nodes).
    #[inline]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name, borrowed from the descriptor where the plan is.
    #[inline]
    pub fn name_cow(&self) -> Cow<'d, str> {
        self.name.clone()
    }

    /// The encoded size of every value of this type, if it is always the same.
    #[inline]
    pub fn fixed_size(&self) -> Option<usize> {
        self.fixed
    }

    /// A lower bound on the encoded length of any value, saturating (as
    /// [`TypeDesc::min_encoded_len`]).
    #[inline]
    pub fn min_encoded_len(&self) -> u64 {
        self.min_len
    }

    /// For a struct field, tuple element or variant field: its offset from the start of its
    /// parent's encoding, when every member before it has a fixed size.
    #[inline]
    pub fn offset(&self) -> Option<usize> {
        self.offset
    }

    /// The numeric element type if this node is a number.
    #[inline]
    pub fn dtype(&self) -> Option<DType> {
        match self.kind {
            Kind::Num(d) => Some(d),
            _ => None,
        }
    }
}

/// A [`TypeDesc`] compiled once: a flat tree of [`Node`]s, the children of each node next to
/// each other, with fixed sizes, minimum lengths and fixed offsets worked out.
///
/// Borrows the descriptor's names (`LayoutPlan<'d>`); [`into_owned`](LayoutPlan::into_owned)
/// makes one that can be kept beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutPlan<'d> {
    nodes: Vec<Node<'d>>,
    depth: usize,
}

/// Where a node's children come from while compiling.
#[derive(Clone, Copy)]
enum Src<'d> {
    Desc(&'d TypeDesc),
    Variant(&'d Variant),
}

impl<'d> LayoutPlan<'d> {
    /// The root node.
    pub const ROOT: NodeId = 0;

    /// Compiles `desc`. Never fails: a descriptor nested deeper than [`MAX_DESC_DEPTH`]
    /// compiles to [`Kind::TooDeep`] nodes there, which the walk refuses.
    pub fn compile(desc: &'d TypeDesc) -> LayoutPlan<'d> {
        let mut nodes = Vec::with_capacity(8);
        let mut srcs: Vec<(Src<'d>, usize)> = Vec::with_capacity(8);
        nodes.push(leaf_node(desc, Cow::Borrowed(""), 0));
        srcs.push((Src::Desc(desc), 0));
        let mut depth = 0;
        // Breadth first, so each node's children are contiguous.
        let mut i = 0;
        while i < nodes.len() {
            let (src, d) = srcs[i];
            depth = depth.max(d + 1);
            let first = nodes.len() as NodeId;
            if nodes[i].kind != Kind::TooDeep {
                push_children(src, d, &mut nodes, &mut srcs);
            }
            nodes[i].children = (first, nodes.len() as NodeId);
            i += 1;
        }
        // Children come after their parents: sizes bottom up.
        for i in (0..nodes.len()).rev() {
            let (fixed, min_len) = sizes(&nodes, i, srcs[i].0);
            nodes[i].fixed = fixed;
            nodes[i].min_len = min_len;
            if matches!(nodes[i].kind, Kind::Struct | Kind::Tuple | Kind::Variant(_)) {
                let mut at = Some(0usize);
                for c in range(nodes[i].children) {
                    let c = c as usize;
                    nodes[c].offset = at;
                    at = at.zip(nodes[c].fixed).and_then(|(a, n)| a.checked_add(n));
                }
            }
        }
        LayoutPlan { nodes, depth }
    }

    /// The plan with its names owned, to keep beside (or instead of) the descriptor.
    pub fn into_owned(self) -> LayoutPlan<'static> {
        LayoutPlan {
            nodes: self
                .nodes
                .into_iter()
                .map(|n| Node {
                    name: Cow::Owned(n.name.into_owned()),
                    kind: n.kind,
                    fixed: n.fixed,
                    min_len: n.min_len,
                    offset: n.offset,
                    children: n.children,
                })
                .collect(),
            depth: self.depth,
        }
    }

    /// The node `id` (panics if `id` is not of this plan).
    #[inline]
    pub fn node(&self, id: NodeId) -> &Node<'d> {
        &self.nodes[id as usize]
    }

    /// The children of `id`, in order.
    #[inline]
    pub fn children(&self, id: NodeId) -> std::ops::Range<NodeId> {
        range(self.node(id).children)
    }

    /// The `i`th child of `id`.
    #[inline]
    pub fn child(&self, id: NodeId, i: usize) -> NodeId {
        self.node(id).children.0 + i as NodeId
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the plan has no node (never: the root is always there).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The nesting depth (a scalar has depth 1), as [`TypeDesc::depth`] up to
    /// [`MAX_DESC_DEPTH`].
    pub fn depth(&self) -> usize {
        self.depth
    }
}

fn range((a, b): (NodeId, NodeId)) -> std::ops::Range<NodeId> {
    a..b
}

/// A node for `desc` named `name` at nesting `depth`, children and sizes not yet known.
fn leaf_node<'d>(desc: &'d TypeDesc, name: Cow<'d, str>, depth: usize) -> Node<'d> {
    let kind = if depth >= MAX_DESC_DEPTH {
        Kind::TooDeep
    } else {
        match desc {
            TypeDesc::Bool => Kind::Bool,
            TypeDesc::U128 => Kind::U128,
            TypeDesc::I128 => Kind::I128,
            TypeDesc::String => Kind::Str,
            TypeDesc::Bytes => Kind::Bytes,
            TypeDesc::Option { .. } => Kind::Option,
            TypeDesc::Seq { .. } => Kind::Seq,
            TypeDesc::Array { len, .. } => Kind::Array { len: *len },
            TypeDesc::Tuple { .. } => Kind::Tuple,
            TypeDesc::Struct { .. } => Kind::Struct,
            TypeDesc::Enum { .. } => Kind::Enum,
            TypeDesc::Map { .. } => Kind::Map,
            TypeDesc::Tensor { dtype } => Kind::Tensor(*dtype),
            d => d.as_dtype().map_or(Kind::TooDeep, Kind::Num),
        }
    };
    Node {
        kind,
        name,
        fixed: None,
        min_len: 0,
        offset: None,
        children: (0, 0),
    }
}

/// Appends the children of a node made from `src` at nesting `depth`.
fn push_children<'d>(
    src: Src<'d>,
    depth: usize,
    nodes: &mut Vec<Node<'d>>,
    srcs: &mut Vec<(Src<'d>, usize)>,
) {
    let mut push = |desc: &'d TypeDesc, name: &'d str, depth: usize| {
        nodes.push(leaf_node(desc, Cow::Borrowed(name), depth));
        srcs.push((Src::Desc(desc), depth));
    };
    match src {
        Src::Desc(desc) => match desc {
            TypeDesc::Option { some: t }
            | TypeDesc::Seq { elem: t }
            | TypeDesc::Array { elem: t, .. } => push(t, "", depth + 1),
            TypeDesc::Tuple { elems } => elems.iter().for_each(|e| push(e, "", depth + 1)),
            TypeDesc::Struct { fields } => {
                fields.iter().for_each(|f| push(&f.ty, &f.name, depth + 1));
            }
            TypeDesc::Map { key, value } => {
                push(key, "", depth + 1);
                push(value, "", depth + 1);
            }
            TypeDesc::Enum { variants } => {
                for v in variants {
                    let shape = match v.kind {
                        VariantKind::Unit => VariantShape::Unit,
                        VariantKind::Tuple { .. } => VariantShape::Tuple,
                        VariantKind::Struct { .. } => VariantShape::Struct,
                    };
                    nodes.push(Node {
                        kind: Kind::Variant(shape),
                        name: Cow::Borrowed(&v.name),
                        fixed: None,
                        min_len: 0,
                        offset: None,
                        children: (0, 0),
                    });
                    // A variant's payload nests like the enum's own children.
                    srcs.push((Src::Variant(v), depth));
                }
            }
            _ => {}
        },
        Src::Variant(v) => match &v.kind {
            VariantKind::Unit => {}
            VariantKind::Tuple { elems } => elems.iter().for_each(|e| push(e, "", depth + 1)),
            VariantKind::Struct { fields } => {
                fields.iter().for_each(|f| push(&f.ty, &f.name, depth + 1));
            }
        },
    }
}

/// The fixed size and minimum length of node `i` (its children already done).
fn sizes(nodes: &[Node<'_>], i: usize, src: Src<'_>) -> (Option<usize>, u64) {
    let n = &nodes[i];
    let kids = || range(n.children).map(|c| &nodes[c as usize]);
    let sum_min = || kids().fold(0u64, |a, c| a.saturating_add(c.min_len));
    let sum_fixed = || kids().map(|c| c.fixed).sum::<Option<usize>>();
    match n.kind {
        Kind::Bool => (Some(1), 1),
        Kind::Num(d) => (Some(d.size_bytes()), d.size_bytes() as u64),
        Kind::U128 | Kind::I128 => (Some(16), 16),
        Kind::Str | Kind::Bytes | Kind::Seq | Kind::Map => (None, 8),
        Kind::Option => (None, 1),
        Kind::Enum => (None, 4),
        Kind::Tensor(_) => (None, 16),
        Kind::Array { len } => {
            let elem = &nodes[n.children.0 as usize];
            let fixed = elem
                .fixed
                .and_then(|f| f.checked_mul(usize::try_from(len).ok()?));
            (fixed, len.saturating_mul(elem.min_len))
        }
        Kind::Tuple | Kind::Struct | Kind::Variant(_) => (sum_fixed(), sum_min()),
        Kind::TooDeep => match src {
            Src::Desc(d) => (None, d.min_encoded_len()),
            Src::Variant(_) => (None, 0),
        },
    }
}

/// Where the walk reads bytes from: fixed-width reads and skips, every one bounds-checked.
///
/// Implemented for [`WireReader`] (a payload in memory); the field extractors implement it
/// for a payload read where it lies in a producer's ring. The walk passes variable-size data
/// to the visitor as spans of the source, which the visitor reads in its own way.
pub trait ByteSource {
    /// The current byte offset.
    fn offset(&self) -> usize;

    /// Bytes not yet read.
    fn remaining(&self) -> usize;

    /// Reads the next `N` bytes.
    fn read_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError>;

    /// Moves past the next `n` bytes; returns the offset where they start.
    fn skip(&mut self, n: usize) -> Result<usize, DecodeError>;

    /// Reads one byte.
    #[inline]
    fn read_u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.read_array::<1>()?[0])
    }

    /// Reads a little-endian `u32`.
    #[inline]
    fn read_u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.read_array()?))
    }

    /// Reads a little-endian `u64`.
    #[inline]
    fn read_u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.read_array()?))
    }

    /// Reads a `u64` length or count prefix of items of at least `min_item_len` bytes each
    /// (zero-sized items count as one) and checks that they fit in what remains, as
    /// [`WireReader::read_len`].
    #[inline]
    fn read_len(&mut self, min_item_len: usize) -> Result<usize, DecodeError> {
        let at = self.offset();
        let len = self.read_u64()?;
        match len.checked_mul(min_item_len.max(1) as u64) {
            Some(need) if need <= self.remaining() as u64 => Ok(len as usize),
            _ => Err(DecodeError::new(
                at,
                DecodeErrorKind::LengthTooLarge {
                    len,
                    remaining: self.remaining(),
                },
            )),
        }
    }
}

impl ByteSource for WireReader<'_> {
    #[inline(always)]
    fn offset(&self) -> usize {
        WireReader::offset(self)
    }

    #[inline(always)]
    fn remaining(&self) -> usize {
        WireReader::remaining(self)
    }

    #[inline(always)]
    fn read_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        self.take_array()
    }

    #[inline(always)]
    fn skip(&mut self, n: usize) -> Result<usize, DecodeError> {
        let at = WireReader::offset(self);
        self.take(n)?;
        Ok(at)
    }
}

/// A fixed-width scalar as read from the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// A bool (its byte was checked to be 0 or 1).
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
}

impl Scalar {
    /// The value as `f64` (a bool as 0 or 1; large integers rounded).
    #[inline]
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => f64::from(u8::from(b)),
            Scalar::U8(v) => f64::from(v),
            Scalar::U16(v) => f64::from(v),
            Scalar::U32(v) => f64::from(v),
            Scalar::U64(v) => v as f64,
            Scalar::U128(v) => v as f64,
            Scalar::I8(v) => f64::from(v),
            Scalar::I16(v) => f64::from(v),
            Scalar::I32(v) => f64::from(v),
            Scalar::I64(v) => v as f64,
            Scalar::I128(v) => v as f64,
            Scalar::F32(v) => f64::from(v),
            Scalar::F64(v) => v,
        }
    }
}

/// The error type of a [`Visit`]: built from the walk's [`DecodeError`]s, and told the
/// field it unwinds out of (a visitor whose error keeps no path ignores it).
pub trait WalkError: From<DecodeError> {
    /// Prefixes the error's field path with `name`.
    #[inline]
    fn in_field(self, name: &str) -> Self {
        let _ = name;
        self
    }
}

impl WalkError for DecodeError {
    #[inline]
    fn in_field(self, name: &str) -> DecodeError {
        DecodeError::in_field(self, name)
    }
}

/// What one reader of payloads makes of what [`walk`] reads.
///
/// The walk calls one method per value, children before their parent's `*_end`, so a
/// visitor that builds a tree builds it bottom up. Only `seq_item`, `field` and `map_entry`
/// have defaults (they drop the value).
pub trait Visit<'d, S: ByteSource + ?Sized> {
    /// What a value becomes.
    type Out;
    /// The visitor's error.
    type Error: WalkError;
    /// A sequence, array or tuple (or tuple variant payload) being built.
    type Seq;
    /// A struct (or struct variant payload) being built.
    type Record;
    /// A map being built.
    type Map;

    /// Whether the walk may move past fixed-size values in one skip instead of visiting
    /// them (for a visitor that only skips; bools are then not checked).
    const SKIPS_FIXED: bool = false;

    /// A scalar.
    fn scalar(&mut self, v: Scalar) -> Result<Self::Out, Self::Error>;

    /// A string of `len` bytes at `at` (not yet checked to be UTF-8).
    fn string(&mut self, src: &S, at: usize, len: usize) -> Result<Self::Out, Self::Error>;

    /// A byte buffer of `len` bytes at `at`.
    fn bytes(&mut self, src: &S, at: usize, len: usize) -> Result<Self::Out, Self::Error>;

    /// A sequence or array of `count` numbers of `dtype` at `at`, packed little-endian.
    fn packed(
        &mut self,
        src: &S,
        dtype: DType,
        at: usize,
        count: usize,
    ) -> Result<Self::Out, Self::Error>;

    /// A tensor of `shape` (its element count checked) whose elements are at `at`.
    fn tensor(
        &mut self,
        src: &S,
        dtype: DType,
        shape: &[u64],
        at: usize,
    ) -> Result<Self::Out, Self::Error>;

    /// An option, with its value if some.
    fn option(&mut self, value: Option<Self::Out>) -> Result<Self::Out, Self::Error>;

    /// Starts a sequence, array, tuple or tuple variant payload (`node` says which) of `len`
    /// items.
    fn seq_begin(&mut self, node: &Node<'d>, len: usize) -> Result<Self::Seq, Self::Error>;

    /// One item of a sequence.
    #[inline]
    fn seq_item(&mut self, seq: &mut Self::Seq, item: Self::Out) -> Result<(), Self::Error> {
        let _ = (seq, item);
        Ok(())
    }

    /// Ends a sequence.
    fn seq_end(&mut self, node: &Node<'d>, seq: Self::Seq) -> Result<Self::Out, Self::Error>;

    /// Starts a struct or struct variant payload (node `id`) of `len` fields.
    fn record_begin(
        &mut self,
        id: NodeId,
        node: &Node<'d>,
        len: usize,
    ) -> Result<Self::Record, Self::Error>;

    /// One field of a struct (`field` is its node: [`Node::name`]).
    #[inline]
    fn field(
        &mut self,
        record: &mut Self::Record,
        field: &Node<'d>,
        value: Self::Out,
    ) -> Result<(), Self::Error> {
        let _ = (record, field, value);
        Ok(())
    }

    /// Ends a struct.
    fn record_end(
        &mut self,
        id: NodeId,
        node: &Node<'d>,
        record: Self::Record,
    ) -> Result<Self::Out, Self::Error>;

    /// An enum's variant `index` (node `variant`), with its payload unless it is a unit
    /// variant.
    fn variant(
        &mut self,
        index: u32,
        variant: &Node<'d>,
        payload: Option<Self::Out>,
    ) -> Result<Self::Out, Self::Error>;

    /// Starts a map of `len` entries.
    fn map_begin(&mut self, len: usize) -> Result<Self::Map, Self::Error>;

    /// One entry of a map.
    #[inline]
    fn map_entry(
        &mut self,
        map: &mut Self::Map,
        key: Self::Out,
        value: Self::Out,
    ) -> Result<(), Self::Error> {
        let _ = (map, key, value);
        Ok(())
    }

    /// Ends a map.
    fn map_end(&mut self, map: Self::Map) -> Result<Self::Out, Self::Error>;
}

/// Walks one value of `plan`'s root type from `src` (which may hold more: see
/// [`WireReader::finish`] to check that it is all read), calling `visitor` for each value.
///
/// Bounds the number of values one walk may visit: a value that consumes input bytes is
/// paid for by them, but zero-sized values (`()`, empty structs) cost nothing, so a hostile
/// descriptor (`[[[(); 16]; 16]; …]`) could otherwise make a 100-byte payload visit billions
/// of values. Legitimate payloads visit at most about one value per byte per nesting level.
#[inline]
pub fn walk<'d, S, V>(
    plan: &LayoutPlan<'d>,
    src: &mut S,
    visitor: &mut V,
) -> Result<V::Out, V::Error>
where
    S: ByteSource + ?Sized,
    V: Visit<'d, S>,
{
    walk_node(plan, LayoutPlan::ROOT, src, visitor)
}

/// [`walk`] from node `id` of `plan` (a value of that node's type).
pub fn walk_node<'d, S, V>(
    plan: &LayoutPlan<'d>,
    id: NodeId,
    src: &mut S,
    visitor: &mut V,
) -> Result<V::Out, V::Error>
where
    S: ByteSource + ?Sized,
    V: Visit<'d, S>,
{
    let depth = plan.depth().min(MAX_DESC_DEPTH) as u64;
    let max = (depth + 1)
        .saturating_mul(src.remaining() as u64 + 1)
        .saturating_add(4096);
    let mut w = Walker {
        plan,
        src,
        v: visitor,
        left: max,
        max,
    };
    w.value(id)
}

/// Moves `src` past one value of node `id`'s type, checking its framing (length prefixes,
/// tags, variant indices, tensor shapes) but not its contents; fixed-size values are skipped
/// in one step.
pub fn skip<S: ByteSource + ?Sized>(
    plan: &LayoutPlan<'_>,
    id: NodeId,
    src: &mut S,
) -> Result<(), DecodeError> {
    walk_node(plan, id, src, &mut Skip)
}

/// The visitor of [`skip`].
struct Skip;

impl<'d, S: ByteSource + ?Sized> Visit<'d, S> for Skip {
    type Out = ();
    type Error = DecodeError;
    type Seq = ();
    type Record = ();
    type Map = ();
    const SKIPS_FIXED: bool = true;

    fn scalar(&mut self, _: Scalar) -> Result<(), DecodeError> {
        Ok(())
    }
    fn string(&mut self, _: &S, _: usize, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn bytes(&mut self, _: &S, _: usize, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn packed(&mut self, _: &S, _: DType, _: usize, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn tensor(&mut self, _: &S, _: DType, _: &[u64], _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn option(&mut self, _: Option<()>) -> Result<(), DecodeError> {
        Ok(())
    }
    fn seq_begin(&mut self, _: &Node<'d>, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn seq_end(&mut self, _: &Node<'d>, _: ()) -> Result<(), DecodeError> {
        Ok(())
    }
    fn record_begin(&mut self, _: NodeId, _: &Node<'d>, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn record_end(&mut self, _: NodeId, _: &Node<'d>, _: ()) -> Result<(), DecodeError> {
        Ok(())
    }
    fn variant(&mut self, _: u32, _: &Node<'d>, _: Option<()>) -> Result<(), DecodeError> {
        Ok(())
    }
    fn map_begin(&mut self, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn map_end(&mut self, _: ()) -> Result<(), DecodeError> {
        Ok(())
    }
}

/// One walk in progress: the plan, the source, the visitor and the value budget.
struct Walker<'p, 'd, S: ?Sized, V> {
    plan: &'p LayoutPlan<'d>,
    src: &'p mut S,
    v: &'p mut V,
    left: u64,
    max: u64,
}

impl<'p, 'd, S, V> Walker<'p, 'd, S, V>
where
    S: ByteSource + ?Sized,
    V: Visit<'d, S>,
{
    /// One value of node `id`: the budget and depth checks, then its body.
    #[inline]
    fn value(&mut self, id: NodeId) -> Result<V::Out, V::Error> {
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
                return self.v.scalar(Scalar::Bool(false));
            }
        }
        macro_rules! num {
            ($t:ty, $v:ident) => {
                Scalar::$v(<$t>::from_le_bytes(self.src.read_array()?))
            };
        }
        let scalar = match node.kind {
            Kind::Bool => {
                let at = self.src.offset();
                match self.src.read_u8()? {
                    0 => Scalar::Bool(false),
                    1 => Scalar::Bool(true),
                    byte => {
                        return Err(
                            DecodeError::new(at, DecodeErrorKind::InvalidBool { byte }).into()
                        );
                    }
                }
            }
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
            Kind::Str => {
                let n = self.src.read_len(1)?;
                let at = self.src.skip(n)?;
                return self.v.string(self.src, at, n);
            }
            Kind::Bytes => {
                let n = self.src.read_len(1)?;
                let at = self.src.skip(n)?;
                return self.v.bytes(self.src, at, n);
            }
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
            Kind::TooDeep => {
                return Err(self.err(DecodeErrorKind::TooDeep {
                    max: MAX_DESC_DEPTH,
                }));
            }
        };
        self.v.scalar(scalar)
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
        if let Kind::Num(dtype) = plan.node(elem_id).kind {
            let at = self.src.skip(n.saturating_mul(dtype.size_bytes()))?;
            return self.v.packed(self.src, dtype, at, n);
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
            self.v.field(&mut rec, field, value)?;
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
        self.v.variant(index, variant, payload)
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
fn read_shape<S: ByteSource + ?Sized>(
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
