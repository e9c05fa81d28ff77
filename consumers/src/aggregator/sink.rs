//! Where summaries go: in memory, or published on the bus.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use snapbus_bus::Level;
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::publisher::{EmitMeta, Publisher, PublisherConfig, PublisherError};
use snapbus_bus::runtime::BusDir;
use snapbus_schemas::SchemaDescriptor;

use crate::HookError;

/// Where summaries go.
pub trait SummarySink {
    /// Emits one summary payload of `schema`.
    fn emit(&mut self, schema: &Arc<SchemaDescriptor>, payload: &[u8]) -> Result<(), HookError>;
}

/// Summaries collected in memory (tests, benchmarks).
impl SummarySink for Vec<(Arc<SchemaDescriptor>, Vec<u8>)> {
    fn emit(&mut self, schema: &Arc<SchemaDescriptor>, payload: &[u8]) -> Result<(), HookError> {
        self.push((Arc::clone(schema), payload.to_vec()));
        Ok(())
    }
}

/// Summaries published on the bus by a producer of the aggregator's own.
pub struct PublisherSink {
    publisher: Publisher,
    keys: HashMap<u64, u16>,
    emitter: u16,
}

/// Level of summary snapshots (INFO).
const SUMMARY_LEVEL: Level = Level::INFO;

impl PublisherSink {
    /// Starts the producer (`name` in `snapbus ls`) on the bus of `dir`.
    pub fn start(dir: &BusDir, name: &str) -> Result<PublisherSink, PublisherError> {
        let publisher = Publisher::start(
            dir.clone(),
            PublisherConfig {
                name: name.to_owned(),
                // Summaries are small and few: 8 MiB holds hundreds of thousands.
                lane: LaneConfig {
                    capacity: 8 << 20,
                    max_frame: 1 << 20,
                    block_size: 64 << 10,
                },
                session_tag: None,
                perf_tag: None,
                relayed: false,
            },
        )?;
        let emitter = publisher.emitter("snapbus.aggregator");
        // Joined before anything is emitted, so that `ls` lists it and a snapshot taken
        // right after a summary sees its lane (the bus is running: the caller checked).
        let t0 = std::time::Instant::now();
        while !publisher.is_connected() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(PublisherSink {
            publisher,
            keys: HashMap::new(),
            emitter,
        })
    }

    /// The producer (for its name and lane id).
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }
}

impl SummarySink for PublisherSink {
    fn emit(&mut self, schema: &Arc<SchemaDescriptor>, payload: &[u8]) -> Result<(), HookError> {
        let key = match self.keys.get(&schema.fingerprint()) {
            Some(k) => *k,
            None => {
                let k = self.publisher.register_schema(schema)?;
                self.keys.insert(schema.fingerprint(), k);
                k
            }
        };
        let version = u16::try_from(schema.version())
            .map_err(|_| format!("{} version {} > 65535", schema.id(), schema.version()))?;
        let meta = EmitMeta {
            schema_key: key,
            schema_version: version,
            level: SUMMARY_LEVEL,
            emitter: self.emitter,
        };
        self.publisher
            .emit_with(meta, payload.len(), |w| Ok(w.put(payload)?))?;
        Ok(())
    }
}
