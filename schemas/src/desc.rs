//! Type descriptors: the self-description that travels with every payload.
//!
//! A [`TypeDesc`] says how the bytes of a value are laid out (see the crate docs for the wire
//! format); [`DType`] is the element type of tensors and packed sequences. The named, versioned
//! root type is [`SchemaDescriptor`](crate::SchemaDescriptor) (module `schema`), its canonical
//! bytes are written and read in `canonical`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::DescriptorError;

/// Maximum nesting depth of a type descriptor. Deeper descriptors are refused, so decoding a
/// hostile descriptor (or a payload with it) cannot exhaust the stack.
pub const MAX_DESC_DEPTH: usize = 64;

/// Maximum number of fields, variants or tuple elements in one descriptor node.
pub const MAX_DESC_WIDTH: usize = 4096;

/// Maximum length in bytes of a schema id, field name or variant name.
pub const MAX_NAME_LEN: usize = 256;

/// The shape of a value on the wire.
///
/// Nested structs are described inline (descriptors are trees; recursive types are not
/// supported). Rust type names are deliberately not part of a descriptor: renaming a struct does
/// not change its schema, renaming a field does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TypeDesc {
    /// One byte, 0 or 1.
    Bool,
    /// Fixed-width little-endian integers and IEEE-754 floats.
    U8,
    /// See [`TypeDesc::U8`].
    U16,
    /// See [`TypeDesc::U8`].
    U32,
    /// See [`TypeDesc::U8`].
    U64,
    /// See [`TypeDesc::U8`].
    U128,
    /// See [`TypeDesc::U8`].
    I8,
    /// See [`TypeDesc::U8`].
    I16,
    /// See [`TypeDesc::U8`].
    I32,
    /// See [`TypeDesc::U8`].
    I64,
    /// See [`TypeDesc::U8`].
    I128,
    /// See [`TypeDesc::U8`].
    F32,
    /// See [`TypeDesc::U8`].
    F64,
    /// `u64` byte length, then UTF-8 bytes.
    String,
    /// `u64` byte length, then the bytes ([`Bytes`](crate::Bytes)).
    Bytes,
    /// One tag byte (0 = none, 1 = some), then the value if some.
    Option {
        /// The type inside `Some`.
        some: Box<TypeDesc>,
    },
    /// `u64` element count, then the elements (`Vec<T>`).
    Seq {
        /// Element type.
        elem: Box<TypeDesc>,
    },
    /// Exactly `len` elements, no length prefix (`[T; N]`).
    Array {
        /// Number of elements.
        len: u64,
        /// Element type.
        elem: Box<TypeDesc>,
    },
    /// The elements one after another, no prefix (tuples, tuple structs).
    Tuple {
        /// Element types in order.
        elems: Vec<TypeDesc>,
    },
    /// The fields one after another, no prefix.
    Struct {
        /// Fields in declaration order.
        fields: Vec<Field>,
    },
    /// `u32` variant index (declaration order), then the variant's fields.
    Enum {
        /// Variants in declaration order.
        variants: Vec<Variant>,
    },
    /// `u64` entry count, then key and value of each entry.
    Map {
        /// Key type.
        key: Box<TypeDesc>,
        /// Value type.
        value: Box<TypeDesc>,
    },
    /// An n-dimensional numeric array ([`Tensor`](crate::Tensor)): `u64` rank, `rank` × `u64`
    /// dimensions (row-major), `u64` element count (= product of the dimensions), then the
    /// elements as contiguous little-endian `dtype` values.
    Tensor {
        /// Element type.
        dtype: DType,
    },
    /// A value whose type is known only at run time (a Python `dict`, `Any` or pydantic extra),
    /// encoded self-describing: one tag byte, then the value ([`dynamic`](crate::dynamic)
    /// has the tags). Decoded, it is the [`Value`](crate::Value) it was: none, bool, `i64`,
    /// `u64`, `f64`, string, bytes, list, map with string keys or tensor.
    Dynamic,
}

/// One named field of a struct (or of a struct-like enum variant).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Field {
    /// Field name.
    pub name: String,
    /// Field type.
    #[serde(rename = "type")]
    pub ty: TypeDesc,
    /// The schema version that introduced the field (1 for the original fields). Only
    /// meaningful on the fields of a snapshot's root struct; see the crate docs on evolution.
    pub since: u32,
}

impl Field {
    /// A field present since version 1.
    pub fn new(name: impl Into<String>, ty: TypeDesc) -> Field {
        Field {
            name: name.into(),
            ty,
            since: 1,
        }
    }

    /// A field introduced by schema version `since`.
    pub fn since(name: impl Into<String>, ty: TypeDesc, since: u32) -> Field {
        Field {
            name: name.into(),
            ty,
            since,
        }
    }
}

/// One variant of an enum.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Variant {
    /// Variant name.
    pub name: String,
    /// What the variant carries.
    #[serde(flatten)]
    pub kind: VariantKind,
}

/// The payload of an enum variant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum VariantKind {
    /// No payload.
    Unit,
    /// Positional fields (`B(u32, f64)`; a newtype variant has one).
    Tuple {
        /// Element types.
        elems: Vec<TypeDesc>,
    },
    /// Named fields (`C { x: u32 }`).
    Struct {
        /// Fields in order.
        fields: Vec<Field>,
    },
}

impl Variant {
    /// A unit variant.
    pub fn unit(name: impl Into<String>) -> Variant {
        Variant {
            name: name.into(),
            kind: VariantKind::Unit,
        }
    }

    /// A tuple variant.
    pub fn tuple(name: impl Into<String>, elems: Vec<TypeDesc>) -> Variant {
        Variant {
            name: name.into(),
            kind: VariantKind::Tuple { elems },
        }
    }

    /// A struct variant.
    pub fn structure(name: impl Into<String>, fields: Vec<Field>) -> Variant {
        Variant {
            name: name.into(),
            kind: VariantKind::Struct { fields },
        }
    }
}

impl DType {
    /// The scalar descriptor of one element.
    pub fn scalar_desc(self) -> TypeDesc {
        match self {
            DType::U8 => TypeDesc::U8,
            DType::U16 => TypeDesc::U16,
            DType::U32 => TypeDesc::U32,
            DType::U64 => TypeDesc::U64,
            DType::I8 => TypeDesc::I8,
            DType::I16 => TypeDesc::I16,
            DType::I32 => TypeDesc::I32,
            DType::I64 => TypeDesc::I64,
            DType::F32 => TypeDesc::F32,
            DType::F64 => TypeDesc::F64,
        }
    }
}

impl From<DType> for TypeDesc {
    /// The scalar descriptor of one element ([`DType::scalar_desc`]).
    fn from(dtype: DType) -> TypeDesc {
        dtype.scalar_desc()
    }
}

impl From<Vec<Field>> for TypeDesc {
    /// A struct of `fields`.
    fn from(fields: Vec<Field>) -> TypeDesc {
        TypeDesc::Struct { fields }
    }
}

impl TypeDesc {
    /// The fields of a struct, in order (empty for other types).
    pub fn fields(&self) -> &[Field] {
        match self {
            TypeDesc::Struct { fields } => fields,
            _ => &[],
        }
    }

    /// The field `name` of a struct.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields().iter().find(|f| f.name == name)
    }

    /// `Some(dtype)` if this is a sequence or fixed array of numbers (packed on the wire: a
    /// reader views them in place).
    pub fn packed_dtype(&self) -> Option<DType> {
        match self {
            TypeDesc::Seq { elem } | TypeDesc::Array { elem, .. } => elem.as_dtype(),
            _ => None,
        }
    }

    /// `Some(dtype)` if this is a scalar numeric type that can be packed (sequences and arrays
    /// of it decode to zero-copy [`Value::Packed`](crate::Value::Packed) views).
    pub fn as_dtype(&self) -> Option<DType> {
        Some(match self {
            TypeDesc::U8 => DType::U8,
            TypeDesc::U16 => DType::U16,
            TypeDesc::U32 => DType::U32,
            TypeDesc::U64 => DType::U64,
            TypeDesc::I8 => DType::I8,
            TypeDesc::I16 => DType::I16,
            TypeDesc::I32 => DType::I32,
            TypeDesc::I64 => DType::I64,
            TypeDesc::F32 => DType::F32,
            TypeDesc::F64 => DType::F64,
            _ => return None,
        })
    }

    /// A lower bound on the encoded length of any value of this type, saturating.
    pub fn min_encoded_len(&self) -> u64 {
        match self {
            TypeDesc::Bool | TypeDesc::U8 | TypeDesc::I8 => 1,
            TypeDesc::U16 | TypeDesc::I16 => 2,
            TypeDesc::U32 | TypeDesc::I32 | TypeDesc::F32 => 4,
            TypeDesc::U64 | TypeDesc::I64 | TypeDesc::F64 => 8,
            TypeDesc::U128 | TypeDesc::I128 => 16,
            TypeDesc::String | TypeDesc::Bytes | TypeDesc::Seq { .. } | TypeDesc::Map { .. } => 8,
            TypeDesc::Option { .. } => 1,
            TypeDesc::Array { len, elem } => len.saturating_mul(elem.min_encoded_len()),
            TypeDesc::Tuple { elems } => elems
                .iter()
                .fold(0u64, |acc, e| acc.saturating_add(e.min_encoded_len())),
            TypeDesc::Struct { fields } => fields
                .iter()
                .fold(0u64, |acc, f| acc.saturating_add(f.ty.min_encoded_len())),
            TypeDesc::Enum { .. } => 4,
            TypeDesc::Tensor { .. } => 16,
            TypeDesc::Dynamic => 1,
        }
    }

    /// The nesting depth (a scalar has depth 1).
    pub fn depth(&self) -> usize {
        let children = match self {
            TypeDesc::Option { some: t }
            | TypeDesc::Seq { elem: t }
            | TypeDesc::Array { elem: t, .. } => t.depth(),
            TypeDesc::Tuple { elems } => elems.iter().map(TypeDesc::depth).max().unwrap_or(0),
            TypeDesc::Struct { fields } => fields.iter().map(|f| f.ty.depth()).max().unwrap_or(0),
            TypeDesc::Enum { variants } => variants
                .iter()
                .map(|v| match &v.kind {
                    VariantKind::Unit => 0,
                    VariantKind::Tuple { elems } => {
                        elems.iter().map(TypeDesc::depth).max().unwrap_or(0)
                    }
                    VariantKind::Struct { fields } => {
                        fields.iter().map(|f| f.ty.depth()).max().unwrap_or(0)
                    }
                })
                .max()
                .unwrap_or(0),
            TypeDesc::Map { key, value } => key.depth().max(value.depth()),
            _ => 0,
        };
        children + 1
    }

    /// Checks the structural limits ([`MAX_DESC_DEPTH`], [`MAX_DESC_WIDTH`], [`MAX_NAME_LEN`],
    /// non-empty distinct field and variant names).
    pub fn validate(&self) -> Result<(), DescriptorError> {
        self.validate_at(0, "")
    }

    fn validate_at(&self, depth: usize, path: &str) -> Result<(), DescriptorError> {
        if depth >= MAX_DESC_DEPTH {
            return Err(DescriptorError::TooDeep {
                max: MAX_DESC_DEPTH,
            });
        }
        match self {
            TypeDesc::Option { some: t }
            | TypeDesc::Seq { elem: t }
            | TypeDesc::Array { elem: t, .. } => t.validate_at(depth + 1, path),
            TypeDesc::Tuple { elems } => {
                check_width(elems.len(), path)?;
                elems
                    .iter()
                    .enumerate()
                    .try_for_each(|(i, e)| e.validate_at(depth + 1, &join(path, &i.to_string())))
            }
            TypeDesc::Struct { fields } => validate_fields(fields, depth, path),
            TypeDesc::Enum { variants } => {
                check_width(variants.len(), path)?;
                check_names(variants.iter().map(|v| v.name.as_str()), path)?;
                for v in variants {
                    let p = join(path, &v.name);
                    match &v.kind {
                        VariantKind::Unit => {}
                        VariantKind::Tuple { elems } => {
                            check_width(elems.len(), &p)?;
                            for e in elems {
                                e.validate_at(depth + 1, &p)?;
                            }
                        }
                        VariantKind::Struct { fields } => validate_fields(fields, depth, &p)?,
                    }
                }
                Ok(())
            }
            TypeDesc::Map { key, value } => {
                key.validate_at(depth + 1, path)?;
                value.validate_at(depth + 1, path)
            }
            _ => Ok(()),
        }
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn check_width(n: usize, path: &str) -> Result<(), DescriptorError> {
    if n > MAX_DESC_WIDTH {
        return Err(DescriptorError::TooWide {
            path: path.to_owned(),
            count: n,
            max: MAX_DESC_WIDTH,
        });
    }
    Ok(())
}

fn check_names<'a>(
    names: impl Iterator<Item = &'a str>,
    path: &str,
) -> Result<(), DescriptorError> {
    let mut seen = std::collections::HashSet::new();
    for name in names {
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            return Err(DescriptorError::BadName {
                path: path.to_owned(),
                name: name.chars().take(MAX_NAME_LEN).collect(),
            });
        }
        if !seen.insert(name) {
            return Err(DescriptorError::DuplicateName {
                path: path.to_owned(),
                name: name.to_owned(),
            });
        }
    }
    Ok(())
}

fn validate_fields(fields: &[Field], depth: usize, path: &str) -> Result<(), DescriptorError> {
    check_width(fields.len(), path)?;
    check_names(fields.iter().map(|f| f.name.as_str()), path)?;
    fields
        .iter()
        .try_for_each(|f| f.ty.validate_at(depth + 1, &join(path, &f.name)))
}

impl fmt::Display for TypeDesc {
    /// A compact, Rust-like rendering: `struct { step: u32, obs: tensor<u8> }`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list<T>(
            f: &mut fmt::Formatter<'_>,
            items: &[T],
            mut each: impl FnMut(&mut fmt::Formatter<'_>, &T) -> fmt::Result,
        ) -> fmt::Result {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                each(f, item)?;
            }
            Ok(())
        }
        fn fields(f: &mut fmt::Formatter<'_>, fs: &[Field]) -> fmt::Result {
            f.write_str("{ ")?;
            list(f, fs, |f, fl| write!(f, "{}: {}", fl.name, fl.ty))?;
            f.write_str(" }")
        }
        match self {
            TypeDesc::Bool => f.write_str("bool"),
            TypeDesc::U128 => f.write_str("u128"),
            TypeDesc::I128 => f.write_str("i128"),
            TypeDesc::String => f.write_str("string"),
            TypeDesc::Bytes => f.write_str("bytes"),
            TypeDesc::Option { some } => write!(f, "option<{some}>"),
            TypeDesc::Seq { elem } => write!(f, "seq<{elem}>"),
            TypeDesc::Array { len, elem } => write!(f, "[{elem}; {len}]"),
            TypeDesc::Tuple { elems } => {
                f.write_str("(")?;
                list(f, elems, |f, e| write!(f, "{e}"))?;
                f.write_str(")")
            }
            TypeDesc::Struct { fields: fs } => {
                f.write_str("struct ")?;
                fields(f, fs)
            }
            TypeDesc::Enum { variants } => {
                f.write_str("enum { ")?;
                list(f, variants, |f, v| {
                    f.write_str(&v.name)?;
                    match &v.kind {
                        VariantKind::Unit => Ok(()),
                        VariantKind::Tuple { elems } => {
                            f.write_str("(")?;
                            list(f, elems, |f, e| write!(f, "{e}"))?;
                            f.write_str(")")
                        }
                        VariantKind::Struct { fields: fs } => {
                            f.write_str(" ")?;
                            fields(f, fs)
                        }
                    }
                })?;
                f.write_str(" }")
            }
            TypeDesc::Map { key, value } => write!(f, "map<{key}, {value}>"),
            TypeDesc::Tensor { dtype } => write!(f, "tensor<{dtype}>"),
            TypeDesc::Dynamic => f.write_str("dynamic"),
            scalar => match scalar.as_dtype() {
                Some(d) => f.write_str(d.name()),
                None => Err(fmt::Error),
            },
        }
    }
}
