//! The layout plan: a descriptor compiled once into flat nodes with their sizes.

use std::borrow::Cow;

use crate::desc::{MAX_DESC_DEPTH, TypeDesc, Variant, VariantKind};
use crate::dtype::DType;

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
    /// A self-describing value ([`TypeDesc::Dynamic`]).
    Dynamic,
    /// A node nested [`MAX_DESC_DEPTH`] deep: walking it is an error.
    TooDeep,
}

impl Kind {
    /// The kind of a node of type `desc` (never [`Kind::Variant`] or [`Kind::TooDeep`]).
    pub fn of(desc: &TypeDesc) -> Kind {
        leaf_node(desc, Cow::Borrowed(""), 0).kind
    }

    /// Whether values of this kind are a number or a bool: the leaves the field extractors
    /// summarize.
    pub fn is_numeric(self) -> bool {
        matches!(self, Kind::Bool | Kind::Num(_))
    }
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
    pub(super) kind: Kind,
    pub(super) name: Cow<'d, str>,
    pub(super) fixed: Option<usize>,
    pub(super) min_len: u64,
    pub(super) offset: Option<usize>,
    pub(super) children: (NodeId, NodeId),
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

/// A [`TypeDesc`] compiled once: a flat tree of [`Node`]s (the root first, the children of each
/// node next to each other), with fixed sizes, minimum lengths and fixed offsets worked out.
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
        let mut nodes = Vec::with_capacity(count(Src::Desc(desc), 0));
        nodes.push(child_node(Src::Desc(desc), "", 0));
        let depth = fill(&mut nodes, 0, Src::Desc(desc), 0);
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

pub(super) fn range((a, b): (NodeId, NodeId)) -> std::ops::Range<NodeId> {
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
            TypeDesc::Dynamic => Kind::Dynamic,
            d => d.as_dtype().map_or(Kind::Bool, Kind::Num),
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

/// Calls `f` with each child of a node made from `src` at nesting `depth`: its source, name
/// and nesting.
#[inline]
fn each_child<'d>(src: Src<'d>, depth: usize, mut f: impl FnMut(Src<'d>, &'d str, usize)) {
    let mut fields = |fields: &'d [crate::desc::Field]| {
        for fl in fields {
            f(Src::Desc(&fl.ty), &fl.name, depth + 1);
        }
    };
    match src {
        Src::Desc(desc) => match desc {
            TypeDesc::Option { some: t }
            | TypeDesc::Seq { elem: t }
            | TypeDesc::Array { elem: t, .. } => f(Src::Desc(t), "", depth + 1),
            TypeDesc::Tuple { elems } => elems.iter().for_each(|e| f(Src::Desc(e), "", depth + 1)),
            TypeDesc::Struct { fields: fs } => fields(fs),
            TypeDesc::Map { key, value } => {
                f(Src::Desc(key), "", depth + 1);
                f(Src::Desc(value), "", depth + 1);
            }
            // A variant's payload nests like the enum's own children.
            TypeDesc::Enum { variants } => variants
                .iter()
                .for_each(|v| f(Src::Variant(v), &v.name, depth)),
            _ => {}
        },
        Src::Variant(v) => match &v.kind {
            VariantKind::Unit => {}
            VariantKind::Tuple { elems } => {
                elems.iter().for_each(|e| f(Src::Desc(e), "", depth + 1))
            }
            VariantKind::Struct { fields: fs } => fields(fs),
        },
    }
}

/// The node of `src` named `name` at nesting `depth`, children and sizes not yet known.
fn child_node<'d>(src: Src<'d>, name: &'d str, depth: usize) -> Node<'d> {
    match src {
        Src::Desc(desc) => leaf_node(desc, Cow::Borrowed(name), depth),
        Src::Variant(v) => Node {
            kind: Kind::Variant(match v.kind {
                VariantKind::Unit => VariantShape::Unit,
                VariantKind::Tuple { .. } => VariantShape::Tuple,
                VariantKind::Struct { .. } => VariantShape::Struct,
            }),
            name: Cow::Borrowed(name),
            fixed: None,
            min_len: 0,
            offset: None,
            children: (0, 0),
        },
    }
}

/// The number of nodes `src` at nesting `depth` compiles to.
fn count(src: Src<'_>, depth: usize) -> usize {
    if matches!(src, Src::Desc(_)) && depth >= MAX_DESC_DEPTH {
        return 1;
    }
    let mut n = 1;
    each_child(src, depth, |c, _, d| n += count(c, d));
    n
}

/// Fills in node `i` (made from `src` at nesting `depth`, already pushed): appends its
/// children next to each other, fills each in turn, then works out its sizes and its
/// children's offsets. Returns the nesting depth of the subtree.
fn fill<'d>(nodes: &mut Vec<Node<'d>>, i: usize, src: Src<'d>, depth: usize) -> usize {
    let mut max = depth + 1;
    if nodes[i].kind != Kind::TooDeep {
        let first = nodes.len();
        each_child(src, depth, |c, name, d| nodes.push(child_node(c, name, d)));
        nodes[i].children = (first as NodeId, nodes.len() as NodeId);
        let mut k = first;
        each_child(src, depth, |c, _, d| {
            max = max.max(fill(nodes, k, c, d));
            k += 1;
        });
    }
    let (fixed, min_len) = sizes(nodes, i, src);
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
    max
}

/// The fixed size and minimum length of node `i` (its children already done).
fn sizes(nodes: &[Node<'_>], i: usize, src: Src<'_>) -> (Option<usize>, u64) {
    let n = &nodes[i];
    let kids = || range(n.children).map(|c| &nodes[c as usize]);
    let sum_min = || kids().fold(0u64, |a, c| a.saturating_add(c.min_len));
    // `None` if a child's size varies or the sum does not fit a `usize` (a hostile descriptor).
    let sum_fixed = || kids().try_fold(0usize, |a, c| a.checked_add(c.fixed?));
    match n.kind {
        Kind::Bool => (Some(1), 1),
        Kind::Num(d) => (Some(d.size_bytes()), d.size_bytes() as u64),
        Kind::U128 | Kind::I128 => (Some(16), 16),
        Kind::Str | Kind::Bytes | Kind::Seq | Kind::Map => (None, 8),
        Kind::Option | Kind::Dynamic => (None, 1),
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
