//! What the walk reads from ([`ByteSource`]) and the scalars it reads.

use crate::cursor::WireReader;
use crate::error::{DecodeError, DecodeErrorKind};

/// Where the walk reads bytes from: fixed-width reads and skips, every one bounds-checked.
///
/// Implemented for [`WireReader`] (a payload in memory); the field extractors implement it
/// for a payload read where it lies in a producer's ring. The walk passes variable-size data
/// to the visitor as spans of the source, which the visitor reads in its own way.
pub trait ByteSource {
    /// The current byte offset.
    fn offset(&self) -> usize;

    /// Bytes not yet read.
    fn remaining(&self) -> usize;

    /// Reads the next `N` bytes.
    fn read_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError>;

    /// Moves past the next `n` bytes; returns the offset where they start.
    fn skip(&mut self, n: usize) -> Result<usize, DecodeError>;

    /// Reads one byte.
    #[inline]
    fn read_u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.read_array::<1>()?[0])
    }

    /// Reads a little-endian `u32`.
    #[inline]
    fn read_u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.read_array()?))
    }

    /// Reads a little-endian `u64`.
    #[inline]
    fn read_u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.read_array()?))
    }

    /// Reads a `u64` length or count prefix of items of at least `min_item_len` bytes each
    /// (zero-sized items count as one) and checks that they fit in what remains, as
    /// [`WireReader::read_len`].
    #[inline]
    fn read_len(&mut self, min_item_len: usize) -> Result<usize, DecodeError> {
        let at = self.offset();
        let len = self.read_u64()?;
        match len.checked_mul(min_item_len.max(1) as u64) {
            Some(need) if need <= self.remaining() as u64 => Ok(len as usize),
            _ => Err(DecodeError::new(
                at,
                DecodeErrorKind::LengthTooLarge {
                    len,
                    remaining: self.remaining(),
                },
            )),
        }
    }
}

impl ByteSource for WireReader<'_> {
    #[inline(always)]
    fn offset(&self) -> usize {
        WireReader::offset(self)
    }

    #[inline(always)]
    fn remaining(&self) -> usize {
        WireReader::remaining(self)
    }

    #[inline(always)]
    fn read_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        self.take_array()
    }

    #[inline(always)]
    fn skip(&mut self, n: usize) -> Result<usize, DecodeError> {
        let at = WireReader::offset(self);
        self.take(n)?;
        Ok(at)
    }
}

/// A fixed-width scalar as read from the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// A bool (its byte was checked to be 0 or 1).
    Bool(bool),
    /// `u8`.
    U8(u8),
    /// `u16`.
    U16(u16),
    /// `u32`.
    U32(u32),
    /// `u64`.
    U64(u64),
    /// `u128`.
    U128(u128),
    /// `i8`.
    I8(i8),
    /// `i16`.
    I16(i16),
    /// `i32`.
    I32(i32),
    /// `i64`.
    I64(i64),
    /// `i128`.
    I128(i128),
    /// `f32`.
    F32(f32),
    /// `f64`.
    F64(f64),
}

impl Scalar {
    /// The value as `f64` (a bool as 0 or 1; large integers rounded).
    #[inline]
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => f64::from(u8::from(b)),
            Scalar::U8(v) => f64::from(v),
            Scalar::U16(v) => f64::from(v),
            Scalar::U32(v) => f64::from(v),
            Scalar::U64(v) => v as f64,
            Scalar::U128(v) => v as f64,
            Scalar::I8(v) => f64::from(v),
            Scalar::I16(v) => f64::from(v),
            Scalar::I32(v) => f64::from(v),
            Scalar::I64(v) => v as f64,
            Scalar::I128(v) => v as f64,
            Scalar::F32(v) => f64::from(v),
            Scalar::F64(v) => v,
        }
    }
}

/// The error type of a [`Visit`](super::Visit): built from the walk's [`DecodeError`]s, and told the
/// field it unwinds out of (a visitor whose error keeps no path ignores it).
pub trait WalkError: From<DecodeError> {
    /// Prefixes the error's field path with `name`.
    #[inline]
    fn in_field(self, name: &str) -> Self {
        let _ = name;
        self
    }
}

impl WalkError for DecodeError {
    #[inline]
    fn in_field(self, name: &str) -> DecodeError {
        DecodeError::in_field(self, name)
    }
}
