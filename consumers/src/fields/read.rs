//! Reading a payload: a bounds-checked cursor (a [`ByteSource`] of the one walk of the wire
//! format, which skips values of any type), numbers as `f64`, reductions of packed numbers
//! (no allocation).

use snapbus_bus::subscriber::RingPayload;
use snapbus_schemas::walk::{ByteSource, Kind};
use snapbus_schemas::{DType, DecodeError, DecodeErrorKind};

/// A payload that is not what its descriptor says (shorter than it says, a bad tag, a tensor
/// whose element count is not the product of its dimensions, invalid UTF-8 in a string key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the payload does not match its descriptor")]
pub struct Malformed;

/// A fixed-width scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scalar {
    Bool,
    Num(DType),
}

impl Scalar {
    pub(super) fn of(kind: Kind) -> Option<Scalar> {
        match kind {
            Kind::Bool => Some(Scalar::Bool),
            Kind::Num(d) => Some(Scalar::Num(d)),
            _ => None,
        }
    }

    pub(super) fn size(self) -> usize {
        match self {
            Scalar::Bool => 1,
            Scalar::Num(d) => d.size_bytes(),
        }
    }
}

impl From<DecodeError> for Malformed {
    fn from(_: DecodeError) -> Malformed {
        Malformed
    }
}

/// Where a payload's bytes are read from: a slice (a copy of the payload) or the payload where
/// it lies in a producer's ring ([`RingPayload`], read with atomic loads). The cursor checks
/// bounds before every read, so `at .. at + n` is always within [`len`](Source::len).
pub trait Source {
    /// The payload's length in bytes.
    fn len(&self) -> usize;

    /// Whether the payload is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies bytes `at .. at + dst.len()` into `dst`.
    fn read(&self, at: usize, dst: &mut [u8]) -> Result<(), Malformed>;

    /// Calls `f` on bytes `at .. at + n` in order, in pieces whose lengths are multiples of 8
    /// (but the last), so elements of up to 8 bytes never straddle two pieces.
    fn pieces(&self, at: usize, n: usize, f: &mut dyn FnMut(&[u8])) -> Result<(), Malformed>;
}

impl Source for [u8] {
    #[inline(always)]
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    #[inline(always)]
    fn read(&self, at: usize, dst: &mut [u8]) -> Result<(), Malformed> {
        let end = at.checked_add(dst.len()).ok_or(Malformed)?;
        dst.copy_from_slice(self.get(at..end).ok_or(Malformed)?);
        Ok(())
    }

    #[inline(always)]
    fn pieces(&self, at: usize, n: usize, f: &mut dyn FnMut(&[u8])) -> Result<(), Malformed> {
        let end = at.checked_add(n).ok_or(Malformed)?;
        f(self.get(at..end).ok_or(Malformed)?);
        Ok(())
    }
}

/// Bytes a ring payload is read through at a time: small enough to stay in the L1 cache.
const PIECE_BYTES: usize = 4096;

impl Source for RingPayload<'_> {
    #[inline]
    fn len(&self) -> usize {
        RingPayload::len(self)
    }

    #[inline]
    fn read(&self, at: usize, dst: &mut [u8]) -> Result<(), Malformed> {
        if self.read_at(at, dst) {
            Ok(())
        } else {
            Err(Malformed)
        }
    }

    fn pieces(&self, at: usize, n: usize, f: &mut dyn FnMut(&[u8])) -> Result<(), Malformed> {
        // A short run through a small buffer: no 4 KiB to clear for three numbers.
        if n <= 64 {
            ring_pieces(self, &mut [0u8; 64], at, n, f)
        } else {
            ring_pieces(self, &mut [0u8; PIECE_BYTES], at, n, f)
        }
    }
}

/// Calls `f` on bytes `at .. at + n` of `payload`, each piece copied into `scratch` first.
fn ring_pieces(
    payload: &RingPayload<'_>,
    scratch: &mut [u8],
    at: usize,
    n: usize,
    f: &mut dyn FnMut(&[u8]),
) -> Result<(), Malformed> {
    let mut done = 0;
    while done < n {
        let k = scratch.len().min(n - done);
        let piece = &mut scratch[..k];
        Source::read(payload, at + done, piece)?;
        f(piece);
        done += k;
    }
    Ok(())
}

/// A read position in a payload; every read is bounds-checked.
pub(super) struct Cursor<'a, S: Source + ?Sized> {
    pub(super) src: &'a S,
    pub(super) pos: usize,
}

impl<'a, S: Source + ?Sized> Cursor<'a, S> {
    /// Bytes left after the position.
    #[inline(always)]
    pub(super) fn left(&self) -> usize {
        self.src.len() - self.pos
    }

    #[inline(always)]
    pub(super) fn skip(&mut self, n: usize) -> Result<(), Malformed> {
        let end = self.pos.checked_add(n).ok_or(Malformed)?;
        if end > self.src.len() {
            return Err(Malformed);
        }
        self.pos = end;
        Ok(())
    }

    #[inline(always)]
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let mut bytes = [0u8; N];
        let at = self.pos;
        self.skip(N)?;
        self.src.read(at, &mut bytes)?;
        Ok(bytes)
    }

    /// Skips `count` elements of `size` bytes; returns where they start and their length.
    #[inline(always)]
    pub(super) fn take_elems(
        &mut self,
        count: u64,
        size: usize,
    ) -> Result<(usize, usize), Malformed> {
        let n = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(size))
            .ok_or(Malformed)?;
        let start = self.pos;
        self.skip(n)?;
        Ok((start, n))
    }

    /// A fixed-width value of `size` (at most 8) bytes, in the first `size` bytes returned.
    #[inline(always)]
    pub(super) fn bytes8(&mut self, size: usize) -> Result<[u8; 8], Malformed> {
        let mut b = [0u8; 8];
        let at = self.pos;
        self.skip(size)?;
        self.src.read(at, b.get_mut(..size).ok_or(Malformed)?)?;
        Ok(b)
    }

    #[inline(always)]
    pub(super) fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take::<1>()?[0])
    }

    #[inline(always)]
    pub(super) fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    #[inline(always)]
    pub(super) fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    #[inline(always)]
    pub(super) fn scalar(&mut self, s: Scalar) -> Result<f64, Malformed> {
        match s {
            Scalar::Bool => match self.u8()? {
                0 => Ok(0.0),
                1 => Ok(1.0),
                _ => Err(Malformed),
            },
            Scalar::Num(d) => {
                let b = self.bytes8(d.size_bytes())?;
                Ok(d.to_f64(&b))
            }
        }
    }

    /// Mean, min and max of `count` packed elements of `d` at the position (see [`Reduce`])
    /// into `out[0..3]`; moves past them.
    pub(super) fn reduce(
        &mut self,
        d: DType,
        count: u64,
        out: &mut [f64],
    ) -> Result<(), Malformed> {
        let (at, n) = self.take_elems(count, d.size_bytes())?;
        let mut acc = Reduce::default();
        self.src.pieces(at, n, &mut |piece| acc.add(d, piece))?;
        acc.finish(out);
        Ok(())
    }
}

/// Mean, min and max of `count` packed elements of `d` at `at` of `src` into `out[0..3]`
/// (`at .. at + count × size` already bounds-checked by the walk).
pub(super) fn reduce_span<S: Source + ?Sized>(
    src: &S,
    d: DType,
    at: usize,
    count: usize,
    out: &mut [f64],
) -> Result<(), Malformed> {
    let n = count.checked_mul(d.size_bytes()).ok_or(Malformed)?;
    let mut acc = Reduce::default();
    src.pieces(at, n, &mut |piece| acc.add(d, piece))?;
    acc.finish(out);
    Ok(())
}

/// Mean, min and max of packed numbers, NaN elements ignored, added a piece at a time.
///
/// Four partial sums, minima and maxima, with no branch per element: a single running sum
/// waits for each addition before the next, four do not.
/// The sums are added in another order than one running sum would: the mean may differ in its
/// last bits, and where the sum overflows it may be NaN rather than an infinity.
struct Reduce {
    sum: [f64; 4],
    min: [f64; 4],
    max: [f64; 4],
    n: u64,
}

impl Default for Reduce {
    fn default() -> Reduce {
        Reduce {
            sum: [0.0; 4],
            min: [f64::INFINITY; 4],
            max: [f64::NEG_INFINITY; 4],
            n: 0,
        }
    }
}

impl Reduce {
    #[inline]
    fn add(&mut self, d: DType, bytes: &[u8]) {
        match d {
            DType::U8 => self.add_as(bytes, |b: [u8; 1]| f64::from(b[0])),
            DType::I8 => self.add_as(bytes, |b: [u8; 1]| f64::from(b[0] as i8)),
            DType::U16 => self.add_as(bytes, |b| f64::from(u16::from_le_bytes(b))),
            DType::I16 => self.add_as(bytes, |b| f64::from(i16::from_le_bytes(b))),
            DType::U32 => self.add_as(bytes, |b| f64::from(u32::from_le_bytes(b))),
            DType::I32 => self.add_as(bytes, |b| f64::from(i32::from_le_bytes(b))),
            DType::U64 => self.add_as(bytes, |b| u64::from_le_bytes(b) as f64),
            DType::I64 => self.add_as(bytes, |b| i64::from_le_bytes(b) as f64),
            DType::F32 => self.add_as(bytes, |b| f64::from(f32::from_le_bytes(b))),
            DType::F64 => self.add_as(bytes, f64::from_le_bytes),
        }
    }

    #[inline(always)]
    fn add_as<const N: usize>(&mut self, bytes: &[u8], value: impl Fn([u8; N]) -> f64) {
        let elem = |c: &[u8]| {
            let mut b = [0u8; N];
            b.copy_from_slice(c);
            value(b)
        };
        let mut n = 0u64;
        let mut quads = bytes.chunks_exact(4 * N);
        for q in &mut quads {
            for (k, c) in q.chunks_exact(N).enumerate() {
                let v = elem(c);
                let ok = !v.is_nan();
                self.sum[k] += if ok { v } else { 0.0 };
                // `f64::min`/`max` ignore a NaN operand.
                self.min[k] = self.min[k].min(v);
                self.max[k] = self.max[k].max(v);
                n += u64::from(ok);
            }
        }
        for c in quads.remainder().chunks_exact(N) {
            let v = elem(c);
            if !v.is_nan() {
                self.sum[0] += v;
                self.min[0] = self.min[0].min(v);
                self.max[0] = self.max[0].max(v);
                n += 1;
            }
        }
        self.n += n;
    }

    /// Into `out[0..3]`; left as they are (NaN) when there was no element.
    fn finish(&self, out: &mut [f64]) {
        if self.n > 0 {
            let [a, b, c, d] = self.sum;
            out[0] = ((a + b) + (c + d)) / self.n as f64;
            out[1] = self.min.iter().copied().fold(f64::INFINITY, f64::min);
            out[2] = self.max.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        }
    }
}

/// Moves past a tensor's header (rank, dimensions, element count, checked against each other);
/// returns its element count.
pub(super) fn tensor_count<S: Source + ?Sized>(cur: &mut Cursor<'_, S>) -> Result<u64, Malformed> {
    let rank = cur.u64()?;
    if rank > snapbus_schemas::MAX_TENSOR_RANK as u64 {
        return Err(Malformed);
    }
    let mut product: u64 = 1;
    for _ in 0..rank {
        product = product.checked_mul(cur.u64()?).ok_or(Malformed)?;
    }
    let count = cur.u64()?;
    if count != product {
        return Err(Malformed);
    }
    Ok(count)
}

/// The cursor is the walk's [`ByteSource`], so [`walk::skip`](snapbus_schemas::walk::skip)
/// moves it past values of any type.
impl<S: Source + ?Sized> ByteSource for Cursor<'_, S> {
    #[inline(always)]
    fn offset(&self) -> usize {
        self.pos
    }

    #[inline(always)]
    fn remaining(&self) -> usize {
        self.left()
    }

    #[inline(always)]
    fn read_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        self.take::<N>().map_err(|_| self.short(N))
    }

    #[inline(always)]
    fn skip(&mut self, n: usize) -> Result<usize, DecodeError> {
        let at = self.pos;
        Cursor::skip(self, n).map_err(|_| self.short(n))?;
        Ok(at)
    }
}

impl<S: Source + ?Sized> Cursor<'_, S> {
    /// The error of a read of `n` bytes past the end.
    #[cold]
    fn short(&self, n: usize) -> DecodeError {
        DecodeError::new(
            self.pos,
            DecodeErrorKind::UnexpectedEnd {
                needed: n,
                remaining: self.left(),
            },
        )
    }
}
