//! [`DType`]: the numeric element type of tensors and packed sequences, with its names in
//! the other type systems a payload meets (numpy, Arrow/Parquet).
//!
//! One definition, so the Python binding, the CSV/Parquet export and the field extractors
//! agree on what `f32` is called and how wide it is. `schemas` does not depend on Arrow:
//! [`ArrowType`] names the Arrow type, and the code that builds Arrow columns maps it.

use std::fmt;

use serde::{Deserialize, Serialize};

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

    /// The dtype of a [`name`](DType::name) (`"f32"`).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Whether this is `f32` or `f64`.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// Whether this is a signed integer.
    pub const fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// The Arrow (and so Parquet) type of one element.
    pub const fn arrow(self) -> ArrowType {
        match self {
            DType::U8 => ArrowType::UInt8,
            DType::U16 => ArrowType::UInt16,
            DType::U32 => ArrowType::UInt32,
            DType::U64 => ArrowType::UInt64,
            DType::I8 => ArrowType::Int8,
            DType::I16 => ArrowType::Int16,
            DType::I32 => ArrowType::Int32,
            DType::I64 => ArrowType::Int64,
            DType::F32 => ArrowType::Float32,
            DType::F64 => ArrowType::Float64,
        }
    }

    /// One little-endian element (`le` holds at least [`size_bytes`](DType::size_bytes)
    /// bytes; only those are read) as `f64`: exact for every dtype but 64-bit integers
    /// beyond 2^53, which round.
    ///
    /// ```
    /// use snapbus_schemas::DType;
    /// assert_eq!(DType::I16.to_f64(&(-3i16).to_le_bytes()), -3.0);
    /// assert_eq!(DType::F32.to_f64(&0.5f32.to_le_bytes()), 0.5);
    /// ```
    #[inline(always)]
    pub fn to_f64(self, le: &[u8]) -> f64 {
        #[inline(always)]
        fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
            let mut a = [0u8; N];
            a.copy_from_slice(&b[..N]);
            a
        }
        match self {
            DType::U8 => f64::from(le[0]),
            DType::I8 => f64::from(le[0] as i8),
            DType::U16 => f64::from(u16::from_le_bytes(arr(le))),
            DType::I16 => f64::from(i16::from_le_bytes(arr(le))),
            DType::U32 => f64::from(u32::from_le_bytes(arr(le))),
            DType::I32 => f64::from(i32::from_le_bytes(arr(le))),
            DType::U64 => u64::from_le_bytes(arr(le)) as f64,
            DType::I64 => i64::from_le_bytes(arr(le)) as f64,
            DType::F32 => f64::from(f32::from_le_bytes(arr(le))),
            DType::F64 => f64::from_le_bytes(arr(le)),
        }
    }

    /// The dtype's code in canonical descriptor bytes.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The dtype of a canonical code.
    pub fn from_code(code: u8) -> Option<DType> {
        DType::ALL.get(usize::from(code)).copied()
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An Arrow data type, by name: what a column of a [`DType`] is in Arrow and Parquet
/// (`arrow::datatypes::DataType` has a variant of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArrowType {
    /// `UInt8`.
    UInt8,
    /// `UInt16`.
    UInt16,
    /// `UInt32`.
    UInt32,
    /// `UInt64`.
    UInt64,
    /// `Int8`.
    Int8,
    /// `Int16`.
    Int16,
    /// `Int32`.
    Int32,
    /// `Int64`.
    Int64,
    /// `Float32`.
    Float32,
    /// `Float64`.
    Float64,
}

impl ArrowType {
    /// The Arrow name (`"Float32"`), as `arrow`'s `DataType` debug-prints it.
    pub const fn name(self) -> &'static str {
        match self {
            ArrowType::UInt8 => "UInt8",
            ArrowType::UInt16 => "UInt16",
            ArrowType::UInt32 => "UInt32",
            ArrowType::UInt64 => "UInt64",
            ArrowType::Int8 => "Int8",
            ArrowType::Int16 => "Int16",
            ArrowType::Int32 => "Int32",
            ArrowType::Int64 => "Int64",
            ArrowType::Float32 => "Float32",
            ArrowType::Float64 => "Float64",
        }
    }
}
