//! Dynamic values in pass 1: a Python value whose type is known only at run time (a field
//! annotated `dict` or `Any`, a pydantic extra, a `dict` event's entry) staged by what it is,
//! in the wire form of `TypeDesc::Dynamic` (`snapbus_schemas::dynamic`): a tag byte, then the
//! body. The built-in types are tried first (the common case: one type-flag check each);
//! enums, numpy scalars, dataclasses, pydantic models and arrays after them.

use std::cell::RefCell;
use std::rc::Rc;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMemoryView, PyString, PyTuple,
    PyType,
};
use pyo3::{PyTypeInfo, intern};
use snapbus::schemas::MAX_DESC_DEPTH;
use snapbus::schemas::dynamic::Tag;

use super::array::Array;
use super::measure::{measure_bytes, measure_str};
use super::{DataError, Piece, Staged, type_name};

/// Stages `obj` as a dynamic value nested `depth` containers deep.
pub(crate) fn measure_dynamic<'py>(
    obj: &Bound<'py, PyAny>,
    out: &mut Staged<'py>,
    depth: usize,
) -> Result<(), DataError> {
    if depth >= MAX_DESC_DEPTH {
        return Err(DataError::value(format!(
            "nested more than {MAX_DESC_DEPTH} containers deep (does it contain itself?)"
        )));
    }
    // The built-in kinds first, by their type flags (a subclass encodes as its base: an
    // `IntEnum` or `str`-mixin `Enum` member is its value either way, a numpy float64 a float).
    if obj.is_none() {
        out.put(&[Tag::None as u8]);
    } else if let Ok(b) = obj.cast::<PyBool>() {
        out.put(&[Tag::Bool as u8, u8::from(b.is_true())]);
    } else if obj.is_instance_of::<PyInt>() {
        int(obj, out)?;
    } else if let Ok(f) = obj.cast::<PyFloat>() {
        float(f.value(), out);
    } else if obj.is_instance_of::<PyString>() {
        out.put(&[Tag::Str as u8]);
        measure_str(obj, out)?;
    } else if let Ok(d) = obj.cast::<PyDict>() {
        map(d, out, depth)?;
    } else if let Ok(l) = obj.cast::<PyList>() {
        list(l.iter(), l.len(), out, depth)?;
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        list(t.iter(), t.len(), out, depth)?;
    } else if obj.is_instance_of::<PyBytes>() || obj.is_instance_of::<PyByteArray>() {
        out.put(&[Tag::Bytes as u8]);
        measure_bytes(obj, out)?;
    } else {
        other(obj, out, depth)?;
    }
    Ok(())
}

/// Everything but the built-in kinds: enums, numpy scalars, dataclasses and pydantic models,
/// arrays.
fn other<'py>(
    obj: &Bound<'py, PyAny>,
    out: &mut Staged<'py>,
    depth: usize,
) -> Result<(), DataError> {
    let py = obj.py();
    if obj.is_instance(enum_type(py).bind(py)).unwrap_or(false) {
        // An Enum member is its value (as pydantic's `model_dump(mode="json")` has it).
        let value = obj
            .getattr(intern!(py, "value"))
            .map_err(|e| py_error(py, &e))?;
        return measure_dynamic(&value, out, depth + 1);
    }
    if let Some(np) = numpy(py) {
        if obj.is_instance(np.generic.bind(py)).unwrap_or(false) {
            return numpy_scalar(np, obj, out);
        }
    }
    if let Some(names) = field_names(obj)? {
        record(obj, &names, out, depth)?;
    } else if obj.is_instance_of::<PyMemoryView>() && is_byte_view(obj) {
        out.put(&[Tag::Bytes as u8]);
        measure_bytes(obj, out)?;
    } else if Array::get(obj).is_ok() || obj.hasattr(intern!(py, "__array__")).unwrap_or(false) {
        ndarray(obj, out)?;
    } else {
        return Err(DataError::ty(format!(
            "a value of type {} has no dynamic encoding (None, bool, int, float, str, bytes, Enum, \
             dataclass, pydantic model, dict with str keys, list, tuple, numpy array or scalar)",
            type_name(obj)
        )));
    }
    Ok(())
}

/// An int: `i64`, else `u64`, else refused.
fn int(obj: &Bound<'_, PyAny>, out: &mut Staged<'_>) -> Result<(), DataError> {
    if let Ok(v) = obj.extract::<i64>() {
        out.put(&[Tag::I64 as u8]);
        out.put(&v.to_le_bytes());
    } else if let Ok(v) = obj.extract::<u64>() {
        out.put(&[Tag::U64 as u8]);
        out.put(&v.to_le_bytes());
    } else {
        return Err(DataError::ty(format!(
            "{} does not fit 64 bits",
            obj.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        )));
    }
    Ok(())
}

#[inline]
fn float(v: f64, out: &mut Staged<'_>) {
    out.put(&[Tag::F64 as u8]);
    out.put(&v.to_le_bytes());
}

/// A dict with `str` keys: a map.
fn map<'py>(d: &Bound<'py, PyDict>, out: &mut Staged<'py>, depth: usize) -> Result<(), DataError> {
    out.put(&[Tag::Map as u8]);
    out.put_u64(d.len() as u64);
    for (k, v) in d.iter() {
        entry(&k, &v, out, depth)?;
    }
    Ok(())
}

/// One map entry: its key (a `str`), then its value.
fn entry<'py>(
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    out: &mut Staged<'py>,
    depth: usize,
) -> Result<(), DataError> {
    let key = k.cast::<PyString>().map_err(|_| {
        DataError::ty(format!(
            "a dict key {} is not a str (dynamic maps have str keys)",
            k.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))
    })?;
    measure_str(key.as_any(), out).map_err(|e| e.within("{key}"))?;
    measure_dynamic(v, out, depth + 1).map_err(|e| e.within(&key.to_string()))
}

/// A list or tuple: a list.
fn list<'py>(
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    n: usize,
    out: &mut Staged<'py>,
    depth: usize,
) -> Result<(), DataError> {
    out.put(&[Tag::List as u8]);
    out.put_u64(n as u64);
    for (i, v) in items.enumerate() {
        measure_dynamic(&v, out, depth + 1).map_err(|e| e.within(&format!("[{i}]")))?;
    }
    Ok(())
}

/// A dataclass or pydantic model instance: a map of its fields (a model's extras after its
/// declared fields).
fn record<'py>(
    obj: &Bound<'py, PyAny>,
    names: &[Py<PyString>],
    out: &mut Staged<'py>,
    depth: usize,
) -> Result<(), DataError> {
    let py = obj.py();
    let extra = if obj
        .hasattr(intern!(py, "__pydantic_extra__"))
        .unwrap_or(false)
    {
        obj.getattr(intern!(py, "__pydantic_extra__"))
            .ok()
            .and_then(|e| e.cast_into::<PyDict>().ok())
    } else {
        None
    };
    let n = names.len() + extra.as_ref().map_or(0, |e| e.len());
    out.put(&[Tag::Map as u8]);
    out.put_u64(n as u64);
    for name in names {
        let name = name.bind(py);
        let v = obj
            .getattr(name)
            .map_err(|e| py_error(py, &e).within(&name.to_string()))?;
        entry(name.as_any(), &v, out, depth)?;
    }
    if let Some(extra) = extra {
        for (k, v) in extra.iter() {
            entry(&k, &v, out, depth)?;
        }
    }
    Ok(())
}

/// A record class's field names.
type Names = Rc<[Py<PyString>]>;

/// The field names of a dataclass or pydantic model instance (cached per class), `None` for
/// anything else.
fn field_names(obj: &Bound<'_, PyAny>) -> Result<Option<Names>, DataError> {
    thread_local! {
        static NAMES: RefCell<Vec<(Py<PyType>, Option<Names>)>> =
            const { RefCell::new(Vec::new()) };
    }
    let py = obj.py();
    let cls = obj.get_type();
    let hit = NAMES.with(|n| {
        n.borrow()
            .iter()
            .find(|(c, _)| c.is(&cls))
            .map(|(_, names)| names.clone())
    });
    if let Some(names) = hit {
        return Ok(names);
    }
    let names: Option<Names> = py
        .import("snapbus.schema")
        .and_then(|m| m.getattr("_record_fields")?.call1((&cls,)))
        .and_then(|r| r.extract::<Option<Vec<Py<PyString>>>>())
        .map_err(|e| py_error(py, &e))?
        .map(Into::into);
    NAMES.with(|n| n.borrow_mut().push((cls.unbind(), names.clone())));
    Ok(names)
}

/// A numpy scalar: a bool, int or float as the Python scalar kinds, any other as an array.
fn numpy_scalar<'py>(
    np: &Numpy,
    obj: &Bound<'py, PyAny>,
    out: &mut Staged<'py>,
) -> Result<(), DataError> {
    let py = obj.py();
    if obj.is_instance(np.bool_.bind(py)).unwrap_or(false) {
        out.put(&[Tag::Bool as u8, u8::from(obj.is_truthy().unwrap_or(false))]);
    } else if obj.is_instance(np.integer.bind(py)).unwrap_or(false) {
        int(obj, out)?;
    } else if obj.is_instance(np.floating.bind(py)).unwrap_or(false) {
        let v = obj.extract::<f64>().map_err(|e| py_error(py, &e))?;
        float(v, out);
    } else {
        ndarray(obj, out)?;
    }
    Ok(())
}

/// An array (anything with a buffer or `__array__`): tag, dtype code, then a tensor's layout,
/// its elements a piece copied in pass 2. A C-contiguous, aligned, native copy is made first
/// where the object's own memory is not one (numpy's `require`).
fn ndarray<'py>(obj: &Bound<'py, PyAny>, out: &mut Staged<'py>) -> Result<(), DataError> {
    let py = obj.py();
    let direct = Array::get(obj)
        .ok()
        .and_then(|b| b.dtype().map(|d| (b, d)))
        .filter(|(b, d)| b.is_c_contiguous() && b.is_aligned(d.size_bytes()));
    // A 0-dimensional array is copied as one element (a buffer of rank 0 has no shape).
    let mut scalar = false;
    let (buf, dtype) = match direct {
        Some(found) => found,
        None => {
            let (arr, zero_d): (Bound<'_, PyAny>, bool) = py
                .import("snapbus.schema")
                .and_then(|m| m.getattr("_as_c_array")?.call1((obj,))?.extract())
                .map_err(|e| py_error(py, &e))?;
            scalar = zero_d;
            let buf = Array::get(&arr).map_err(|e| py_error(py, &e))?;
            let dtype = buf.dtype().ok_or_else(|| {
                DataError::value(format!(
                    "an array of format {:?} (item size {}) has no snapbus dtype (supported: \
                     bool as uint8, uint8..uint64, int8..int64, float32, float64)",
                    buf.format_text(),
                    buf.item_size()
                ))
            })?;
            (buf, dtype)
        }
    };
    out.put(&[Tag::NdArray as u8, dtype.code()]);
    let shape = if scalar { &[][..] } else { buf.shape() };
    out.put_u64(shape.len() as u64);
    for &d in shape {
        out.put_u64(d as u64);
    }
    out.put_u64(buf.item_count() as u64);
    out.piece(buf.len_bytes(), Piece::Buf(buf, dtype))
}

/// A memoryview of bytes (format `B`): bytes, not an array.
fn is_byte_view(obj: &Bound<'_, PyAny>) -> bool {
    Array::get(obj)
        .is_ok_and(|b| b.dimensions() <= 1 && b.item_size() == 1 && matches!(b.format(), b"B"))
}

fn py_error(py: Python<'_>, e: &PyErr) -> DataError {
    DataError::ty(e.value(py).to_string())
}

/// `enum.Enum`.
fn enum_type(py: Python<'_>) -> &Py<PyType> {
    static ENUM: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    ENUM.get_or_init(py, || {
        py.import("enum")
            .and_then(|m| m.getattr("Enum"))
            .and_then(|e| Ok(e.cast_into::<PyType>()?.unbind()))
            .unwrap_or_else(|_| PyDict::type_object(py).unbind())
    })
}

/// The numpy scalar types.
struct Numpy {
    generic: Py<PyType>,
    bool_: Py<PyType>,
    integer: Py<PyType>,
    floating: Py<PyType>,
}

/// numpy's scalar types, once numpy is imported (never imported here: a value can only be a
/// numpy scalar if numpy was).
fn numpy(py: Python<'_>) -> Option<&'static Numpy> {
    static NUMPY: PyOnceLock<Numpy> = PyOnceLock::new();
    if let Some(np) = NUMPY.get(py) {
        return Some(np);
    }
    let sys = py.import("sys").ok()?;
    let np = sys.getattr("modules").ok()?.get_item("numpy").ok()?;
    let ty = |name: &str| -> Option<Py<PyType>> {
        Some(np.getattr(name).ok()?.cast_into::<PyType>().ok()?.unbind())
    };
    let found = Numpy {
        generic: ty("generic")?,
        bool_: ty("bool_")?,
        integer: ty("integer")?,
        floating: ty("floating")?,
    };
    Some(NUMPY.get_or_init(py, || found))
}
