//! Pass 1: an object checked against its plan node, field by field (interned `getattr`, one
//! typed extract each), its ops appended and its exact encoded length returned. [`measure`]
//! handles the scalars itself (the per-field hot path) and hands every other kind of node to
//! a helper of its own.

use pyo3::buffer::PyUntypedBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use snapbus::schemas::DType;

use super::buffer::{buffer, check_dtype};
use super::{DataError, Int, Node, Op, le, le_u64, type_name};

/// Pass 1: checks `obj` against `node`, appends its ops, returns its encoded length.
pub(crate) fn measure<'py>(
    node: &Node,
    obj: &Bound<'py, PyAny>,
    ops: &mut Vec<Op<'py>>,
) -> Result<usize, DataError> {
    Ok(match node {
        Node::Struct(fields) => measure_struct(fields, obj, ops)?,
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
        Node::Str => measure_str(obj, ops)?,
        Node::Bytes => measure_bytes(obj, ops)?,
        Node::Enum(map, names) => measure_enum(map, names, obj, ops)?,
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
        Node::Tuple(elems) => measure_tuple(elems, obj, ops)?,
        Node::Map(k, v) => measure_map(k, v, obj, ops)?,
        Node::Tensor(dtype) => measure_tensor(*dtype, obj, ops)?,
    })
}

/// A struct: each field read by its interned name and measured, in declaration order.
#[inline]
fn measure_struct<'py>(
    fields: &[(Py<PyString>, Node)],
    obj: &Bound<'py, PyAny>,
    ops: &mut Vec<Op<'py>>,
) -> Result<usize, DataError> {
    let py = obj.py();
    let mut n = 0;
    for (name, sub) in fields {
        let v = obj.getattr(name.bind(py)).map_err(|_| {
            DataError::ty(format!("missing attribute (got a {})", type_name(obj)))
                .within(&name.to_string())
        })?;
        n += measure(sub, &v, ops).map_err(|e| e.within(&name.to_string()))?;
    }
    Ok(n)
}

/// A `str`: its UTF-8 length, then its bytes.
#[inline]
fn measure_str<'py>(obj: &Bound<'py, PyAny>, ops: &mut Vec<Op<'py>>) -> Result<usize, DataError> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| DataError::ty(format!("expected str, got {}", type_name(obj))))?;
    let len = s
        .to_str()
        .map_err(|_| DataError::value("a str that is not valid UTF-8".into()))?
        .len();
    ops.push(le_u64(len as u64));
    ops.push(Op::Str(s.clone()));
    Ok(8 + len)
}

/// `bytes`, or any buffer of bytes: its length, then its contents.
#[inline]
fn measure_bytes<'py>(obj: &Bound<'py, PyAny>, ops: &mut Vec<Op<'py>>) -> Result<usize, DataError> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        let len = b.as_bytes().len();
        ops.push(le_u64(len as u64));
        ops.push(Op::Bytes(b.clone()));
        Ok(8 + len)
    } else {
        let buf = buffer(obj, DType::U8)
            .map_err(|_| DataError::ty(format!("expected bytes, got {}", type_name(obj))))?;
        let len = buf.len_bytes();
        ops.push(le_u64(len as u64));
        ops.push(Op::Buf(buf, DType::U8));
        Ok(8 + len)
    }
}

/// An enum member (or literal string): its variant index.
#[inline]
fn measure_enum(
    map: &Py<PyDict>,
    names: &[String],
    obj: &Bound<'_, PyAny>,
    ops: &mut Vec<Op<'_>>,
) -> Result<usize, DataError> {
    let idx = map
        .bind(obj.py())
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
    Ok(4)
}

/// A fixed-length tuple: each element measured against its own node.
#[inline]
fn measure_tuple<'py>(
    elems: &[Node],
    obj: &Bound<'py, PyAny>,
    ops: &mut Vec<Op<'py>>,
) -> Result<usize, DataError> {
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
    Ok(n)
}

/// A `dict`: its length, then each key and value.
#[inline]
fn measure_map<'py>(
    k: &Node,
    v: &Node,
    obj: &Bound<'py, PyAny>,
    ops: &mut Vec<Op<'py>>,
) -> Result<usize, DataError> {
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
    Ok(n)
}

/// An array kept with its shape: rank, dimensions, element count, then the elements.
#[inline]
fn measure_tensor(
    dtype: DType,
    obj: &Bound<'_, PyAny>,
    ops: &mut Vec<Op<'_>>,
) -> Result<usize, DataError> {
    let buf = buffer(obj, dtype)?;
    let shape = buf.shape();
    ops.push(le_u64(shape.len() as u64));
    for &d in shape {
        ops.push(le_u64(d as u64));
    }
    ops.push(le_u64(buf.item_count() as u64));
    let n = 16 + 8 * shape.len() + buf.len_bytes();
    ops.push(Op::Buf(buf, dtype));
    Ok(n)
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
