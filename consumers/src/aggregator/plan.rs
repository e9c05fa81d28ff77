//! Extraction plans: a schema's descriptor compiled once into a short list of operations that
//! pull the group-by values, the window field and every summarized number out of a payload
//! without decoding it into [`Value`](snapbus_schemas::Value)s (no allocation per record).

use snapbus_bus::subscriber::Glob;
use snapbus_schemas::{DType, Field, TypeDesc, VariantKind};

/// Fixed-size numeric arrays up to this length are summarized element by element
/// (`position.0`, `position.1`, …); longer ones, sequences and tensors by their mean, minimum
/// and maximum per record.
pub(crate) const MAX_ELEMENTWISE: u64 = 16;

/// One operation of a plan; the cursor moves over the payload as the operations run.
#[derive(Debug, Clone)]
enum Op {
    /// Skip this many bytes.
    Skip(usize),
    /// Skip one value of this (variable-size) type.
    SkipDyn(Box<TypeDesc>),
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
    /// A scalar key (a group-by field or the window field) copied into key slot `slot`.
    Key { scalar: Scalar, slot: usize },
    /// A string key.
    KeyStr { slot: usize },
    /// An enum: its variant's name is key slot `slot` (if any), its payload is skipped.
    Enum {
        slot: Option<usize>,
        variants: Vec<(String, Option<Box<TypeDesc>>)>,
    },
}

/// A fixed-width scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scalar {
    Bool,
    Num(DType),
}

impl Scalar {
    fn of(desc: &TypeDesc) -> Option<Scalar> {
        match desc {
            TypeDesc::Bool => Some(Scalar::Bool),
            d => d.as_dtype().map(Scalar::Num),
        }
    }

    fn size(self) -> usize {
        match self {
            Scalar::Bool => 1,
            Scalar::Num(d) => d.size_bytes(),
        }
    }
}

/// The value of a group-by or window field in one record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KeyValue {
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
}

impl KeyValue {
    /// Appends a self-delimiting encoding (the group's identity within a producer).
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            KeyValue::Bool(b) => out.extend_from_slice(&[0, u8::from(*b)]),
            KeyValue::U64(v) => {
                out.push(1);
                out.extend_from_slice(&v.to_le_bytes());
            }
            KeyValue::I64(v) => {
                out.push(2);
                out.extend_from_slice(&v.to_le_bytes());
            }
            KeyValue::F64(v) => {
                out.push(3);
                out.extend_from_slice(&v.to_bits().to_le_bytes());
            }
            KeyValue::Str(s) => {
                out.push(4);
                out.extend_from_slice(&(s.len() as u64).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
}

/// A group-by (or window) field's type, as it appears in the summary schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyType {
    Bool,
    U64,
    I64,
    F64,
    Str,
}

impl KeyType {
    pub(crate) fn desc(self) -> TypeDesc {
        match self {
            KeyType::Bool => TypeDesc::Bool,
            KeyType::U64 => TypeDesc::U64,
            KeyType::I64 => TypeDesc::I64,
            KeyType::F64 => TypeDesc::F64,
            KeyType::Str => TypeDesc::String,
        }
    }

    fn of_scalar(s: Scalar) -> KeyType {
        match s {
            Scalar::Bool => KeyType::Bool,
            Scalar::Num(DType::F32 | DType::F64) => KeyType::F64,
            Scalar::Num(DType::I8 | DType::I16 | DType::I32 | DType::I64) => KeyType::I64,
            Scalar::Num(_) => KeyType::U64,
        }
    }
}

/// A schema's compiled plan.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    ops: Vec<Op>,
    /// Summarized leaves, by dotted name (`reward`, `position.0`, `observation.mean`).
    pub(crate) leaves: Vec<String>,
    /// Key slots: the group-by fields in the order given, then the window field if any.
    pub(crate) keys: Vec<(String, KeyType)>,
    /// Whether the last key slot is the window field.
    pub(crate) has_window_field: bool,
    /// Per leaf: a bool.
    binary: Vec<bool>,
}

/// Why a schema cannot be summarized as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PlanError {
    /// A group-by field is missing or not a scalar, string or enum.
    GroupField(String),
}

/// What one record yields (the vectors are reused from record to record).
#[derive(Debug, Default)]
pub(crate) struct Extracted {
    /// One value per leaf; NaN where absent (a none option, an empty sequence) or NaN.
    pub(crate) values: Vec<f64>,
    /// The group-by values as bytes, in payload order: per field its slot number, then its
    /// [`KeyValue::encode_into`] encoding ([`decode_group`] reads it back).
    pub(crate) group: Vec<u8>,
    /// The window field's value.
    pub(crate) window: Option<u64>,
}

/// The group-by values of [`Extracted::group`] in slot order (`None` if malformed).
pub(crate) fn decode_group(mut bytes: &[u8], slots: usize) -> Option<Vec<KeyValue>> {
    let mut out: Vec<Option<KeyValue>> = vec![None; slots];
    while let Some((&slot, rest)) = bytes.split_first() {
        let (&tag, rest) = rest.split_first()?;
        let (v, rest) = match tag {
            0 => (KeyValue::Bool(*rest.first()? != 0), rest.get(1..)?),
            1..=3 => {
                let b: [u8; 8] = rest.get(..8)?.try_into().ok()?;
                let v = match tag {
                    1 => KeyValue::U64(u64::from_le_bytes(b)),
                    2 => KeyValue::I64(i64::from_le_bytes(b)),
                    _ => KeyValue::F64(f64::from_bits(u64::from_le_bytes(b))),
                };
                (v, rest.get(8..)?)
            }
            4 => {
                let n =
                    usize::try_from(u64::from_le_bytes(rest.get(..8)?.try_into().ok()?)).ok()?;
                let s = std::str::from_utf8(rest.get(8..8usize.checked_add(n)?)?).ok()?;
                (KeyValue::Str(s.to_owned()), rest.get(8 + n..)?)
            }
            _ => return None,
        };
        *out.get_mut(usize::from(slot))? = Some(v);
        bytes = rest;
    }
    out.into_iter().collect()
}

/// Whether the payload was malformed (shorter than its descriptor says, a bad tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;

struct Compiler<'a> {
    ops: Vec<Op>,
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
    pub(crate) fn compile(
        root: &TypeDesc,
        group_by: &[String],
        window_field: Option<&str>,
        fields: &[Glob],
    ) -> Result<Plan, PlanError> {
        let n_keys = group_by.len() + usize::from(window_field.is_some());
        let mut c = Compiler {
            ops: Vec::new(),
            leaves: Vec::new(),
            binary: Vec::new(),
            group_by,
            window_field,
            fields,
            keys: vec![None; n_keys],
        };
        c.node(root, "");
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
        };
        if window_field.is_some() && !has_window_field {
            // Keys must be dense: the window field was not found, so no op writes it.
            plan.keys.truncate(group_by.len());
        }
        Ok(plan)
    }

    /// Runs the plan over `payload`, filling `out` (its vectors are reused).
    pub(crate) fn extract(&self, payload: &[u8], out: &mut Extracted) -> Result<(), Malformed> {
        if out.values.len() == self.leaves.len() {
            out.values.fill(f64::NAN);
        } else {
            out.values.clear();
            out.values.resize(self.leaves.len(), f64::NAN);
        }
        out.group.clear();
        out.window = None;
        let window_slot = self.window_slot();
        let mut cur = Cursor {
            buf: payload,
            pos: 0,
        };
        for op in &self.ops {
            match op {
                Op::Skip(n) => cur.skip(*n)?,
                Op::SkipDyn(d) => skip_value(d, &mut cur, 0)?,
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
                    let bytes = cur.take_elems(n, dtype.size_bytes())?;
                    reduce(*dtype, bytes, &mut out.values[*leaf..*leaf + 3]);
                }
                Op::Tensor { dtype, leaf } => {
                    let bytes = tensor_bytes(*dtype, &mut cur)?;
                    reduce(*dtype, bytes, &mut out.values[*leaf..*leaf + 3]);
                }
                Op::Key { scalar, slot } => {
                    let start = cur.pos;
                    cur.skip(scalar.size())?;
                    let key = key_of(*scalar, &payload[start..cur.pos]);
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
                    let bytes = cur.take_elems(n, 1)?;
                    std::str::from_utf8(bytes).map_err(|_| Malformed)?;
                    push_str_key(&mut out.group, *slot, bytes);
                }
                Op::Enum { slot, variants } => {
                    let idx = cur.u32()? as usize;
                    let (name, payload_desc) = variants.get(idx).ok_or(Malformed)?;
                    if let Some(slot) = slot {
                        push_str_key(&mut out.group, *slot, name.as_bytes());
                    }
                    if let Some(d) = payload_desc {
                        skip_value(d, &mut cur, 0)?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Plan {
    /// The key slot of the window field, if the schema has it.
    fn window_slot(&self) -> Option<usize> {
        self.has_window_field.then(|| self.keys.len() - 1)
    }

    /// Whether leaf `i` is a bool (its quantiles are kept exactly).
    pub(crate) fn binary_leaves(&self) -> &[bool] {
        &self.binary
    }
}

/// Appends a string key as [`KeyValue::Str`] would encode it, after its slot.
fn push_str_key(out: &mut Vec<u8>, slot: usize, bytes: &[u8]) {
    out.push(slot as u8);
    out.push(4);
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

impl Compiler<'_> {
    /// Emits the operations for one value at `path` (keys are taken from struct and tuple
    /// paths only, never from inside options, sequences or enums).
    fn node(&mut self, desc: &TypeDesc, path: &str) {
        if !path.is_empty() {
            if let Some(slot) = self.key_slot(path) {
                self.key(desc, path, slot);
                return;
            }
        }
        let selected = self.selected(path);
        match desc {
            TypeDesc::Struct { fields } => self.fields(fields, path),
            TypeDesc::Tuple { elems } => {
                for (i, e) in elems.iter().enumerate() {
                    self.node(e, &join(path, &i.to_string()));
                }
            }
            d if Scalar::of(d).is_some() && selected => {
                let scalar = Scalar::of(d).unwrap_or(Scalar::Bool);
                let leaf = self.leaf(path.to_owned());
                self.binary[leaf] = scalar == Scalar::Bool;
                self.ops.push(Op::Num { scalar, leaf });
            }
            TypeDesc::Array { len, elem } if selected && elem.as_dtype().is_some() => {
                let dtype = elem.as_dtype().unwrap_or(DType::U8);
                if *len <= MAX_ELEMENTWISE {
                    for i in 0..*len {
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
                        count: Some(*len),
                        leaf,
                    });
                }
            }
            TypeDesc::Seq { elem } if selected && elem.as_dtype().is_some() => {
                let dtype = elem.as_dtype().unwrap_or(DType::U8);
                let leaf = self.reduced_leaves(path);
                self.ops.push(Op::Packed {
                    dtype,
                    count: None,
                    leaf,
                });
            }
            TypeDesc::Tensor { dtype } if selected => {
                let leaf = self.reduced_leaves(path);
                self.ops.push(Op::Tensor {
                    dtype: *dtype,
                    leaf,
                });
            }
            TypeDesc::Option { some } if Scalar::of(some).is_some() && selected => {
                let scalar = Scalar::of(some).unwrap_or(Scalar::Bool);
                let leaf = self.leaf(path.to_owned());
                self.binary[leaf] = scalar == Scalar::Bool;
                self.ops.push(Op::OptNum { scalar, leaf });
            }
            TypeDesc::Enum { variants } => {
                self.ops.push(enum_op(variants, None));
            }
            d => self.skip(d),
        }
    }

    fn fields(&mut self, fields: &[Field], path: &str) {
        for f in fields {
            self.node(&f.ty, &join(path, &f.name));
        }
    }

    fn key_slot(&self, path: &str) -> Option<usize> {
        if let Some(i) = self.group_by.iter().position(|g| g == path) {
            return Some(i);
        }
        (self.window_field == Some(path)).then_some(self.group_by.len())
    }

    fn key(&mut self, desc: &TypeDesc, path: &str, slot: usize) {
        let (op, ty) = match desc {
            TypeDesc::String => (Op::KeyStr { slot }, KeyType::Str),
            TypeDesc::Enum { variants } => (enum_op(variants, Some(slot)), KeyType::Str),
            d => match Scalar::of(d) {
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
        for stat in ["mean", "min", "max"] {
            self.leaf(join(path, stat));
        }
        first
    }

    fn skip(&mut self, desc: &TypeDesc) {
        match fixed_size(desc) {
            Some(n) => self.ops.push(Op::Skip(n)),
            None => self.ops.push(Op::SkipDyn(Box::new(desc.clone()))),
        }
    }
}

fn enum_op(variants: &[snapbus_schemas::Variant], slot: Option<usize>) -> Op {
    let variants = variants
        .iter()
        .map(|v| {
            let payload = match &v.kind {
                VariantKind::Unit => None,
                VariantKind::Tuple { elems } => Some(Box::new(TypeDesc::Tuple {
                    elems: elems.clone(),
                })),
                VariantKind::Struct { fields } => Some(Box::new(TypeDesc::Struct {
                    fields: fields.clone(),
                })),
            };
            (v.name.clone(), payload)
        })
        .collect();
    Op::Enum { slot, variants }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
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

/// The encoded size of a type if it is always the same.
fn fixed_size(desc: &TypeDesc) -> Option<usize> {
    match desc {
        TypeDesc::Struct { fields } => fields.iter().map(|f| fixed_size(&f.ty)).sum(),
        TypeDesc::Tuple { elems } => elems.iter().map(fixed_size).sum(),
        TypeDesc::Array { len, elem } => fixed_size(elem)?.checked_mul(usize::try_from(*len).ok()?),
        d => Scalar::of(d).map(Scalar::size),
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn skip(&mut self, n: usize) -> Result<(), Malformed> {
        let end = self.pos.checked_add(n).ok_or(Malformed)?;
        if end > self.buf.len() {
            return Err(Malformed);
        }
        self.pos = end;
        Ok(())
    }

    #[inline(always)]
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let bytes = self
            .buf
            .get(self.pos..self.pos + N)
            .ok_or(Malformed)?
            .try_into()
            .map_err(|_| Malformed)?;
        self.pos += N;
        Ok(bytes)
    }

    #[inline(always)]
    fn take_elems(&mut self, count: u64, size: usize) -> Result<&'a [u8], Malformed> {
        let n = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(size))
            .ok_or(Malformed)?;
        let start = self.pos;
        self.skip(n)?;
        Ok(&self.buf[start..self.pos])
    }

    #[inline(always)]
    fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take::<1>()?[0])
    }

    #[inline(always)]
    fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    #[inline(always)]
    fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    #[inline(always)]
    fn scalar(&mut self, s: Scalar) -> Result<f64, Malformed> {
        match s {
            Scalar::Bool => match self.u8()? {
                0 => Ok(0.0),
                1 => Ok(1.0),
                _ => Err(Malformed),
            },
            Scalar::Num(d) => {
                let start = self.pos;
                self.skip(d.size_bytes())?;
                Ok(num(d, &self.buf[start..self.pos]))
            }
        }
    }
}

/// A little-endian number of type `d` (`b` has exactly its size) as f64.
#[inline(always)]
fn num(d: DType, b: &[u8]) -> f64 {
    fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&b[..N]);
        a
    }
    match d {
        DType::U8 => f64::from(b[0]),
        DType::I8 => f64::from(b[0] as i8),
        DType::U16 => f64::from(u16::from_le_bytes(arr(b))),
        DType::I16 => f64::from(i16::from_le_bytes(arr(b))),
        DType::U32 => f64::from(u32::from_le_bytes(arr(b))),
        DType::I32 => f64::from(i32::from_le_bytes(arr(b))),
        DType::U64 => u64::from_le_bytes(arr(b)) as f64,
        DType::I64 => i64::from_le_bytes(arr(b)) as f64,
        DType::F32 => f64::from(f32::from_le_bytes(arr(b))),
        DType::F64 => f64::from_le_bytes(arr(b)),
    }
}

#[inline]
fn key_of(s: Scalar, b: &[u8]) -> KeyValue {
    match s {
        Scalar::Bool => KeyValue::Bool(b[0] != 0),
        Scalar::Num(d @ (DType::F32 | DType::F64)) => KeyValue::F64(num(d, b)),
        Scalar::Num(d @ (DType::I8 | DType::I16 | DType::I32 | DType::I64)) => {
            KeyValue::I64(num(d, b) as i64)
        }
        Scalar::Num(DType::U64) => {
            KeyValue::U64(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        }
        Scalar::Num(d) => KeyValue::U64(num(d, b) as u64),
    }
}

/// Mean, min and max of packed elements (NaN elements ignored) into `out[0..3]`; all NaN
/// when there is no element.
fn reduce(d: DType, bytes: &[u8], out: &mut [f64]) {
    let size = d.size_bytes();
    let (mut sum, mut min, mut max, mut n) = (0.0f64, f64::INFINITY, f64::NEG_INFINITY, 0u64);
    for chunk in bytes.chunks_exact(size) {
        let v = num(d, chunk);
        if v.is_nan() {
            continue;
        }
        sum += v;
        min = min.min(v);
        max = max.max(v);
        n += 1;
    }
    if n > 0 {
        out[0] = sum / n as f64;
        out[1] = min;
        out[2] = max;
    }
}

fn tensor_bytes<'a>(d: DType, cur: &mut Cursor<'a>) -> Result<&'a [u8], Malformed> {
    let rank = cur.u64()?;
    if rank > snapbus_schemas::MAX_TENSOR_RANK as u64 {
        return Err(Malformed);
    }
    let mut product: u64 = 1;
    for _ in 0..rank {
        product = product.checked_mul(cur.u64()?).ok_or(Malformed)?;
    }
    let count = cur.u64()?;
    if count != product {
        return Err(Malformed);
    }
    cur.take_elems(count, d.size_bytes())
}

/// Skips one value of type `desc` (descriptors are at most 64 deep, so is this recursion).
fn skip_value(desc: &TypeDesc, cur: &mut Cursor<'_>, depth: usize) -> Result<(), Malformed> {
    if depth > 64 {
        return Err(Malformed);
    }
    if let Some(n) = fixed_size(desc) {
        return cur.skip(n);
    }
    match desc {
        TypeDesc::String | TypeDesc::Bytes => {
            let n = cur.u64()?;
            cur.take_elems(n, 1).map(drop)
        }
        TypeDesc::Option { some } => match cur.u8()? {
            0 => Ok(()),
            1 => skip_value(some, cur, depth + 1),
            _ => Err(Malformed),
        },
        TypeDesc::Seq { elem } => {
            let n = cur.u64()?;
            match fixed_size(elem) {
                Some(size) => cur.take_elems(n, size).map(drop),
                None => {
                    // Every element takes at least one byte: a count beyond the payload is
                    // malformed, not a reason to loop.
                    if n > (cur.buf.len() - cur.pos) as u64 {
                        return Err(Malformed);
                    }
                    (0..n).try_for_each(|_| skip_value(elem, cur, depth + 1))
                }
            }
        }
        TypeDesc::Array { len, elem } => {
            if *len > (cur.buf.len() - cur.pos) as u64 {
                return Err(Malformed);
            }
            (0..*len).try_for_each(|_| skip_value(elem, cur, depth + 1))
        }
        TypeDesc::Tuple { elems } => elems.iter().try_for_each(|e| skip_value(e, cur, depth + 1)),
        TypeDesc::Struct { fields } => fields
            .iter()
            .try_for_each(|f| skip_value(&f.ty, cur, depth + 1)),
        TypeDesc::Enum { variants } => {
            let v = variants.get(cur.u32()? as usize).ok_or(Malformed)?;
            match &v.kind {
                VariantKind::Unit => Ok(()),
                VariantKind::Tuple { elems } => {
                    elems.iter().try_for_each(|e| skip_value(e, cur, depth + 1))
                }
                VariantKind::Struct { fields } => fields
                    .iter()
                    .try_for_each(|f| skip_value(&f.ty, cur, depth + 1)),
            }
        }
        TypeDesc::Map { key, value } => {
            let n = cur.u64()?;
            if n > (cur.buf.len() - cur.pos) as u64 {
                return Err(Malformed);
            }
            (0..n).try_for_each(|_| {
                skip_value(key, cur, depth + 1)?;
                skip_value(value, cur, depth + 1)
            })
        }
        TypeDesc::Tensor { dtype } => tensor_bytes(*dtype, cur).map(drop),
        _ => Err(Malformed),
    }
}
