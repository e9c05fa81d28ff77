//! Flattening payloads into table columns (CSV, Parquet, Arrow for Python's `to_pandas`).
//!
//! A table's columns come from the schema's descriptor, not from the values, so every row of a
//! schema has the same columns. Their names are the dotted paths of
//! [`crate::fields`] (the walk of [`FieldNode::tree`]); this module chooses what
//! each holds and formats it (the Arrow types: [`arrow`](super::arrow)):
//!
//! | descriptor | columns |
//! |---|---|
//! | (every table) | [`FIXED`]: `t_nanos`, `producer_id`, `producer`, `pid`, `level`, `seq`, `version` first |
//! | struct | one group per field, named `parent.field` (`obs.pos.x`); a root that is not a struct is one column `value` |
//! | tuple | one group per element, `parent.0`, `parent.1`, … |
//! | bool, integers, floats, string | one typed column |
//! | `u128`, `i128` | text (decimal, exact) |
//! | bytes | binary (CSV: a JSON array of numbers) |
//! | option | the inner type's columns, empty when none |
//! | enum | a text column with the variant's name, then each variant's fields flattened as `enum.Variant.field` (`enum.Variant` for a newtype variant, `enum.Variant.0`, … for tuple variants), empty unless that variant is set |
//! | fixed array of up to [`MAX_ELEMENTWISE`] numbers | CSV: a column per element, `name.0`, `name.1`, … (`position.0…2`); Arrow: a list of its dtype |
//! | sequence or longer array of numbers | a list of its dtype (CSV: a JSON array) |
//! | tensor | `name`: its elements flat, row-major, as a list of its dtype; `name.shape`: its dimensions as a list of integers (CSV: JSON arrays) |
//! | anything else (sequences of other types, maps) | text: the JSON of the value (the same JSON as `echo`) |
//!
//! A payload column whose name is taken (a field called `seq` or `producer_id`, or a field name
//! with a dot in it) is called `payload.<name>` (then `payload.<name>~2`, `~3`, …); its
//! [`Column::path`] keeps the field's own path.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::fields::{FieldNode, MAX_ELEMENTWISE, Parts, TENSOR_SHAPE, join};
use snapbus_schemas::{DType, Packed, SchemaDescriptor, TypeDesc, Value, walk};

/// What a column holds (and so its Arrow type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The record's time (CLOCK_REALTIME, nanoseconds since the Unix epoch).
    Time,
    /// `bool`.
    Bool,
    /// A number of one dtype (its Arrow type: [`DType::arrow`]).
    Num(DType),
    /// Text: strings, enum variant names, 128-bit integers in decimal.
    Text,
    /// A byte buffer.
    Bytes,
    /// Numbers of one dtype: a packed sequence or array.
    List(DType),
    /// A tensor's elements, flat and row-major; its shape is the next column ([`Kind::Shape`]).
    Tensor(DType),
    /// A tensor's shape, as a list of integers.
    Shape,
    /// Anything else, as its JSON text.
    Json,
}

/// One column of a table.
#[derive(Debug, Clone)]
pub struct Column {
    /// Its name (the dotted path, or `payload.<path>` when that name is taken).
    pub name: String,
    /// The dotted path of the field it holds (`""` for the fixed columns and for a root that
    /// is not a struct).
    pub path: String,
    /// What it holds.
    pub kind: Kind,
}

/// One cell of a row, borrowing from the decoded value.
#[derive(Debug)]
pub enum Cell<'a> {
    /// Empty (an option that is none, another enum variant).
    Null,
    /// A fixed column's integer.
    U64(u64),
    /// A fixed column's text.
    Str(&'a str),
    /// A leaf of the payload (a scalar, a string, bytes, or a value rendered as JSON).
    Value(&'a Value<'a>),
    /// Numbers, little-endian, of one dtype.
    Numbers(DType, &'a [u8]),
    /// One number of a packed array, little-endian.
    Number(DType, &'a [u8]),
    /// A tensor's shape.
    Shape(&'a [u64]),
}

impl Cell<'_> {
    /// The cell as CSV text.
    pub fn to_text(&self) -> Cow<'_, str> {
        match self {
            Cell::Null => Cow::Borrowed(""),
            Cell::U64(v) => Cow::Owned(v.to_string()),
            Cell::Str(s) => Cow::Borrowed(s),
            Cell::Numbers(dtype, bytes) => Cow::Owned(
                Value::Packed(Packed {
                    dtype: *dtype,
                    bytes: Cow::Borrowed(bytes),
                })
                .to_json()
                .to_string(),
            ),
            Cell::Number(dtype, bytes) => {
                let one = Value::Packed(Packed {
                    dtype: *dtype,
                    bytes: Cow::Borrowed(bytes),
                })
                .to_json();
                Cow::Owned(one.get(0).map_or_else(String::new, |v| v.to_string()))
            }
            Cell::Shape(dims) => Cow::Owned(serde_json::Value::from(dims.to_vec()).to_string()),
            Cell::Value(v) => value_text(v),
        }
    }
}

/// A leaf value as CSV text: numbers in their shortest round-trip form (`0.1`, `1e-7`, `NaN`,
/// `inf`), booleans as `true`/`false`, strings as they are, the rest as JSON.
fn value_text<'a>(v: &'a Value<'a>) -> Cow<'a, str> {
    Cow::Owned(match v {
        Value::Bool(b) => b.to_string(),
        Value::U8(x) => x.to_string(),
        Value::U16(x) => x.to_string(),
        Value::U32(x) => x.to_string(),
        Value::U64(x) => x.to_string(),
        Value::U128(x) => x.to_string(),
        Value::I8(x) => x.to_string(),
        Value::I16(x) => x.to_string(),
        Value::I32(x) => x.to_string(),
        Value::I64(x) => x.to_string(),
        Value::I128(x) => x.to_string(),
        Value::F32(x) => format!("{x:?}"),
        Value::F64(x) => format!("{x:?}"),
        Value::Str(s) => return Cow::Borrowed(s.as_ref()),
        Value::Variant { name, .. } => return Cow::Borrowed(name.as_ref()),
        other => other.to_json().to_string(),
    })
}

/// How a part of the descriptor maps onto columns.
#[derive(Debug)]
enum Node {
    /// The value itself goes into this column.
    Leaf(usize),
    /// A tensor: elements and shape.
    Tensor { data: usize, shape: usize },
    /// A fixed array of numbers, a column per element from `first` on.
    Elements { first: usize, len: usize },
    /// Struct fields or tuple elements, in order.
    Fields(Vec<Node>),
    /// An option: the inner value's columns.
    Option(Box<Node>),
    /// An enum: the variant name's column, and each variant's payload.
    Enum { tag: usize, variants: Vec<Node> },
}

/// The fixed columns every table starts with: the record's time, its producer (bus id,
/// name, pid), its level (`TRACE` … `ERROR`), the low 32 bits of its lane sequence number and
/// its schema's version.
pub const FIXED: [(&str, Kind); 7] = [
    ("t_nanos", Kind::Time),
    ("producer_id", Kind::Num(DType::U64)),
    ("producer", Kind::Text),
    ("pid", Kind::Num(DType::U32)),
    ("level", Kind::Text),
    ("seq", Kind::Num(DType::U32)),
    ("version", Kind::Num(DType::U32)),
];

/// The columns of one schema and how its values fill them.
#[derive(Debug)]
pub struct Plan {
    columns: Vec<Column>,
    root: Node,
}

/// Builds the columns while walking a descriptor.
struct Builder {
    columns: Vec<Column>,
    taken: HashSet<String>,
    /// Fixed arrays of numbers get a column per element (CSV).
    split_arrays: bool,
}

impl Builder {
    fn column(&mut self, path: &str, kind: Kind) -> usize {
        self.named_column(path, path, kind)
    }

    fn named_column(&mut self, path: &str, field: &str, kind: Kind) -> usize {
        let base = if path.is_empty() { "value" } else { path };
        let mut name = base.to_owned();
        if self.taken.contains(&name) {
            name = format!("payload.{base}");
        }
        let mut n = 1;
        while self.taken.contains(&name) {
            n += 1;
            name = format!("payload.{base}~{n}");
        }
        self.taken.insert(name.clone());
        self.columns.push(Column {
            name,
            path: field.to_owned(),
            kind,
        });
        self.columns.len() - 1
    }

    /// The columns of `n` (a node of the descriptor's field tree, which names them), in tree
    /// order.
    fn node(&mut self, n: &FieldNode<'_>) -> Node {
        match &n.parts {
            Parts::Struct(parts) | Parts::Tuple(parts) => self.fields(parts),
            Parts::Option(some) => Node::Option(Box::new(self.node(some))),
            Parts::Enum(variants) => {
                let tag = self.column(&n.path, Kind::Text);
                let variants = variants.iter().map(|parts| self.fields(parts)).collect();
                Node::Enum { tag, variants }
            }
            Parts::Leaf => match walk::Kind::of(n.desc) {
                walk::Kind::Tensor(dtype) => {
                    let data = self.column(&n.path, Kind::Tensor(dtype));
                    let shape = self.column(&join(&n.path, TENSOR_SHAPE), Kind::Shape);
                    Node::Tensor { data, shape }
                }
                walk::Kind::Array { len } if self.split_arrays && len <= MAX_ELEMENTWISE => {
                    match n.desc.packed_dtype() {
                        Some(dtype) => {
                            let first = self.columns.len();
                            for k in 0..len {
                                self.column(&join(&n.path, &k.to_string()), Kind::Num(dtype));
                            }
                            Node::Elements {
                                first,
                                len: usize::try_from(len).unwrap_or(0),
                            }
                        }
                        None => Node::Leaf(self.column(&n.path, Kind::of_leaf(n.desc))),
                    }
                }
                _ => Node::Leaf(self.column(&n.path, Kind::of_leaf(n.desc))),
            },
        }
    }

    fn fields(&mut self, parts: &[FieldNode<'_>]) -> Node {
        Node::Fields(parts.iter().map(|p| self.node(p)).collect())
    }
}

impl Kind {
    /// The kind of a leaf of the field tree (not a tensor: it has two columns).
    fn of_leaf(desc: &TypeDesc) -> Kind {
        match walk::Kind::of(desc) {
            walk::Kind::Bool => Kind::Bool,
            walk::Kind::Num(d) => Kind::Num(d),
            walk::Kind::U128 | walk::Kind::I128 | walk::Kind::Str => Kind::Text,
            walk::Kind::Bytes => Kind::Bytes,
            _ if desc.packed_dtype().is_some() => {
                Kind::List(desc.packed_dtype().unwrap_or(DType::F64))
            }
            // Other sequences, arrays and maps (structs, tuples, options, enums and tensors are
            // not leaves).
            _ => Kind::Json,
        }
    }
}

impl Plan {
    /// The columns of `schema`: the [`FIXED`] ones, then the payload's; with `split_arrays`,
    /// a column per element of each fixed array of up to [`MAX_ELEMENTWISE`] numbers.
    pub fn new(schema: &SchemaDescriptor, split_arrays: bool) -> Plan {
        let mut b = Builder {
            columns: Vec::new(),
            taken: HashSet::new(),
            split_arrays,
        };
        for (name, kind) in FIXED {
            b.named_column(name, "", kind);
        }
        let root = b.node(&FieldNode::tree(schema.root()));
        Plan {
            columns: b.columns,
            root,
        }
    }

    /// All columns, in order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// One row: the fixed columns, then `value` (decoded with this plan's schema) flattened.
    pub fn row<'a>(&self, fixed: &'a Fixed<'a>, value: &'a Value<'a>) -> Vec<Cell<'a>> {
        let mut cells: Vec<Cell<'a>> = Vec::with_capacity(self.columns.len());
        cells.extend([
            Cell::U64(fixed.t_nanos),
            Cell::U64(fixed.producer_id),
            Cell::Str(fixed.producer),
            Cell::U64(u64::from(fixed.pid)),
            Cell::Str(fixed.level),
            Cell::U64(u64::from(fixed.seq)),
            Cell::U64(u64::from(fixed.version)),
        ]);
        cells.resize_with(self.columns.len(), || Cell::Null);
        fill(&self.root, value, &mut cells);
        cells
    }
}

/// The values of the fixed columns.
#[derive(Debug)]
pub struct Fixed<'a> {
    /// CLOCK_REALTIME of the record, nanoseconds.
    pub t_nanos: u64,
    /// The producer's id on the recorded bus.
    pub producer_id: u64,
    /// The producer's name.
    pub producer: &'a str,
    /// The producer's pid.
    pub pid: u32,
    /// The record's level, by name (`INFO`).
    pub level: &'a str,
    /// The low 32 bits of the record's lane sequence number.
    pub seq: u32,
    /// The schema's version.
    pub version: u32,
}

#[cfg(feature = "recording")]
impl<'a> Fixed<'a> {
    /// The fixed columns of a recorded record.
    pub fn of_message(m: &'a crate::recording::Message) -> Fixed<'a> {
        let c = &m.channel;
        Fixed {
            t_nanos: m.t_nanos,
            producer_id: c.producer_id,
            producer: &c.producer,
            pid: c.pid,
            level: c.level.name(),
            seq: m.sequence,
            version: c.schema.version(),
        }
    }
}

/// Puts `value` into the cells of `node`. A value that does not have the node's shape (it was
/// decoded with the same descriptor, so it always has) leaves its cells empty.
fn fill<'a>(node: &Node, value: &'a Value<'a>, cells: &mut [Cell<'a>]) {
    let mut set = |i: usize, cell: Cell<'a>| {
        if let Some(c) = cells.get_mut(i) {
            *c = cell;
        }
    };
    match (node, value) {
        (Node::Leaf(i), Value::Packed(p)) => set(*i, Cell::Numbers(p.dtype, p.bytes.as_ref())),
        (Node::Leaf(i), v) => set(*i, Cell::Value(v)),
        (Node::Elements { first, len }, Value::Packed(p)) => {
            let size = p.dtype.size_bytes();
            for (k, one) in p.bytes.chunks_exact(size).take(*len).enumerate() {
                set(first + k, Cell::Number(p.dtype, one));
            }
        }
        (Node::Elements { first, len }, Value::Seq(items)) => {
            for (k, v) in items.iter().take(*len).enumerate() {
                set(first + k, Cell::Value(v));
            }
        }
        (Node::Tensor { data, shape }, Value::Tensor(t)) => {
            set(*data, Cell::Numbers(t.dtype, t.data.as_ref()));
            set(*shape, Cell::Shape(&t.shape));
        }
        (Node::Fields(nodes), Value::Struct(fields)) => {
            for (n, (_, v)) in nodes.iter().zip(fields) {
                fill(n, v, cells);
            }
        }
        (Node::Fields(nodes), Value::Seq(items)) => {
            for (n, v) in nodes.iter().zip(items) {
                fill(n, v, cells);
            }
        }
        (Node::Option(inner), Value::Option(Some(v))) => fill(inner, v, cells),
        (
            Node::Enum { tag, variants },
            Value::Variant {
                index, value: v, ..
            },
        ) => {
            set(*tag, Cell::Value(value));
            if let Some(n) = variants.get(*index as usize) {
                fill(n, v, cells);
            }
        }
        _ => {}
    }
}
