//! [`PayloadWriter`]: how a caller that encodes its own payload writes it into the frame it
//! claimed ([`Publisher::emit_with`](super::Publisher::emit_with)), with the publisher's copy
//! policy applied to every part.
//!
//! The policy lives here and nowhere else: a part of [`STREAM_MIN_BYTES`] or more, into a lane
//! larger than the last-level cache, is copied with non-temporal stores (the lines go to
//! memory, not through the producer's caches, and are not read before being overwritten);
//! other parts with [`copy_to_lane`] (inline moves when small, the platform's `memcpy`
//! otherwise).

use bytemuck::Pod;
use snapbus_schemas::EncodeError;

use crate::stream::{STREAM_MIN_BYTES, copy_cells, copy_to_lane};

/// The payload of a claimed frame, written front to back by the caller that encodes it: its
/// parts go in with [`put`](Self::put) (bytes), [`put_cells`](Self::put_cells) (elements read
/// one at a time from memory other code may change, such as a Python buffer) or
/// [`put_with`](Self::put_with) (written in place by the caller). The emit fails, with an
/// [`EncodeError::LengthMismatch`], unless exactly the promised length is written.
///
/// ```
/// # use snapbus_bus::publisher::PayloadWriter;
/// # fn fill(w: &mut PayloadWriter<'_>) -> Result<(), snapbus_bus::schemas::EncodeError> {
/// let samples = [1.5f32, 2.5];
/// w.put(&8u64.to_le_bytes())?; // a length prefix
/// w.put_with(8, |dst| dst.copy_from_slice(bytemuck::cast_slice(&samples)))?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct PayloadWriter<'a> {
    buf: &'a mut [u8],
    pos: usize,
    streams: bool,
}

/// Why a payload was not filled (the fill closure of
/// [`Publisher::emit_with`](super::Publisher::emit_with) returns it).
#[derive(Debug, thiserror::Error)]
pub enum FillError {
    /// The payload could not be encoded: the frame is aborted and the record counted as an
    /// encode error.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The caller gave the record up on purpose: the frame is aborted (readers skip it;
    /// nothing is counted lost) and the emit returns
    /// [`EmitError::Aborted`](super::EmitError::Aborted).
    #[error("the payload was given up")]
    Abort,
}

/// Copies one part of a payload into a lane with the publisher's policy (see the module
/// docs); `streams`: the lane is larger than the last-level cache.
#[inline(always)]
pub(super) fn copy_part(dst: &mut [u8], src: &[u8], streams: bool) {
    copy_to_lane(dst, src, streams);
}

impl<'a> PayloadWriter<'a> {
    /// A writer over `buf`, the whole payload of a claimed frame.
    #[inline]
    pub(super) fn new(buf: &'a mut [u8], streams: bool) -> Self {
        PayloadWriter {
            buf,
            pos: 0,
            streams,
        }
    }

    /// The payload's length (what the emit promised).
    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether the payload is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Bytes written so far.
    #[inline]
    pub fn written(&self) -> usize {
        self.pos
    }

    /// The next `n` bytes of the frame, or a length mismatch if fewer are left.
    #[inline]
    fn next(&mut self, n: usize) -> Result<&mut [u8], EncodeError> {
        let (pos, promised) = (self.pos, self.buf.len());
        let end = pos.checked_add(n).filter(|&end| end <= promised).ok_or(
            EncodeError::LengthMismatch {
                promised,
                written: pos.saturating_add(n),
            },
        )?;
        self.pos = end;
        Ok(&mut self.buf[pos..end])
    }

    /// Writes `src` next.
    #[inline]
    pub fn put(&mut self, src: &[u8]) -> Result<(), EncodeError> {
        let streams = self.streams;
        copy_part(self.next(src.len())?, src, streams);
        Ok(())
    }

    /// Writes the elements of `src`, read one at a time with `get`, next, as their
    /// native-endian bytes: with non-temporal stores if the publisher streams a part this
    /// large; otherwise `plain` gets the destination (`src.len()` elements' bytes) to copy
    /// them the caller's way (typically a bulk copy of the same memory, faster than reading
    /// element by element).
    #[inline]
    pub fn put_cells<T: Pod, C>(
        &mut self,
        src: &[C],
        get: impl Fn(&C) -> T,
        plain: impl FnOnce(&mut [u8]) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        let n = src.len().saturating_mul(std::mem::size_of::<T>());
        let streams = self.streams && n >= STREAM_MIN_BYTES;
        let dst = self.next(n)?;
        if streams {
            copy_cells(dst, src, get);
            Ok(())
        } else {
            plain(dst)
        }
    }

    /// Hands the next `n` bytes of the frame to `fill`, which must write all of them (they
    /// hold the ring's old contents until it does): a payload read or computed straight into
    /// the lane.
    #[inline]
    pub fn put_with<R>(
        &mut self,
        n: usize,
        fill: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, EncodeError> {
        Ok(fill(self.next(n)?))
    }

    /// Whether exactly the promised length was written.
    #[inline]
    pub(super) fn finish(&self) -> Result<(), EncodeError> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(EncodeError::LengthMismatch {
                promised: self.buf.len(),
                written: self.pos,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn parts_are_written_in_order_and_the_length_is_checked() {
        for streams in [false, true] {
            let mut buf = vec![0u8; 12];
            let mut w = PayloadWriter::new(&mut buf, streams);
            w.put(&[1, 2, 3]).unwrap();
            let cells = [Cell::new(0x0605_0404u32)];
            w.put_cells(&cells, Cell::get, |d| {
                d.copy_from_slice(&cells[0].get().to_ne_bytes());
                Ok(())
            })
            .unwrap();
            assert_eq!(w.written(), 7);
            assert!(matches!(
                w.finish(),
                Err(EncodeError::LengthMismatch {
                    promised: 12,
                    written: 7
                })
            ));
            assert!(matches!(
                w.put(&[0; 6]),
                Err(EncodeError::LengthMismatch {
                    promised: 12,
                    written: 13
                })
            ));
            w.put_with(5, |d| d.fill(9)).unwrap();
            w.finish().unwrap();
            let mut want = vec![1, 2, 3];
            want.extend_from_slice(&0x0605_0404u32.to_ne_bytes());
            want.extend_from_slice(&[9; 5]);
            assert_eq!(buf, want);
        }
    }

    #[test]
    fn large_cells_stream_only_into_a_streaming_lane() {
        let n = STREAM_MIN_BYTES / 4;
        let cells: Vec<Cell<f32>> = (0..n).map(|i| Cell::new(i as f32)).collect();
        let want: Vec<u8> = cells.iter().flat_map(|c| c.get().to_ne_bytes()).collect();
        for (streams, len, plain_called) in
            [(true, n, false), (false, n, true), (true, n - 1, true)]
        {
            let mut buf = vec![0u8; len * 4];
            let mut w = PayloadWriter::new(&mut buf, streams);
            let mut called = false;
            w.put_cells(&cells[..len], Cell::get, |d| {
                called = true;
                d.copy_from_slice(&want[..len * 4]);
                Ok(())
            })
            .unwrap();
            w.finish().unwrap();
            assert_eq!(called, plain_called, "streams {streams}, {len} elements");
            assert_eq!(buf, want[..len * 4]);
        }
    }
}
