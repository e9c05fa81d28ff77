//! Array buffers in pass 1: a field's buffer, its format, item size and alignment checked
//! against the declared dtype (with the numpy conversion to suggest when they do not fit).

use pyo3::prelude::*;
use snapbus::schemas::DType;

use super::array::Array;
use super::{DataError, type_name};

/// The buffer of an array field, its format checked against the declared dtype.
pub(super) fn buffer(obj: &Bound<'_, PyAny>, dtype: DType) -> Result<Array, DataError> {
    let raw = Array::get(obj).map_err(|_| {
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
) -> Result<Array, DataError> {
    let py = obj.py();
    let cast = py
        .import("snapbus.schema")
        .and_then(|m| m.getattr("_cast_array")?.call1((obj, numpy_name(dtype))))
        .ok()
        .filter(|a| !a.is_none());
    let Some(cast) = cast else {
        return Err(refused);
    };
    Array::get(&cast)
        .map_err(|_| refused)
        .and_then(|raw| check_dtype(raw, dtype))
}

pub(super) fn check_dtype(raw: Array, dtype: DType) -> Result<Array, DataError> {
    if !raw.is_aligned(dtype.size_bytes()) {
        return Err(DataError::value(format!(
            "the array's memory is not aligned for {dtype} (a view at an odd offset) and numpy \
             is not there to copy it; pass a copy (np.ascontiguousarray)"
        )));
    }
    if raw.dtype() == Some(dtype) {
        Ok(raw)
    } else {
        Err(DataError::value(format!(
            "array of format {:?} (item size {}) given where dtype {dtype} is declared \
             (native little-endian; numpy does not cast it to {dtype} under its \
             `same_kind` rule: convert with .astype(np.{}))",
            raw.format_text(),
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
