//! Pass 2: the staged encoding written into the claimed frame through the producer's
//! [`PayloadWriter`], its large parts copied once from their objects (the writer decides how:
//! past the caches for a large part into a lane larger than them).

use pyo3::buffer::{Element, PyBuffer, PyUntypedBuffer, ReadOnlyCell};
use pyo3::prelude::*;
use snapbus::PayloadWriter;
use snapbus::schemas::{DType, Element as Numeric, EncodeError};

use super::{Piece, Staged};

/// Pass 2: writes `staged` into the frame (exactly the length pass 1 staged).
pub(crate) fn write(
    py: Python<'_>,
    staged: &Staged<'_>,
    w: &mut PayloadWriter<'_>,
) -> Result<(), EncodeError> {
    let total = w.len();
    let mismatch = |written: usize| EncodeError::LengthMismatch {
        promised: total,
        written,
    };
    if staged.len() != total {
        return Err(mismatch(staged.len()));
    }
    let bytes = staged.bytes.as_slice();
    let mut from = 0usize;
    for (at, n, piece) in &staged.pieces {
        let (at, n) = (*at, *n);
        w.put(bytes.get(from..at).ok_or_else(|| mismatch(w.written()))?)?;
        from = at;
        match piece {
            Piece::Str(s) => match s.to_str() {
                Ok(s) if s.len() == n => w.put(s.as_bytes())?,
                _ => return Err(mismatch(w.written())),
            },
            Piece::Bytes(b) if b.as_bytes().len() == n => w.put(b.as_bytes())?,
            Piece::Bytes(_) => return Err(mismatch(w.written())),
            Piece::Buf(b, dtype) => copy_buffer(py, b, *dtype, n, w)?,
        }
    }
    w.put(bytes.get(from..).ok_or_else(|| mismatch(w.written()))?)
}

/// Copies a buffer of `n` bytes (any strides, C order) into the frame once: a C-contiguous
/// one as the writer decides (element by element from its memory through non-temporal stores
/// where it streams), otherwise with the buffer's own copy; a destination not aligned for the
/// element type goes through an aligned copy first (tensors after odd-length strings).
fn copy_buffer(
    py: Python<'_>,
    b: &PyUntypedBuffer,
    dtype: DType,
    n: usize,
    w: &mut PayloadWriter<'_>,
) -> Result<(), EncodeError> {
    fn typed<T: Element + Numeric>(
        py: Python<'_>,
        b: &PyUntypedBuffer,
        n: usize,
        w: &mut PayloadWriter<'_>,
    ) -> Result<(), EncodeError> {
        let bad = |e: PyErr| EncodeError::TypeMismatch {
            path: String::new(),
            expected: format!("an array of {}", T::DTYPE),
            found: e.to_string(),
        };
        // Pass 1 checked format, size and alignment.
        let typed: &PyBuffer<T> = b.as_typed::<T>().map_err(bad)?;
        // The buffer's own copy.
        let plain = |dst: &mut [u8]| {
            match bytemuck::try_cast_slice_mut::<u8, T>(dst) {
                Ok(d) => typed.copy_to_slice(py, d),
                Err(_) => typed
                    .to_vec(py)
                    .map(|v| dst.copy_from_slice(bytemuck::cast_slice(&v))),
            }
            .map_err(bad)
        };
        match typed.as_slice(py) {
            Some(cells) if std::mem::size_of_val(cells) == n => {
                w.put_cells(cells, ReadOnlyCell::get, plain)
            }
            _ => w.put_with(n, plain)?,
        }
    }
    match dtype {
        DType::U8 => typed::<u8>(py, b, n, w),
        DType::U16 => typed::<u16>(py, b, n, w),
        DType::U32 => typed::<u32>(py, b, n, w),
        DType::U64 => typed::<u64>(py, b, n, w),
        DType::I8 => typed::<i8>(py, b, n, w),
        DType::I16 => typed::<i16>(py, b, n, w),
        DType::I32 => typed::<i32>(py, b, n, w),
        DType::I64 => typed::<i64>(py, b, n, w),
        DType::F32 => typed::<f32>(py, b, n, w),
        DType::F64 => typed::<f64>(py, b, n, w),
    }
}
