//! Dynamic values: [`Value`], a payload without its Rust type, and [`ToValue`], the view of a
//! typed [`Wire`] value as one (equal to what [`decode`](crate::decode) returns for its bytes).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use crate::element::{Element, Packed, TensorView};
use crate::tensor::{Bytes, Tensor};
use crate::wire::{Wire, for_each_element, for_each_tuple};

/// A decoded value, borrowing strings, byte buffers and numeric arrays from the payload where
/// it can (zero copy on little-endian machines).
///
/// Sequences, arrays and tuples all become [`Value::Seq`], except sequences and arrays of
/// numeric scalars, which become [`Value::Packed`] views; tensors become [`Value::Tensor`].
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// `bool`.
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
    /// A string.
    Str(Cow<'a, str>),
    /// A byte buffer ([`TypeDesc::Bytes`](crate::TypeDesc::Bytes)).
    Bytes(Cow<'a, [u8]>),
    /// An option.
    Option(Option<Box<Value<'a>>>),
    /// A sequence, fixed array or tuple of non-numeric (or mixed) elements.
    Seq(Vec<Value<'a>>),
    /// A sequence or fixed array of numeric scalars, as little-endian bytes.
    Packed(Packed<'a>),
    /// A struct: field names and values in order.
    Struct(Vec<(Cow<'a, str>, Value<'a>)>),
    /// An enum variant.
    Variant {
        /// Variant index (its position in the declaration).
        index: u32,
        /// Variant name.
        name: Cow<'a, str>,
        /// The payload: [`Value::Unit`], a [`Value::Seq`] for tuple variants or a
        /// [`Value::Struct`] for struct variants.
        value: Box<Value<'a>>,
    },
    /// The payload of a unit enum variant.
    Unit,
    /// A map's entries in wire order.
    Map(Vec<(Value<'a>, Value<'a>)>),
    /// A tensor.
    Tensor(TensorView<'a>),
}

impl Value<'_> {
    /// Copies every borrowed part, detaching the value from the payload buffer.
    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::Bool(v) => Value::Bool(v),
            Value::U8(v) => Value::U8(v),
            Value::U16(v) => Value::U16(v),
            Value::U32(v) => Value::U32(v),
            Value::U64(v) => Value::U64(v),
            Value::U128(v) => Value::U128(v),
            Value::I8(v) => Value::I8(v),
            Value::I16(v) => Value::I16(v),
            Value::I32(v) => Value::I32(v),
            Value::I64(v) => Value::I64(v),
            Value::I128(v) => Value::I128(v),
            Value::F32(v) => Value::F32(v),
            Value::F64(v) => Value::F64(v),
            Value::Str(s) => Value::Str(Cow::Owned(s.into_owned())),
            Value::Bytes(b) => Value::Bytes(Cow::Owned(b.into_owned())),
            Value::Option(o) => Value::Option(o.map(|v| Box::new(v.into_owned()))),
            Value::Seq(items) => Value::Seq(items.into_iter().map(Value::into_owned).collect()),
            Value::Packed(p) => Value::Packed(Packed {
                dtype: p.dtype,
                bytes: Cow::Owned(p.bytes.into_owned()),
            }),
            Value::Struct(fields) => Value::Struct(
                fields
                    .into_iter()
                    .map(|(k, v)| (Cow::Owned(k.into_owned()), v.into_owned()))
                    .collect(),
            ),
            Value::Variant { index, name, value } => Value::Variant {
                index,
                name: Cow::Owned(name.into_owned()),
                value: Box::new(value.into_owned()),
            },
            Value::Unit => Value::Unit,
            Value::Map(entries) => Value::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect(),
            ),
            Value::Tensor(t) => Value::Tensor(TensorView {
                dtype: t.dtype,
                shape: t.shape,
                data: Cow::Owned(t.data.into_owned()),
            }),
        }
    }

    /// The field `name` of a struct value.
    pub fn field(&self, name: &str) -> Option<&Value<'_>> {
        match self {
            Value::Struct(fields) => fields.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Follows a dotted path of struct fields (`"pose.position"`).
    pub fn path(&self, dotted: &str) -> Option<&Value<'_>> {
        dotted.split('.').try_fold(self, |v, name| v.field(name))
    }

    /// A scalar number widened to `f64` (`None` for non-numeric values).
    pub fn as_f64(&self) -> Option<f64> {
        Some(match *self {
            Value::U8(v) => f64::from(v),
            Value::U16(v) => f64::from(v),
            Value::U32(v) => f64::from(v),
            Value::U64(v) => v as f64,
            Value::U128(v) => v as f64,
            Value::I8(v) => f64::from(v),
            Value::I16(v) => f64::from(v),
            Value::I32(v) => f64::from(v),
            Value::I64(v) => v as f64,
            Value::I128(v) => v as f64,
            Value::F32(v) => f64::from(v),
            Value::F64(v) => v,
            Value::Bool(v) => f64::from(u8::from(v)),
            _ => return None,
        })
    }

    /// A short name of the value's kind, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Bool(_) => "bool",
            Value::U8(_) => "u8",
            Value::U16(_) => "u16",
            Value::U32(_) => "u32",
            Value::U64(_) => "u64",
            Value::U128(_) => "u128",
            Value::I8(_) => "i8",
            Value::I16(_) => "i16",
            Value::I32(_) => "i32",
            Value::I64(_) => "i64",
            Value::I128(_) => "i128",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Str(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::Option(_) => "option",
            Value::Seq(_) => "sequence",
            Value::Packed(_) => "packed array",
            Value::Struct(_) => "struct",
            Value::Variant { .. } => "enum variant",
            Value::Unit => "unit",
            Value::Map(_) => "map",
            Value::Tensor(_) => "tensor",
        }
    }
}

/// A [`Wire`] type viewed as a dynamic [`Value`], borrowing where it can.
///
/// Implemented for every std type that implements [`Wire`], for [`Tensor`] and [`Bytes`], and
/// derived with `#[derive(Wire)]` / `#[derive(Snapshot)]`. A hand-written [`Wire`] impl adds a
/// `ToValue` impl beside it. The value equals what [`decode`](crate::decode) returns for the
/// encoded bytes; the property tests check the std impls against it.
///
/// ```
/// use snapbus_schemas::{Snapshot, ToValue, Value};
///
/// #[derive(Snapshot)]
/// #[snapshot(id = "doc.gain", version = 1)]
/// struct Gain { gain: f32 }
///
/// assert_eq!(Gain { gain: 0.5 }.to_value().field("gain"), Some(&Value::F32(0.5)));
/// ```
pub trait ToValue: Wire {
    /// The value as a dynamic [`Value`], borrowing where it can.
    fn to_value(&self) -> Value<'_>;

    /// A slice as a dynamic value (numeric types give a zero-copy [`Value::Packed`]).
    #[doc(hidden)]
    fn slice_to_value(items: &[Self]) -> Value<'_> {
        Value::Seq(items.iter().map(ToValue::to_value).collect())
    }
}

macro_rules! scalar_to_value {
    ($($t:ty => $variant:ident),* $(,)?) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value<'_> {
                Value::$variant(*self)
            }
        }
    )*};
}

scalar_to_value! { bool => Bool, u128 => U128, i128 => I128 }

macro_rules! element_to_value {
    ($($t:ty => $variant:ident),* $(,)?) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value<'_> {
                Value::$variant(*self)
            }
            fn slice_to_value(items: &[Self]) -> Value<'_> {
                Value::Packed(Packed::from_slice(items))
            }
        }
    )*};
}

for_each_element!(element_to_value);

impl ToValue for String {
    fn to_value(&self) -> Value<'_> {
        Value::Str(Cow::Borrowed(self))
    }
}

impl ToValue for Bytes {
    fn to_value(&self) -> Value<'_> {
        Value::Bytes(Cow::Borrowed(&self.0))
    }
}

impl<T: Element> ToValue for Tensor<T> {
    fn to_value(&self) -> Value<'_> {
        let data = Packed::from_slice(self.data()).bytes;
        Value::Tensor(TensorView {
            dtype: T::DTYPE,
            shape: self.shape().to_vec(),
            data,
        })
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value<'_> {
        Value::Option(self.as_ref().map(|v| Box::new(v.to_value())))
    }
}

impl<T: ToValue> ToValue for Box<T> {
    fn to_value(&self) -> Value<'_> {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Vec<T> {
    fn to_value(&self) -> Value<'_> {
        T::slice_to_value(self)
    }
}

impl<T: ToValue, const N: usize> ToValue for [T; N] {
    fn to_value(&self) -> Value<'_> {
        T::slice_to_value(self)
    }
}

macro_rules! tuple_to_value {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: ToValue),+> ToValue for ($($name,)+) {
            fn to_value(&self) -> Value<'_> {
                Value::Seq(vec![$(self.$idx.to_value()),+])
            }
        }
    };
}

for_each_tuple!(tuple_to_value);

impl ToValue for () {
    fn to_value(&self) -> Value<'_> {
        Value::Seq(Vec::new())
    }
}

fn map_to_value<'a, K: ToValue + 'a, V: ToValue + 'a>(
    entries: impl Iterator<Item = (&'a K, &'a V)>,
) -> Value<'a> {
    Value::Map(entries.map(|(k, v)| (k.to_value(), v.to_value())).collect())
}

impl<K: ToValue + Ord, V: ToValue> ToValue for BTreeMap<K, V> {
    fn to_value(&self) -> Value<'_> {
        map_to_value(self.iter())
    }
}

impl<K: ToValue + Eq + std::hash::Hash, V: ToValue, S: BuildHasher + Default> ToValue
    for HashMap<K, V, S>
{
    fn to_value(&self) -> Value<'_> {
        map_to_value(self.iter())
    }
}
