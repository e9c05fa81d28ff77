//! Pass 1: an object checked against its plan node, field by field (interned `getattr`, one
//! typed extract each), and its encoding staged ([`Staged`]). [`measure`] handles the scalars
//! itself (the per-field hot path) and hands every other kind of node to a helper of its own.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use snapbus::schemas::DType;

use super::array::Array;
use super::buffer::{buffer, cast, check_dtype};
use super::dynamic::measure_dynamic;
use super::{DataError, Node, Piece, STAGE_MAX_BYTES, Staged, type_name};

/// Pass 1: checks `obj` against `node` and stages its encoding.
pub(crate) fn measure<'py>(
    node: &Node,
    obj: &Bound<'py, PyAny>,
    out: &mut Staged<'py>,
) -> Result<(), DataError> {
    match node {
        Node::Struct(fields) => measure_struct(fields, obj, out)?,
        Node::Bool => {
            let b = obj
                .extract::<bool>()
                .map_err(|_| DataError::ty(format!("expected bool, got {}", type_name(obj))))?;
            out.put(&[u8::from(b)]);
        }
        Node::Num(DType::F64) => out.put(&float(obj)?.to_le_bytes()),
        Node::Num(DType::F32) => out.put(&(float(obj)? as f32).to_le_bytes()),
        Node::Num(dtype) => int(*dtype, obj, out)?,
        Node::Str => measure_str(obj, out)?,
        Node::Bytes => measure_bytes(obj, out)?,
        Node::Enum(map, names) => measure_enum(map, names, obj, out)?,
        Node::Option(inner) => {
            if obj.is_none() {
                out.put(&[0]);
            } else {
                out.put(&[1]);
                measure(inner, obj, out)?;
            }
        }
        Node::Seq(elem) => measure_seq(elem, obj, out)?,
        Node::Tuple(elems) => measure_tuple(elems, obj, out)?,
        Node::Map(k, v) => measure_map(k, v, obj, out)?,
        Node::Tensor(dtype) => measure_tensor(*dtype, obj, out)?,
        Node::Dynamic => measure_dynamic(obj, out, 0)?,
    }
    Ok(())
}

/// A struct: each field read by its interned name and measured, in declaration order.
#[inline]
fn measure_struct<'py>(
    fields: &[(Py<PyString>, Node)],
    obj: &Bound<'py, PyAny>,
    out: &mut Staged<'py>,
) -> Result<(), DataError> {
    let py = obj.py();
    for (name, sub) in fields {
        let v = obj.getattr(name.bind(py)).map_err(|_| {
            DataError::ty(format!("missing attribute (got a {})", type_name(obj)))
                .within(&name.to_string())
        })?;
        measure(sub, &v, out).map_err(|e| e.within(&name.to_string()))?;
    }
    Ok(())
}

/// A `str`: its UTF-8 length, then its bytes.
#[inline]
pub(super) fn measure_str<'py>(
    obj: &Bound<'py, PyAny>,
    out: &mut Staged<'py>,
) -> Result<(), DataError> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| DataError::ty(format!("expected str, got {}", type_name(obj))))?;
    let text = s
        .to_cow()
        .map_err(|_| DataError::value("a str that is not valid UTF-8".into()))?;
    out.put_u64(text.len() as u64);
    if text.len() <= STAGE_MAX_BYTES {
        out.put(text.as_bytes());
    } else {
        out.piece(text.len(), Piece::Str(s.clone()))?;
    }
    Ok(())
}

/// `bytes`, or any buffer of bytes: its length, then its contents.
#[inline]
pub(super) fn measure_bytes<'py>(
    obj: &Bound<'py, PyAny>,
    out: &mut Staged<'py>,
) -> Result<(), DataError> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        let bytes = b.as_bytes();
        out.put_u64(bytes.len() as u64);
        if bytes.len() <= STAGE_MAX_BYTES {
            out.put(bytes);
        } else {
            out.piece(bytes.len(), Piece::Bytes(b.clone()))?;
        }
    } else {
        let buf = buffer(obj, DType::U8)
            .map_err(|_| DataError::ty(format!("expected bytes, got {}", type_name(obj))))?;
        let len = buf.len_bytes();
        out.put_u64(len as u64);
        out.piece(len, Piece::Buf(buf, DType::U8))?;
    }
    Ok(())
}

/// An enum member (or literal string): its variant index.
#[inline]
fn measure_enum(
    map: &Py<PyDict>,
    names: &[String],
    obj: &Bound<'_, PyAny>,
    out: &mut Staged<'_>,
) -> Result<(), DataError> {
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
    out.put(&idx.to_le_bytes());
    Ok(())
}

/// A fixed-length tuple: each element measured against its own node.
#[inline]
fn measure_tuple<'py>(
    elems: &[Node],
    obj: &Bound<'py, PyAny>,
    out: &mut Staged<'py>,
) -> Result<(), DataError> {
    let items = sequence_items(obj)?;
    if items.len() != elems.len() {
        return Err(DataError::value(format!(
            "expected {} elements, got {}",
            elems.len(),
            items.len()
        )));
    }
    for (i, (e, v)) in elems.iter().zip(items.iter()).enumerate() {
        measure(e, v, out).map_err(|err| err.within(&i.to_string()))?;
    }
    Ok(())
}

/// A `dict`: its length, then each key and value.
#[inline]
fn measure_map<'py>(
    k: &Node,
    v: &Node,
    obj: &Bound<'py, PyAny>,
    out: &mut Staged<'py>,
) -> Result<(), DataError> {
    let d = obj
        .cast::<PyDict>()
        .map_err(|_| DataError::ty(format!("expected dict, got {}", type_name(obj))))?;
    out.put_u64(d.len() as u64);
    for (key, value) in d.iter() {
        measure(k, &key, out).map_err(|e| e.within("{key}"))?;
        measure(v, &value, out).map_err(|e| {
            let label = key.str().map_or_else(|_| "?".into(), |s| s.to_string());
            e.within(&format!("[{label:?}]"))
        })?;
    }
    Ok(())
}

/// An array kept with its shape: rank, dimensions, element count, then the elements.
#[inline]
fn measure_tensor<'py>(
    dtype: DType,
    obj: &Bound<'py, PyAny>,
    out: &mut Staged<'py>,
) -> Result<(), DataError> {
    let buf = buffer(obj, dtype)?;
    let shape = buf.shape();
    out.put_u64(shape.len() as u64);
    for &d in shape {
        out.put_u64(d as u64);
    }
    out.put_u64(buf.item_count() as u64);
    out.piece(buf.len_bytes(), Piece::Buf(buf, dtype))?;
    Ok(())
}

fn float(obj: &Bound<'_, PyAny>) -> Result<f64, DataError> {
    if obj.is_instance_of::<PyString>() {
        return Err(DataError::ty("expected float, got str".into()));
    }
    obj.extract::<f64>()
        .map_err(|_| DataError::ty(format!("expected float, got {}", type_name(obj))))
}

/// An integer of dtype `kind`: range-checked, little-endian. A `float` or `str` is refused
/// before any conversion (CPython 3.8 would truncate a float through `__int__`).
fn int(kind: DType, obj: &Bound<'_, PyAny>, out: &mut Staged<'_>) -> Result<(), DataError> {
    if !obj.is_exact_instance_of::<PyInt>()
        && (obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyString>())
    {
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
            out.put(&v.to_le_bytes())
        }};
    }
    match kind {
        DType::U8 => get!(u8, "u8"),
        DType::U16 => get!(u16, "u16"),
        DType::U32 => get!(u32, "u32"),
        DType::U64 => get!(u64, "u64"),
        DType::I8 => get!(i8, "i8"),
        DType::I16 => get!(i16, "i16"),
        DType::I32 => get!(i32, "i32"),
        DType::I64 => get!(i64, "i64"),
        // Not reached: `measure` takes floats before the integer checks above.
        DType::F32 => out.put(&(float(obj)? as f32).to_le_bytes()),
        DType::F64 => out.put(&float(obj)?.to_le_bytes()),
    }
    Ok(())
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
    out: &mut Staged<'py>,
) -> Result<(), DataError> {
    // Numeric elements from a buffer (numpy array, array.array): one copy, not per element.
    if let Some(dtype) = elem.dtype() {
        if !obj.is_instance_of::<PyList>() && !obj.is_instance_of::<PyTuple>() {
            if let Ok(raw) = Array::get(obj) {
                if raw.dimensions() > 1 {
                    return Err(DataError::value(format!(
                        "a {}-dimensional array given for a sequence (pass a 1-D array, or \
                         declare the field NDArray[...] to keep its shape)",
                        raw.dimensions()
                    )));
                }
                let buf = check_dtype(raw, dtype).or_else(|e| cast(obj, dtype, e))?;
                out.put_u64(buf.item_count() as u64);
                out.piece(buf.len_bytes(), Piece::Buf(buf, dtype))?;
                return Ok(());
            }
        }
    }
    let items = sequence_items(obj)?;
    out.put_u64(items.len() as u64);
    if let Some(dtype) = elem.dtype() {
        out.bytes.reserve(items.len() * dtype.size_bytes());
    }
    for (i, v) in items.iter().enumerate() {
        measure(elem, v, out).map_err(|e| e.within(&format!("[{i}]")))?;
    }
    Ok(())
}
