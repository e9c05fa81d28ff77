//! Pass 2: the ops pass 1 left, written into the claimed frame, arrays copied once from their
//! buffers (large ones, into a lane larger than the caches, with stores that bypass them:
//! [`snapbus_bus::stream`]).

use pyo3::buffer::{Element, PyBuffer, PyUntypedBuffer, ReadOnlyCell};
use pyo3::prelude::*;
use snapbus::schemas::{DType, EncodeError};

use super::Op;

/// Pass 2: writes the ops into the frame (exactly the length pass 1 measured); `stream`: copy
/// large arrays and bytes with non-temporal stores.
pub(crate) fn write(
    py: Python<'_>,
    ops: &[Op<'_>],
    buf: &mut [u8],
    stream: bool,
) -> Result<(), EncodeError> {
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
            Op::Bytes(b) if stream => snapbus_bus::stream::copy(dst, b.as_bytes()),
            Op::Bytes(b) => dst.copy_from_slice(b.as_bytes()),
            Op::Buf(b, dtype) => {
                copy_buffer(py, b, *dtype, dst, stream).map_err(|e| EncodeError::TypeMismatch {
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
