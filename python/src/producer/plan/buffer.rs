//! Array buffers in pass 1: a field's buffer, its format, item size and alignment checked
//! against the declared dtype (with the numpy conversion to suggest when they do not fit).

use pyo3::buffer::{Element, PyUntypedBuffer};
use pyo3::prelude::*;
use snapbus::schemas::DType;

use super::{DataError, type_name};

/// The buffer of an array field, its format checked against the declared dtype.
pub(super) fn buffer(obj: &Bound<'_, PyAny>, dtype: DType) -> Result<PyUntypedBuffer, DataError> {
    let raw = PyUntypedBuffer::get(obj).map_err(|_| {
        DataError::ty(format!(
            "expected an array of {dtype} (numpy or a buffer), got {}",
            type_name(obj)
        ))
    })?;
    check_dtype(raw, dtype).or_else(|e| cast(obj, dtype, e))
}

/// `obj` as an array of `dtype` where numpy casts it under its `same_kind` rule (a float64
/// array for an `f32` field, int32 for `i64`, uint8 for `f32`), C-contiguous and aligned;
/// `refused` (why its own buffer did not fit) for anything else.
pub(super) fn cast(
    obj: &Bound<'_, PyAny>,
    dtype: DType,
    refused: DataError,
) -> Result<PyUntypedBuffer, DataError> {
    let py = obj.py();
    let cast = py
        .import("snapbus.schema")
        .and_then(|m| m.getattr("_cast_array")?.call1((obj, numpy_name(dtype))))
        .ok()
        .filter(|a| !a.is_none());
    let Some(cast) = cast else {
        return Err(refused);
    };
    PyUntypedBuffer::get(&cast)
        .map_err(|_| refused)
        .and_then(|raw| check_dtype(raw, dtype))
}

pub(super) fn check_dtype(
    raw: PyUntypedBuffer,
    dtype: DType,
) -> Result<PyUntypedBuffer, DataError> {
    fn ok<T: Element>(b: &PyUntypedBuffer) -> bool {
        std::mem::size_of::<T>() == b.item_size() && T::is_compatible_format(b.format())
    }
    if raw.buf_ptr().align_offset(dtype.size_bytes()) != 0 {
        return Err(DataError::value(format!(
            "the array's memory is not aligned for {dtype} (a view at an odd offset) and numpy \
             is not there to copy it; pass a copy (np.ascontiguousarray)"
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
             (native little-endian; numpy does not cast it to {dtype} under its \
             `same_kind` rule: convert with .astype(np.{}))",
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
