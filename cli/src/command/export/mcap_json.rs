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
//!
//! `--format foxglove` is the same file shaped for Foxglove as the live bridge serves it:
//! topics as paths (`demo.step` → `/demo/step`, so that message paths like
//! `/demo/step.reward` need no quoting), and each tensor that is an image or points (the
//! plotter's [`View`](snapbus_consumers::fields::View)) also on a topic of its own
//! (`/demo/step/observation`) as `foxglove.RawImage` / `foxglove.PointCloud` JSON.

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
    /// Shaped for Foxglove (`--format foxglove`).
    #[cfg_attr(
        not(feature = "foxglove"),
        expect(dead_code, reason = "only the `foxglove` feature reads it")
    )]
    foxglove: bool,
    /// (output channel, tensor path) → the output channel of its Foxglove message (`None`:
    /// a tensor with none).
    #[cfg(feature = "foxglove")]
    views: HashMap<(u16, String), Option<u16>>,
}

impl McapJson {
    /// Creates (or truncates) `path` and writes the MCAP header.
    pub(super) fn create(path: &Path, foxglove: bool) -> anyhow::Result<McapJson> {
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
            foxglove,
            #[cfg(feature = "foxglove")]
            views: HashMap::new(),
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
        let topic = self.topic(schema.id(), None);
        let id = self
            .out
            .add_channel(schema_id, &topic, MESSAGE_ENCODING, &metadata)
            .with_context(|| self.context())?;
        self.channels.insert(channel.id, id);
        Ok(id)
    }

    /// The topic of `schema`'s records (`field`: of one of its tensors).
    fn topic(&self, schema: &str, field: Option<&str>) -> String {
        #[cfg(feature = "foxglove")]
        if self.foxglove {
            return snapbus_consumers::foxglove::messages::topic(schema, field);
        }
        let _ = field;
        schema.to_owned()
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
            .with_context(|| format!("writing {}", self.path.display()))?;
        #[cfg(feature = "foxglove")]
        if self.foxglove {
            self.write_views(channel_id, schema, &header, value)?;
        }
        Ok(())
    }

    /// The Foxglove messages of the images and points of `value`, on their own channels.
    #[cfg(feature = "foxglove")]
    fn write_views(
        &mut self,
        on: u16,
        schema: &SchemaDescriptor,
        header: &MessageHeader,
        value: &Value<'_>,
    ) -> anyhow::Result<()> {
        use snapbus_consumers::foxglove::messages;
        for (path, tv) in snapbus_consumers::fields::tensors(value) {
            let key = (on, path);
            if self.views.get(&key) == Some(&None) {
                continue;
            }
            let Some((name, m)) = messages::of_tensor(tv, &key.1, header.log_time) else {
                self.views.insert(key, None);
                continue;
            };
            let channel_id = match self.views.get(&key) {
                Some(Some(id)) => *id,
                _ => {
                    let data = serde_json::to_vec(&messages::json_schema(name))?;
                    let schema_id = self
                        .out
                        .add_schema(name, SCHEMA_ENCODING, &data)
                        .with_context(|| self.context())?;
                    let topic = self.topic(schema.id(), Some(&key.1));
                    let id = self
                        .out
                        .add_channel(schema_id, &topic, MESSAGE_ENCODING, &BTreeMap::new())
                        .with_context(|| self.context())?;
                    self.views.insert(key, Some(id));
                    id
                }
            };
            self.buf.clear();
            serde_json::to_writer(&mut self.buf, &m)?;
            let header = MessageHeader {
                channel_id,
                ..*header
            };
            self.out
                .write_to_known_channel(&header, &self.buf)
                .with_context(|| self.context())?;
        }
        Ok(())
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
