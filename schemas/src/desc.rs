//! Type descriptors: the self-description that travels with every payload.
//!
//! A [`TypeDesc`] says how the bytes of a value are laid out (see the crate docs for the wire
//! format). A [`SchemaDescriptor`] names a root type with a schema id and a version, has a
//! canonical byte form ([`SchemaDescriptor::to_canonical_bytes`]) and a stable 64-bit
//! [fingerprint](SchemaDescriptor::fingerprint) computed from it.
//!
//! Descriptors arrive from other processes and from files, so
//! [`SchemaDescriptor::from_canonical_bytes`] treats its input as untrusted: nesting depth,
//! counts and lengths are bounded and every violation is a [`DescriptorError`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{DecodeError, DecodeErrorKind, DescriptorError};
use crate::wire::WireReader;

/// Maximum nesting depth of a type descriptor. Deeper descriptors are refused, so decoding a
/// hostile descriptor (or a payload with it) cannot exhaust the stack.
pub const MAX_DESC_DEPTH: usize = 64;

/// Maximum number of fields, variants or tuple elements in one descriptor node.
pub const MAX_DESC_WIDTH: usize = 4096;

/// Maximum length in bytes of a schema id, field name or variant name.
pub const MAX_NAME_LEN: usize = 256;

/// Numeric element type of a [`Tensor`](crate::Tensor) or of a packed numeric sequence.
///
/// All dtypes are little-endian on the wire, as in numpy's `<u1`, `<f4`, ….
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// `u8`, numpy `uint8`.
    U8,
    /// `u16`, numpy `uint16`.
    U16,
    /// `u32`, numpy `uint32`.
    U32,
    /// `u64`, numpy `uint64`.
    U64,
    /// `i8`, numpy `int8`.
    I8,
    /// `i16`, numpy `int16`.
    I16,
    /// `i32`, numpy `int32`.
    I32,
    /// `i64`, numpy `int64`.
    I64,
    /// `f32`, numpy `float32`.
    F32,
    /// `f64`, numpy `float64`.
    F64,
}

impl DType {
    /// All dtypes, in code order.
    pub const ALL: [DType; 10] = [
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F32,
        DType::F64,
    ];

    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    /// Lower-case Rust name (`"f32"`), also used in JSON.
    pub const fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// The numpy dtype string (`"<f4"`), for `numpy.frombuffer`.
    pub const fn numpy(self) -> &'static str {
        match self {
            DType::U8 => "|u1",
            DType::U16 => "<u2",
            DType::U32 => "<u4",
            DType::U64 => "<u8",
            DType::I8 => "|i1",
            DType::I16 => "<i2",
            DType::I32 => "<i4",
            DType::I64 => "<i8",
            DType::F32 => "<f4",
            DType::F64 => "<f8",
        }
    }

    const fn code(self) -> u8 {
        self as u8
    }

    fn from_code(code: u8) -> Option<DType> {
        DType::ALL.get(usize::from(code)).copied()
    }

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

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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

impl TypeDesc {
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
            scalar => match scalar.as_dtype() {
                Some(d) => f.write_str(d.name()),
                None => Err(fmt::Error),
            },
        }
    }
}

/// Checks that `id` is a valid schema id: dot-separated segments of ASCII letters, digits, `_`
/// and `-`, at most [`MAX_NAME_LEN`] bytes (`"monty.env_interface.step"`).
pub fn validate_schema_id(id: &str) -> Result<(), DescriptorError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_NAME_LEN
        && id.split('.').all(|seg| {
            !seg.is_empty()
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(DescriptorError::BadSchemaId { id: id.to_owned() })
    }
}

/// A named, versioned root type: what a producer registers and what every file embeds.
///
/// Built by `#[derive(Snapshot)]` (see [`Snapshot::descriptor`](crate::Snapshot::descriptor)),
/// by [`SchemaDescriptor::new`], or decoded from its canonical bytes. The fingerprint is
/// computed once on construction.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "RawDescriptor")]
pub struct SchemaDescriptor {
    id: String,
    version: u32,
    root: TypeDesc,
    fingerprint: u64,
}

#[derive(Deserialize)]
struct RawDescriptor {
    id: String,
    version: u32,
    root: TypeDesc,
}

impl TryFrom<RawDescriptor> for SchemaDescriptor {
    type Error = DescriptorError;
    fn try_from(raw: RawDescriptor) -> Result<Self, Self::Error> {
        SchemaDescriptor::new(raw.id, raw.version, raw.root)
    }
}

impl PartialEq for SchemaDescriptor {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.version == other.version && self.root == other.root
    }
}
impl Eq for SchemaDescriptor {}

/// Magic prefix of a descriptor's canonical bytes (`"SBD"` + layout version 1).
pub const DESCRIPTOR_MAGIC: [u8; 4] = *b"SBD\x01";

impl SchemaDescriptor {
    /// Builds and validates a descriptor: the id must pass [`validate_schema_id`], the version
    /// must be ≥ 1, the type must pass [`TypeDesc::validate`], and when the root is a struct its
    /// fields' `since` versions must be ≥ 1, non-decreasing and ≤ `version` (fields are only
    /// ever appended).
    pub fn new(
        id: impl Into<String>,
        version: u32,
        root: TypeDesc,
    ) -> Result<SchemaDescriptor, DescriptorError> {
        let desc = SchemaDescriptor::new_unchecked(id.into(), version, root);
        desc.validate()?;
        Ok(desc)
    }

    /// Builds a descriptor without validating it (the derive validates at compile time what it
    /// can; [`SchemaRegistry`](crate::SchemaRegistry) re-validates everything it accepts).
    pub(crate) fn new_unchecked(id: String, version: u32, root: TypeDesc) -> SchemaDescriptor {
        let mut desc = SchemaDescriptor {
            id,
            version,
            root,
            fingerprint: 0,
        };
        desc.fingerprint = xxhash_rust::xxh3::xxh3_64(&desc.to_canonical_bytes());
        desc
    }

    /// Runs the checks of [`SchemaDescriptor::new`] again.
    pub fn validate(&self) -> Result<(), DescriptorError> {
        validate_schema_id(&self.id)?;
        if self.version == 0 {
            return Err(DescriptorError::ZeroVersion {
                id: self.id.clone(),
            });
        }
        self.root.validate()?;
        if let TypeDesc::Struct { fields } = &self.root {
            let mut prev = 1;
            for f in fields {
                if f.since < prev || f.since > self.version {
                    return Err(DescriptorError::BadSince {
                        id: self.id.clone(),
                        field: f.name.clone(),
                        since: f.since,
                        version: self.version,
                    });
                }
                prev = f.since;
            }
        }
        Ok(())
    }

    /// The schema id (`"monty.env_interface.step"`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The schema version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The root type.
    pub fn root(&self) -> &TypeDesc {
        &self.root
    }

    /// XXH3-64 of [`to_canonical_bytes`](Self::to_canonical_bytes). Equal descriptors have equal
    /// fingerprints on every platform and in every release that keeps the canonical layout.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The canonical byte form, in the same bincode-1.x-style layout as payloads:
    /// [`DESCRIPTOR_MAGIC`], the id (`u64` length + UTF-8), the version (`u32`), then the root
    /// node. A node is one tag byte followed by its children:
    ///
    /// | tag | node | then |
    /// |----|------|------|
    /// | 0–12 | bool, u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64 | — |
    /// | 13, 14 | string, bytes | — |
    /// | 15 | option | node |
    /// | 16 | seq | node |
    /// | 17 | array | `u64` len, node |
    /// | 18 | tuple | `u64` n, n nodes |
    /// | 19 | struct | `u64` n, n × (name, `u32` since, node) |
    /// | 20 | enum | `u64` n, n × (name, `u8` kind 0 unit / 1 tuple / 2 struct, then as tuple or struct) |
    /// | 21 | map | key node, value node |
    /// | 22 | tensor | `u8` dtype code (u8, u16, u32, u64, i8, i16, i32, i64, f32, f64 = 0–9) |
    pub fn to_canonical_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&DESCRIPTOR_MAGIC);
        put_str(&mut out, &self.id);
        out.extend_from_slice(&self.version.to_le_bytes());
        put_node(&mut out, &self.root);
        out
    }

    /// Decodes and validates canonical bytes from an untrusted source.
    pub fn from_canonical_bytes(bytes: &[u8]) -> Result<SchemaDescriptor, DescriptorError> {
        let mut r = WireReader::new(bytes);
        let magic = r.take(4).map_err(DescriptorError::Decode)?;
        if magic != DESCRIPTOR_MAGIC {
            return Err(DescriptorError::BadMagic {
                found: magic.to_vec(),
            });
        }
        let id = read_name(&mut r)?;
        let version = r.read_u32().map_err(DescriptorError::Decode)?;
        let root = read_node(&mut r, 0)?;
        if r.remaining() != 0 {
            return Err(DescriptorError::Decode(DecodeError::new(
                r.offset(),
                DecodeErrorKind::TrailingBytes {
                    count: r.remaining(),
                },
            )));
        }
        SchemaDescriptor::new(id, version, root)
    }

    /// A JSON Schema (draft 2020-12) describing the JSON form of this schema's values (the
    /// form [`Value::to_json`](crate::Value::to_json) produces), for tools such as Foxglove.
    pub fn to_json_schema(&self) -> serde_json::Value {
        let mut schema = crate::json::json_schema(&self.root);
        if let Some(obj) = schema.as_object_mut() {
            obj.insert(
                "$schema".into(),
                "https://json-schema.org/draft/2020-12/schema".into(),
            );
            obj.insert("title".into(), self.id.clone().into());
            obj.insert(
                "description".into(),
                format!("snapbus schema {} version {}", self.id, self.version).into(),
            );
        }
        schema
    }
}

impl fmt::Display for SchemaDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} v{} [{:016x}] {}",
            self.id, self.version, self.fingerprint, self.root
        )
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_fields(out: &mut Vec<u8>, fields: &[Field]) {
    out.extend_from_slice(&(fields.len() as u64).to_le_bytes());
    for f in fields {
        put_str(out, &f.name);
        out.extend_from_slice(&f.since.to_le_bytes());
        put_node(out, &f.ty);
    }
}

fn put_node(out: &mut Vec<u8>, t: &TypeDesc) {
    match t {
        TypeDesc::Bool => out.push(0),
        TypeDesc::U8 => out.push(1),
        TypeDesc::U16 => out.push(2),
        TypeDesc::U32 => out.push(3),
        TypeDesc::U64 => out.push(4),
        TypeDesc::U128 => out.push(5),
        TypeDesc::I8 => out.push(6),
        TypeDesc::I16 => out.push(7),
        TypeDesc::I32 => out.push(8),
        TypeDesc::I64 => out.push(9),
        TypeDesc::I128 => out.push(10),
        TypeDesc::F32 => out.push(11),
        TypeDesc::F64 => out.push(12),
        TypeDesc::String => out.push(13),
        TypeDesc::Bytes => out.push(14),
        TypeDesc::Option { some } => {
            out.push(15);
            put_node(out, some);
        }
        TypeDesc::Seq { elem } => {
            out.push(16);
            put_node(out, elem);
        }
        TypeDesc::Array { len, elem } => {
            out.push(17);
            out.extend_from_slice(&len.to_le_bytes());
            put_node(out, elem);
        }
        TypeDesc::Tuple { elems } => {
            out.push(18);
            out.extend_from_slice(&(elems.len() as u64).to_le_bytes());
            elems.iter().for_each(|e| put_node(out, e));
        }
        TypeDesc::Struct { fields } => {
            out.push(19);
            put_fields(out, fields);
        }
        TypeDesc::Enum { variants } => {
            out.push(20);
            out.extend_from_slice(&(variants.len() as u64).to_le_bytes());
            for v in variants {
                put_str(out, &v.name);
                match &v.kind {
                    VariantKind::Unit => out.push(0),
                    VariantKind::Tuple { elems } => {
                        out.push(1);
                        out.extend_from_slice(&(elems.len() as u64).to_le_bytes());
                        elems.iter().for_each(|e| put_node(out, e));
                    }
                    VariantKind::Struct { fields } => {
                        out.push(2);
                        put_fields(out, fields);
                    }
                }
            }
        }
        TypeDesc::Map { key, value } => {
            out.push(21);
            put_node(out, key);
            put_node(out, value);
        }
        TypeDesc::Tensor { dtype } => {
            out.push(22);
            out.push(dtype.code());
        }
    }
}

fn read_name(r: &mut WireReader<'_>) -> Result<String, DescriptorError> {
    let at = r.offset();
    let len = r.read_len(1).map_err(DescriptorError::Decode)?;
    if len > MAX_NAME_LEN {
        return Err(DescriptorError::Decode(DecodeError::new(
            at,
            DecodeErrorKind::LengthTooLarge {
                len: len as u64,
                remaining: MAX_NAME_LEN,
            },
        )));
    }
    let bytes = r.take(len).map_err(DescriptorError::Decode)?;
    std::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| DescriptorError::Decode(DecodeError::new(at, DecodeErrorKind::InvalidUtf8)))
}

fn read_count(r: &mut WireReader<'_>, min_each: usize) -> Result<usize, DescriptorError> {
    let at = r.offset();
    let n = r.read_len(min_each).map_err(DescriptorError::Decode)?;
    if n > MAX_DESC_WIDTH {
        return Err(DescriptorError::Decode(DecodeError::new(
            at,
            DecodeErrorKind::LengthTooLarge {
                len: n as u64,
                remaining: MAX_DESC_WIDTH,
            },
        )));
    }
    Ok(n)
}

fn read_fields(r: &mut WireReader<'_>, depth: usize) -> Result<Vec<Field>, DescriptorError> {
    // A field is at least a name length (8), since (4) and a tag (1).
    let n = read_count(r, 13)?;
    let mut fields = Vec::with_capacity(n);
    for _ in 0..n {
        let name = read_name(r)?;
        let since = r.read_u32().map_err(DescriptorError::Decode)?;
        let ty = read_node(r, depth + 1)?;
        fields.push(Field { name, ty, since });
    }
    Ok(fields)
}

fn read_nodes(r: &mut WireReader<'_>, depth: usize) -> Result<Vec<TypeDesc>, DescriptorError> {
    let n = read_count(r, 1)?;
    (0..n).map(|_| read_node(r, depth + 1)).collect()
}

fn read_node(r: &mut WireReader<'_>, depth: usize) -> Result<TypeDesc, DescriptorError> {
    if depth >= MAX_DESC_DEPTH {
        return Err(DescriptorError::TooDeep {
            max: MAX_DESC_DEPTH,
        });
    }
    let at = r.offset();
    let tag = r.read_u8().map_err(DescriptorError::Decode)?;
    let child = |r: &mut WireReader<'_>| read_node(r, depth + 1).map(Box::new);
    Ok(match tag {
        0 => TypeDesc::Bool,
        1 => TypeDesc::U8,
        2 => TypeDesc::U16,
        3 => TypeDesc::U32,
        4 => TypeDesc::U64,
        5 => TypeDesc::U128,
        6 => TypeDesc::I8,
        7 => TypeDesc::I16,
        8 => TypeDesc::I32,
        9 => TypeDesc::I64,
        10 => TypeDesc::I128,
        11 => TypeDesc::F32,
        12 => TypeDesc::F64,
        13 => TypeDesc::String,
        14 => TypeDesc::Bytes,
        15 => TypeDesc::Option { some: child(r)? },
        16 => TypeDesc::Seq { elem: child(r)? },
        17 => {
            let len = r.read_u64().map_err(DescriptorError::Decode)?;
            TypeDesc::Array {
                len,
                elem: child(r)?,
            }
        }
        18 => TypeDesc::Tuple {
            elems: read_nodes(r, depth)?,
        },
        19 => TypeDesc::Struct {
            fields: read_fields(r, depth)?,
        },
        20 => {
            let n = read_count(r, 9)?;
            let mut variants = Vec::with_capacity(n);
            for _ in 0..n {
                let name = read_name(r)?;
                let kind_at = r.offset();
                let kind = match r.read_u8().map_err(DescriptorError::Decode)? {
                    0 => VariantKind::Unit,
                    1 => VariantKind::Tuple {
                        elems: read_nodes(r, depth)?,
                    },
                    2 => VariantKind::Struct {
                        fields: read_fields(r, depth)?,
                    },
                    other => {
                        return Err(DescriptorError::Decode(DecodeError::new(
                            kind_at,
                            DecodeErrorKind::InvalidTag { tag: other },
                        )));
                    }
                };
                variants.push(Variant { name, kind });
            }
            TypeDesc::Enum { variants }
        }
        21 => {
            let key = child(r)?;
            let value = child(r)?;
            TypeDesc::Map { key, value }
        }
        22 => {
            let code_at = r.offset();
            let code = r.read_u8().map_err(DescriptorError::Decode)?;
            let dtype = DType::from_code(code).ok_or_else(|| {
                DescriptorError::Decode(DecodeError::new(
                    code_at,
                    DecodeErrorKind::InvalidTag { tag: code },
                ))
            })?;
            TypeDesc::Tensor { dtype }
        }
        other => {
            return Err(DescriptorError::Decode(DecodeError::new(
                at,
                DecodeErrorKind::InvalidTag { tag: other },
            )));
        }
    })
}
