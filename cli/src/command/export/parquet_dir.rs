//! `--format parquet` (feature `parquet`): one Parquet file per schema, with the columns of
//! [`columns`](super::columns), typed:
//!
//! | column | Arrow / Parquet type |
//! |---|---|
//! | `t_nanos`, `producer_id` | UInt64 |
//! | `seq` | UInt32 |
//! | `producer`, strings, enum variant names, 128-bit integers, JSON | Utf8 |
//! | bool | Boolean |
//! | integers | (U)Int8 … (U)Int64, as declared |
//! | floats | Float32, Float64 |
//! | bytes | Binary |
//! | number sequences, tensor elements | `List<Float64>` |
//! | tensor shapes | `List<Int64>` |
//!
//! Payload columns are nullable. Rows are buffered per schema in batches of at most
//! [`BATCH_ROWS`] rows or about [`BATCH_BYTES`] bytes, and row groups hold at most
//! [`ROW_GROUP_ROWS`] rows or about [`ROW_GROUP_BYTES`] bytes, so memory stays bounded
//! whatever the recording's size. No compression (the codecs build C code). The file's
//! key-value metadata holds `snapbus.schema_id`, `snapbus.schema_version`,
//! `snapbus.fingerprint` and `snapbus.descriptor` (the type descriptor as JSON).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int8Builder, Int16Builder,
    Int32Builder, Int64Builder, ListBuilder, StringBuilder, UInt8Builder, UInt16Builder,
    UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use snapbus_schemas::{ArrowType, Packed, SchemaDescriptor, Value};

use super::columns::{Cell, Kind, Plan};
use super::tables::{Format, TableWriter};

/// Rows buffered per schema before they are handed to the Parquet writer.
pub(crate) const BATCH_ROWS: usize = 8192;
/// Bytes (about) buffered per schema before they are handed to the Parquet writer.
pub(crate) const BATCH_BYTES: usize = 32 << 20;
/// Most rows in one row group.
pub(crate) const ROW_GROUP_ROWS: usize = 64 * 1024;
/// Most bytes (about, encoded) in one row group.
pub(crate) const ROW_GROUP_BYTES: usize = 128 << 20;

/// The Parquet table format.
pub(super) fn format() -> Format {
    Format {
        ext: "parquet",
        create,
        split_arrays: false,
    }
}

/// A column's builder.
enum Col {
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
    Floats(ListBuilder<Float64Builder>),
    Shape(ListBuilder<Int64Builder>),
}

impl Col {
    fn new(kind: Kind) -> (DataType, Col) {
        match kind {
            Kind::Bool => (DataType::Boolean, Col::Bool(BooleanBuilder::new())),
            Kind::Num(d) => match d.arrow() {
                ArrowType::UInt8 => (DataType::UInt8, Col::U8(UInt8Builder::new())),
                ArrowType::UInt16 => (DataType::UInt16, Col::U16(UInt16Builder::new())),
                ArrowType::UInt32 => (DataType::UInt32, Col::U32(UInt32Builder::new())),
                ArrowType::UInt64 => (DataType::UInt64, Col::U64(UInt64Builder::new())),
                ArrowType::Int8 => (DataType::Int8, Col::I8(Int8Builder::new())),
                ArrowType::Int16 => (DataType::Int16, Col::I16(Int16Builder::new())),
                ArrowType::Int32 => (DataType::Int32, Col::I32(Int32Builder::new())),
                ArrowType::Int64 => (DataType::Int64, Col::I64(Int64Builder::new())),
                ArrowType::Float32 => (DataType::Float32, Col::F32(Float32Builder::new())),
                ArrowType::Float64 => (DataType::Float64, Col::F64(Float64Builder::new())),
            },
            Kind::Text | Kind::Json => (DataType::Utf8, Col::Text(StringBuilder::new())),
            Kind::Bytes => (DataType::Binary, Col::Bytes(BinaryBuilder::new())),
            Kind::Floats => (
                DataType::List(Arc::new(Field::new_list_field(DataType::Float64, true))),
                Col::Floats(ListBuilder::new(Float64Builder::new())),
            ),
            Kind::Shape => (
                DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true))),
                Col::Shape(ListBuilder::new(Int64Builder::new())),
            ),
        }
    }

    fn append_null(&mut self) {
        match self {
            Col::Bool(b) => b.append_null(),
            Col::U8(b) => b.append_null(),
            Col::U16(b) => b.append_null(),
            Col::U32(b) => b.append_null(),
            Col::U64(b) => b.append_null(),
            Col::I8(b) => b.append_null(),
            Col::I16(b) => b.append_null(),
            Col::I32(b) => b.append_null(),
            Col::I64(b) => b.append_null(),
            Col::F32(b) => b.append_null(),
            Col::F64(b) => b.append_null(),
            Col::Text(b) => b.append_null(),
            Col::Bytes(b) => b.append_null(),
            Col::Floats(b) => b.append_null(),
            Col::Shape(b) => b.append_null(),
        }
    }

    /// Appends `cell`; returns about how many bytes it adds. A cell of another type than the
    /// column's (never: both come from one descriptor) is appended as null.
    fn append(&mut self, cell: &Cell<'_>) -> usize {
        match (self, cell) {
            (col, Cell::Null) => col.append_null(),
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
            (Col::Text(b), cell) => {
                let text = cell.to_text();
                b.append_value(&text);
                return text.len();
            }
            (Col::Floats(b), Cell::Numbers(dtype, bytes)) => {
                let p = Packed {
                    dtype: *dtype,
                    bytes: std::borrow::Cow::Borrowed(bytes),
                };
                let n = p.len();
                let values = b.values();
                for i in 0..n {
                    values.append_value(p.get_f64(i).unwrap_or(f64::NAN));
                }
                b.append(true);
                return n * 8;
            }
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

    fn finish(&mut self) -> ArrayRef {
        match self {
            Col::Bool(b) => Arc::new(b.finish()),
            Col::U8(b) => Arc::new(b.finish()),
            Col::U16(b) => Arc::new(b.finish()),
            Col::U32(b) => Arc::new(b.finish()),
            Col::U64(b) => Arc::new(b.finish()),
            Col::I8(b) => Arc::new(b.finish()),
            Col::I16(b) => Arc::new(b.finish()),
            Col::I32(b) => Arc::new(b.finish()),
            Col::I64(b) => Arc::new(b.finish()),
            Col::F32(b) => Arc::new(b.finish()),
            Col::F64(b) => Arc::new(b.finish()),
            Col::Text(b) => Arc::new(b.finish()),
            Col::Bytes(b) => Arc::new(b.finish()),
            Col::Floats(b) => Arc::new(b.finish()),
            Col::Shape(b) => Arc::new(b.finish()),
        }
    }
}

/// One Parquet file being written.
struct ParquetTable {
    schema: SchemaRef,
    cols: Vec<Col>,
    rows: usize,
    bytes: usize,
    out: ArrowWriter<File>,
}

fn create(
    path: &Path,
    schema: &SchemaDescriptor,
    plan: &Plan,
) -> anyhow::Result<Box<dyn TableWriter>> {
    let mut fields = Vec::with_capacity(plan.columns().len());
    let mut cols = Vec::with_capacity(plan.columns().len());
    for (i, c) in plan.columns().iter().enumerate() {
        let (ty, col) = Col::new(c.kind);
        // The fixed columns always have a value.
        let nullable = i >= super::columns::FIXED.len();
        fields.push(Field::new(c.name.clone(), ty, nullable));
        cols.push(col);
    }
    let arrow_schema = Arc::new(Schema::new(fields));
    let metadata = vec![
        KeyValue::new("snapbus.schema_id".into(), schema.id().to_owned()),
        KeyValue::new(
            "snapbus.schema_version".into(),
            schema.version().to_string(),
        ),
        KeyValue::new(
            "snapbus.fingerprint".into(),
            format!("{:016x}", schema.fingerprint()),
        ),
        KeyValue::new(
            "snapbus.descriptor".into(),
            serde_json::to_string(schema.root())?,
        ),
    ];
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
        .set_key_value_metadata(Some(metadata))
        .build();
    let file = crate::bus::create_file(path)?;
    let out = ArrowWriter::try_new(file, Arc::clone(&arrow_schema), Some(props))?;
    Ok(Box::new(ParquetTable {
        schema: arrow_schema,
        cols,
        rows: 0,
        bytes: 0,
        out,
    }))
}

impl ParquetTable {
    /// Hands the buffered rows to the Parquet writer.
    fn write_batch(&mut self) -> anyhow::Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let arrays: Vec<ArrayRef> = self.cols.iter_mut().map(Col::finish).collect();
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), arrays)?;
        self.out.write(&batch)?;
        self.rows = 0;
        self.bytes = 0;
        Ok(())
    }
}

impl TableWriter for ParquetTable {
    fn row(&mut self, cells: &[Cell<'_>]) -> anyhow::Result<()> {
        for (col, cell) in self.cols.iter_mut().zip(cells) {
            self.bytes += col.append(cell);
        }
        self.rows += 1;
        if self.rows >= BATCH_ROWS || self.bytes >= BATCH_BYTES {
            self.write_batch()?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> anyhow::Result<()> {
        self.write_batch()?;
        self.out.close()?;
        Ok(())
    }
}
