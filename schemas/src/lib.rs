//! Schema-versioned snapshots for snapbus: type descriptors, the wire format, and dynamic
//! decoding.
//!
//! # Guarantees
//!
//! - **Self-describing data.** Every snapshot type has a stable string schema id, a version and
//!   a [`TypeDesc`] that travels with the data, so a consumer that does not share the
//!   producer's Rust types (`snapbus echo`, the plotter, a recorder, Python) decodes any payload
//!   with [`decode`].
//! - **One layout, pinned.** Payloads use the bincode 1.x layout (below): fixed-width
//!   little-endian scalars and `u64` length prefixes. Golden-byte tests pin it, and a
//!   cross-check test proves it equal to what `bincode` 1.x and 2.x (legacy config) produce.
//! - **No allocation on the emit path.** [`Wire::encoded_len`] and [`Wire::encode_into`] write
//!   straight into a caller-provided buffer (a slot in shared memory).
//! - **Untrusted input never panics.** [`decode`], [`Wire::decode`] and
//!   [`SchemaDescriptor::from_canonical_bytes`] check every length prefix against the bytes
//!   that remain before allocating, bound nesting depth, and return a [`DecodeError`] naming the
//!   byte offset and field path. A fuzz target (`schemas/fuzz`) exercises them.
//! - **Disagreements are detected.** A descriptor has a canonical byte form and a 64-bit
//!   [fingerprint](SchemaDescriptor::fingerprint); a [`SchemaRegistry`] refuses a second,
//!   different layout under the same `(schema_id, version)` and any version that is not an
//!   append-only evolution of the others.
//!
//! # Example
//!
//! ```
//! use snapbus_schemas::{decode, decode_versioned, Snapshot, Tensor, Wire};
//!
//! #[derive(Snapshot, Debug, PartialEq)]
//! #[snapshot(id = "monty.env_interface.step", version = 1)]
//! struct EnvStep {
//!     episode: u32,
//!     step: u32,
//!     reward: f64,
//!     observation: Tensor<u8>,
//! }
//!
//! let event = EnvStep {
//!     episode: 3,
//!     step: 17,
//!     reward: 0.25,
//!     observation: Tensor::new(vec![2, 2], vec![0, 64, 128, 255])?,
//! };
//!
//! // Encode into a caller-provided buffer, without allocating.
//! let mut buf = [0u8; 128];
//! let n = event.encode_into(&mut buf)?;
//! assert_eq!(n, event.encoded_len());
//!
//! // A consumer without the Rust type decodes from the descriptor...
//! let desc = EnvStep::descriptor();
//! let value = decode(desc.root(), &buf[..n])?;
//! assert_eq!(
//!     value.to_json().to_string(),
//!     r#"{"episode":3,"step":17,"reward":0.25,"observation":{"dtype":"u8","shape":[2,2],"data":[0,64,128,255]}}"#
//! );
//!
//! // ...and a Rust consumer decodes the typed value.
//! assert_eq!(decode_versioned::<EnvStep>(&buf[..n], desc.version())?, event);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The wire format
//!
//! A payload is the value's fields in declaration order with no header, no padding and no
//! field tags (schema id and version travel beside the payload, in the bus frame or the file
//! record):
//!
//! | type | bytes |
//! |---|---|
//! | `bool` | 1 byte, `0x00` or `0x01` (anything else is an error) |
//! | `u8`…`u128`, `i8`…`i128` | fixed width, little-endian, two's complement |
//! | `f32`, `f64` | IEEE-754 bits, little-endian (NaN payloads preserved) |
//! | `String` | `u64` byte length, UTF-8 bytes (validated) |
//! | [`Bytes`], `Vec<T>` | `u64` element count, then the elements |
//! | `[T; N]` | the N elements, no prefix |
//! | tuples, tuple structs, structs | the elements or fields in order, no prefix |
//! | `Option<T>` | `0x00`, or `0x01` then the value |
//! | enums | `u32` variant index (declaration order, explicit discriminants are ignored), then the variant's fields |
//! | `BTreeMap`, `HashMap` | `u64` entry count, then key, value, key, value… |
//! | [`Tensor<T>`] | `u64` rank, rank × `u64` dimensions, `u64` element count, then the elements |
//! | dynamic (a type known only at run time) | a tag byte, then the value (see [`dynamic`]) |
//!
//! So a numeric array is its raw little-endian bytes right after its `u64` count: a reader
//! (numpy's `frombuffer`, a GPU upload) views it in place. For example:
//!
//! ```
//! use snapbus_schemas::{Snapshot, Wire};
//!
//! #[derive(Snapshot)]
//! #[snapshot(id = "doc.layout", version = 1)]
//! struct Sample {
//!     step: u32,
//!     ok: bool,
//!     gain: Option<f32>,
//!     pos: Vec<f32>,
//!     tag: String,
//! }
//!
//! let bytes = Sample { step: 7, ok: true, gain: None, pos: vec![1.0, -2.0], tag: "hi".into() }
//!     .encode_to_vec()?;
//! assert_eq!(bytes, [
//!     0x07, 0x00, 0x00, 0x00,                          // step: u32 7
//!     0x01,                                            // ok: true
//!     0x00,                                            // gain: None
//!     0x02, 0, 0, 0, 0, 0, 0, 0,                       // pos: 2 elements
//!     0x00, 0x00, 0x80, 0x3f,  0x00, 0x00, 0x00, 0xc0, // 1.0f32, -2.0f32
//!     0x02, 0, 0, 0, 0, 0, 0, 0,  b'h', b'i',          // tag: "hi"
//! ]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The descriptor of a schema has its own canonical encoding in the same layout family (see
//! [`SchemaDescriptor::to_canonical_bytes`]); its XXH3-64 is the fingerprint.
//!
//! # Evolution
//!
//! A schema changes by **appending fields to its root struct** and bumping the version:
//!
//! ```
//! use snapbus_schemas::{decode_versioned, Snapshot, Wire};
//!
//! #[derive(Snapshot, Debug, PartialEq)]
//! #[snapshot(id = "doc.step", version = 1)]
//! struct StepV1 { step: u32 }
//!
//! #[derive(Snapshot, Debug, PartialEq)]
//! #[snapshot(id = "doc.step", version = 2)]
//! struct StepV2 {
//!     step: u32,
//!     #[snapshot(since = 2, default = 1.0)]
//!     gain: f64,
//! }
//!
//! let old = StepV1 { step: 5 }.encode_to_vec()?;
//! let new = StepV2 { step: 6, gain: 0.5 }.encode_to_vec()?;
//! // A v2 reader fills the default for a v1 payload; a v1 reader skips the appended field.
//! assert_eq!(decode_versioned::<StepV2>(&old, 1)?, StepV2 { step: 5, gain: 1.0 });
//! assert_eq!(decode_versioned::<StepV1>(&new, 2)?, StepV1 { step: 6 });
//! snapbus_schemas::check_compatible(StepV1::descriptor(), StepV2::descriptor())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The rules: version N+1 may append fields to the root struct, each marked
//! `#[snapshot(since = N+1)]` with a default (`Default::default()` unless `default = expr`).
//! A reader of version N reads payloads of newer versions (ignoring trailing fields) and of
//! older ones (filling defaults). Nested types are frozen. Anything else — removing, renaming,
//! reordering or retyping a field — needs a new schema id; [`check_compatible`] and
//! [`SchemaRegistry::register`] refuse it with an error naming the first difference.
//!
//! # Limits
//!
//! Descriptors nest at most [`MAX_DESC_DEPTH`] levels and have at most [`MAX_DESC_WIDTH`]
//! members per node; tensors have at most [`MAX_TENSOR_RANK`] dimensions. For bounds checks,
//! elements of zero encoded size (`()`) count as one byte. Schema types cannot be generic or
//! recursive.

extern crate self as snapbus_schemas;

// The modules form a DAG, bottom first: error, dtype; cursor, desc; canonical, wire; schema, element;
// tensor; value; walk; decode, encode, snapshot; json, builtin (ARCHITECTURE.md lists each edge).
// Modules import from the module that defines an item, never through the crate root.
pub mod builtin;
mod canonical;
mod cursor;
mod decode;
mod desc;
mod dtype;
pub mod dynamic;
mod element;
mod encode;
mod error;
pub mod json;
mod schema;
mod snapshot;
mod tensor;
mod value;
pub mod walk;
mod wire;

pub use canonical::DESCRIPTOR_MAGIC;
pub use cursor::{WireReader, WireWriter};
pub use decode::{decode, decode_from, decode_with};
pub use desc::{
    Field, MAX_DESC_DEPTH, MAX_DESC_WIDTH, MAX_NAME_LEN, TypeDesc, Variant, VariantKind,
};
pub use dtype::{ArrowType, DType};
pub use element::{Element, Packed, TensorView};
pub use encode::{ValueEncoder, encode_value, encode_value_into, value_encoded_len};
pub use error::{DecodeError, DecodeErrorKind, DescriptorError, EncodeError, IncompatibleSchema};
pub use schema::{SchemaDescriptor, validate_schema_id};
pub use snapbus_schemas_derive::{Snapshot, Wire};
pub use snapshot::{
    RegisterError, Registered, SchemaRegistry, Snapshot, check_compatible, decode_versioned,
    first_difference,
};
pub use tensor::{Bytes, MAX_TENSOR_RANK, ShapeError, Tensor};
pub use value::{ToValue, Value};
pub use wire::Wire;

/// Items used by the derive macros' generated code. Not a public API.
#[doc(hidden)]
pub mod __private {
    use crate::schema::SchemaDescriptor;
    use crate::snapshot::Snapshot;

    /// The descriptor of `T`, built without panicking: the derive has already checked the id,
    /// version and `since` ordering at compile time; the rest (depth, width) is re-checked by
    /// every registry that accepts it.
    pub fn descriptor_of<T: Snapshot>() -> SchemaDescriptor {
        SchemaDescriptor::new_unchecked(T::SCHEMA_ID.to_owned(), T::VERSION, T::type_desc())
    }
}
