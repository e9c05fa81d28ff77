//! Encode plans: a dataclass's schema, compiled once per class from the plan `snapbus.schema`
//! walks out of its annotations, into a validated [`SchemaDescriptor`] and a tree of [`Node`]s
//! that encodes an instance in two passes. Pass 1 ([`measure()`]) reads every field (interned
//! `getattr`, one typed extract each), checks it, and computes the exact payload length, leaving
//! a flat list of [`Op`]s; pass 2 ([`write()`]) writes those ops into the frame claimed in the
//! lane, in the codec's layout (bincode 1.x: little-endian, `u64` lengths, `u8` option tags,
//! `u32` enum indices, no padding). Arrays are copied once, from their buffer into the frame.
//!
//! This module holds the plan's types; [`compile`] makes plans (and caches them per class),
//! [`mod@measure`] is pass 1, [`buffer`] checks array buffers against their dtype, and
//! [`mod@write`] is pass 2.

use std::fmt;

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use snapbus::schemas::{DType, SchemaDescriptor};

mod buffer;
mod compile;
mod measure;
mod write;

pub(crate) use compile::plan_for;
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
}

/// Integer widths.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Int {
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
}

/// One node of an encode plan.
pub(crate) enum Node {
    Bool,
    Int(Int),
    F32,
    F64,
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
}

impl Node {
    /// The dtype of a numeric scalar node (the packed-sequence fast path).
    #[inline]
    fn dtype(&self) -> Option<DType> {
        Some(match self {
            Node::Int(Int::U8) => DType::U8,
            Node::Int(Int::U16) => DType::U16,
            Node::Int(Int::U32) => DType::U32,
            Node::Int(Int::U64) => DType::U64,
            Node::Int(Int::I8) => DType::I8,
            Node::Int(Int::I16) => DType::I16,
            Node::Int(Int::I32) => DType::I32,
            Node::Int(Int::I64) => DType::I64,
            Node::F32 => DType::F32,
            Node::F64 => DType::F64,
            _ => return None,
        })
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
    fn within(mut self, segment: &str) -> DataError {
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

/// What pass 2 writes, in order.
pub(crate) enum Op<'py> {
    /// Up to 8 little-endian bytes.
    Le([u8; 8], u8),
    Str(Bound<'py, PyString>),
    Bytes(Bound<'py, PyBytes>),
    /// A buffer's contents, C order, as `dtype` elements.
    Buf(PyUntypedBuffer, DType),
}

/// A `u64`, little-endian (lengths, counts, dimensions).
#[inline]
fn le_u64(v: u64) -> Op<'static> {
    Op::Le(v.to_le_bytes(), 8)
}

/// Up to 8 bytes, as given.
#[inline]
fn le(bytes: &[u8]) -> Op<'static> {
    let mut b = [0u8; 8];
    b[..bytes.len()].copy_from_slice(bytes);
    Op::Le(b, bytes.len() as u8)
}

/// The name of `obj`'s type (for messages).
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .qualname()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}
