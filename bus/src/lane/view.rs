//! A payload where it lies in the ring ([`PayloadView`]), read with atomic loads only.

use super::Lane;
use crate::mem::LaneMem;
use crate::sync::{AtomicU64, Ordering};

/// A view of a payload in the ring, for reading in place. Values read through it are only
/// trustworthy once the read is validated, which [`LaneReader::read_in_place`](super::LaneReader::read_in_place) does
/// after the closure returns.
pub struct PayloadView<'a, M: LaneMem> {
    pub(super) lane: &'a Lane<M>,
    pub(super) byte_off: usize,
    pub(super) len: usize,
    /// The payload's words (the last one padded), bounds-checked once when the view is made:
    /// a word read through the view is one compare and one load.
    pub(super) words: &'a [AtomicU64],
}

impl<M: LaneMem> PayloadView<'_, M> {
    /// Payload length.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the payload is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Byte `i` (atomic load), `None` past the end.
    #[inline]
    pub fn byte(&self, i: usize) -> Option<u8> {
        if i >= self.len {
            return None;
        }
        let w = self.words.get(i / 8)?.load(Ordering::Relaxed);
        Some(w.to_le_bytes()[i % 8])
    }

    /// Copies the payload into `dst` (which must be exactly `len()` bytes).
    pub fn copy_to(&self, dst: &mut [u8]) -> bool {
        dst.len() == self.len && self.lane.mem.copy_out(self.byte_off, dst)
    }

    /// Word `i` of the payload: its bytes `8 i .. 8 i + 8`, little-endian (one atomic load; in
    /// the last word, the bytes past `len()` are the frame's padding). `None` past the end.
    #[inline(always)]
    pub fn word(&self, i: usize) -> Option<u64> {
        Some(self.words.get(i)?.load(Ordering::Relaxed))
    }

    /// Copies the payload's bytes `offset .. offset + dst.len()` into `dst`. `false` (nothing
    /// copied) if `offset` is not a multiple of 8 or the range goes past the payload.
    pub fn copy_range_to(&self, offset: usize, dst: &mut [u8]) -> bool {
        offset % 8 == 0
            && offset
                .checked_add(dst.len())
                .is_some_and(|end| end <= self.len)
            && self.lane.mem.copy_out(self.byte_off + offset, dst)
    }

    /// Copies the payload's bytes `offset .. offset + dst.len()` into `dst`, from any offset
    /// (the bytes up to the next word boundary from one word, then whole words). `false` if
    /// the range goes past the payload (checked before anything is copied).
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> bool {
        if offset
            .checked_add(dst.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        if dst.is_empty() {
            return true;
        }
        let in_word = offset % 8;
        if in_word == 0 {
            return self.copy_range_to(offset, dst);
        }
        let Some(w) = self.word(offset / 8) else {
            return false;
        };
        let k = (8 - in_word).min(dst.len());
        dst[..k].copy_from_slice(&w.to_le_bytes()[in_word..in_word + k]);
        k == dst.len() || self.copy_range_to(offset + k, &mut dst[k..])
    }

    /// Calls `f` on the whole payload in order, a piece at a time, each piece copied into
    /// `scratch`: a buffer small enough to stay in the L1 cache (4 KiB, say), so the payload is
    /// read once and never copied whole. Pieces are `scratch.len()` rounded down to a multiple
    /// of 8 bytes, the last one shorter. `false` (and `f` not called) if `scratch` is shorter
    /// than 8 bytes.
    pub fn for_each_chunk(&self, scratch: &mut [u8], mut f: impl FnMut(&[u8])) -> bool {
        let piece = scratch.len() / 8 * 8;
        if piece == 0 {
            return false;
        }
        let mut offset = 0;
        while offset < self.len {
            let n = piece.min(self.len - offset);
            let dst = &mut scratch[..n];
            if !self.copy_range_to(offset, dst) {
                return false;
            }
            f(dst);
            offset += n;
        }
        true
    }
}
