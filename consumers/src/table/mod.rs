//! Records as table rows (feature `table`): the columns of a schema ([`columns`]) as CSV text
//! and, with feature `arrow`, as Arrow arrays ([`arrow`]), for `snapbus export` (CSV,
//! Parquet) and Python's `Recording.to_arrow()` / `to_pandas()`, which thus have the same
//! columns. With features `arrow` and `recording`, [`read_schema`] reads one schema of a
//! recording into Arrow batches.

#[cfg(feature = "arrow")]
pub mod arrow;
pub mod columns;

pub use columns::{Cell, Column, FIXED, Fixed, Kind, Plan};

#[cfg(all(feature = "arrow", feature = "recording"))]
pub use read::{SchemaTable, TableRead, read_schema};

#[cfg(all(feature = "arrow", feature = "recording"))]
mod read {
    use std::collections::{BTreeSet, HashMap};
    use std::io::Read;
    use std::sync::Arc;

    use arrow_array::RecordBatch;
    use arrow_schema::ArrowError;
    use snapbus_schemas::{SchemaDescriptor, decode};

    use super::arrow::Batcher;
    use super::columns::{Fixed, Plan};
    use crate::recording::{Item, RecordingReader};

    /// Rows per batch.
    const BATCH_ROWS: usize = 64 * 1024;
    /// Bytes (about) per batch.
    const BATCH_BYTES: usize = 64 << 20;

    /// The rows of one version of a schema (one id, version and fingerprint).
    #[derive(Debug)]
    pub struct SchemaTable {
        /// Its descriptor.
        pub schema: Arc<SchemaDescriptor>,
        /// Its rows, in file order.
        pub batches: Vec<RecordBatch>,
    }

    /// What [`read_schema`] read.
    #[derive(Debug, Default)]
    pub struct TableRead {
        /// A table per version of the schema, in order of first appearance.
        pub tables: Vec<SchemaTable>,
        /// Records whose payload did not decode (left out).
        pub undecodable: u64,
        /// Damaged parts of the file that were skipped, described.
        pub damage: Vec<String>,
        /// Why the read stopped before the end (a file cut short), if it did.
        pub error: Option<String>,
        /// The schema ids of the records read (every schema, not only the one asked for).
        pub schema_ids: BTreeSet<String>,
        /// Whether the file was read through its footer.
        pub complete: bool,
    }

    struct Building {
        schema: Arc<SchemaDescriptor>,
        plan: Plan,
        batcher: Batcher,
        batches: Vec<RecordBatch>,
    }

    impl Building {
        fn flush(&mut self) -> Result<(), ArrowError> {
            if self.batcher.rows() > 0 {
                self.batches.push(self.batcher.finish()?);
            }
            Ok(())
        }
    }

    /// Reads the records of schema id `schema_id` from `reader` (from where it stands) into
    /// Arrow batches with the columns of [`Plan::new`] (arrays as lists, not split). A
    /// damaged part is skipped (with a resyncing reader) and described; a cut ends the read,
    /// and says why; payloads that do not decode are counted and left out.
    pub fn read_schema<R: Read>(
        mut reader: RecordingReader<R>,
        schema_id: &str,
    ) -> Result<TableRead, ArrowError> {
        let mut out = TableRead::default();
        let mut building: Vec<Building> = Vec::new();
        // By channel id, then by (version, fingerprint).
        let mut by_channel: HashMap<u16, usize> = HashMap::new();
        let mut by_key: HashMap<(u32, u64), usize> = HashMap::new();
        for item in reader.by_ref() {
            let m = match item {
                Ok(Item::Message(m)) => m,
                Ok(Item::Damaged(d)) => {
                    out.damage.push(d.to_string());
                    continue;
                }
                Ok(_) => continue,
                Err(e) => {
                    out.error = Some(e.to_string());
                    break;
                }
            };
            let c = &m.channel;
            if c.is_loss {
                continue;
            }
            if c.schema.id() != schema_id {
                if !out.schema_ids.contains(c.schema.id()) {
                    out.schema_ids.insert(c.schema.id().to_owned());
                }
                continue;
            }
            let i = match by_channel.get(&c.id) {
                Some(&i) => i,
                None => {
                    let key = (c.schema.version(), c.schema.fingerprint());
                    let i = *by_key.entry(key).or_insert_with(|| {
                        let plan = Plan::new(&c.schema, false);
                        building.push(Building {
                            schema: Arc::clone(&c.schema),
                            batcher: Batcher::new(&c.schema, &plan),
                            plan,
                            batches: Vec::new(),
                        });
                        building.len() - 1
                    });
                    by_channel.insert(c.id, i);
                    i
                }
            };
            let b = &mut building[i];
            let Ok(value) = decode(b.schema.root(), &m.data) else {
                out.undecodable += 1;
                continue;
            };
            let fixed = Fixed::of_message(&m);
            b.batcher.row(&b.plan.row(&fixed, &value));
            if b.batcher.rows() >= BATCH_ROWS || b.batcher.bytes() >= BATCH_BYTES {
                b.flush()?;
            }
        }
        out.complete = out.error.is_none() && reader.complete();
        for mut b in building {
            b.flush()?;
            if b.batches.is_empty() {
                b.batches.push(b.batcher.finish()?);
            }
            out.tables.push(SchemaTable {
                schema: b.schema,
                batches: b.batches,
            });
        }
        Ok(out)
    }
}
