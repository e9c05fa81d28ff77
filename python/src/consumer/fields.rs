//! `FieldPlan`: the field names of [`snapbus_consumers::fields`], for Python, so pandas
//! columns, rerun entity paths, export columns and metric names come from one rule.
//!
//! The rule (the walk of [`FieldNode::tree`]): a field's name is its dotted path from the
//! root; struct fields by name (`pose.x`), tuple elements by index (`pair.0`), an option's
//! value at the option's own path, an enum's variant name at the enum's path and its payload
//! under the variant (`mode.Jump.height`). What is a leaf of that tree (scalars, strings,
//! bytes, enums, sequences, arrays, maps, tensors) is one column; sinks that split a leaf name
//! its parts below it: a short array's elements `position.0`, a sequence's or tensor's
//! reductions `observation.mean` (metrics), a tensor's shape `observation.shape` (export).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};
use snapbus_bus::schemas::walk::{Kind, LayoutPlan};
use snapbus_bus::schemas::{SchemaDescriptor, TypeDesc};
use snapbus_consumers::fields::{FieldNode, MAX_ELEMENTWISE, Parts, Plan};

use super::event::Schema;

/// One leaf: its dotted path, its path's parts, its element type, its shape.
type Leaf = (String, Vec<String>, String, Option<Vec<u64>>);

/// A leaf as `leaves()` gives it: `(dotted path, dtype, shape)`.
type PyLeaf<'py> = (String, String, Option<Bound<'py, PyTuple>>);

/// The fields of a schema, named by the one rule (see the module docs).
#[pyclass(frozen, module = "snapbus._snapbus", name = "FieldPlan")]
pub(crate) struct FieldPlan {
    leaves: Vec<Leaf>,
    numeric: Vec<String>,
}

#[pymethods]
impl FieldPlan {
    /// The plan of `schema`: an event's `Schema`, an event dataclass, or a descriptor's JSON
    /// (`snapbus schemas --json`, or `json.dumps(snapbus.schema_of(cls))`).
    #[new]
    fn new(schema: &Bound<'_, PyAny>) -> PyResult<FieldPlan> {
        if let Ok(s) = schema.cast::<Schema>() {
            return Ok(FieldPlan::of(s.get().desc.root()));
        }
        let json = descriptor_json(schema)?;
        let desc: SchemaDescriptor = serde_json::from_str(&json)
            .map_err(|e| PyTypeError::new_err(format!("not a schema descriptor: {e}")))?;
        Ok(FieldPlan::of(desc.root()))
    }

    /// The leaves of the field tree, in payload order: `(dotted path, dtype, shape)`. `dtype`
    /// is a number's (`"f64"`, `"u8"`, … and `"bool"`, `"u128"`, `"i128"`) for numeric
    /// leaves, else `"string"`, `"bytes"`, `"enum"` (the variant's name), `"seq"`, `"array"`
    /// or `"map"`; `shape` is `()` for one value, `(n,)` for a fixed array, `None` where the
    /// count travels with each record (sequences, tensors, maps).
    fn leaves<'py>(&self, py: Python<'py>) -> PyResult<Vec<PyLeaf<'py>>> {
        self.leaves
            .iter()
            .map(|(path, _, dtype, shape)| {
                let shape = shape.as_ref().map(|s| PyTuple::new(py, s)).transpose()?;
                Ok((path.clone(), dtype.clone(), shape))
            })
            .collect()
    }

    /// The parts of each leaf's path (field names may hold dots), in the order of `leaves()`.
    fn parts(&self) -> Vec<Vec<String>> {
        self.leaves.iter().map(|l| l.1.clone()).collect()
    }

    /// The numeric leaves as the metrics sinks (Prometheus, OTLP, the aggregator, the plotter)
    /// name them: short arrays element by element (`position.0`), longer ones, sequences and
    /// tensors by their reductions (`observation.mean`).
    fn numeric(&self) -> Vec<String> {
        self.numeric.clone()
    }

    /// The most elements of a fixed array named one by one (`position.0` …); longer arrays
    /// are reduced.
    #[classattr]
    const MAX_ELEMENTWISE: u64 = MAX_ELEMENTWISE;
}

impl FieldPlan {
    fn of(root: &TypeDesc) -> FieldPlan {
        let mut leaves = Vec::new();
        walk(&FieldNode::tree(root), &mut Vec::new(), &mut leaves);
        FieldPlan {
            leaves,
            numeric: Plan::numeric(root).leaves().to_vec(),
        }
    }
}

/// The descriptor's JSON of an event dataclass (the one it is emitted with, as
/// `snapbus.schema_of` gives it), or `schema` itself, a JSON string.
fn descriptor_json(schema: &Bound<'_, PyAny>) -> PyResult<String> {
    if schema.is_instance_of::<PyType>() {
        let (json, _): (String, u64) = schema
            .py()
            .import("snapbus._snapbus")?
            .getattr("_schema_json")?
            .call1((schema,))?
            .extract()?;
        return Ok(json);
    }
    schema.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "FieldPlan takes a Schema, an event dataclass or a descriptor's JSON, not {}",
            schema
                .get_type()
                .qualname()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })
}

/// Appends the leaves under `n` (whose path's parts are `parts`).
fn walk(n: &FieldNode<'_>, parts: &mut Vec<String>, out: &mut Vec<Leaf>) {
    match &n.parts {
        Parts::Struct(children) | Parts::Tuple(children) => {
            for c in children {
                child(n, c, parts, out);
            }
        }
        Parts::Option(some) => walk(some, parts, out),
        Parts::Enum(variants) => {
            out.push(leaf(n, parts, "enum".into(), Some(Vec::new())));
            for c in variants.iter().flatten() {
                child(n, c, parts, out);
            }
        }
        Parts::Leaf => {
            let (dtype, shape) = kind(n.desc);
            out.push(leaf(n, parts, dtype, shape));
        }
    }
}

/// Walks `c`, a part of `n`, with the parts of its path below `n`'s.
fn child(n: &FieldNode<'_>, c: &FieldNode<'_>, parts: &mut Vec<String>, out: &mut Vec<Leaf>) {
    let below = c
        .path
        .get(n.path.len()..)
        .map(|s| s.strip_prefix('.').unwrap_or(s))
        .unwrap_or_default();
    // An enum's payload is at `enum.Variant` (a newtype) or `enum.Variant.part`: two parts.
    let added: Vec<&str> = match (&n.parts, below.split_once('.')) {
        (Parts::Enum(_), Some((variant, rest))) => vec![variant, rest],
        _ => vec![below],
    };
    let depth = parts.len();
    parts.extend(added.iter().map(|s| (*s).to_owned()));
    walk(c, parts, out);
    parts.truncate(depth);
}

fn leaf(n: &FieldNode<'_>, parts: &[String], dtype: String, shape: Option<Vec<u64>>) -> Leaf {
    (n.path.clone(), parts.to_vec(), dtype, shape)
}

/// The dtype and shape of a leaf's descriptor.
fn kind(desc: &TypeDesc) -> (String, Option<Vec<u64>>) {
    let plan = LayoutPlan::compile(desc);
    let root = LayoutPlan::ROOT;
    // The element dtype of a sequence or an array of numbers.
    let numbers = |or: &str| {
        plan.children(root)
            .find_map(|c| plan.node(c).dtype())
            .map_or_else(|| or.to_owned(), |d| d.name().to_owned())
    };
    let one = Some(Vec::new());
    match plan.node(root).kind() {
        Kind::Num(d) => (d.name().into(), one),
        Kind::Bool => ("bool".into(), one),
        Kind::U128 => ("u128".into(), one),
        Kind::I128 => ("i128".into(), one),
        Kind::Str => ("string".into(), one),
        Kind::Bytes => ("bytes".into(), one),
        Kind::Array { len } => (numbers("array"), Some(vec![len])),
        Kind::Seq => (numbers("seq"), None),
        Kind::Tensor(d) => (d.name().into(), None),
        Kind::Map => ("map".into(), None),
        // Structs, tuples, options and enums have parts (FieldNode::tree).
        other => (format!("{other:?}").to_lowercase(), None),
    }
}
