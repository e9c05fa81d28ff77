//! Encode plans: a dataclass's schema, compiled once per class from the plan `snapbus.schema`
//! walks out of its annotations, into a validated [`SchemaDescriptor`] and a tree of [`Node`]s
//! that encodes an instance in two passes. Pass 1 ([`measure`]) reads every field (interned
//! `getattr`, one typed extract each), checks it, and computes the exact payload length, leaving
//! a flat list of [`Op`]s; pass 2 ([`write`]) writes those ops into the frame claimed in the
//! lane, in the codec's layout (bincode 1.x: little-endian, `u64` lengths, `u8` option tags,
//! `u32` enum indices, no padding). Arrays are copied once, from their buffer into the frame.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use pyo3::buffer::{Element, PyBuffer, PyUntypedBuffer};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};
use snapbus::schemas::{
    DType, EncodeError, Field, SchemaDescriptor, TypeDesc, Variant, check_compatible,
};

/// A compiled event class: its descriptor and its encode plan.
pub(crate) struct Compiled {
    /// The descriptor published with its records.
    pub(crate) desc: SchemaDescriptor,
    /// The root struct.
    pub(crate) root: Node,
    /// The class's qualified name (for messages).
    pub(crate) class: String,
    /// The class object's address (the key of the per-(class, field) warnings).
    pub(crate) class_id: usize,
}

/// Integer widths.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Int {
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
}

/// One node of an encode plan.
pub(crate) enum Node {
    Bool,
    Int(Int),
    F32,
    F64,
    Str,
    Bytes,
    /// Enum members (or literal strings) → variant index; the names for messages.
    Enum(Py<PyDict>, Vec<String>),
    Option(Box<Node>),
    Seq(Box<Node>),
    Tuple(Vec<Node>),
    Map(Box<Node>, Box<Node>),
    /// Fields: the interned attribute name and its plan.
    Struct(Vec<(Py<PyString>, Node)>),
    Tensor(DType),
}

impl Node {
    /// The dtype of a numeric scalar node (the packed-sequence fast path).
    fn dtype(&self) -> Option<DType> {
        Some(match self {
            Node::Int(Int::U8) => DType::U8,
            Node::Int(Int::U16) => DType::U16,
            Node::Int(Int::U32) => DType::U32,
            Node::Int(Int::U64) => DType::U64,
            Node::Int(Int::I8) => DType::I8,
            Node::Int(Int::I16) => DType::I16,
            Node::Int(Int::I32) => DType::I32,
            Node::Int(Int::I64) => DType::I64,
            Node::F32 => DType::F32,
            Node::F64 => DType::F64,
            _ => return None,
        })
    }
}

/// A value that does not fit its field: which field, what is wrong, and which Python
/// exception it is in strict mode.
#[derive(Debug)]
pub(crate) struct DataError {
    /// Dotted field path, innermost last.
    pub(crate) path: String,
    pub(crate) message: String,
    /// `ValueError` (out of range, wrong dtype) rather than `TypeError` (wrong type).
    pub(crate) value_error: bool,
}

impl DataError {
    fn ty(message: String) -> DataError {
        DataError {
            path: String::new(),
            message,
            value_error: false,
        }
    }
    fn value(message: String) -> DataError {
        DataError {
            path: String::new(),
            message,
            value_error: true,
        }
    }
    fn within(mut self, segment: &str) -> DataError {
        self.path = if self.path.is_empty() {
            segment.to_owned()
        } else if self.path.starts_with('[') || self.path.starts_with('{') {
            format!("{segment}{}", self.path)
        } else {
            format!("{segment}.{}", self.path)
        };
        self
    }
    /// The Python exception (strict mode).
    pub(crate) fn to_py(&self, class: &str) -> PyErr {
        let msg = format!("{class}.{}: {}", self.path, self.message);
        if self.value_error {
            PyValueError::new_err(msg)
        } else {
            PyTypeError::new_err(msg)
        }
    }
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "field `{}`: {}", self.path, self.message)
    }
}

/// What pass 2 writes, in order.
pub(crate) enum Op<'py> {
    /// Up to 8 little-endian bytes.
    Le([u8; 8], u8),
    Str(Bound<'py, PyString>),
    Bytes(Bound<'py, PyBytes>),
    /// A buffer's contents, C order, as `dtype` elements.
    Buf(PyUntypedBuffer, DType),
}

fn le_u64(v: u64) -> Op<'static> {
    Op::Le(v.to_le_bytes(), 8)
}

fn le(bytes: &[u8]) -> Op<'static> {
    let mut b = [0u8; 8];
    b[..bytes.len()].copy_from_slice(bytes);
    Op::Le(b, bytes.len() as u8)
}

/// Pass 1: checks `obj` against `node`, appends its ops, returns its encoded length.
pub(crate) fn measure<'py>(
    node: &Node,
    obj: &Bound<'py, PyAny>,
    ops: &mut Vec<Op<'py>>,
) -> Result<usize, DataError> {
    let py = obj.py();
    Ok(match node {
        Node::Struct(fields) => {
            let mut n = 0;
            for (name, sub) in fields {
                let v = obj.getattr(name.bind(py)).map_err(|_| {
                    DataError::ty(format!("missing attribute (got a {})", type_name(obj)))
                        .within(&name.to_string())
                })?;
                n += measure(sub, &v, ops).map_err(|e| e.within(&name.to_string()))?;
            }
            n
        }
        Node::Bool => {
            let b = obj
                .extract::<bool>()
                .map_err(|_| DataError::ty(format!("expected bool, got {}", type_name(obj))))?;
            ops.push(le(&[u8::from(b)]));
            1
        }
        Node::Int(kind) => {
            let op = int_op(*kind, obj)?;
            let n = match op {
                Op::Le(_, n) => usize::from(n),
                _ => 0,
            };
            ops.push(op);
            n
        }
        Node::F64 => {
            let v = float(obj)?;
            ops.push(le(&v.to_le_bytes()));
            8
        }
        Node::F32 => {
            let v = float(obj)?;
            ops.push(le(&(v as f32).to_le_bytes()));
            4
        }
        Node::Str => {
            let s = obj
                .cast::<PyString>()
                .map_err(|_| DataError::ty(format!("expected str, got {}", type_name(obj))))?;
            let len = s
                .to_str()
                .map_err(|_| DataError::value("a str that is not valid UTF-8".into()))?
                .len();
            ops.push(le_u64(len as u64));
            ops.push(Op::Str(s.clone()));
            8 + len
        }
        Node::Bytes => {
            if let Ok(b) = obj.cast::<PyBytes>() {
                let len = b.as_bytes().len();
                ops.push(le_u64(len as u64));
                ops.push(Op::Bytes(b.clone()));
                8 + len
            } else {
                let buf = buffer(obj, DType::U8).map_err(|_| {
                    DataError::ty(format!("expected bytes, got {}", type_name(obj)))
                })?;
                let len = buf.len_bytes();
                ops.push(le_u64(len as u64));
                ops.push(Op::Buf(buf, DType::U8));
                8 + len
            }
        }
        Node::Enum(map, names) => {
            let idx = map
                .bind(py)
                .get_item(obj)
                .ok()
                .flatten()
                .and_then(|i| i.extract::<u32>().ok())
                .ok_or_else(|| {
                    DataError::value(format!(
                        "{} is not one of {names:?}",
                        obj.repr().map_or_else(|_| "?".into(), |r| r.to_string())
                    ))
                })?;
            ops.push(le(&idx.to_le_bytes()));
            4
        }
        Node::Option(inner) => {
            if obj.is_none() {
                ops.push(le(&[0]));
                1
            } else {
                ops.push(le(&[1]));
                1 + measure(inner, obj, ops)?
            }
        }
        Node::Seq(elem) => measure_seq(elem, obj, ops)?,
        Node::Tuple(elems) => {
            let items = sequence_items(obj)?;
            if items.len() != elems.len() {
                return Err(DataError::value(format!(
                    "expected {} elements, got {}",
                    elems.len(),
                    items.len()
                )));
            }
            let mut n = 0;
            for (i, (e, v)) in elems.iter().zip(items.iter()).enumerate() {
                n += measure(e, v, ops).map_err(|err| err.within(&i.to_string()))?;
            }
            n
        }
        Node::Map(k, v) => {
            let d = obj
                .cast::<PyDict>()
                .map_err(|_| DataError::ty(format!("expected dict, got {}", type_name(obj))))?;
            ops.push(le_u64(d.len() as u64));
            let mut n = 8;
            for (key, value) in d.iter() {
                n += measure(k, &key, ops).map_err(|e| e.within("{key}"))?;
                let label = key.str().map_or_else(|_| "?".into(), |s| s.to_string());
                n += measure(v, &value, ops).map_err(|e| e.within(&format!("[{label:?}]")))?;
            }
            n
        }
        Node::Tensor(dtype) => {
            let buf = buffer(obj, *dtype)?;
            let shape = buf.shape();
            ops.push(le_u64(shape.len() as u64));
            for &d in shape {
                ops.push(le_u64(d as u64));
            }
            ops.push(le_u64(buf.item_count() as u64));
            let n = 16 + 8 * shape.len() + buf.len_bytes();
            ops.push(Op::Buf(buf, *dtype));
            n
        }
    })
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .qualname()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

fn float(obj: &Bound<'_, PyAny>) -> Result<f64, DataError> {
    if obj.is_instance_of::<PyString>() {
        return Err(DataError::ty("expected float, got str".into()));
    }
    obj.extract::<f64>()
        .map_err(|_| DataError::ty(format!("expected float, got {}", type_name(obj))))
}

fn int_op(kind: Int, obj: &Bound<'_, PyAny>) -> Result<Op<'static>, DataError> {
    if obj.is_instance_of::<pyo3::types::PyFloat>() || obj.is_instance_of::<PyString>() {
        return Err(DataError::ty(format!(
            "expected int, got {}",
            type_name(obj)
        )));
    }
    let range = |name: &str| {
        DataError::value(format!(
            "{} is out of range for {name}",
            obj.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))
    };
    macro_rules! get {
        ($t:ty, $name:literal) => {{
            let v: $t = obj.extract().map_err(|e: PyErr| {
                if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(obj.py()) {
                    range($name)
                } else {
                    DataError::ty(format!("expected int, got {}", type_name(obj)))
                }
            })?;
            le(&v.to_le_bytes())
        }};
    }
    Ok(match kind {
        Int::U8 => get!(u8, "u8"),
        Int::U16 => get!(u16, "u16"),
        Int::U32 => get!(u32, "u32"),
        Int::U64 => get!(u64, "u64"),
        Int::I8 => get!(i8, "i8"),
        Int::I16 => get!(i16, "i16"),
        Int::I32 => get!(i32, "i32"),
        Int::I64 => get!(i64, "i64"),
    })
}

/// The items of a list or tuple (other iterables are collected).
fn sequence_items<'py>(obj: &Bound<'py, PyAny>) -> Result<Vec<Bound<'py, PyAny>>, DataError> {
    if let Ok(l) = obj.cast::<PyList>() {
        return Ok(l.iter().collect());
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return Ok(t.iter().collect());
    }
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyDict>() {
        return Err(DataError::ty(format!(
            "expected a sequence, got {}",
            type_name(obj)
        )));
    }
    let it = obj
        .try_iter()
        .map_err(|_| DataError::ty(format!("expected a sequence, got {}", type_name(obj))))?;
    it.collect::<PyResult<Vec<_>>>()
        .map_err(|e| DataError::ty(format!("iterating it failed: {e}")))
}

fn measure_seq<'py>(
    elem: &Node,
    obj: &Bound<'py, PyAny>,
    ops: &mut Vec<Op<'py>>,
) -> Result<usize, DataError> {
    // Numeric elements from a buffer (numpy array, array.array): one copy, not per element.
    if let Some(dtype) = elem.dtype() {
        if !obj.is_instance_of::<PyList>() && !obj.is_instance_of::<PyTuple>() {
            if let Ok(raw) = PyUntypedBuffer::get(obj) {
                if raw.dimensions() > 1 {
                    return Err(DataError::value(format!(
                        "a {}-dimensional array given for a sequence (pass a 1-D array, or \
                         declare the field NDArray[...] to keep its shape)",
                        raw.dimensions()
                    )));
                }
                let buf = check_dtype(raw, dtype)?;
                ops.push(le_u64(buf.item_count() as u64));
                let n = 8 + buf.len_bytes();
                ops.push(Op::Buf(buf, dtype));
                return Ok(n);
            }
        }
    }
    let items = sequence_items(obj)?;
    ops.push(le_u64(items.len() as u64));
    let mut n = 8;
    for (i, v) in items.iter().enumerate() {
        n += measure(elem, v, ops).map_err(|e| e.within(&format!("[{i}]")))?;
    }
    Ok(n)
}

/// The buffer of an array field, its format checked against the declared dtype.
fn buffer(obj: &Bound<'_, PyAny>, dtype: DType) -> Result<PyUntypedBuffer, DataError> {
    let raw = PyUntypedBuffer::get(obj).map_err(|_| {
        DataError::ty(format!(
            "expected an array of {dtype} (numpy or a buffer), got {}",
            type_name(obj)
        ))
    })?;
    check_dtype(raw, dtype)
}

fn check_dtype(raw: PyUntypedBuffer, dtype: DType) -> Result<PyUntypedBuffer, DataError> {
    fn ok<T: Element>(b: &PyUntypedBuffer) -> bool {
        std::mem::size_of::<T>() == b.item_size() && T::is_compatible_format(b.format())
    }
    if raw.buf_ptr().align_offset(dtype.size_bytes()) != 0 {
        return Err(DataError::value(format!(
            "the array's memory is not aligned for {dtype} (a view at an odd offset); pass a \
             copy (np.ascontiguousarray)"
        )));
    }
    let fits = match dtype {
        DType::U8 => ok::<u8>(&raw),
        DType::U16 => ok::<u16>(&raw),
        DType::U32 => ok::<u32>(&raw),
        DType::U64 => ok::<u64>(&raw),
        DType::I8 => ok::<i8>(&raw),
        DType::I16 => ok::<i16>(&raw),
        DType::I32 => ok::<i32>(&raw),
        DType::I64 => ok::<i64>(&raw),
        DType::F32 => ok::<f32>(&raw),
        DType::F64 => ok::<f64>(&raw),
    };
    if fits {
        Ok(raw)
    } else {
        Err(DataError::value(format!(
            "array of format {:?} (item size {}) given where dtype {dtype} is declared \
             (native little-endian; convert with .astype(np.{}))",
            raw.format(),
            raw.item_size(),
            numpy_name(dtype)
        )))
    }
}

fn numpy_name(d: DType) -> &'static str {
    match d {
        DType::U8 => "uint8",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::F32 => "float32",
        DType::F64 => "float64",
    }
}

/// Pass 2: writes the ops into the frame (exactly the length pass 1 measured).
pub(crate) fn write(py: Python<'_>, ops: &[Op<'_>], buf: &mut [u8]) -> Result<(), EncodeError> {
    let total = buf.len();
    let mut pos = 0usize;
    let mismatch = |written: usize| EncodeError::LengthMismatch {
        promised: total,
        written,
    };
    for op in ops {
        let n = match op {
            Op::Le(_, n) => usize::from(*n),
            Op::Str(s) => s.to_str().map_err(|_| mismatch(pos))?.len(),
            Op::Bytes(b) => b.as_bytes().len(),
            Op::Buf(b, _) => b.len_bytes(),
        };
        let dst = buf.get_mut(pos..pos + n).ok_or_else(|| mismatch(pos + n))?;
        match op {
            Op::Le(bytes, n) => dst.copy_from_slice(&bytes[..usize::from(*n)]),
            Op::Str(s) => dst.copy_from_slice(s.to_str().map_err(|_| mismatch(pos))?.as_bytes()),
            Op::Bytes(b) => dst.copy_from_slice(b.as_bytes()),
            Op::Buf(b, dtype) => {
                copy_buffer(py, b, *dtype, dst).map_err(|e| EncodeError::TypeMismatch {
                    path: String::new(),
                    expected: format!("an array of {dtype}"),
                    found: e.to_string(),
                })?
            }
        }
        pos += n;
    }
    if pos == total {
        Ok(())
    } else {
        Err(mismatch(pos))
    }
}

/// Copies a buffer (any strides, C order) into `dst` once; a destination not aligned for the
/// element type goes through an aligned copy first (tensors after odd-length strings).
fn copy_buffer(py: Python<'_>, b: &PyUntypedBuffer, dtype: DType, dst: &mut [u8]) -> PyResult<()> {
    fn typed<T: Element + bytemuck::Pod>(
        py: Python<'_>,
        b: &PyUntypedBuffer,
        dst: &mut [u8],
    ) -> PyResult<()> {
        // Pass 1 checked format, size and alignment.
        let typed: &PyBuffer<T> = b.as_typed::<T>()?;
        match bytemuck::try_cast_slice_mut::<u8, T>(dst) {
            Ok(d) => typed.copy_to_slice(py, d),
            Err(_) => {
                let v = typed.to_vec(py)?;
                dst.copy_from_slice(bytemuck::cast_slice(&v));
                Ok(())
            }
        }
    }
    match dtype {
        DType::U8 => typed::<u8>(py, b, dst),
        DType::U16 => typed::<u16>(py, b, dst),
        DType::U32 => typed::<u32>(py, b, dst),
        DType::U64 => typed::<u64>(py, b, dst),
        DType::I8 => typed::<i8>(py, b, dst),
        DType::I16 => typed::<i16>(py, b, dst),
        DType::I32 => typed::<i32>(py, b, dst),
        DType::I64 => typed::<i64>(py, b, dst),
        DType::F32 => typed::<f32>(py, b, dst),
        DType::F64 => typed::<f64>(py, b, dst),
    }
}

// ---------------------------------------------------------------------------------------------
// Compiling plans.
// ---------------------------------------------------------------------------------------------

fn dtype_named(name: &str) -> PyResult<DType> {
    DType::ALL
        .into_iter()
        .find(|d| d.name() == name)
        .ok_or_else(|| PyTypeError::new_err(format!("unknown dtype {name:?}")))
}

/// Compiles a plan node (see `snapbus/schema.py`) into a [`Node`] and its [`TypeDesc`].
fn compile_node(py: Python<'_>, plan: &Bound<'_, PyAny>) -> PyResult<(Node, TypeDesc)> {
    let t = plan.cast::<PyTuple>()?;
    let kind: String = t.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "bool" => (Node::Bool, TypeDesc::Bool),
        "int" => {
            let name: String = t.get_item(1)?.extract()?;
            let (k, d) = match name.as_str() {
                "u8" => (Int::U8, TypeDesc::U8),
                "u16" => (Int::U16, TypeDesc::U16),
                "u32" => (Int::U32, TypeDesc::U32),
                "u64" => (Int::U64, TypeDesc::U64),
                "i8" => (Int::I8, TypeDesc::I8),
                "i16" => (Int::I16, TypeDesc::I16),
                "i32" => (Int::I32, TypeDesc::I32),
                "i64" => (Int::I64, TypeDesc::I64),
                other => return Err(PyTypeError::new_err(format!("unknown int {other:?}"))),
            };
            (Node::Int(k), d)
        }
        "float" => {
            let name: String = t.get_item(1)?.extract()?;
            if name == "f32" {
                (Node::F32, TypeDesc::F32)
            } else {
                (Node::F64, TypeDesc::F64)
            }
        }
        "str" => (Node::Str, TypeDesc::String),
        "bytes" => (Node::Bytes, TypeDesc::Bytes),
        "enum" => {
            let names: Vec<String> = t.get_item(1)?.extract()?;
            let map = t.get_item(2)?.cast_into::<PyDict>()?.unbind();
            let variants = names.iter().map(Variant::unit).collect();
            (Node::Enum(map, names), TypeDesc::Enum { variants })
        }
        "option" => {
            let (n, d) = compile_node(py, &t.get_item(1)?)?;
            (
                Node::Option(Box::new(n)),
                TypeDesc::Option { some: Box::new(d) },
            )
        }
        "seq" => {
            let (n, d) = compile_node(py, &t.get_item(1)?)?;
            (Node::Seq(Box::new(n)), TypeDesc::Seq { elem: Box::new(d) })
        }
        "tuple" => {
            let mut nodes = Vec::new();
            let mut descs = Vec::new();
            for e in t.get_item(1)?.try_iter()? {
                let (n, d) = compile_node(py, &e?)?;
                nodes.push(n);
                descs.push(d);
            }
            (Node::Tuple(nodes), TypeDesc::Tuple { elems: descs })
        }
        "map" => {
            let (kn, kd) = compile_node(py, &t.get_item(1)?)?;
            let (vn, vd) = compile_node(py, &t.get_item(2)?)?;
            (
                Node::Map(Box::new(kn), Box::new(vn)),
                TypeDesc::Map {
                    key: Box::new(kd),
                    value: Box::new(vd),
                },
            )
        }
        "struct" => {
            let mut nodes = Vec::new();
            let mut fields = Vec::new();
            for f in t.get_item(1)?.try_iter()? {
                let f = f?;
                let f = f.cast::<PyTuple>()?;
                let name: String = f.get_item(0)?.extract()?;
                let since: u32 = f.get_item(1)?.extract()?;
                let (n, d) = compile_node(py, &f.get_item(2)?)?;
                nodes.push((PyString::intern(py, &name).unbind(), n));
                fields.push(Field::since(name, d, since));
            }
            (Node::Struct(nodes), TypeDesc::Struct { fields })
        }
        "tensor" => {
            let d = dtype_named(&t.get_item(1)?.extract::<String>()?)?;
            (Node::Tensor(d), TypeDesc::Tensor { dtype: d })
        }
        other => return Err(PyTypeError::new_err(format!("unknown plan node {other:?}"))),
    })
}

/// Every class compiled in this process (holding the class, so its address stays unique).
static PLANS: Mutex<Vec<(Py<PyType>, Arc<Compiled>)>> = Mutex::new(Vec::new());
/// (schema id, version) → fingerprint and class, for the "changed under the same version" check.
/// The descriptors (and the classes that made them) registered in this process, by schema id.
type Layouts = HashMap<String, Vec<(SchemaDescriptor, String)>>;
/// For the "changed under the same version" and evolution checks.
static LAYOUTS: Mutex<Option<Layouts>> = Mutex::new(None);

thread_local! {
    /// (class address, plan), most recently used first: the lock-free first level.
    static LOCAL: std::cell::RefCell<Vec<(usize, Arc<Compiled>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The compiled plan of `cls`, compiling it on first use (`TypeError` for a class that cannot
/// be a schema, naming the field).
pub(crate) fn plan_for(cls: &Bound<'_, PyType>) -> PyResult<Arc<Compiled>> {
    let key = cls.as_ptr() as usize;
    let hit = LOCAL.with(|l| {
        let l = l.borrow();
        l.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, p)| Arc::clone(p))
    });
    if let Some(p) = hit {
        return Ok(p);
    }
    let plan = shared_plan(cls)?;
    LOCAL.with(|l| {
        let mut l = l.borrow_mut();
        l.insert(0, (key, Arc::clone(&plan)));
        l.truncate(64);
    });
    Ok(plan)
}

/// The process-wide level: compiled once per class (a class compiled by two threads at once
/// keeps the first plan stored).
fn shared_plan(cls: &Bound<'_, PyType>) -> PyResult<Arc<Compiled>> {
    {
        let plans = PLANS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, p)) = plans.iter().find(|(c, _)| c.is(cls)) {
            return Ok(Arc::clone(p));
        }
    }
    let compiled = Arc::new(compile(cls)?);
    let mut plans = PLANS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = plans.iter().find(|(c, _)| c.is(cls)) {
        return Ok(Arc::clone(p));
    }
    plans.push((cls.clone().unbind(), Arc::clone(&compiled)));
    Ok(compiled)
}

/// Walks `cls` (Python) and compiles the result (Rust): descriptor validated, layout checked
/// against what this process already registered under the same id and version.
fn compile(cls: &Bound<'_, PyType>) -> PyResult<Compiled> {
    let py = cls.py();
    let walked = py
        .import("snapbus.schema")?
        .getattr("plan_of")?
        .call1((cls,))?;
    let (id, version, root): (String, u32, Bound<'_, PyAny>) = walked.extract()?;
    let class = cls.qualname()?.to_string();
    let (node, desc) = compile_node(py, &root)?;
    let desc = SchemaDescriptor::new(id.clone(), version, desc)
        .map_err(|e| PyTypeError::new_err(format!("{class}: not a valid schema: {e}")))?;
    check_layout(&desc, &class)?;
    Ok(Compiled {
        desc,
        root: node,
        class,
        class_id: cls.as_ptr() as usize,
    })
}

/// Refuses a descriptor that this process registered before under the same id with a layout
/// the evolution rules do not allow: a different layout under the same version (a notebook
/// cell re-defining a class), or versions that are not "fields appended, with `since`".
fn check_layout(desc: &SchemaDescriptor, class: &str) -> PyResult<()> {
    let mut layouts = LAYOUTS.lock().unwrap_or_else(|p| p.into_inner());
    let known = layouts
        .get_or_insert_with(HashMap::new)
        .entry(desc.id().to_owned())
        .or_default();
    let (id, version) = (desc.id(), desc.version());
    for (other, other_class) in known.iter() {
        if other.version() == version && other.fingerprint() != desc.fingerprint() {
            return Err(PyTypeError::new_err(format!(
                "{class}: schema {id:?} version {version} was already registered in this \
                 process by {other_class} with a different layout (fingerprint {:016x}, now \
                 {:016x}); changing a schema's fields needs a new schema_version (append \
                 fields with defaults and field(metadata={{\"since\": N}})) or a new schema_id",
                other.fingerprint(),
                desc.fingerprint()
            )));
        }
        if other.version() != version {
            let (old, new) = if other.version() < version {
                (other, desc)
            } else {
                (desc, other)
            };
            if let Err(e) = check_compatible(new, old) {
                return Err(PyTypeError::new_err(format!(
                    "{class}: schema {id:?} version {version} does not evolve from version {} \
                     ({other_class}) by the rules (fields only appended, each with \
                     field(metadata={{\"since\": N}})): {e}",
                    other.version()
                )));
            }
        }
    }
    if !known
        .iter()
        .any(|(d, _)| d.fingerprint() == desc.fingerprint())
    {
        known.push((desc.clone(), class.to_owned()));
    }
    Ok(())
}
