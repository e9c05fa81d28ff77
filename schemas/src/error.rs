//! Error types, one per operation.

use thiserror::Error;

/// A payload (or descriptor) could not be decoded. Carries the byte offset where decoding
/// failed and, when known, the dotted path of the field being decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{kind} at byte offset {offset}{}", path_suffix(.path))]
pub struct DecodeError {
    /// Byte offset into the payload where the problem was found.
    pub offset: usize,
    /// Dotted path of the field being decoded (`"observation.shape"`), empty at the root.
    pub path: String,
    /// What went wrong.
    pub kind: DecodeErrorKind,
}

fn path_suffix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" (in field `{path}`)")
    }
}

impl DecodeError {
    /// A new error at `offset`.
    pub fn new(offset: usize, kind: DecodeErrorKind) -> DecodeError {
        DecodeError {
            offset,
            path: String::new(),
            kind,
        }
    }

    /// Prefixes the error's field path with `name` (called while unwinding out of a field).
    #[must_use]
    pub fn in_field(mut self, name: &str) -> DecodeError {
        self.path = if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{name}.{}", self.path)
        };
        self
    }
}

/// The reasons a decode can fail.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The input ended inside a value.
    #[error("unexpected end of input: needed {needed} bytes, {remaining} remain")]
    UnexpectedEnd {
        /// Bytes the value needed.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A length or count prefix claims more data than the input can hold.
    #[error("length prefix {len} exceeds what the remaining {remaining} bytes can hold")]
    LengthTooLarge {
        /// The claimed length or count.
        len: u64,
        /// Bytes (or the limit) it was checked against.
        remaining: usize,
    },
    /// A `bool` byte other than 0 or 1.
    #[error("invalid bool byte {byte:#04x}")]
    InvalidBool {
        /// The byte found.
        byte: u8,
    },
    /// An `Option` tag other than 0 or 1.
    #[error("invalid option tag {tag:#04x}")]
    InvalidOptionTag {
        /// The tag found.
        tag: u8,
    },
    /// An enum variant index out of range.
    #[error("invalid enum variant index {index} (the enum has {count} variants)")]
    InvalidVariant {
        /// The index found.
        index: u32,
        /// Number of variants in the descriptor.
        count: usize,
    },
    /// A string that is not valid UTF-8.
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    /// A tensor whose element count is not the product of its shape.
    #[error("tensor shape {shape:?} needs {expected} elements but {found} are present")]
    TensorShape {
        /// The shape read.
        shape: Vec<u64>,
        /// Product of the shape (saturating).
        expected: u64,
        /// Element count read.
        found: u64,
    },
    /// A tensor with more dimensions than [`MAX_TENSOR_RANK`](crate::MAX_TENSOR_RANK).
    #[error("tensor rank {rank} exceeds the maximum {max}")]
    TensorRank {
        /// The rank read.
        rank: u64,
        /// The limit.
        max: usize,
    },
    /// Bytes left over after the value was complete.
    #[error("{count} trailing bytes after the value")]
    TrailingBytes {
        /// Number of bytes left.
        count: usize,
    },
    /// Nesting deeper than the descriptor limit.
    #[error("nesting deeper than {max}")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// An unknown tag byte in a descriptor.
    #[error("invalid tag {tag}")]
    InvalidTag {
        /// The tag found.
        tag: u8,
    },
    /// The payload would decode to more values than its size can justify (a hostile
    /// descriptor of nested zero-sized elements); refused instead of exhausting memory.
    #[error("payload decodes to more than {max} values, more than its size justifies")]
    TooManyValues {
        /// The limit for this payload and descriptor.
        max: u64,
    },
    /// A map holds the same key twice; decoding it into a map would silently drop an entry.
    #[error("duplicate map key")]
    DuplicateMapKey,
    /// A typed decode was asked to read a payload written by a schema version it cannot read.
    #[error("payload version {found} is not readable as version {expected}")]
    Version {
        /// The reader's version.
        expected: u32,
        /// The payload's version.
        found: u32,
    },
}

/// A value could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The caller's buffer is shorter than [`Wire::encoded_len`](crate::Wire::encoded_len).
    #[error("buffer too small: the value needs {needed} bytes, the buffer has {available}")]
    BufferTooSmall {
        /// Bytes the encoding needs.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
    /// A hand-written [`Wire`](crate::Wire) impl wrote a different number of bytes than its
    /// `encoded_len` promised.
    #[error("encoder wrote {written} bytes but encoded_len promised {promised}")]
    LengthMismatch {
        /// Bytes promised.
        promised: usize,
        /// Bytes written (or attempted).
        written: usize,
    },
    /// A dynamic [`Value`](crate::Value) does not match the descriptor it is encoded with.
    #[error("value does not match the descriptor at `{path}`: expected {expected}, found {found}")]
    TypeMismatch {
        /// Dotted path of the mismatch.
        path: String,
        /// What the descriptor wants.
        expected: String,
        /// What the value holds.
        found: String,
    },
}

/// A type descriptor or schema descriptor is malformed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DescriptorError {
    /// The schema id is not dot-separated `[A-Za-z0-9_-]+` segments of at most 256 bytes.
    #[error(
        "invalid schema id {id:?}: use dot-separated segments of letters, digits, '_' and '-' (e.g. \"monty.env_interface.step\")"
    )]
    BadSchemaId {
        /// The id given.
        id: String,
    },
    /// Version 0 is reserved.
    #[error("schema {id}: version must be >= 1")]
    ZeroVersion {
        /// The schema id.
        id: String,
    },
    /// A root field's `since` version is out of order or beyond the schema version.
    #[error(
        "schema {id} v{version}: field `{field}` has since = {since}; since must be >= 1, non-decreasing (fields are only appended) and <= the schema version"
    )]
    BadSince {
        /// The schema id.
        id: String,
        /// The field.
        field: String,
        /// Its `since`.
        since: u32,
        /// The schema version.
        version: u32,
    },
    /// Nesting deeper than [`MAX_DESC_DEPTH`](crate::MAX_DESC_DEPTH).
    #[error("type descriptor nests deeper than {max} levels")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// Too many fields, variants or elements in one node.
    #[error("type descriptor node `{path}` has {count} members, more than the maximum {max}")]
    TooWide {
        /// Dotted path of the node.
        path: String,
        /// Members found.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// An empty or over-long field or variant name.
    #[error("bad field or variant name {name:?} in `{path}`")]
    BadName {
        /// Dotted path of the node.
        path: String,
        /// The name (truncated).
        name: String,
    },
    /// Two fields or variants with the same name.
    #[error("duplicate name {name:?} in `{path}`")]
    DuplicateName {
        /// Dotted path of the node.
        path: String,
        /// The name.
        name: String,
    },
    /// Canonical descriptor bytes do not start with the descriptor magic.
    #[error("not a snapbus descriptor: bad magic {found:02x?}")]
    BadMagic {
        /// The bytes found.
        found: Vec<u8>,
    },
    /// Canonical descriptor bytes are malformed.
    #[error("malformed descriptor: {0}")]
    Decode(DecodeError),
}

/// Two descriptors that claim to be the same schema disagree in a way the evolution rules do
/// not allow (see the crate docs, "Evolution").
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum IncompatibleSchema {
    /// The ids differ.
    #[error("schema id {reader:?} cannot read payloads of schema {writer:?}")]
    DifferentId {
        /// The reader's id.
        reader: String,
        /// The writer's id.
        writer: String,
    },
    /// Same id and version, different layout: two producers disagree about the schema.
    #[error(
        "schema {id} v{version} is defined twice with different layouts (fingerprints {fingerprint_a:016x} and {fingerprint_b:016x}): {difference}; bump the version or use a new schema id"
    )]
    Conflict {
        /// The schema id.
        id: String,
        /// The version both claim.
        version: u32,
        /// One fingerprint.
        fingerprint_a: u64,
        /// The other fingerprint.
        fingerprint_b: u64,
        /// The first difference found.
        difference: String,
    },
    /// The newer version is not the older one with fields appended.
    #[error(
        "schema {id}: v{newer} is not v{older} with fields appended ({difference}); incompatible changes need a new schema id"
    )]
    NotAppendOnly {
        /// The schema id.
        id: String,
        /// The older version.
        older: u32,
        /// The newer version.
        newer: u32,
        /// What differs.
        difference: String,
    },
}
