//! Numeric elements and the views of them: the [`Element`] trait (the scalar types a
//! [`Tensor`](crate::Tensor) or a packed sequence holds), and the borrowed little-endian views
//! [`Packed`] and [`TensorView`] that dynamic values carry.

use std::borrow::Cow;

use crate::cursor::WireReader;
use crate::dtype::DType;
use crate::wire::{Wire, for_each_element};

/// Scalar numeric element types: the element types of [`Tensor`](crate::Tensor) and of packed
/// sequences. Sealed.
pub trait Element: Wire + bytemuck::Pod + sealed::Sealed {
    /// The element's dtype.
    const DTYPE: DType;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! element {
    ($($t:ty => $dtype:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;
        }
    )*};
}

for_each_element!(element);

/// A packed numeric array: `count` elements of `dtype` as little-endian bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed<'a> {
    /// Element type.
    pub dtype: DType,
    /// The elements as little-endian bytes (`len = count × dtype size`).
    pub bytes: Cow<'a, [u8]>,
}

impl<'a> Packed<'a> {
    /// A view of `items` (borrowed on little-endian machines).
    pub fn from_slice<T: Element>(items: &'a [T]) -> Packed<'a> {
        let bytes = if cfg!(target_endian = "little") {
            Cow::Borrowed(bytemuck::cast_slice(items))
        } else {
            let mut out = Vec::with_capacity(size_of_val(items));
            for x in items {
                out.extend_from_slice(&x.encode_to_vec().unwrap_or_default());
            }
            Cow::Owned(out)
        };
        Packed {
            dtype: T::DTYPE,
            bytes,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / self.dtype.size_bytes()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Copies the elements out as `T`; `None` if `T` is not the dtype.
    pub fn to_vec<T: Element>(&self) -> Option<Vec<T>> {
        (T::DTYPE == self.dtype).then(|| le_to_vec(&self.bytes))
    }

    /// Element `i` widened to `f64` (for plotting and statistics).
    pub fn get_f64(&self, i: usize) -> Option<f64> {
        get_f64(self.dtype, &self.bytes, i)
    }
}

fn le_to_vec<T: Element>(bytes: &[u8]) -> Vec<T> {
    let mut r = WireReader::new(bytes);
    T::decode_vec(&mut r, bytes.len() / size_of::<T>()).unwrap_or_default()
}

fn get_f64(dtype: DType, bytes: &[u8], i: usize) -> Option<f64> {
    let size = dtype.size_bytes();
    let start = i.checked_mul(size)?;
    let chunk = bytes.get(start..start.checked_add(size)?)?;
    Some(match Scalar::read(dtype, chunk) {
        Scalar::Unsigned(v) => v as f64,
        Scalar::Signed(v) => v as f64,
        Scalar::F32(v) => f64::from(v),
        Scalar::F64(v) => v,
    })
}

/// One element of a packed array, read from its little-endian bytes and widened without loss
/// (what [`Packed::get_f64`] and the JSON rendering of packed arrays share).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scalar {
    /// `u8` … `u64`.
    Unsigned(u64),
    /// `i8` … `i64`.
    Signed(i64),
    /// `f32`, kept narrow (its shortest decimal differs from the widened `f64`'s).
    F32(f32),
    /// `f64`.
    F64(f64),
}

impl Scalar {
    /// Reads one element of `dtype` from `chunk`, which holds exactly `dtype.size_bytes()`
    /// bytes (shorter input reads as zero-padded).
    pub(crate) fn read(dtype: DType, chunk: &[u8]) -> Scalar {
        let mut b = [0u8; 8];
        let n = chunk.len().min(8);
        b[..n].copy_from_slice(&chunk[..n]);
        match dtype {
            DType::U8 => Scalar::Unsigned(u64::from(b[0])),
            DType::I8 => Scalar::Signed(i64::from(b[0] as i8)),
            DType::U16 => Scalar::Unsigned(u64::from(u16::from_le_bytes([b[0], b[1]]))),
            DType::I16 => Scalar::Signed(i64::from(i16::from_le_bytes([b[0], b[1]]))),
            DType::U32 => Scalar::Unsigned(u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            DType::I32 => Scalar::Signed(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            DType::F32 => Scalar::F32(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            DType::U64 => Scalar::Unsigned(u64::from_le_bytes(b)),
            DType::I64 => Scalar::Signed(i64::from_le_bytes(b)),
            DType::F64 => Scalar::F64(f64::from_le_bytes(b)),
        }
    }
}

/// A tensor viewed in a payload.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorView<'a> {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first.
    pub shape: Vec<u64>,
    /// The elements as little-endian bytes, row-major.
    pub data: Cow<'a, [u8]>,
}

impl TensorView<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.size_bytes()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Copies the elements out as `T`; `None` if `T` is not the dtype.
    pub fn to_vec<T: Element>(&self) -> Option<Vec<T>> {
        (T::DTYPE == self.dtype).then(|| le_to_vec(&self.data))
    }

    /// Element `i` (row-major) widened to `f64`.
    pub fn get_f64(&self, i: usize) -> Option<f64> {
        get_f64(self.dtype, &self.data, i)
    }
}
