//! `--format parquet` (feature `parquet`): one Parquet file per schema, with the columns and
//! Arrow types of [`snapbus_consumers::table::arrow`] (`t_nanos` a UTC timestamp in
//! nanoseconds, numbers, lists and tensors in their own dtype, a tensor's shape beside it;
//! `producer`, `pid`, `level`, `seq` and `version` columns; each field's metadata says which
//! field of the descriptor it holds).
//!
//! Rows are buffered per schema in batches of at most [`BATCH_ROWS`] rows or about
//! [`BATCH_BYTES`] bytes, and row groups hold at most [`ROW_GROUP_ROWS`] rows or about
//! [`ROW_GROUP_BYTES`] bytes, so memory stays bounded whatever the recording's size. No
//! compression (the codecs build C code). The file's key-value metadata holds
//! `snapbus.schema_id`, `snapbus.schema_version`, `snapbus.fingerprint` and
//! `snapbus.descriptor` (the type descriptor as JSON), and the Arrow schema (so pyarrow and
//! pandas get the timestamp's time zone back).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use snapbus_consumers::table::arrow::{Batcher, schema_metadata};
use snapbus_consumers::table::{Cell, Plan};
use snapbus_schemas::SchemaDescriptor;

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

/// One Parquet file being written.
struct ParquetTable {
    batcher: Batcher,
    out: ArrowWriter<File>,
}

fn create(
    path: &Path,
    schema: &SchemaDescriptor,
    plan: &Plan,
) -> anyhow::Result<Box<dyn TableWriter>> {
    let batcher = Batcher::new(schema, plan);
    let metadata = schema_metadata(schema)
        .into_iter()
        .map(|(k, v)| KeyValue::new(k, v))
        .collect();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
        .set_key_value_metadata(Some(metadata))
        .build();
    let file = crate::bus::create_file(path)?;
    let out = ArrowWriter::try_new(file, Arc::clone(batcher.schema()), Some(props))?;
    Ok(Box::new(ParquetTable { batcher, out }))
}

impl ParquetTable {
    /// Hands the buffered rows to the Parquet writer.
    fn write_batch(&mut self) -> anyhow::Result<()> {
        if self.batcher.rows() == 0 {
            return Ok(());
        }
        let batch = self.batcher.finish()?;
        self.out.write(&batch)?;
        Ok(())
    }
}

impl TableWriter for ParquetTable {
    fn row(&mut self, cells: &[Cell<'_>]) -> anyhow::Result<()> {
        self.batcher.row(cells);
        if self.batcher.rows() >= BATCH_ROWS || self.batcher.bytes() >= BATCH_BYTES {
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
