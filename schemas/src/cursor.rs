//! The byte cursors every codec path shares: [`WireWriter`] writes into a caller-provided
//! slice without allocating or panicking, [`WireReader`] reads untrusted bytes with every read
//! bounds-checked. The bottom of the crate: it knows bytes and errors, nothing of types.

use crate::error::{DecodeError, DecodeErrorKind};
use crate::walk::ByteSource;

/// Writes a value into a caller-provided byte slice, never allocating and never panicking.
///
/// Writing past the end sets an overflow flag instead of panicking;
/// [`Wire::encode_into`](crate::Wire::encode_into) checks the length first, so that only
/// happens with a hand-written impl whose `encoded_len` is wrong, and is then reported as
/// [`EncodeError::LengthMismatch`](crate::EncodeError::LengthMismatch).
#[derive(Debug)]
pub struct WireWriter<'a> {
    buf: &'a mut [u8],
    pos: usize,
    overflow: bool,
}

impl<'a> WireWriter<'a> {
    /// A writer at the start of `buf`.
    pub fn new(buf: &'a mut [u8]) -> WireWriter<'a> {
        WireWriter {
            buf,
            pos: 0,
            overflow: false,
        }
    }

    /// Appends raw bytes.
    #[inline]
    pub fn put(&mut self, bytes: &[u8]) {
        let end = self.pos.saturating_add(bytes.len());
        match self.buf.get_mut(self.pos..end) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.pos = end;
            }
            None => self.overflow = true,
        }
    }

    /// Appends a `u64` length prefix.
    #[inline]
    pub fn put_len(&mut self, len: usize) {
        self.put(&(len as u64).to_le_bytes());
    }

    /// Bytes written so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Whether a write did not fit.
    pub fn overflowed(&self) -> bool {
        self.overflow
    }
}

/// Reads values from untrusted bytes: every read is bounds-checked and every failure is a
/// [`DecodeError`] carrying the offset.
#[derive(Debug, Clone)]
pub struct WireReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> WireReader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> WireReader<'a> {
        WireReader { buf, pos: 0 }
    }

    /// Current byte offset.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The `len` bytes at offset `at` of the whole input (wherever the reader is), if they are
    /// in it: what a [`walk`](crate::walk) visitor borrows a span with.
    #[inline]
    pub fn slice(&self, at: usize, len: usize) -> Option<&'a [u8]> {
        self.buf.get(at..at.checked_add(len)?)
    }

    /// Takes the next `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let out = &self.buf[self.pos..end];
                self.pos = end;
                Ok(out)
            }
            None => Err(DecodeError::new(
                self.pos,
                DecodeErrorKind::UnexpectedEnd {
                    needed: n,
                    remaining: self.remaining(),
                },
            )),
        }
    }

    /// Takes the next `N` bytes as an array.
    #[inline]
    pub fn take_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// Reads one byte.
    #[inline]
    pub fn read_u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take_array::<1>()?[0])
    }

    /// Reads a little-endian `u32`.
    #[inline]
    pub fn read_u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take_array()?))
    }

    /// Reads a little-endian `u64`.
    #[inline]
    pub fn read_u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take_array()?))
    }

    /// Checks that every byte was read: a value must fill its payload exactly.
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(DecodeError::new(
                self.pos,
                DecodeErrorKind::TrailingBytes { count },
            )),
        }
    }

    /// Reads a `u64` length or count prefix and checks it against the remaining input: `len`
    /// items of at least `min_item_len` bytes each (zero-sized items count as one byte) must
    /// fit. So a hostile prefix can never make the decoder allocate or loop more than the input
    /// justifies.
    #[inline]
    pub fn read_len(&mut self, min_item_len: usize) -> Result<usize, DecodeError> {
        ByteSource::read_len(self, min_item_len)
    }
}
