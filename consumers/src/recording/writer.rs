//! Writing recordings.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mcap::records::{MessageHeader, Metadata};
use snapbus_bus::control::ProducerInfo;
use snapbus_bus::lane::FrameMeta;
use snapbus_schemas::{SchemaDescriptor, Snapshot, Wire};
use thiserror::Error;

use super::{
    FORMAT_VERSION, LossRecord, MESSAGE_ENCODING, PRODUCER_METADATA, PROFILE, RECORDING_METADATA,
    SCHEMA_ENCODING,
};

/// Why a recording could not be written.
#[derive(Debug, Error)]
pub enum WriteError {
    /// The file could not be created.
    #[error("creating {path}: {source}")]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file exists and overwriting was not asked for.
    #[error("{0} exists; choose another path, or pass --force to overwrite it")]
    Exists(PathBuf),
    /// Writing failed (disk full, …).
    #[error("writing {path}: {source}")]
    Mcap {
        /// The file.
        path: PathBuf,
        /// Why.
        source: mcap::McapError,
    },
}

/// How to write a recording.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// `recorder` or `snapshot` (stored in the `snapbus.recording` metadata).
    pub source: String,
    /// The bus name.
    pub bus: String,
    /// Target chunk size: a chunk is finished (and written) once it holds this many bytes.
    pub chunk_bytes: u64,
    /// Overwrite an existing file.
    pub overwrite: bool,
}

impl WriterOptions {
    /// 1 MiB chunks, no overwriting.
    pub fn new(source: impl Into<String>, bus: impl Into<String>) -> WriterOptions {
        WriterOptions {
            source: source.into(),
            bus: bus.into(),
            chunk_bytes: 1 << 20,
            overwrite: false,
        }
    }
}

/// (producer id, producer's schema key, emitter, level).
type ChannelKey = (u64, u16, u16, u8);

/// Writes records into one MCAP file. Call [`flush`](Self::flush) regularly (the recorder
/// does every second) and [`finish`](Self::finish) at the end; a file that was never finished
/// is still readable up to its last flushed chunk.
pub struct RecordingWriter {
    path: PathBuf,
    mcap: mcap::Writer<BufWriter<File>>,
    /// (schema id, version, fingerprint) → MCAP schema id.
    schemas: HashMap<(String, u32, u64), u16>,
    channels: HashMap<ChannelKey, u16>,
    loss_channels: HashMap<u64, u16>,
    producers: HashMap<u64, ()>,
    last: Option<(ChannelKey, u16)>,
    messages: u64,
    approx_bytes: u64,
}

impl RecordingWriter {
    /// Creates `path` and writes the MCAP header and the `snapbus.recording` metadata.
    pub fn create(path: &Path, opts: &WriterOptions) -> Result<RecordingWriter, WriteError> {
        let mut open = std::fs::OpenOptions::new();
        // Bus data is private, like the sockets: 0600 (a file overwritten keeps its mode).
        std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
        open.write(true);
        if opts.overwrite {
            open.create(true).truncate(true);
        } else {
            open.create_new(true);
        }
        let file = open.open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                WriteError::Exists(path.to_owned())
            } else {
                WriteError::Create {
                    path: path.to_owned(),
                    source: e,
                }
            }
        })?;
        let mcap_err = |source| WriteError::Mcap {
            path: path.to_owned(),
            source,
        };
        // Chunks are built in memory and written whole: a killed writer leaves complete chunks
        // (and at most one partly written one at the end), never a chunk header that promises
        // data that is not there.
        let mut mcap = mcap::WriteOptions::new()
            .profile(PROFILE)
            .library(format!("snapbus {}", env!("CARGO_PKG_VERSION")))
            .compression(None)
            .use_chunks(true)
            .disable_seeking(true)
            .chunk_size(Some(opts.chunk_bytes))
            .create(BufWriter::with_capacity(256 << 10, file))
            .map_err(mcap_err)?;
        let mut meta = BTreeMap::new();
        meta.insert("format_version".into(), FORMAT_VERSION.to_string());
        meta.insert("source".into(), opts.source.clone());
        meta.insert("bus".into(), opts.bus.clone());
        meta.insert(
            "started_nanos".into(),
            snapbus_bus::lane::now_realtime_nanos().to_string(),
        );
        meta.insert(
            "snapbus_version".into(),
            env!("CARGO_PKG_VERSION").to_owned(),
        );
        mcap.write_metadata(&Metadata {
            name: RECORDING_METADATA.into(),
            metadata: meta,
        })
        .map_err(mcap_err)?;
        Ok(RecordingWriter {
            path: path.to_owned(),
            mcap,
            schemas: HashMap::new(),
            channels: HashMap::new(),
            loss_channels: HashMap::new(),
            producers: HashMap::new(),
            last: None,
            messages: 0,
            approx_bytes: 64,
        })
    }

    fn err(&self, source: mcap::McapError) -> WriteError {
        WriteError::Mcap {
            path: self.path.clone(),
            source,
        }
    }

    /// Writes the producer's metadata record, once per producer.
    fn producer(&mut self, producer_id: u64, info: &ProducerInfo) -> Result<(), WriteError> {
        if self.producers.contains_key(&producer_id) {
            return Ok(());
        }
        let mut meta = BTreeMap::new();
        meta.insert("id".into(), producer_id.to_string());
        meta.insert("pid".into(), info.pid.to_string());
        meta.insert("name".into(), info.name.clone());
        meta.insert(
            "cmdline".into(),
            serde_json::to_string(&info.cmdline).unwrap_or_default(),
        );
        if let Some(t) = &info.session_tag {
            meta.insert("session_tag".into(), t.clone());
        }
        if let Some(t) = &info.perf_tag {
            meta.insert("perf_tag".into(), t.clone());
        }
        meta.insert("lane_id".into(), format!("{:016x}", info.lane_id));
        meta.insert("started_nanos".into(), info.started_nanos.to_string());
        self.approx_bytes += 128 + meta.values().map(|v| v.len() as u64 + 16).sum::<u64>();
        self.mcap
            .write_metadata(&Metadata {
                name: PRODUCER_METADATA.into(),
                metadata: meta,
            })
            .map_err(|e| self.err(e))?;
        self.producers.insert(producer_id, ());
        Ok(())
    }

    fn schema(&mut self, schema: &SchemaDescriptor) -> Result<u16, WriteError> {
        let key = (
            schema.id().to_owned(),
            schema.version(),
            schema.fingerprint(),
        );
        if let Some(&id) = self.schemas.get(&key) {
            return Ok(id);
        }
        let data = schema.to_canonical_bytes();
        self.approx_bytes += 32 + data.len() as u64;
        let id = self
            .mcap
            .add_schema(schema.id(), SCHEMA_ENCODING, &data)
            .map_err(|e| self.err(e))?;
        self.schemas.insert(key, id);
        Ok(id)
    }

    fn channel(
        &mut self,
        key: ChannelKey,
        producer: &ProducerInfo,
        schema: &SchemaDescriptor,
        emitter: Option<&str>,
    ) -> Result<u16, WriteError> {
        if let Some(&id) = self.channels.get(&key) {
            return Ok(id);
        }
        let (producer_id, _, _, level) = key;
        self.producer(producer_id, producer)?;
        let schema_id = self.schema(schema)?;
        let mut meta = BTreeMap::new();
        meta.insert("producer_id".into(), producer_id.to_string());
        meta.insert("producer".into(), producer.name.clone());
        meta.insert("pid".into(), producer.pid.to_string());
        meta.insert("schema_version".into(), schema.version().to_string());
        meta.insert(
            "fingerprint".into(),
            format!("{:016x}", schema.fingerprint()),
        );
        meta.insert("level".into(), level.to_string());
        if let Some(e) = emitter {
            meta.insert("emitter".into(), e.to_owned());
        }
        self.approx_bytes += 160;
        let id = self
            .mcap
            .add_channel(schema_id, schema.id(), MESSAGE_ENCODING, &meta)
            .map_err(|e| self.err(e))?;
        self.channels.insert(key, id);
        Ok(id)
    }

    /// Writes one record of `producer`'s lane.
    pub fn write(
        &mut self,
        producer_id: u64,
        producer: &ProducerInfo,
        schema: &Arc<SchemaDescriptor>,
        emitter: Option<&str>,
        meta: &FrameMeta,
        payload: &[u8],
    ) -> Result<(), WriteError> {
        let key = (producer_id, meta.schema_key, meta.emitter, meta.level);
        let channel_id = match self.last {
            Some((k, id)) if k == key => id,
            _ => {
                let id = self.channel(key, producer, schema, emitter)?;
                self.last = Some((key, id));
                id
            }
        };
        self.write_message(channel_id, meta.seq, meta.t_nanos, payload)
    }

    fn write_message(
        &mut self,
        channel_id: u16,
        seq: u64,
        t_nanos: u64,
        payload: &[u8],
    ) -> Result<(), WriteError> {
        let header = MessageHeader {
            channel_id,
            sequence: seq as u32,
            log_time: t_nanos,
            publish_time: t_nanos,
        };
        self.mcap
            .write_to_known_channel(&header, payload)
            .map_err(|e| self.err(e))?;
        self.messages += 1;
        // Record header (9) + message header (22) + message index entry (16).
        self.approx_bytes += payload.len() as u64 + 47;
        Ok(())
    }

    /// Writes an explicit loss record: `lost` records of `producer` were overwritten unread.
    pub fn write_loss(
        &mut self,
        producer_id: u64,
        producer: &ProducerInfo,
        lost: u64,
        t_nanos: u64,
    ) -> Result<(), WriteError> {
        let channel_id = match self.loss_channels.get(&producer_id) {
            Some(&id) => id,
            None => {
                self.producer(producer_id, producer)?;
                let desc = LossRecord::descriptor();
                let schema_id = self.schema(desc)?;
                let mut meta = BTreeMap::new();
                meta.insert("producer_id".into(), producer_id.to_string());
                meta.insert("producer".into(), producer.name.clone());
                meta.insert("pid".into(), producer.pid.to_string());
                let id = self
                    .mcap
                    .add_channel(schema_id, desc.id(), MESSAGE_ENCODING, &meta)
                    .map_err(|e| self.err(e))?;
                self.loss_channels.insert(producer_id, id);
                id
            }
        };
        let rec = LossRecord {
            producer_id,
            producer_pid: producer.pid,
            lost,
        };
        // A struct of integers always encodes.
        let buf = rec.encode_to_vec().unwrap_or_default();
        self.write_message(channel_id, 0, t_nanos, &buf)
    }

    /// Finishes the current chunk and hands it to the operating system: after this, a crash of
    /// this process loses nothing written so far.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        self.mcap.flush().map_err(|e| self.err(e))
    }

    /// Writes the summary (indexes, statistics) and the footer, and closes the file.
    pub fn finish(mut self) -> Result<u64, WriteError> {
        self.mcap.finish().map_err(|e| self.err(e))?;
        Ok(self.messages)
    }

    /// Messages written (including loss records).
    pub fn messages(&self) -> u64 {
        self.messages
    }

    /// About how many bytes the file holds (for rotation).
    pub fn approx_bytes(&self) -> u64 {
        self.approx_bytes
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
