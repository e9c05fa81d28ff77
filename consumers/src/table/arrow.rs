//! The columns of a [`Plan`] as Arrow arrays (feature `arrow`): what `snapbus export --format
//! parquet` writes and what Python's `Recording.to_arrow()` / `to_pandas()` return.
//!
//! | column | Arrow type |
//! |---|---|
//! | `t_nanos` | `Timestamp(ns, "UTC")` |
//! | `producer_id` | UInt64 |
//! | `pid`, `seq`, `version` | UInt32 |
//! | `producer`, `level`, strings, enum variant names, 128-bit integers, JSON | Utf8 |
//! | bool | Boolean |
//! | integers, floats | (U)Int8 … (U)Int64, Float32, Float64, as declared |
//! | bytes | Binary |
//! | number sequences and arrays | `List<dtype>` (`List<UInt8>` for `Vec<u8>`) |
//! | tensors | `List<dtype>`, flat, row-major, then `<name>.shape`: `List<Int64>` |
//!
//! Tensors are two plain columns rather than Arrow's `fixed_shape_tensor` extension: a snapbus
//! tensor's shape may change from record to record, and every reader (pandas, polars, DuckDB,
//! pyarrow) reads plain lists, where extension types are understood by some only. Each field
//! carries metadata saying what it is: `snapbus.path` (the field's dotted path in the
//! descriptor, for a column renamed `payload.…`), `snapbus.kind` (`time`, `value`, `list`,
//! `tensor`, `shape`, `json`) and, on a tensor, `snapbus.shape_column`. Payload columns are
//! nullable (options, enum variants not taken).

use std::collections::HashMap;
use std::sync::Arc;

pub use arrow_array::RecordBatch;
use arrow_array::builder::PrimitiveBuilder;
use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int8Builder, Int16Builder,
    Int32Builder, Int64Builder, ListBuilder, StringBuilder, TimestampNanosecondBuilder,
    UInt8Builder, UInt16Builder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, ListArray, make_array};
use arrow_buffer::{Buffer, MutableBuffer, NullBufferBuilder, OffsetBuffer};
use arrow_data::ArrayData;
pub use arrow_schema::ArrowError;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use snapbus_schemas::{ArrowType, DType, SchemaDescriptor, Value};

use super::columns::{Cell, Kind, Plan};

// Numbers are copied into Arrow buffers as the payload holds them: little-endian.
const _: () = assert!(
    cfg!(target_endian = "little"),
    "snapbus's Arrow columns assume a little-endian host"
);

/// The Arrow type of one element of `dtype`.
pub fn element_type(dtype: DType) -> DataType {
    match dtype.arrow() {
        ArrowType::UInt8 => DataType::UInt8,
        ArrowType::UInt16 => DataType::UInt16,
        ArrowType::UInt32 => DataType::UInt32,
        ArrowType::UInt64 => DataType::UInt64,
        ArrowType::Int8 => DataType::Int8,
        ArrowType::Int16 => DataType::Int16,
        ArrowType::Int32 => DataType::Int32,
        ArrowType::Int64 => DataType::Int64,
        ArrowType::Float32 => DataType::Float32,
        ArrowType::Float64 => DataType::Float64,
    }
}

fn list_of(t: DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(t, true)))
}

/// The Arrow type of a column of `kind`.
pub fn data_type(kind: Kind) -> DataType {
    match kind {
        Kind::Time => DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        Kind::Bool => DataType::Boolean,
        Kind::Num(d) => element_type(d),
        Kind::Text | Kind::Json => DataType::Utf8,
        Kind::Bytes => DataType::Binary,
        Kind::List(d) | Kind::Tensor(d) => list_of(element_type(d)),
        Kind::Shape => list_of(DataType::Int64),
    }
}

/// The schema's key-value metadata: `snapbus.schema_id`, `snapbus.schema_version`,
/// `snapbus.fingerprint` (hex) and `snapbus.descriptor` (the type descriptor as JSON).
pub fn schema_metadata(schema: &SchemaDescriptor) -> Vec<(String, String)> {
    vec![
        ("snapbus.schema_id".into(), schema.id().to_owned()),
        (
            "snapbus.schema_version".into(),
            schema.version().to_string(),
        ),
        (
            "snapbus.fingerprint".into(),
            format!("{:016x}", schema.fingerprint()),
        ),
        (
            "snapbus.descriptor".into(),
            serde_json::to_string(schema.root()).unwrap_or_default(),
        ),
    ]
}

/// The Arrow schema of `plan`'s table (of `schema`), with the metadata described above.
pub fn arrow_schema(schema: &SchemaDescriptor, plan: &Plan) -> Schema {
    let columns = plan.columns();
    let fields: Vec<Field> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let kind = match c.kind {
                Kind::Time => "time",
                Kind::List(_) => "list",
                Kind::Tensor(_) => "tensor",
                Kind::Shape => "shape",
                Kind::Json => "json",
                _ => "value",
            };
            let mut meta = HashMap::from([
                ("snapbus.path".to_owned(), c.path.clone()),
                ("snapbus.kind".to_owned(), kind.to_owned()),
            ]);
            if let (Kind::Tensor(_), Some(shape)) = (c.kind, columns.get(i + 1)) {
                meta.insert("snapbus.shape_column".into(), shape.name.clone());
            }
            // The fixed columns always have a value.
            let nullable = i >= super::columns::FIXED.len();
            Field::new(c.name.clone(), data_type(c.kind), nullable).with_metadata(meta)
        })
        .collect();
    let metadata: HashMap<String, String> = schema_metadata(schema).into_iter().collect();
    Schema::new_with_metadata(fields, metadata)
}

/// Numbers of one dtype per row, as a list column: the bytes copied as they are.
struct NumList {
    dtype: DType,
    values: MutableBuffer,
    offsets: Vec<i32>,
    nulls: NullBufferBuilder,
}

impl NumList {
    fn new(dtype: DType) -> NumList {
        NumList {
            dtype,
            values: MutableBuffer::new(0),
            offsets: vec![0],
            nulls: NullBufferBuilder::new(0),
        }
    }

    fn last(&self) -> i32 {
        self.offsets.last().copied().unwrap_or(0)
    }

    fn append_null(&mut self) {
        self.offsets.push(self.last());
        self.nulls.append_null();
    }

    /// Appends one row of little-endian elements of `dtype`; a row of another dtype (never:
    /// both come from one descriptor) or past 2^31 elements in one batch is null.
    fn append(&mut self, dtype: DType, bytes: &[u8]) -> usize {
        let n = bytes.len() / dtype.size_bytes();
        let next = i32::try_from(n)
            .ok()
            .and_then(|n| self.last().checked_add(n));
        match next {
            Some(next) if dtype == self.dtype => {
                self.values
                    .extend_from_slice(&bytes[..n * dtype.size_bytes()]);
                self.offsets.push(next);
                self.nulls.append_non_null();
                bytes.len()
            }
            _ => {
                self.append_null();
                0
            }
        }
    }

    /// The rows as a list array; the next batch starts with room for as many.
    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        let element = element_type(self.dtype);
        let len = usize::try_from(self.last()).unwrap_or(0);
        let room = MutableBuffer::new(self.values.len());
        let values: Buffer = std::mem::replace(&mut self.values, room).into();
        let data = ArrayData::builder(element.clone())
            .len(len)
            .add_buffer(values)
            .build()?;
        let mut room = Vec::with_capacity(self.offsets.len());
        room.push(0);
        let offsets = std::mem::replace(&mut self.offsets, room);
        let list = ListArray::try_new(
            Arc::new(Field::new_list_field(element, true)),
            OffsetBuffer::new(offsets.into()),
            make_array(data),
            self.nulls.finish(),
        )?;
        Ok(Arc::new(list))
    }
}

/// A column's builder.
enum Col {
    Time(TimestampNanosecondBuilder),
    Bool(BooleanBuilder),
    U8(UInt8Builder),
    U16(UInt16Builder),
    U32(UInt32Builder),
    U64(UInt64Builder),
    I8(Int8Builder),
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    Text(StringBuilder),
    Bytes(BinaryBuilder),
    List(NumList),
    Shape(ListBuilder<Int64Builder>),
}

macro_rules! each_col {
    ($col:expr, $b:ident => $e:expr) => {
        match $col {
            Col::Time($b) => $e,
            Col::Bool($b) => $e,
            Col::U8($b) => $e,
            Col::U16($b) => $e,
            Col::U32($b) => $e,
            Col::U64($b) => $e,
            Col::I8($b) => $e,
            Col::I16($b) => $e,
            Col::I32($b) => $e,
            Col::I64($b) => $e,
            Col::F32($b) => $e,
            Col::F64($b) => $e,
            Col::Text($b) => $e,
            Col::Bytes($b) => $e,
            Col::List($b) => $e,
            Col::Shape($b) => $e,
        }
    };
}

impl Col {
    fn new(kind: Kind) -> Col {
        match kind {
            Kind::Time => Col::Time(TimestampNanosecondBuilder::new().with_timezone("UTC")),
            Kind::Bool => Col::Bool(BooleanBuilder::new()),
            Kind::Num(d) => match d {
                DType::U8 => Col::U8(UInt8Builder::new()),
                DType::U16 => Col::U16(UInt16Builder::new()),
                DType::U32 => Col::U32(UInt32Builder::new()),
                DType::U64 => Col::U64(UInt64Builder::new()),
                DType::I8 => Col::I8(Int8Builder::new()),
                DType::I16 => Col::I16(Int16Builder::new()),
                DType::I32 => Col::I32(Int32Builder::new()),
                DType::I64 => Col::I64(Int64Builder::new()),
                DType::F32 => Col::F32(Float32Builder::new()),
                DType::F64 => Col::F64(Float64Builder::new()),
            },
            Kind::Text | Kind::Json => Col::Text(StringBuilder::new()),
            Kind::Bytes => Col::Bytes(BinaryBuilder::new()),
            Kind::List(d) | Kind::Tensor(d) => Col::List(NumList::new(d)),
            Kind::Shape => Col::Shape(ListBuilder::new(Int64Builder::new())),
        }
    }

    fn append_null(&mut self) {
        each_col!(self, b => b.append_null());
    }

    /// Appends `cell`; returns about how many bytes it adds. A cell of another type than the
    /// column's (never: both come from one descriptor) is appended as null.
    fn append(&mut self, cell: &Cell<'_>) -> usize {
        match (self, cell) {
            (col, Cell::Null) => col.append_null(),
            (Col::Time(b), Cell::U64(v)) => b.append_option(i64::try_from(*v).ok()),
            (Col::U64(b), Cell::U64(v)) => b.append_value(*v),
            (Col::U32(b), Cell::U64(v)) => b.append_option(u32::try_from(*v).ok()),
            (Col::Bool(b), Cell::Value(Value::Bool(v))) => b.append_value(*v),
            (Col::U8(b), Cell::Value(Value::U8(v))) => b.append_value(*v),
            (Col::U16(b), Cell::Value(Value::U16(v))) => b.append_value(*v),
            (Col::U32(b), Cell::Value(Value::U32(v))) => b.append_value(*v),
            (Col::U64(b), Cell::Value(Value::U64(v))) => b.append_value(*v),
            (Col::I8(b), Cell::Value(Value::I8(v))) => b.append_value(*v),
            (Col::I16(b), Cell::Value(Value::I16(v))) => b.append_value(*v),
            (Col::I32(b), Cell::Value(Value::I32(v))) => b.append_value(*v),
            (Col::I64(b), Cell::Value(Value::I64(v))) => b.append_value(*v),
            (Col::F32(b), Cell::Value(Value::F32(v))) => b.append_value(*v),
            (Col::F64(b), Cell::Value(Value::F64(v))) => b.append_value(*v),
            (Col::Bytes(b), Cell::Value(Value::Bytes(v))) => {
                b.append_value(v);
                return v.len();
            }
            (Col::Text(b), Cell::Str(s)) => {
                b.append_value(s);
                return s.len();
            }
            (Col::Text(b), cell) => {
                let text = cell.to_text();
                b.append_value(&text);
                return text.len();
            }
            (Col::List(b), Cell::Numbers(dtype, bytes)) => return b.append(*dtype, bytes),
            (Col::Shape(b), Cell::Shape(dims)) => {
                for &d in *dims {
                    b.values()
                        .append_value(i64::try_from(d).unwrap_or(i64::MAX));
                }
                b.append(true);
                return dims.len() * 8;
            }
            (col, _) => col.append_null(),
        }
        8
    }

    /// The rows as an array; numbers start the next batch with room for as many rows (no
    /// reallocation while it fills).
    fn finish(&mut self, rows: usize) -> Result<ArrayRef, ArrowError> {
        macro_rules! again {
            ($b:expr) => {{
                let a = Arc::new($b.finish());
                *$b = PrimitiveBuilder::with_capacity(rows);
                a
            }};
        }
        Ok(match self {
            Col::List(b) => return b.finish(),
            Col::Time(b) => {
                let a = Arc::new(b.finish());
                *b = TimestampNanosecondBuilder::with_capacity(rows).with_timezone("UTC");
                a
            }
            Col::Bool(b) => Arc::new(b.finish()),
            Col::U8(b) => again!(b),
            Col::U16(b) => again!(b),
            Col::U32(b) => again!(b),
            Col::U64(b) => again!(b),
            Col::I8(b) => again!(b),
            Col::I16(b) => again!(b),
            Col::I32(b) => again!(b),
            Col::I64(b) => again!(b),
            Col::F32(b) => again!(b),
            Col::F64(b) => again!(b),
            Col::Text(b) => Arc::new(b.finish()),
            Col::Bytes(b) => Arc::new(b.finish()),
            Col::Shape(b) => Arc::new(b.finish()),
        })
    }
}

/// Rows of one table, buffered as Arrow columns until [`finish`](Batcher::finish) makes them a
/// [`RecordBatch`].
pub struct Batcher {
    schema: SchemaRef,
    cols: Vec<Col>,
    rows: usize,
    bytes: usize,
}

impl Batcher {
    /// The builder of `plan`'s table of `schema` ([`arrow_schema()`]).
    pub fn new(schema: &SchemaDescriptor, plan: &Plan) -> Batcher {
        Batcher {
            schema: Arc::new(arrow_schema(schema, plan)),
            cols: plan.columns().iter().map(|c| Col::new(c.kind)).collect(),
            rows: 0,
            bytes: 0,
        }
    }

    /// The table's Arrow schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Appends one row (the cells of [`Plan::row`]).
    pub fn row(&mut self, cells: &[Cell<'_>]) {
        for (col, cell) in self.cols.iter_mut().zip(cells) {
            self.bytes += col.append(cell);
        }
        self.rows += 1;
    }

    /// Rows buffered.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes buffered, about.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The buffered rows as a batch (empty when none); the builder starts afresh.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let rows = self.rows;
        let arrays = self
            .cols
            .iter_mut()
            .map(|c| c.finish(rows))
            .collect::<Result<Vec<_>, _>>()?;
        self.rows = 0;
        self.bytes = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), arrays)
    }
}
