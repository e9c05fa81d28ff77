//! Pass 2: the staged encoding written into the claimed frame, its large parts copied once
//! from their objects (large ones, into a lane larger than the caches, with stores that
//! bypass them; small ones with inline moves: [`snapbus_bus::stream::copy_to_lane`]).

use pyo3::buffer::{Element, PyBuffer, PyUntypedBuffer, ReadOnlyCell};
use pyo3::prelude::*;
use snapbus::schemas::{DType, EncodeError};
use snapbus_bus::stream::copy_to_lane;

use super::{Piece, Staged};

/// Pass 2: writes `staged` into the frame (exactly the length pass 1 staged); `stream`: copy
/// large arrays and bytes with non-temporal stores.
pub(crate) fn write(
    py: Python<'_>,
    staged: &Staged<'_>,
    buf: &mut [u8],
    stream: bool,
) -> Result<(), EncodeError> {
    let total = buf.len();
    let mismatch = |written: usize| EncodeError::LengthMismatch {
        promised: total,
        written,
    };
    if staged.len() != total {
        return Err(mismatch(staged.len()));
    }
    let bytes = staged.bytes.as_slice();
    let (mut from, mut pos) = (0usize, 0usize);
    for (at, n, piece) in &staged.pieces {
        let (at, n) = (*at, *n);
        let head = bytes.get(from..at).ok_or_else(|| mismatch(pos))?;
        let dst = buf
            .get_mut(pos..pos + head.len())
            .ok_or_else(|| mismatch(pos))?;
        copy_to_lane(dst, head, false);
        pos += head.len();
        from = at;
        let dst = buf.get_mut(pos..pos + n).ok_or_else(|| mismatch(pos))?;
        match piece {
            Piece::Str(s) => match s.to_str() {
                Ok(s) if s.len() == n => copy_to_lane(dst, s.as_bytes(), false),
                _ => return Err(mismatch(pos)),
            },
            Piece::Bytes(b) => copy_to_lane(dst, b.as_bytes(), stream),
            Piece::Buf(b, dtype) => {
                copy_buffer(py, b, *dtype, dst, stream).map_err(|e| EncodeError::TypeMismatch {
                    path: String::new(),
                    expected: format!("an array of {dtype}"),
                    found: e.to_string(),
                })?
            }
        }
        pos += n;
    }
    let tail = bytes.get(from..).ok_or_else(|| mismatch(pos))?;
    match buf.get_mut(pos..) {
        Some(dst) if dst.len() == tail.len() => copy_to_lane(dst, tail, false),
        _ => return Err(mismatch(pos)),
    }
    Ok(())
}

/// Copies a buffer (any strides, C order) into `dst` once; with `stream`, a C-contiguous one
/// element by element from its memory through non-temporal stores; otherwise a destination
/// not aligned for the element type goes through an aligned copy first (tensors after
/// odd-length strings).
fn copy_buffer(
    py: Python<'_>,
    b: &PyUntypedBuffer,
    dtype: DType,
    dst: &mut [u8],
    stream: bool,
) -> PyResult<()> {
    fn typed<T: Element + bytemuck::Pod>(
        py: Python<'_>,
        b: &PyUntypedBuffer,
        dst: &mut [u8],
        stream: bool,
    ) -> PyResult<()> {
        // Pass 1 checked format, size and alignment.
        let typed: &PyBuffer<T> = b.as_typed::<T>()?;
        if stream {
            if let Some(cells) = typed.as_slice(py) {
                snapbus_bus::stream::copy_cells(dst, cells, ReadOnlyCell::get);
                return Ok(());
            }
        }
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
        DType::U8 => typed::<u8>(py, b, dst, stream),
        DType::U16 => typed::<u16>(py, b, dst, stream),
        DType::U32 => typed::<u32>(py, b, dst, stream),
        DType::U64 => typed::<u64>(py, b, dst, stream),
        DType::I8 => typed::<i8>(py, b, dst, stream),
        DType::I16 => typed::<i16>(py, b, dst, stream),
        DType::I32 => typed::<i32>(py, b, dst, stream),
        DType::I64 => typed::<i64>(py, b, dst, stream),
        DType::F32 => typed::<f32>(py, b, dst, stream),
        DType::F64 => typed::<f64>(py, b, dst, stream),
    }
}
