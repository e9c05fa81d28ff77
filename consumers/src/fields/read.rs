//! Reading a payload: a bounds-checked cursor, little-endian numbers as `f64`, reductions of
//! packed numbers, and skipping values of any type (no allocation).

use snapbus_schemas::{DType, TypeDesc, VariantKind};

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
    pub(super) fn of(desc: &TypeDesc) -> Option<Scalar> {
        match desc {
            TypeDesc::Bool => Some(Scalar::Bool),
            d => d.as_dtype().map(Scalar::Num),
        }
    }

    pub(super) fn size(self) -> usize {
        match self {
            Scalar::Bool => 1,
            Scalar::Num(d) => d.size_bytes(),
        }
    }
}

/// The encoded size of a type if it is always the same.
pub(super) fn fixed_size(desc: &TypeDesc) -> Option<usize> {
    match desc {
        TypeDesc::Struct { fields } => fields.iter().map(|f| fixed_size(&f.ty)).sum(),
        TypeDesc::Tuple { elems } => elems.iter().map(fixed_size).sum(),
        TypeDesc::Array { len, elem } => fixed_size(elem)?.checked_mul(usize::try_from(*len).ok()?),
        d => Scalar::of(d).map(Scalar::size),
    }
}

/// A read position in a payload; every read is bounds-checked.
pub(super) struct Cursor<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    pub(super) fn skip(&mut self, n: usize) -> Result<(), Malformed> {
        let end = self.pos.checked_add(n).ok_or(Malformed)?;
        if end > self.buf.len() {
            return Err(Malformed);
        }
        self.pos = end;
        Ok(())
    }

    #[inline(always)]
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let bytes = self
            .buf
            .get(self.pos..self.pos + N)
            .ok_or(Malformed)?
            .try_into()
            .map_err(|_| Malformed)?;
        self.pos += N;
        Ok(bytes)
    }

    #[inline(always)]
    pub(super) fn take_elems(&mut self, count: u64, size: usize) -> Result<&'a [u8], Malformed> {
        let n = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(size))
            .ok_or(Malformed)?;
        let start = self.pos;
        self.skip(n)?;
        Ok(&self.buf[start..self.pos])
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
                let start = self.pos;
                self.skip(d.size_bytes())?;
                Ok(num(d, &self.buf[start..self.pos]))
            }
        }
    }
}

/// A little-endian number of type `d` (`b` has exactly its size) as f64.
#[inline(always)]
pub(super) fn num(d: DType, b: &[u8]) -> f64 {
    fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&b[..N]);
        a
    }
    match d {
        DType::U8 => f64::from(b[0]),
        DType::I8 => f64::from(b[0] as i8),
        DType::U16 => f64::from(u16::from_le_bytes(arr(b))),
        DType::I16 => f64::from(i16::from_le_bytes(arr(b))),
        DType::U32 => f64::from(u32::from_le_bytes(arr(b))),
        DType::I32 => f64::from(i32::from_le_bytes(arr(b))),
        DType::U64 => u64::from_le_bytes(arr(b)) as f64,
        DType::I64 => i64::from_le_bytes(arr(b)) as f64,
        DType::F32 => f64::from(f32::from_le_bytes(arr(b))),
        DType::F64 => f64::from_le_bytes(arr(b)),
    }
}

/// Mean, min and max of packed elements (NaN elements ignored) into `out[0..3]`; all NaN
/// when there is no element.
pub(super) fn reduce(d: DType, bytes: &[u8], out: &mut [f64]) {
    let size = d.size_bytes();
    let (mut sum, mut min, mut max, mut n) = (0.0f64, f64::INFINITY, f64::NEG_INFINITY, 0u64);
    for chunk in bytes.chunks_exact(size) {
        let v = num(d, chunk);
        if v.is_nan() {
            continue;
        }
        sum += v;
        min = min.min(v);
        max = max.max(v);
        n += 1;
    }
    if n > 0 {
        out[0] = sum / n as f64;
        out[1] = min;
        out[2] = max;
    }
}

pub(super) fn tensor_bytes<'a>(d: DType, cur: &mut Cursor<'a>) -> Result<&'a [u8], Malformed> {
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
    cur.take_elems(count, d.size_bytes())
}

/// Skips one value of type `desc` (descriptors are at most 64 deep, so is this recursion).
pub(super) fn skip_value(
    desc: &TypeDesc,
    cur: &mut Cursor<'_>,
    depth: usize,
) -> Result<(), Malformed> {
    if depth > 64 {
        return Err(Malformed);
    }
    if let Some(n) = fixed_size(desc) {
        return cur.skip(n);
    }
    match desc {
        TypeDesc::String | TypeDesc::Bytes => {
            let n = cur.u64()?;
            cur.take_elems(n, 1).map(drop)
        }
        TypeDesc::Option { some } => match cur.u8()? {
            0 => Ok(()),
            1 => skip_value(some, cur, depth + 1),
            _ => Err(Malformed),
        },
        TypeDesc::Seq { elem } => {
            let n = cur.u64()?;
            match fixed_size(elem) {
                Some(size) => cur.take_elems(n, size).map(drop),
                None => {
                    // Every element takes at least one byte: a count beyond the payload is
                    // malformed, not a reason to loop.
                    if n > (cur.buf.len() - cur.pos) as u64 {
                        return Err(Malformed);
                    }
                    (0..n).try_for_each(|_| skip_value(elem, cur, depth + 1))
                }
            }
        }
        TypeDesc::Array { len, elem } => {
            if *len > (cur.buf.len() - cur.pos) as u64 {
                return Err(Malformed);
            }
            (0..*len).try_for_each(|_| skip_value(elem, cur, depth + 1))
        }
        TypeDesc::Tuple { elems } => elems.iter().try_for_each(|e| skip_value(e, cur, depth + 1)),
        TypeDesc::Struct { fields } => fields
            .iter()
            .try_for_each(|f| skip_value(&f.ty, cur, depth + 1)),
        TypeDesc::Enum { variants } => {
            let v = variants.get(cur.u32()? as usize).ok_or(Malformed)?;
            match &v.kind {
                VariantKind::Unit => Ok(()),
                VariantKind::Tuple { elems } => {
                    elems.iter().try_for_each(|e| skip_value(e, cur, depth + 1))
                }
                VariantKind::Struct { fields } => fields
                    .iter()
                    .try_for_each(|f| skip_value(&f.ty, cur, depth + 1)),
            }
        }
        TypeDesc::Map { key, value } => {
            let n = cur.u64()?;
            if n > (cur.buf.len() - cur.pos) as u64 {
                return Err(Malformed);
            }
            (0..n).try_for_each(|_| {
                skip_value(key, cur, depth + 1)?;
                skip_value(value, cur, depth + 1)
            })
        }
        TypeDesc::Tensor { dtype } => tensor_bytes(*dtype, cur).map(drop),
        _ => Err(Malformed),
    }
}
