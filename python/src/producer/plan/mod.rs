//! Encode plans: a dataclass's schema, compiled once per class from the descriptor
//! `snapbus.schema` walks out of its annotations, into a validated [`SchemaDescriptor`] and a
//! tree of [`Node`]s
//! that encodes an instance in two passes. Pass 1 ([`measure()`]) reads every field (interned
//! `getattr`, one typed extract each), checks it, and stages the encoding: its small parts
//! (numbers, lengths, tags, short strings) as bytes, its large parts (arrays, long `str` and
//! `bytes`) as [`Piece`]s that still point at their Python objects. Its length is then exact,
//! so pass 2 ([`write()`]) fills a frame claimed in the lane to that length: the staged bytes,
//! and each large part copied once, straight from its object. The layout is the codec's
//! (bincode 1.x: little-endian, `u64` lengths, `u8` option tags, `u32` enum indices, no
//! padding).
//!
//! Staging numbers as bytes rather than as a list of typed operations is a measured choice:
//! building each operation on the stack and moving it into a list stalled on every field (a
//! 16-byte load of a value just written with narrower stores cannot be forwarded from the
//! store buffer), and the list was a heap allocation per snapshot.
//!
//! This module holds the plan's types; [`compile`] makes plans (and caches them per class),
//! [`event`] finds the plan of an event (a dataclass's, or a pydantic model's or `dict`'s per
//! shape), [`mod@measure`] is pass 1, [`dynamic`] its part for values typed only at run time,
//! [`array`] reads an array's memory (the buffer protocol, or a `memoryview` on CPython
//! before 3.11), [`buffer`] checks array buffers against their dtype (casting what numpy casts under
//! `same_kind`), and [`mod@write`] is pass 2.

use std::fmt;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use smallvec::SmallVec;
use snapbus::schemas::{DType, SchemaDescriptor};

mod array;
mod buffer;
mod compile;
mod dynamic;
mod event;
mod measure;
mod write;

pub(crate) use compile::plan_for;
pub(crate) use dynamic::measure_dynamic;
pub(crate) use event::{Extras, event_class};
pub(crate) use measure::measure;
pub(crate) use write::write;

/// A compiled event class: its descriptor and its encode plan.
pub(crate) struct Compiled {
    /// The descriptor published with its records.
    pub(crate) desc: SchemaDescriptor,
    /// The root struct.
    pub(crate) root: Node,
    /// The class's qualified name (for messages).
    pub(crate) class: String,
    /// The class object's address (the key of the per-(class, field) warnings).
    pub(crate) class_id: usize,
    /// Why its records may not be emitted: its layout conflicts with a descriptor of its id
    /// the bus already knows (from another process), by the evolution rules. Checked once,
    /// when the class is compiled (its first emit).
    pub(crate) refused: Option<String>,
}

/// One node of an encode plan.
pub(crate) enum Node {
    Bool,
    /// An integer or a float of this dtype.
    Num(DType),
    Str,
    Bytes,
    /// Enum members (or literal strings) → variant index; the names for messages.
    Enum(Py<PyDict>, Vec<String>),
    Option(Box<Node>),
    Seq(Box<Node>),
    Tuple(Vec<Node>),
    Map(Box<Node>, Box<Node>),
    /// Fields: the interned attribute name and its plan.
    Struct(Vec<(Py<PyString>, Node)>),
    Tensor(DType),
    /// A value encoded by what it is (`TypeDesc::Dynamic`).
    Dynamic,
}

impl Node {
    /// The dtype of a numeric scalar node (the packed-sequence fast path).
    #[inline]
    fn dtype(&self) -> Option<DType> {
        match self {
            Node::Num(dtype) => Some(*dtype),
            _ => None,
        }
    }
}

/// A value that does not fit its field: which field, what is wrong, and which Python
/// exception it is in strict mode.
#[derive(Debug)]
pub(crate) struct DataError {
    /// Dotted field path, innermost last.
    pub(crate) path: String,
    pub(crate) message: String,
    /// `ValueError` (out of range, wrong dtype) rather than `TypeError` (wrong type).
    pub(crate) value_error: bool,
}

impl DataError {
    fn ty(message: String) -> DataError {
        DataError {
            path: String::new(),
            message,
            value_error: false,
        }
    }
    fn value(message: String) -> DataError {
        DataError {
            path: String::new(),
            message,
            value_error: true,
        }
    }
    pub(crate) fn within(mut self, segment: &str) -> DataError {
        self.path = if self.path.is_empty() {
            segment.to_owned()
        } else if self.path.starts_with('[') || self.path.starts_with('{') {
            format!("{segment}{}", self.path)
        } else {
            format!("{segment}.{}", self.path)
        };
        self
    }
    /// The Python exception (strict mode).
    pub(crate) fn to_py(&self, class: &str) -> PyErr {
        let msg = format!("{class}.{}: {}", self.path, self.message);
        if self.value_error {
            PyValueError::new_err(msg)
        } else {
            PyTypeError::new_err(msg)
        }
    }
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "field `{}`: {}", self.path, self.message)
    }
}

/// `str` and `bytes` objects up to this length are staged as bytes in pass 1; longer ones are
/// copied in pass 2, straight from their objects, as are arrays and other buffers (a
/// `bytearray` or `memoryview` given for `bytes`) of any length.
const STAGE_MAX_BYTES: usize = 128;

/// What pass 1 leaves for pass 2: the encoding's bytes in order, except its large parts,
/// which are [`Piece`]s placed between them. On the stack up to [`INLINE_BYTES`] staged bytes
/// and two pieces.
pub(crate) struct Staged<'py> {
    bytes: StagedBytes,
    /// The large parts: the number of staged bytes before each, its length, its source.
    pieces: SmallVec<[(usize, usize, Piece<'py>); 2]>,
    /// The pieces' total length.
    pieces_len: usize,
}

impl<'py> Staged<'py> {
    pub(crate) fn new() -> Staged<'py> {
        Staged {
            bytes: StagedBytes::new(),
            pieces: SmallVec::new(),
            pieces_len: 0,
        }
    }

    /// The encoded length: what pass 2 writes (`usize::MAX`, which no lane grants, if it
    /// does not fit).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.bytes.len.saturating_add(self.pieces_len)
    }

    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.bytes.put(bytes);
    }

    /// A `u64`, little-endian (lengths, counts, dimensions).
    #[inline]
    fn put_u64(&mut self, v: u64) {
        self.put(&v.to_le_bytes());
    }

    /// A large part of `len` bytes, at the current position. Refused if the pieces' length
    /// would not fit a `usize` (views with zero strides can claim any length).
    fn piece(&mut self, len: usize, piece: Piece<'py>) -> Result<(), DataError> {
        self.pieces_len = self.pieces_len.checked_add(len).ok_or_else(|| {
            DataError::value(format!("{len} more bytes make the event too large"))
        })?;
        self.pieces.push((self.bytes.len, len, piece));
        Ok(())
    }
}

/// Staged bytes held on the stack up to this many.
const INLINE_BYTES: usize = 256;

/// Bytes staged by pass 1: in `inline` while they fit, then all of them in `heap`. (Not a
/// `SmallVec`: its appends call out of line to reserve, one call per field.)
struct StagedBytes {
    inline: [u8; INLINE_BYTES],
    len: usize,
    /// Empty until the bytes outgrow `inline`, then every staged byte.
    heap: Vec<u8>,
}

impl StagedBytes {
    fn new() -> StagedBytes {
        StagedBytes {
            inline: [0; INLINE_BYTES],
            len: 0,
            heap: Vec::new(),
        }
    }

    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if self.heap.is_empty() {
            if let Some(dst) = self.inline.get_mut(self.len..end) {
                dst.copy_from_slice(bytes);
                self.len = end;
                return;
            }
            self.spill(bytes.len());
        }
        self.heap.extend_from_slice(bytes);
        self.len = end;
    }

    /// Moves the inline bytes to the heap, with room for `more`.
    #[cold]
    fn spill(&mut self, more: usize) {
        self.heap.reserve(2 * (self.len + more));
        self.heap.extend_from_slice(&self.inline[..self.len]);
    }

    /// Room for `n` more bytes (a long sequence of numbers).
    fn reserve(&mut self, n: usize) {
        if self.len + n > INLINE_BYTES {
            if self.heap.is_empty() {
                self.spill(n);
            } else {
                self.heap.reserve(n);
            }
        }
    }

    /// The staged bytes.
    fn as_slice(&self) -> &[u8] {
        if self.heap.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.heap
        }
    }
}

/// A large part of an encoding, copied in pass 2 from its object.
pub(crate) enum Piece<'py> {
    Str(Bound<'py, PyString>),
    Bytes(Bound<'py, PyBytes>),
    /// A buffer's contents, C order, as `dtype` elements.
    Buf(array::Array, DType),
}

/// The name of `obj`'s type (for messages).
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .qualname()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}
