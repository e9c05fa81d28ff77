//! [`Tensor`]: n-dimensional numeric arrays, and [`Bytes`]: opaque byte buffers.

use crate::cursor::{WireReader, WireWriter};
use crate::desc::TypeDesc;
use crate::element::Element;
use crate::error::{DecodeError, DecodeErrorKind};
use crate::wire::Wire;

/// Maximum rank of a tensor (numpy's limit).
pub const MAX_TENSOR_RANK: usize = 64;

/// An n-dimensional, row-major, contiguous numeric array: an observation, an image, a
/// feature map.
///
/// On the wire: `u64` rank, the dimensions as `u64`s, `u64` element count, then the elements as
/// little-endian values with no padding, so a reader can view the data in place (numpy:
/// `np.frombuffer(buf, "<f4", count, offset).reshape(shape)`). The dtype is part of the
/// descriptor ([`TypeDesc::Tensor`]), not of each payload.
///
/// ```
/// use snapbus_schemas::{Tensor, Wire};
/// let image = Tensor::new(vec![2, 3], vec![0u8, 1, 2, 3, 4, 5])?;
/// assert_eq!(image.shape(), &[2, 3]);
/// let bytes = image.encode_to_vec()?;
/// assert_eq!(bytes.len(), 8 + 2 * 8 + 8 + 6);
/// assert_eq!(Tensor::<u8>::decode_exact(&bytes)?, image);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Tensor<T> {
    shape: Vec<u64>,
    data: Vec<T>,
}

/// The data length does not match the product of the shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tensor shape {shape:?} needs {expected:?} elements but {found} were given")]
pub struct ShapeError {
    /// The shape given.
    pub shape: Vec<u64>,
    /// The product of the shape (`None` on overflow).
    pub expected: Option<u64>,
    /// The data length given.
    pub found: usize,
}

/// Product of the dimensions, `None` on overflow.
pub(crate) fn element_count(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

impl<T: Element> Tensor<T> {
    /// A tensor of `shape` holding `data` in row-major order.
    pub fn new(shape: Vec<u64>, data: Vec<T>) -> Result<Tensor<T>, ShapeError> {
        let expected = element_count(&shape);
        if shape.len() > MAX_TENSOR_RANK || expected != Some(data.len() as u64) {
            return Err(ShapeError {
                shape,
                expected,
                found: data.len(),
            });
        }
        Ok(Tensor { shape, data })
    }

    /// A tensor of `shape` filled with zeros.
    pub fn zeros(shape: Vec<u64>) -> Result<Tensor<T>, ShapeError> {
        let n = element_count(&shape)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| ShapeError {
                shape: shape.clone(),
                expected: None,
                found: 0,
            })?;
        Tensor::new(shape, vec![T::zeroed(); n])
    }

    /// The dimensions, outermost first.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The elements in row-major order.
    pub fn data(&self) -> &[T] {
        &self.data
    }

    /// The elements, mutably (the shape cannot change).
    pub fn data_mut(&mut self) -> &mut [T] {
        &mut self.data
    }

    /// Splits into shape and data.
    pub fn into_parts(self) -> (Vec<u64>, Vec<T>) {
        (self.shape, self.data)
    }
}

impl<T: Element> Wire for Tensor<T> {
    const MIN_ENCODED_LEN: usize = 16;

    fn type_desc() -> TypeDesc {
        TypeDesc::Tensor { dtype: T::DTYPE }
    }

    #[inline]
    fn encoded_len(&self) -> usize {
        8 + 8 * self.shape.len() + 8 + size_of_val(self.data.as_slice())
    }

    #[inline]
    fn encode(&self, w: &mut WireWriter<'_>) {
        self.shape.encode(w);
        self.data.encode(w);
    }

    fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
        let shape = read_shape(r)?;
        let at = r.offset();
        let data = Vec::<T>::decode(r)?;
        let expected = element_count(&shape).unwrap_or(u64::MAX);
        if expected != data.len() as u64 {
            return Err(DecodeError::new(
                at,
                DecodeErrorKind::TensorShape {
                    shape,
                    expected,
                    found: data.len() as u64,
                },
            ));
        }
        Ok(Tensor { shape, data })
    }
}

/// Reads a tensor's rank and dimensions, refusing ranks above [`MAX_TENSOR_RANK`].
pub(crate) fn read_shape(r: &mut WireReader<'_>) -> Result<Vec<u64>, DecodeError> {
    let mut dims = [0; MAX_TENSOR_RANK];
    let rank = crate::walk::read_shape(r, &mut dims)?;
    Ok(dims[..rank].to_vec())
}

/// An opaque byte buffer (a compressed frame, a serialized blob). Described as
/// [`TypeDesc::Bytes`] and rendered as such by generic consumers; on the wire identical to
/// `Vec<u8>` (`u64` length, then the bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Bytes(#[serde(with = "serde_bytes_compat")] pub Vec<u8>);

mod serde_bytes_compat {
    pub(super) fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Bytes {
        Bytes(v)
    }
}

impl Wire for Bytes {
    const MIN_ENCODED_LEN: usize = 8;
    fn type_desc() -> TypeDesc {
        TypeDesc::Bytes
    }
    fn encoded_len(&self) -> usize {
        8 + self.0.len()
    }
    fn encode(&self, w: &mut WireWriter<'_>) {
        w.put_len(self.0.len());
        w.put(&self.0);
    }
    fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
        let n = r.read_len(1)?;
        Ok(Bytes(r.take(n)?.to_vec()))
    }
}
