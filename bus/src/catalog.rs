//! A producer's **catalog**: the schema descriptors and emitter names behind the small keys its
//! frames carry, in a second (small) lane next to its data lane.
//!
//! A producer writes a schema's entry before the first frame that uses its key, in the same
//! thread, so a consumer that has read that frame (an Acquire of its commit word) and then
//! reads the catalog finds the entry. Consumers therefore resolve keys without asking the
//! broker, and a schema that appears after a consumer subscribed reaches it on its own.
//!
//! The catalog is a lane like any other (sealed memfd, validated reads), so it is just as
//! untrusted: entries that do not decode are counted and skipped. It is never allowed to wrap:
//! the writer refuses new entries once half of it is used.

use std::collections::HashMap;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use snapbus_schemas::SchemaDescriptor;
use thiserror::Error;

use crate::lane::{
    LaneConfig, LaneOpenError, LaneReader, LaneWriter, Poll, RecordMeta, ShmLane, StartAt,
};
use crate::mem::ShmMem;

/// Size of a catalog lane: room for thousands of schemas.
const CATALOG_CONFIG: LaneConfig = LaneConfig {
    capacity: 1 << 20,
    max_frame: 128 << 10,
    block_size: 64 << 10,
};

/// Largest schema descriptor (canonical bytes) a catalog holds: a catalog record must fit one
/// frame of the catalog lane. About 10,000 fields with short names.
pub const MAX_DESCRIPTOR_BYTES: usize = 120 << 10;

/// One catalog record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Entry {
    /// Frames with `schema_key == key` are payloads of this schema (canonical descriptor
    /// bytes).
    Schema { key: u16, descriptor: Vec<u8> },
    /// Frames with `emitter == id` come from the telemetry handle named `name`.
    Emitter { id: u16, name: String },
}

/// Why a catalog entry could not be written.
#[derive(Debug, Error)]
pub enum CatalogError {
    /// The catalog is full (more schemas or emitters than it holds).
    #[error("the catalog is full ({used} of {capacity} bytes used)")]
    Full {
        /// Bytes used.
        used: u64,
        /// Capacity.
        capacity: u64,
    },
    /// A schema descriptor larger than [`MAX_DESCRIPTOR_BYTES`]: no catalog holds it.
    #[error(
        "schema {id}: its descriptor of {bytes} bytes is too large for a producer's catalog \
         (at most {MAX_DESCRIPTOR_BYTES} bytes; fewer fields make it smaller)"
    )]
    TooLarge {
        /// The schema id.
        id: String,
        /// The descriptor's canonical bytes.
        bytes: usize,
    },
    /// The lane refused the record.
    #[error("catalog write failed: {0}")]
    Write(String),
}

/// The producer's side.
pub struct CatalogWriter {
    lane: ShmLane,
    writer: LaneWriter<ShmMem>,
}

impl CatalogWriter {
    /// A new, empty catalog in its own sealed memfd.
    pub fn create() -> Result<CatalogWriter, LaneOpenError> {
        let lane = ShmLane::create("snapbus-catalog", &CATALOG_CONFIG)?;
        let writer = lane
            .lane()
            .writer()
            .ok_or_else(|| LaneOpenError::Segment("catalog mapped read-only".into()))?;
        Ok(CatalogWriter { lane, writer })
    }

    /// The catalog's fd (passed to the broker, and on to consumers).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.lane.fd()
    }

    fn append(&mut self, entry: &Entry) -> Result<(), CatalogError> {
        let bytes = postcard::to_allocvec(entry).map_err(|e| CatalogError::Write(e.to_string()))?;
        let used = self.lane.lane().stats().claim_tail;
        let capacity = self.lane.lane().geometry().capacity;
        if used + bytes.len() as u64 + 64 > capacity / 2 {
            return Err(CatalogError::Full { used, capacity });
        }
        let meta = RecordMeta {
            schema_key: 0,
            schema_version: 0,
            level: 0,
            emitter: 0,
        };
        self.writer
            .write_bytes(meta, &bytes)
            .map(|_| ())
            .map_err(|e| CatalogError::Write(e.to_string()))
    }

    /// Records that frames with `key` carry payloads described by `descriptor`.
    pub fn add_schema(
        &mut self,
        key: u16,
        descriptor: &SchemaDescriptor,
    ) -> Result<(), CatalogError> {
        let bytes = descriptor.to_canonical_bytes();
        if bytes.len() > MAX_DESCRIPTOR_BYTES {
            return Err(CatalogError::TooLarge {
                id: descriptor.id().to_owned(),
                bytes: bytes.len(),
            });
        }
        self.append(&Entry::Schema {
            key,
            descriptor: bytes,
        })
    }

    /// Records that frames with `emitter == id` come from the handle named `name`.
    pub fn add_emitter(&mut self, id: u16, name: &str) -> Result<(), CatalogError> {
        self.append(&Entry::Emitter {
            id,
            name: name.to_owned(),
        })
    }
}

/// A consumer's (or the broker's) view of a producer's catalog.
pub struct Catalog {
    reader: LaneReader<ShmMem>,
    schemas: HashMap<u16, Arc<SchemaDescriptor>>,
    /// Emitter names by id: an index per record, not a hash (a consumer looks one up for
    /// every record it reads).
    emitters: Vec<Option<Arc<str>>>,
    damaged: u64,
}

impl Catalog {
    /// Maps a catalog read-only (`fd` from the broker).
    pub fn open(fd: OwnedFd) -> Result<Catalog, LaneOpenError> {
        let lane = ShmLane::open(fd)?;
        Ok(Catalog {
            reader: lane.lane().reader(StartAt::Oldest),
            schemas: HashMap::new(),
            emitters: Vec::new(),
            damaged: 0,
        })
    }

    /// Reads entries added since the last call; returns whether there were any.
    pub fn refresh(&mut self) -> bool {
        let mut any = false;
        loop {
            match self.reader.poll() {
                Poll::Frame(f) => match postcard::from_bytes::<Entry>(f.payload) {
                    Ok(Entry::Schema { key, descriptor }) => {
                        match SchemaDescriptor::from_canonical_bytes(&descriptor) {
                            Ok(d) => {
                                self.schemas.insert(key, Arc::new(d));
                                any = true;
                            }
                            Err(_) => self.damaged += 1,
                        }
                    }
                    Ok(Entry::Emitter { id, name }) => {
                        let i = usize::from(id);
                        if self.emitters.len() <= i {
                            self.emitters.resize(i + 1, None);
                        }
                        self.emitters[i] = Some(Arc::from(name));
                        any = true;
                    }
                    Err(_) => self.damaged += 1,
                },
                // A catalog never wraps; a gap means damage.
                Poll::Lagged(n) => self.damaged += n,
                Poll::Empty | Poll::Closed => return any,
                // An entry being written: the frame that needs it cannot be committed yet.
                Poll::Pending => return any,
            }
        }
    }

    /// The schema of frames with `key`.
    pub fn schema(&self, key: u16) -> Option<&Arc<SchemaDescriptor>> {
        self.schemas.get(&key)
    }

    /// Every schema, by key.
    pub fn schemas(&self) -> impl Iterator<Item = (u16, &Arc<SchemaDescriptor>)> {
        self.schemas.iter().map(|(k, d)| (*k, d))
    }

    /// The name of emitter `id`.
    #[inline]
    pub fn emitter(&self, id: u16) -> Option<&Arc<str>> {
        self.emitters.get(usize::from(id)).and_then(Option::as_ref)
    }

    /// Entries that did not decode (a corrupt or hostile catalog).
    pub fn damaged(&self) -> u64 {
        self.damaged
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snapbus_schemas::Snapshot;
    use snapbus_schemas::builtin::DurationSample;

    #[test]
    fn entries_written_are_read_back() {
        let mut w = CatalogWriter::create().expect("catalog");
        let mut c = Catalog::open(w.fd().try_clone_to_owned().expect("dup")).expect("open");
        assert!(!c.refresh());
        w.add_schema(7, DurationSample::descriptor())
            .expect("schema");
        w.add_emitter(3, "monty.models").expect("emitter");
        assert!(c.refresh());
        assert_eq!(c.schema(7).map(|d| d.id()), Some(DurationSample::SCHEMA_ID));
        assert_eq!(c.emitter(3).map(|n| &**n), Some("monty.models"));
        assert!(c.schema(8).is_none());
        assert_eq!(c.damaged(), 0);
    }

    #[test]
    fn a_full_catalog_refuses_entries_instead_of_wrapping() {
        let mut w = CatalogWriter::create().expect("catalog");
        let name = "x".repeat(60_000);
        let mut n = 0;
        let err = loop {
            match w.add_emitter(n, &name) {
                Ok(()) => n += 1,
                Err(e) => break e,
            }
        };
        assert!(matches!(err, CatalogError::Full { .. }), "{err}");
        let mut c = Catalog::open(w.fd().try_clone_to_owned().expect("dup")).expect("open");
        c.refresh();
        assert_eq!(
            c.emitters.iter().flatten().count(),
            usize::from(n),
            "every accepted entry is readable"
        );
        assert_eq!(c.damaged(), 0);
    }

    /// A descriptor larger than a catalog record can be is refused for that, saying its size
    /// (before: "the catalog is full (64 of 1048576 bytes used)").
    #[test]
    fn a_descriptor_too_large_for_any_catalog_says_so() {
        use snapbus_schemas::{Field, SchemaDescriptor, TypeDesc};
        let inner: Vec<Field> = (0..4_000)
            .map(|i| Field::new(format!("field_{i:04}"), TypeDesc::F64))
            .collect();
        let fields = (0..4)
            .map(|i| {
                Field::new(
                    format!("part{i}"),
                    TypeDesc::Struct {
                        fields: inner.clone(),
                    },
                )
            })
            .collect();
        let desc = SchemaDescriptor::new("wide", 1, TypeDesc::Struct { fields }).expect("desc");
        let mut w = CatalogWriter::create().expect("catalog");
        let err = w.add_schema(1, &desc).expect_err("accepted");
        assert!(matches!(err, CatalogError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("too large"), "{err}");
        w.add_schema(2, DurationSample::descriptor())
            .expect("a small schema still fits");
    }
}
