//! `--format mcap-json`: an MCAP file that generic tools (Foxglove, the `mcap` CLI and
//! libraries) decode without knowing snapbus.
//!
//! One MCAP schema per snapbus schema (id, version, descriptor): name = schema id, encoding
//! `jsonschema`, data = the JSON Schema of the JSON form of its values. One channel per channel
//! of the recording (schema, producer, emitter, level): topic = schema id, message encoding
//! `json`, the recording's channel metadata. Messages: the payload as JSON (the same JSON as
//! `echo` prints), `log_time` = `publish_time` = the record's timestamp, the same `sequence`.
//! Loss records are messages on topic `snapbus.loss`; the recording's metadata records are
//! copied. The file is chunked and indexed, without compression.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use mcap::records::{MessageHeader, Metadata};
use snapbus_consumers::recording::{ChannelInfo, LossRecord, Message};
use snapbus_schemas::{SchemaDescriptor, Snapshot, Value};

use super::{Loss, Sink};

/// MCAP schema encoding of JSON Schemas.
const SCHEMA_ENCODING: &str = "jsonschema";
/// MCAP message encoding of JSON messages.
const MESSAGE_ENCODING: &str = "json";

/// Writes an MCAP file with JSON messages.
pub(super) struct McapJson {
    path: PathBuf,
    out: mcap::Writer<BufWriter<File>>,
    /// (schema id, version, fingerprint) → MCAP schema id.
    schemas: HashMap<(String, u32, u64), u16>,
    /// The recording's channel id → the output's.
    channels: HashMap<u16, u16>,
    buf: Vec<u8>,
}

impl McapJson {
    /// Creates (or truncates) `path` and writes the MCAP header.
    pub(super) fn create(path: &Path) -> anyhow::Result<McapJson> {
        let file = crate::bus::create_file(path)
            .with_context(|| format!("creating {}", path.display()))?;
        let out = mcap::WriteOptions::new()
            .library(format!("snapbus {} export", env!("CARGO_PKG_VERSION")))
            .compression(None)
            .create(BufWriter::with_capacity(256 << 10, file))
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(McapJson {
            path: path.to_owned(),
            out,
            schemas: HashMap::new(),
            channels: HashMap::new(),
            buf: Vec::new(),
        })
    }

    fn context(&self) -> String {
        format!("writing {}", self.path.display())
    }

    /// The output channel of the recording's `channel`, declared on first use.
    fn channel(&mut self, channel: &ChannelInfo, schema: &SchemaDescriptor) -> anyhow::Result<u16> {
        if let Some(&id) = self.channels.get(&channel.id) {
            return Ok(id);
        }
        let key = (
            schema.id().to_owned(),
            schema.version(),
            schema.fingerprint(),
        );
        let schema_id = match self.schemas.get(&key) {
            Some(&id) => id,
            None => {
                let json = serde_json::to_vec(&schema.to_json_schema())?;
                let id = self
                    .out
                    .add_schema(schema.id(), SCHEMA_ENCODING, &json)
                    .with_context(|| self.context())?;
                self.schemas.insert(key, id);
                id
            }
        };
        let mut metadata = channel.metadata.clone();
        metadata.insert("schema_version".into(), schema.version().to_string());
        let id = self
            .out
            .add_channel(schema_id, schema.id(), MESSAGE_ENCODING, &metadata)
            .with_context(|| self.context())?;
        self.channels.insert(channel.id, id);
        Ok(id)
    }

    fn write(
        &mut self,
        channel: &ChannelInfo,
        schema: &SchemaDescriptor,
        t_nanos: u64,
        sequence: u32,
        value: &Value<'_>,
    ) -> anyhow::Result<()> {
        let channel_id = self.channel(channel, schema)?;
        self.buf.clear();
        serde_json::to_writer(&mut self.buf, &value.to_json())?;
        let header = MessageHeader {
            channel_id,
            sequence,
            log_time: t_nanos,
            publish_time: t_nanos,
        };
        self.out
            .write_to_known_channel(&header, &self.buf)
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

impl Sink for McapJson {
    fn message(&mut self, m: &Message, value: &Value<'_>) -> anyhow::Result<()> {
        self.write(&m.channel, &m.channel.schema, m.t_nanos, m.sequence, value)
    }

    fn loss(&mut self, loss: &Loss<'_>) -> anyhow::Result<()> {
        let schema = LossRecord::descriptor();
        self.write(loss.channel, schema, loss.t_nanos, 0, &loss.value()?)
    }

    fn metadata(&mut self, name: &str, fields: &BTreeMap<String, String>) -> anyhow::Result<()> {
        self.out
            .write_metadata(&Metadata {
                name: name.to_owned(),
                metadata: fields.clone(),
            })
            .with_context(|| self.context())
    }

    fn finish(mut self: Box<Self>) -> anyhow::Result<Vec<PathBuf>> {
        self.out.finish().with_context(|| self.context())?;
        let this = *self;
        this.out
            .into_inner()
            .flush()
            .with_context(|| format!("writing {}", this.path.display()))?;
        Ok(vec![this.path])
    }
}
