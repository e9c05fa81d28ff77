//! An array's memory as pass 1 measures it and pass 2 copies it: its buffer (the buffer
//! protocol), checked against a dtype, and copied once, straight from its memory into the frame.
//! (The buffer protocol is in the stable ABI from CPython 3.11; the wheel's builds for 3.8 to
//! 3.10 use each version's full API.)

use pyo3::prelude::*;
use snapbus::PayloadWriter;
use snapbus::schemas::{DType, EncodeError};

pub(crate) use imp::Array;

impl Array {
    /// The snapbus dtype of the array's native-order format (`None` for any other).
    pub(crate) fn dtype(&self) -> Option<DType> {
        let f = self.format();
        let f = match f {
            [b'@' | b'=' | b'<', rest @ ..] => rest,
            _ => f,
        };
        let size = self.item_size();
        let d = match (f, size) {
            (b"B", 1) => DType::U8,
            (b"b", 1) => DType::I8,
            (b"H", 2) => DType::U16,
            (b"h", 2) => DType::I16,
            (b"I" | b"L", 4) => DType::U32,
            (b"i" | b"l", 4) => DType::I32,
            (b"Q" | b"L", 8) => DType::U64,
            (b"q" | b"l", 8) => DType::I64,
            (b"f", 4) => DType::F32,
            (b"d", 8) => DType::F64,
            _ => return None,
        };
        (d.size_bytes() == size).then_some(d)
    }

    /// The format as text (for messages).
    pub(crate) fn format_text(&self) -> String {
        String::from_utf8_lossy(self.format()).into_owned()
    }
}

fn typed_error(dtype: DType, e: &dyn std::fmt::Display) -> EncodeError {
    EncodeError::TypeMismatch {
        path: String::new(),
        expected: format!("an array of {dtype}"),
        found: e.to_string(),
    }
}

mod imp {
    use pyo3::buffer::{Element, PyBuffer, PyUntypedBuffer, ReadOnlyCell};

    use super::*;

    /// An array's buffer (the buffer protocol).
    pub(crate) struct Array(PyUntypedBuffer);

    impl Array {
        /// The buffer of `obj` (an error for an object without one).
        pub(crate) fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
            PyUntypedBuffer::get(obj).map(Self)
        }

        pub(crate) fn format(&self) -> &[u8] {
            self.0.format().to_bytes()
        }

        pub(crate) fn item_size(&self) -> usize {
            self.0.item_size()
        }

        pub(crate) fn dimensions(&self) -> usize {
            self.0.dimensions()
        }

        pub(crate) fn shape(&self) -> &[usize] {
            self.0.shape()
        }

        pub(crate) fn item_count(&self) -> usize {
            self.0.item_count()
        }

        pub(crate) fn len_bytes(&self) -> usize {
            self.0.len_bytes()
        }

        pub(crate) fn is_c_contiguous(&self) -> bool {
            self.0.is_c_contiguous()
        }

        /// Whether its memory is aligned to `align` bytes.
        pub(crate) fn is_aligned(&self, align: usize) -> bool {
            self.0.buf_ptr().align_offset(align) == 0
        }

        /// Copies its `n` bytes (any strides, C order) into the frame once: a C-contiguous
        /// buffer as the writer decides (element by element from its memory through
        /// non-temporal stores where it streams), otherwise with the buffer's own copy; a
        /// destination not aligned for the element type goes through an aligned copy first
        /// (tensors after odd-length strings).
        pub(crate) fn copy_into(
            &self,
            py: Python<'_>,
            dtype: DType,
            n: usize,
            w: &mut PayloadWriter<'_>,
        ) -> Result<(), EncodeError> {
            match dtype {
                DType::U8 => typed::<u8>(py, &self.0, dtype, n, w),
                DType::U16 => typed::<u16>(py, &self.0, dtype, n, w),
                DType::U32 => typed::<u32>(py, &self.0, dtype, n, w),
                DType::U64 => typed::<u64>(py, &self.0, dtype, n, w),
                DType::I8 => typed::<i8>(py, &self.0, dtype, n, w),
                DType::I16 => typed::<i16>(py, &self.0, dtype, n, w),
                DType::I32 => typed::<i32>(py, &self.0, dtype, n, w),
                DType::I64 => typed::<i64>(py, &self.0, dtype, n, w),
                DType::F32 => typed::<f32>(py, &self.0, dtype, n, w),
                DType::F64 => typed::<f64>(py, &self.0, dtype, n, w),
            }
        }
    }

    fn typed<T: Element + snapbus::schemas::Element>(
        py: Python<'_>,
        b: &PyUntypedBuffer,
        dtype: DType,
        n: usize,
        w: &mut PayloadWriter<'_>,
    ) -> Result<(), EncodeError> {
        let bad = |e: PyErr| typed_error(dtype, &e);
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
}
