//! The typed codec: the [`Wire`] trait and its impls for std types.
//!
//! A `Wire` type knows its descriptor and its bytes, nothing more: the dynamic view of a value
//! ([`ToValue`](crate::ToValue)) is built on top of it, in `value`.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash};

use crate::cursor::{WireReader, WireWriter};
use crate::desc::TypeDesc;
use crate::error::{DecodeError, DecodeErrorKind, EncodeError};

/// A type with a wire encoding and a type descriptor.
///
/// Implemented for the std types listed in the crate docs and derived with `#[derive(Wire)]`
/// (nested types) or `#[derive(Snapshot)]` (root types). The encoding is the bincode 1.x
/// layout; see the crate docs.
///
/// Hand-written impls must keep `encoded_len` exact and `encode` consistent with
/// [`Wire::type_desc`]; the property tests in this crate check the std impls against both.
pub trait Wire: Sized {
    /// A lower bound on the encoded length of any value of this type (used to bound length
    /// prefixes before allocating).
    const MIN_ENCODED_LEN: usize;

    /// The descriptor of this type.
    fn type_desc() -> TypeDesc;

    /// Exact number of bytes [`encode`](Wire::encode) writes.
    fn encoded_len(&self) -> usize;

    /// Writes the value. Use [`encode_into`](Wire::encode_into) unless composing impls.
    fn encode(&self, w: &mut WireWriter<'_>);

    /// Reads a value.
    fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError>;

    /// Encodes into `buf` without allocating; returns the number of bytes written.
    // `#[inline]`: a copy in every codegen unit that uses it, so an emit path (the bus's
    // `Publisher::write_record`) inlines it whichever unit it lands in; out of line (it was,
    // depending on how rustc happened to partition the caller's crate) an emit costs ~30
    // instructions more and keeps its abort path.
    #[inline]
    fn encode_into(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let needed = self.encoded_len();
        let Some(dst) = buf.get_mut(..needed) else {
            return Err(EncodeError::BufferTooSmall {
                needed,
                available: buf.len(),
            });
        };
        let mut w = WireWriter::new(dst);
        self.encode(&mut w);
        if w.overflowed() || w.position() != needed {
            return Err(EncodeError::LengthMismatch {
                promised: needed,
                written: w.position(),
            });
        }
        Ok(needed)
    }

    /// Encodes into a new `Vec`.
    fn encode_to_vec(&self) -> Result<Vec<u8>, EncodeError> {
        let mut out = vec![0u8; self.encoded_len()];
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// Decodes a whole buffer; trailing bytes are an error.
    fn decode_exact(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = WireReader::new(bytes);
        let v = Self::decode(&mut r)?;
        r.finish()?;
        Ok(v)
    }

    /// Encoded length of a slice of values (bulk hook; numeric types override it).
    #[doc(hidden)]
    fn slice_encoded_len(items: &[Self]) -> usize {
        items.iter().map(Wire::encoded_len).sum()
    }

    /// Encodes a slice of values back to back (bulk hook; numeric types copy in one go).
    #[doc(hidden)]
    fn encode_slice(items: &[Self], w: &mut WireWriter<'_>) {
        for item in items {
            item.encode(w);
        }
    }

    /// Decodes `n` values back to back; `n` was already checked against the input.
    #[doc(hidden)]
    fn decode_vec(r: &mut WireReader<'_>, n: usize) -> Result<Vec<Self>, DecodeError> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(Self::decode(r)?);
        }
        Ok(out)
    }

    /// Decodes exactly `N` values into an array (bulk hook; numeric types copy in place
    /// without allocating).
    #[doc(hidden)]
    fn decode_array<const N: usize>(r: &mut WireReader<'_>) -> Result<[Self; N], DecodeError> {
        let at = r.offset();
        // `decode_vec` returns exactly N items, so the conversion cannot fail; the impossible
        // case maps to an error rather than a panic.
        Self::decode_vec(r, N)?.try_into().map_err(|_| {
            DecodeError::new(
                at,
                DecodeErrorKind::UnexpectedEnd {
                    needed: N,
                    remaining: 0,
                },
            )
        })
    }
}

/// Invokes the macro `$m` once with every numeric element type and its name (the variant name
/// in [`DType`](crate::DType), [`TypeDesc`] and [`Value`](crate::Value) alike):
/// `$m!(u8 => U8, …, f64 => F64)`. The one list of element types every impl uses.
macro_rules! for_each_element {
    ($m:ident) => {
        $m! {
            u8 => U8, u16 => U16, u32 => U32, u64 => U64,
            i8 => I8, i16 => I16, i32 => I32, i64 => I64,
            f32 => F32, f64 => F64,
        }
    };
}
pub(crate) use for_each_element;

macro_rules! numeric {
    ($($t:ty => $desc:ident),* $(,)?) => {$(
        impl Wire for $t {
            const MIN_ENCODED_LEN: usize = size_of::<$t>();
            fn type_desc() -> TypeDesc {
                TypeDesc::$desc
            }
            #[inline]
            fn encoded_len(&self) -> usize {
                size_of::<$t>()
            }
            #[inline]
            fn encode(&self, w: &mut WireWriter<'_>) {
                w.put(&self.to_le_bytes());
            }
            #[inline]
            fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
                Ok(<$t>::from_le_bytes(r.take_array()?))
            }
            #[inline]
            fn slice_encoded_len(items: &[Self]) -> usize {
                size_of_val(items)
            }
            #[inline]
            fn encode_slice(items: &[Self], w: &mut WireWriter<'_>) {
                if cfg!(target_endian = "little") {
                    w.put(bytemuck::cast_slice(items));
                } else {
                    items.iter().for_each(|x| w.put(&x.to_le_bytes()));
                }
            }
            #[inline]
            fn decode_vec(r: &mut WireReader<'_>, n: usize) -> Result<Vec<Self>, DecodeError> {
                let bytes = r.take(n.saturating_mul(size_of::<$t>()))?;
                if cfg!(target_endian = "little") {
                    // One copy: straight from the payload when it is aligned for the type,
                    // element by element otherwise (never zero-fill, then copy).
                    Ok(match bytemuck::try_cast_slice::<u8, $t>(bytes) {
                        Ok(aligned) => aligned.to_vec(),
                        Err(_) => bytes
                            .chunks_exact(size_of::<$t>())
                            .map(bytemuck::pod_read_unaligned::<$t>)
                            .collect(),
                    })
                } else {
                    Ok(bytes
                        .chunks_exact(size_of::<$t>())
                        .map(|c| {
                            let mut a = [0u8; size_of::<$t>()];
                            a.copy_from_slice(c);
                            <$t>::from_le_bytes(a)
                        })
                        .collect())
                }
            }
            #[inline]
            fn decode_array<const N: usize>(r: &mut WireReader<'_>) -> Result<[Self; N], DecodeError> {
                let bytes = r.take(N * size_of::<$t>())?;
                let mut out = [<$t>::default(); N];
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(size_of::<$t>())) {
                    *o = <$t>::from_le_bytes(bytemuck::pod_read_unaligned(c));
                }
                Ok(out)
            }
        }
    )*};
}

for_each_element!(numeric);

macro_rules! wide_int {
    ($($t:ty => $desc:ident);* $(;)?) => {$(
        impl Wire for $t {
            const MIN_ENCODED_LEN: usize = 16;
            fn type_desc() -> TypeDesc {
                TypeDesc::$desc
            }
            fn encoded_len(&self) -> usize {
                16
            }
            fn encode(&self, w: &mut WireWriter<'_>) {
                w.put(&self.to_le_bytes());
            }
            fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
                Ok(<$t>::from_le_bytes(r.take_array()?))
            }
        }
    )*};
}

wide_int! { u128 => U128; i128 => I128 }

impl Wire for bool {
    const MIN_ENCODED_LEN: usize = 1;
    fn type_desc() -> TypeDesc {
        TypeDesc::Bool
    }
    #[inline]
    fn encoded_len(&self) -> usize {
        1
    }
    #[inline]
    fn encode(&self, w: &mut WireWriter<'_>) {
        w.put(&[u8::from(*self)]);
    }
    #[inline]
    fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
        let at = r.offset();
        match r.read_u8()? {
            0 => Ok(false),
            1 => Ok(true),
            byte => Err(DecodeError::new(at, DecodeErrorKind::InvalidBool { byte })),
        }
    }
}

impl Wire for String {
    const MIN_ENCODED_LEN: usize = 8;
    fn type_desc() -> TypeDesc {
        TypeDesc::String
    }
    fn encoded_len(&self) -> usize {
        8 + self.len()
    }
    fn encode(&self, w: &mut WireWriter<'_>) {
        w.put_len(self.len());
        w.put(self.as_bytes());
    }
    fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
        let len = r.read_len(1)?;
        let at = r.offset();
        let bytes = r.take(len)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| DecodeError::new(at, DecodeErrorKind::InvalidUtf8))
    }
}

impl<T: Wire> Wire for Option<T> {
    const MIN_ENCODED_LEN: usize = 1;
    fn type_desc() -> TypeDesc {
        TypeDesc::Option {
            some: Box::new(T::type_desc()),
        }
    }
    fn encoded_len(&self) -> usize {
        1 + self.as_ref().map_or(0, Wire::encoded_len)
    }
    fn encode(&self, w: &mut WireWriter<'_>) {
        match self {
            None => w.put(&[0]),
            Some(v) => {
                w.put(&[1]);
                v.encode(w);
            }
        }
    }
    fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
        let at = r.offset();
        match r.read_u8()? {
            0 => Ok(None),
            1 => T::decode(r).map(Some),
            tag => Err(DecodeError::new(
                at,
                DecodeErrorKind::InvalidOptionTag { tag },
            )),
        }
    }
}

impl<T: Wire> Wire for Box<T> {
    const MIN_ENCODED_LEN: usize = T::MIN_ENCODED_LEN;
    fn type_desc() -> TypeDesc {
        T::type_desc()
    }
    fn encoded_len(&self) -> usize {
        (**self).encoded_len()
    }
    fn encode(&self, w: &mut WireWriter<'_>) {
        (**self).encode(w);
    }
    fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
        T::decode(r).map(Box::new)
    }
}

impl<T: Wire> Wire for Vec<T> {
    const MIN_ENCODED_LEN: usize = 8;
    fn type_desc() -> TypeDesc {
        TypeDesc::Seq {
            elem: Box::new(T::type_desc()),
        }
    }
    #[inline]
    fn encoded_len(&self) -> usize {
        8 + T::slice_encoded_len(self)
    }
    #[inline]
    fn encode(&self, w: &mut WireWriter<'_>) {
        w.put_len(self.len());
        T::encode_slice(self, w);
    }
    #[inline]
    fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
        let n = r.read_len(T::MIN_ENCODED_LEN)?;
        T::decode_vec(r, n)
    }
}

impl<T: Wire, const N: usize> Wire for [T; N] {
    const MIN_ENCODED_LEN: usize = N.saturating_mul(T::MIN_ENCODED_LEN);
    fn type_desc() -> TypeDesc {
        TypeDesc::Array {
            len: N as u64,
            elem: Box::new(T::type_desc()),
        }
    }
    #[inline]
    fn encoded_len(&self) -> usize {
        T::slice_encoded_len(self)
    }
    #[inline]
    fn encode(&self, w: &mut WireWriter<'_>) {
        T::encode_slice(self, w);
    }
    #[inline]
    fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
        let at = r.offset();
        if (N as u64).saturating_mul(T::MIN_ENCODED_LEN as u64) > r.remaining() as u64 {
            return Err(DecodeError::new(
                at,
                DecodeErrorKind::UnexpectedEnd {
                    needed: N.saturating_mul(T::MIN_ENCODED_LEN),
                    remaining: r.remaining(),
                },
            ));
        }
        T::decode_array::<N>(r)
    }
}

macro_rules! tuple {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: Wire),+> Wire for ($($name,)+) {
            const MIN_ENCODED_LEN: usize = 0 $(+ $name::MIN_ENCODED_LEN)+;
            fn type_desc() -> TypeDesc {
                TypeDesc::Tuple { elems: vec![$($name::type_desc()),+] }
            }
            fn encoded_len(&self) -> usize {
                0 $(+ self.$idx.encoded_len())+
            }
            fn encode(&self, w: &mut WireWriter<'_>) {
                $(self.$idx.encode(w);)+
            }
            fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
                Ok(($($name::decode(r)?,)+))
            }
        }
    };
}

/// Invokes the macro `$m` once per supported tuple arity (1 to 8), with the element type
/// names and field indexes: `$m!(A 0, B 1)`. The one list of arities every tuple impl uses.
macro_rules! for_each_tuple {
    ($m:ident) => {
        $m!(A 0);
        $m!(A 0, B 1);
        $m!(A 0, B 1, C 2);
        $m!(A 0, B 1, C 2, D 3);
        $m!(A 0, B 1, C 2, D 3, E 4);
        $m!(A 0, B 1, C 2, D 3, E 4, F 5);
        $m!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
        $m!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
    };
}
pub(crate) use for_each_tuple;

for_each_tuple!(tuple);

impl Wire for () {
    const MIN_ENCODED_LEN: usize = 0;
    fn type_desc() -> TypeDesc {
        TypeDesc::Tuple { elems: Vec::new() }
    }
    fn encoded_len(&self) -> usize {
        0
    }
    fn encode(&self, _: &mut WireWriter<'_>) {}
    fn decode(_: &mut WireReader<'_>) -> Result<Self, DecodeError> {
        Ok(())
    }
}

/// The items every map impl shares: `u64` entry count, then key, value, key, value…
macro_rules! map_layout {
    () => {
        const MIN_ENCODED_LEN: usize = 8;
        fn type_desc() -> TypeDesc {
            TypeDesc::Map {
                key: Box::new(K::type_desc()),
                value: Box::new(V::type_desc()),
            }
        }
        fn encoded_len(&self) -> usize {
            8 + self
                .iter()
                .map(|(k, v)| k.encoded_len() + v.encoded_len())
                .sum::<usize>()
        }
        fn encode(&self, w: &mut WireWriter<'_>) {
            w.put_len(self.len());
            for (k, v) in self {
                k.encode(w);
                v.encode(w);
            }
        }
    };
}

/// Decodes a map's entries; `insert` returns `false` for a key already present, which is an
/// error (keeping only one of the two values would silently lose data).
fn map_decode<K: Wire, V: Wire, M>(
    r: &mut WireReader<'_>,
    make: impl FnOnce(usize) -> M,
    mut insert: impl FnMut(&mut M, K, V) -> bool,
) -> Result<M, DecodeError> {
    let n = r.read_len(K::MIN_ENCODED_LEN + V::MIN_ENCODED_LEN)?;
    let mut map = make(n);
    for _ in 0..n {
        let at = r.offset();
        let k = K::decode(r)?;
        let v = V::decode(r)?;
        if !insert(&mut map, k, v) {
            return Err(DecodeError::new(at, DecodeErrorKind::DuplicateMapKey));
        }
    }
    Ok(map)
}

impl<K: Wire + Ord, V: Wire> Wire for BTreeMap<K, V> {
    map_layout!();
    fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
        map_decode(r, |_| BTreeMap::new(), |m, k, v| m.insert(k, v).is_none())
    }
}

impl<K: Wire + Eq + Hash, V: Wire, S: BuildHasher + Default> Wire for HashMap<K, V, S> {
    map_layout!();
    fn decode(r: &mut WireReader<'_>) -> Result<Self, DecodeError> {
        map_decode(
            r,
            |n| HashMap::with_capacity_and_hasher(n, S::default()),
            |m, k, v| m.insert(k, v).is_none(),
        )
    }
}
