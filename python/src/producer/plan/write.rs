//! Pass 2: the staged encoding written into the claimed frame through the producer's
//! [`PayloadWriter`], its large parts copied once from their objects (the writer decides how:
//! past the caches for a large part into a lane larger than them).

use pyo3::prelude::*;
use snapbus::PayloadWriter;
use snapbus::schemas::EncodeError;

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
            Piece::Str(s) => match s.to_cow() {
                Ok(s) if s.len() == n => w.put(s.as_bytes())?,
                _ => return Err(mismatch(w.written())),
            },
            Piece::Bytes(b) if b.as_bytes().len() == n => w.put(b.as_bytes())?,
            Piece::Bytes(_) => return Err(mismatch(w.written())),
            Piece::Buf(b, dtype) => b.copy_into(py, *dtype, n, w)?,
        }
    }
    w.put(bytes.get(from..).ok_or_else(|| mismatch(w.written()))?)
}
