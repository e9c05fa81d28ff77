//! A descriptor as a tree of dotted paths: the one walk that names fields.

use snapbus_schemas::walk::Kind;
use snapbus_schemas::{TypeDesc, VariantKind};

/// The name of a tensor's shape next to the tensor (`obs.shape` for tensor `obs`).
pub const TENSOR_SHAPE: &str = "shape";

/// The per-record reductions of a long array, a sequence or a tensor, in order
/// (`observation.mean`, `observation.min`, `observation.max`).
pub const REDUCTIONS: [&str; 3] = ["mean", "min", "max"];

/// `path.name`, or `name` at the root (`path` empty).
pub fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// One node of a descriptor's field tree: a value, its dotted path and its parts.
#[derive(Debug, Clone)]
pub struct FieldNode<'d> {
    /// The dotted path from the root (`""` for the root itself; `obs.pos`, `pair.0`,
    /// `mode.Jump.height`).
    pub path: String,
    /// The value's type.
    pub desc: &'d TypeDesc,
    /// What the type is ([`Kind::of`] the descriptor): what the users of the tree match on.
    pub kind: Kind,
    /// Its parts that have paths of their own.
    pub parts: Parts<'d>,
}

/// The parts of a [`FieldNode`] that have paths of their own.
#[derive(Debug, Clone)]
pub enum Parts<'d> {
    /// None: scalars, strings, bytes, sequences, arrays, maps and tensors are leaves.
    Leaf,
    /// A struct's fields, in order, at `path.field`.
    Struct(Vec<FieldNode<'d>>),
    /// A tuple's elements, in order, at `path.0`, `path.1`, …
    Tuple(Vec<FieldNode<'d>>),
    /// An option's value, at the option's own path.
    Option(Box<FieldNode<'d>>),
    /// Per variant, in order, its payload's parts: none for a unit variant; a newtype
    /// variant's value at `path.Variant`; tuple elements at `path.Variant.0`, …; struct
    /// fields at `path.Variant.field`.
    Enum(Vec<Vec<FieldNode<'d>>>),
}

impl<'d> FieldNode<'d> {
    /// The tree of `root` (a schema's root type).
    pub fn tree(root: &'d TypeDesc) -> FieldNode<'d> {
        FieldNode::at(root, String::new())
    }

    /// The tree of `desc` at `path`.
    fn at(desc: &'d TypeDesc, path: String) -> FieldNode<'d> {
        let parts = match desc {
            TypeDesc::Struct { fields } => Parts::Struct(
                fields
                    .iter()
                    .map(|f| FieldNode::at(&f.ty, join(&path, &f.name)))
                    .collect(),
            ),
            TypeDesc::Tuple { elems } => Parts::Tuple(elems_at(elems, &path)),
            TypeDesc::Option { some } => Parts::Option(Box::new(FieldNode::at(some, path.clone()))),
            TypeDesc::Enum { variants } => Parts::Enum(
                variants
                    .iter()
                    .map(|v| {
                        let at = join(&path, &v.name);
                        match &v.kind {
                            VariantKind::Unit => Vec::new(),
                            VariantKind::Tuple { elems } if elems.len() == 1 => {
                                vec![FieldNode::at(&elems[0], at)]
                            }
                            VariantKind::Tuple { elems } => elems_at(elems, &at),
                            VariantKind::Struct { fields } => fields
                                .iter()
                                .map(|f| FieldNode::at(&f.ty, join(&at, &f.name)))
                                .collect(),
                        }
                    })
                    .collect(),
            ),
            _ => Parts::Leaf,
        };
        FieldNode {
            path,
            desc,
            kind: Kind::of(desc),
            parts,
        }
    }
}

fn elems_at<'d>(elems: &'d [TypeDesc], path: &str) -> Vec<FieldNode<'d>> {
    elems
        .iter()
        .enumerate()
        .map(|(i, e)| FieldNode::at(e, join(path, &i.to_string())))
        .collect()
}

/// The dotted paths of the tensor fields of `root` reachable through structs only (the ones
/// [`Value::path`](snapbus_schemas::Value::path) reaches), in order; `""` if the root is a
/// tensor.
pub fn tensor_paths(root: &TypeDesc) -> Vec<String> {
    fn walk(n: &FieldNode<'_>, out: &mut Vec<String>) {
        match &n.parts {
            Parts::Leaf if matches!(n.kind, Kind::Tensor(_)) => out.push(n.path.clone()),
            Parts::Struct(fields) => fields.iter().for_each(|f| walk(f, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&FieldNode::tree(root), &mut out);
    out
}
