//! The compiled plan: a descriptor turned once into a short list of operations.

use snapbus_bus::subscriber::Glob;
use snapbus_schemas::walk::{self, Kind, LayoutPlan};
use snapbus_schemas::{DType, TypeDesc};

use super::dynamic::Leaves;
#[cfg(doc)]
use super::key::decode_group;
use super::key::{KeyType, KeyValue, encode_str, reserve_str};
use super::read::{Cursor, Malformed, Scalar, Source, tensor_count};
use super::tree::{FieldNode, Parts, REDUCTIONS, join};

/// Fixed-size numeric arrays up to this length are extracted element by element
/// (`position.0`, `position.1`, …); longer ones, sequences and tensors by their mean, minimum
/// and maximum per record ([`REDUCTIONS`]).
pub const MAX_ELEMENTWISE: u64 = 16;

/// One operation of a plan; the cursor moves over the payload as the operations run.
#[derive(Debug, Clone)]
enum Op {
    /// Skip this many bytes.
    Skip(usize),
    /// Skip one value of this (variable-size) type, by the walk of its layout.
    SkipDyn(Box<LayoutPlan<'static>>),
    /// A numeric scalar (or a bool, as 0/1) summarized as leaf `leaf`.
    Num { scalar: Scalar, leaf: usize },
    /// An optional numeric scalar (a tag, then the value if some), summarized as leaf `leaf`
    /// when present.
    OptNum { scalar: Scalar, leaf: usize },
    /// `count` numeric elements (`None`: a `u64` count first) summarized per record by their
    /// mean, minimum and maximum as leaves `leaf`, `leaf + 1`, `leaf + 2`.
    Packed {
        dtype: DType,
        count: Option<u64>,
        leaf: usize,
    },
    /// A tensor (rank, dims, count, elements) summarized like [`Op::Packed`].
    Tensor { dtype: DType, leaf: usize },
    /// A dynamic value whose numeric leaves are found by walking it (see [`super::dynamic`]),
    /// under `path`.
    Dynamic {
        path: String,
        layout: Box<LayoutPlan<'static>>,
    },
    /// A scalar key (a group-by field or the window field) copied into key slot `slot`.
    Key { scalar: Scalar, slot: usize },
    /// A string key.
    KeyStr { slot: usize },
    /// An enum: its variant's name is key slot `slot` (if any), its payload is skipped (the
    /// variants are the children of the layout's root).
    Enum {
        slot: Option<usize>,
        layout: Box<LayoutPlan<'static>>,
    },
}

/// A schema's descriptor compiled into extraction operations (see the [module docs](super)).
#[derive(Debug, Clone)]
pub struct Plan {
    ops: Vec<Op>,
    /// Summarized leaves, by dotted name (`reward`, `position.0`, `observation.mean`).
    leaves: Vec<String>,
    /// Key slots: the group-by fields in the order given, then the window field if any.
    keys: Vec<(String, KeyType)>,
    /// Whether the last key slot is the window field.
    has_window_field: bool,
    /// Per leaf: a bool.
    binary: Vec<bool>,
    /// Whether it walks dynamic fields ([`Extracted::dynamic`]).
    has_dynamic: bool,
}

/// Why a plan cannot be compiled as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A group-by field is missing or not a scalar, string or enum (outside options and
    /// sequences).
    #[error(
        "no group-by field {0:?} (a number, bool, string or enum outside options and sequences)"
    )]
    GroupField(String),
}

/// What one record yields (the vectors are reused from record to record).
#[derive(Debug, Default)]
pub struct Extracted {
    /// One value per leaf; NaN where absent (a none option, an empty sequence) or NaN.
    pub values: Vec<f64>,
    /// The group-by values as bytes, in payload order: per field its slot number, then its
    /// [`KeyValue::encode_into`] encoding ([`decode_group`] reads it back).
    pub group: Vec<u8>,
    /// The window field's value.
    pub window: Option<u64>,
    /// The numeric leaves of dynamic fields, found in this record: (dotted path, value), in
    /// payload order. Unlike [`values`](Extracted::values), which leaves there are differs
    /// from record to record (see the [module docs](super)).
    pub dynamic: Vec<(String, f64)>,
}

struct Compiler<'a> {
    ops: Vec<Op>,
    has_dynamic: bool,
    leaves: Vec<String>,
    binary: Vec<bool>,
    group_by: &'a [String],
    window_field: Option<&'a str>,
    fields: &'a [Glob],
    keys: Vec<Option<(String, KeyType)>>,
}

impl Plan {
    /// Compiles `root` (a schema's root type). `group_by` and `window_field` are dotted paths;
    /// `fields` selects the summarized fields by dotted path (empty: every numeric field).
    /// Group-by and window fields are not summarized. A missing window field is not an error
    /// (the schema is then summarized per experiment only; see `has_window_field`).
    pub fn compile(
        root: &TypeDesc,
        group_by: &[String],
        window_field: Option<&str>,
        fields: &[Glob],
    ) -> Result<Plan, PlanError> {
        let n_keys = group_by.len() + usize::from(window_field.is_some());
        let mut c = Compiler {
            ops: Vec::new(),
            has_dynamic: false,
            leaves: Vec::new(),
            binary: Vec::new(),
            group_by,
            window_field,
            fields,
            keys: vec![None; n_keys],
        };
        c.node(&FieldNode::tree(root));
        let mut keys = Vec::with_capacity(n_keys);
        for (i, k) in c.keys.into_iter().enumerate() {
            match k {
                Some(k) => keys.push(k),
                None if i < group_by.len() => {
                    return Err(PlanError::GroupField(group_by[i].clone()));
                }
                None => {}
            }
        }
        let has_window_field = window_field.is_some() && keys.len() == n_keys;
        let mut plan = Plan {
            ops: merge_skips(c.ops),
            leaves: c.leaves,
            keys,
            has_window_field,
            binary: c.binary,
            has_dynamic: c.has_dynamic,
        };
        if window_field.is_some() && !has_window_field {
            // Keys must be dense: the window field was not found, so no op writes it.
            plan.keys.truncate(group_by.len());
        }
        Ok(plan)
    }

    /// Runs the plan over `payload`, filling `out` (its vectors are reused).
    pub fn extract(&self, payload: &[u8], out: &mut Extracted) -> Result<(), Malformed> {
        self.extract_from(payload, out)
    }

    /// [`extract`](Plan::extract) from any [`Source`]: a record's payload where it lies in the
    /// ring ([`RingPayload`](snapbus_bus::subscriber::RingPayload)), read once, a few bytes at
    /// a time for numbers and a piece at a time for reductions, never copied whole. What it
    /// extracts from a ring payload is only to be trusted once the read is validated (see
    /// [`Subscriber::next_in_place`](snapbus_bus::subscriber::Subscriber::next_in_place)).
    pub fn extract_from<S: Source + ?Sized>(
        &self,
        payload: &S,
        out: &mut Extracted,
    ) -> Result<(), Malformed> {
        if out.values.len() == self.leaves.len() {
            out.values.fill(f64::NAN);
        } else {
            out.values.clear();
            out.values.resize(self.leaves.len(), f64::NAN);
        }
        out.group.clear();
        out.window = None;
        out.dynamic.clear();
        let window_slot = self.window_slot();
        let mut cur = Cursor {
            src: payload,
            pos: 0,
        };
        for op in &self.ops {
            match op {
                Op::Skip(n) => cur.skip(*n)?,
                Op::SkipDyn(layout) => walk::skip(layout, LayoutPlan::ROOT, &mut cur)?,
                Op::Num { scalar, leaf } => out.values[*leaf] = cur.scalar(*scalar)?,
                Op::OptNum { scalar, leaf } => match cur.u8()? {
                    0 => {}
                    1 => out.values[*leaf] = cur.scalar(*scalar)?,
                    _ => return Err(Malformed),
                },
                Op::Packed { dtype, count, leaf } => {
                    let n = match count {
                        Some(n) => *n,
                        None => cur.u64()?,
                    };
                    cur.reduce(*dtype, n, &mut out.values[*leaf..*leaf + 3])?;
                }
                Op::Tensor { dtype, leaf } => {
                    let n = tensor_count(&mut cur)?;
                    cur.reduce(*dtype, n, &mut out.values[*leaf..*leaf + 3])?;
                }
                Op::Dynamic { path, layout } => {
                    walk::walk(layout, &mut cur, &mut Leaves)?.push_under(path, &mut out.dynamic);
                }
                Op::Key { scalar, slot } => {
                    let size = scalar.size();
                    let b = cur.bytes8(size)?;
                    let key = KeyValue::read(*scalar, &b[..size]);
                    if Some(*slot) == window_slot {
                        out.window = match key {
                            KeyValue::U64(v) => Some(v),
                            KeyValue::I64(v) => Some(v as u64),
                            _ => None,
                        };
                    } else {
                        out.group.push(*slot as u8);
                        key.encode_into(&mut out.group);
                    }
                }
                Op::KeyStr { slot } => {
                    let n = cur.u64()?;
                    let (at, len) = cur.take_elems(n, 1)?;
                    // Read straight into the group bytes, after the slot, tag and length.
                    out.group.push(*slot as u8);
                    let bytes = reserve_str(len, &mut out.group);
                    payload.read(at, &mut out.group[bytes.clone()])?;
                    std::str::from_utf8(&out.group[bytes]).map_err(|_| Malformed)?;
                }
                Op::Enum { slot, layout } => {
                    let idx = cur.u32()? as usize;
                    let variants = layout.children(LayoutPlan::ROOT);
                    if idx >= variants.len() {
                        return Err(Malformed);
                    }
                    let variant = layout.child(LayoutPlan::ROOT, idx);
                    if let Some(slot) = slot {
                        let name = layout.node(variant).name();
                        push_str_key(&mut out.group, *slot, name.as_bytes());
                    }
                    walk::skip(layout, variant, &mut cur)?;
                }
            }
        }
        Ok(())
    }
}

impl Plan {
    /// A plan of every numeric leaf of `root` (no group-by or window field): what the plotter
    /// plots and the aggregator summarizes without options.
    pub fn numeric(root: &TypeDesc) -> Plan {
        Plan::compile(root, &[], None, &[]).unwrap_or_else(|_| Plan {
            ops: Vec::new(),
            leaves: Vec::new(),
            keys: Vec::new(),
            has_window_field: false,
            binary: Vec::new(),
            has_dynamic: false,
        })
    }

    /// Whether records may have numeric leaves in dynamic fields, found record by record
    /// ([`Extracted::dynamic`]) rather than listed in [`leaves`](Plan::leaves).
    pub fn has_dynamic(&self) -> bool {
        self.has_dynamic
    }

    /// The numeric leaves, by dotted name (`reward`, `position.0`, `observation.mean`), in
    /// payload order: [`Extracted::values`] has one value per leaf.
    pub fn leaves(&self) -> &[String] {
        &self.leaves
    }

    /// The key slots: the group-by fields (dotted path, type) in the order given, then the
    /// window field if the schema has it.
    pub fn keys(&self) -> &[(String, KeyType)] {
        &self.keys
    }

    /// Whether the schema has the window field (an integer outside options and sequences);
    /// it is then the last of [`Plan::keys`].
    pub fn has_window_field(&self) -> bool {
        self.has_window_field
    }

    /// The key slot of the window field, if the schema has it.
    fn window_slot(&self) -> Option<usize> {
        self.has_window_field.then(|| self.keys.len() - 1)
    }

    /// Per leaf: whether it is a bool (0 or 1).
    pub fn binary_leaves(&self) -> &[bool] {
        &self.binary
    }
}

/// Appends a string key as [`KeyValue::Str`] would encode it, after its slot.
fn push_str_key(out: &mut Vec<u8>, slot: usize, bytes: &[u8]) {
    out.push(slot as u8);
    encode_str(bytes, out);
}

impl Compiler<'_> {
    /// Emits the operations for one value at `path` (keys are taken from struct and tuple
    /// paths only, never from inside options, sequences or enums).
    fn node(&mut self, n: &FieldNode<'_>) {
        let (desc, path) = (n.desc, n.path.as_str());
        if !path.is_empty() {
            if let Some(slot) = self.key_slot(path) {
                self.key(desc, path, slot);
                return;
            }
        }
        let selected = self.selected(path);
        match (&n.parts, n.kind) {
            (Parts::Struct(parts) | Parts::Tuple(parts), _) => {
                parts.iter().for_each(|p| self.node(p));
            }
            (_, kind) if selected && Scalar::of(kind).is_some() => {
                let scalar = Scalar::of(kind).unwrap_or(Scalar::Bool);
                let leaf = self.leaf(path.to_owned());
                self.binary[leaf] = scalar == Scalar::Bool;
                self.ops.push(Op::Num { scalar, leaf });
            }
            (_, Kind::Array { len }) if selected && desc.packed_dtype().is_some() => {
                let dtype = desc.packed_dtype().unwrap_or(DType::U8);
                if len <= MAX_ELEMENTWISE {
                    for i in 0..len {
                        let leaf = self.leaf(join(path, &i.to_string()));
                        self.ops.push(Op::Num {
                            scalar: Scalar::Num(dtype),
                            leaf,
                        });
                    }
                } else {
                    let leaf = self.reduced_leaves(path);
                    self.ops.push(Op::Packed {
                        dtype,
                        count: Some(len),
                        leaf,
                    });
                }
            }
            (_, Kind::Seq) if selected && desc.packed_dtype().is_some() => {
                let dtype = desc.packed_dtype().unwrap_or(DType::U8);
                let leaf = self.reduced_leaves(path);
                self.ops.push(Op::Packed {
                    dtype,
                    count: None,
                    leaf,
                });
            }
            (_, Kind::Tensor(dtype)) if selected => {
                let leaf = self.reduced_leaves(path);
                self.ops.push(Op::Tensor { dtype, leaf });
            }
            (Parts::Option(some), _) if selected && Scalar::of(some.kind).is_some() => {
                let scalar = Scalar::of(some.kind).unwrap_or(Scalar::Bool);
                let leaf = self.leaf(path.to_owned());
                self.binary[leaf] = scalar == Scalar::Bool;
                self.ops.push(Op::OptNum { scalar, leaf });
            }
            (_, Kind::Enum) => self.ops.push(enum_op(desc, None)),
            (_, Kind::Dynamic) if selected => {
                self.has_dynamic = true;
                self.ops.push(Op::Dynamic {
                    path: path.to_owned(),
                    layout: Box::new(LayoutPlan::compile(desc).into_owned()),
                });
            }
            _ => self.skip(desc),
        }
    }

    fn key_slot(&self, path: &str) -> Option<usize> {
        if let Some(i) = self.group_by.iter().position(|g| g == path) {
            return Some(i);
        }
        (self.window_field == Some(path)).then_some(self.group_by.len())
    }

    fn key(&mut self, desc: &TypeDesc, path: &str, slot: usize) {
        let (op, ty) = match Kind::of(desc) {
            Kind::Str => (Op::KeyStr { slot }, KeyType::Str),
            Kind::Enum => (enum_op(desc, Some(slot)), KeyType::Str),
            kind => match Scalar::of(kind) {
                Some(scalar) => (Op::Key { scalar, slot }, KeyType::of_scalar(scalar)),
                None => (Op::Skip(0), KeyType::Bool),
            },
        };
        let window = slot == self.group_by.len();
        let usable =
            !matches!(op, Op::Skip(_)) && (!window || matches!(ty, KeyType::U64 | KeyType::I64));
        if !usable {
            // Not usable as a key (a window field must be an integer: an episode number): the
            // slot stays empty — an error for a group-by field, "no window field" for the
            // window field.
            self.skip(desc);
            return;
        }
        self.ops.push(op);
        self.keys[slot] = Some((path.to_owned(), ty));
    }

    fn selected(&self, path: &str) -> bool {
        self.fields.is_empty() || self.fields.iter().any(|g| g.matches(path))
    }

    fn leaf(&mut self, name: String) -> usize {
        self.leaves.push(name);
        self.binary.push(false);
        self.leaves.len() - 1
    }

    fn reduced_leaves(&mut self, path: &str) -> usize {
        let first = self.leaves.len();
        for stat in REDUCTIONS {
            self.leaf(join(path, stat));
        }
        first
    }

    fn skip(&mut self, desc: &TypeDesc) {
        let layout = LayoutPlan::compile(desc);
        match layout.node(LayoutPlan::ROOT).fixed_size() {
            Some(n) => self.ops.push(Op::Skip(n)),
            None => self.ops.push(Op::SkipDyn(Box::new(layout.into_owned()))),
        }
    }
}

/// The operation of enum `desc`, its variant's name a key in `slot` if any.
fn enum_op(desc: &TypeDesc, slot: Option<usize>) -> Op {
    Op::Enum {
        slot,
        layout: Box::new(LayoutPlan::compile(desc).into_owned()),
    }
}

/// Adjacent fixed skips become one.
fn merge_skips(ops: Vec<Op>) -> Vec<Op> {
    let mut out: Vec<Op> = Vec::with_capacity(ops.len());
    for op in ops {
        if let (Op::Skip(n), Some(Op::Skip(m))) = (&op, out.last_mut()) {
            *m += n;
            continue;
        }
        out.push(op);
    }
    out
}
