//! Writing recordings.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mcap::records::{MessageHeader, Metadata};
use snapbus_schemas::{SchemaDescriptor, Snapshot, Wire};
use thiserror::Error;

use super::mcap_out::{Compression, McapOut};
use crate::output::OutputError;
use crate::runtime::{Producer, RecordHeader};

use super::{
    FORMAT_VERSION, LossRecord, MESSAGE_ENCODING, PRODUCER_METADATA, RECORDING_METADATA,
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
    /// The path is not ours to write (another user's file or symlink, a directory).
    #[error(transparent)]
    Refused(OutputError),
    /// Writing to the file failed (disk full, quota exceeded, read-only file system, …).
    #[error("writing {path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why (the operating system's error; in the message, not repeated as its source).
        error: std::io::Error,
    },
    /// The MCAP layer refused a record.
    #[error("writing {path}: {source}")]
    Mcap {
        /// The file.
        path: PathBuf,
        /// Why.
        source: mcap::McapError,
    },
    /// An earlier write failed; the file ends with what was written before that failure.
    #[error("writing {path}: an earlier write failed ({first})")]
    Failed {
        /// The file.
        path: PathBuf,
        /// The first failure, as reported then.
        first: String,
        /// Whether that failure was permanent (see [`WriteError::is_permanent`]).
        permanent: bool,
    },
}

impl WriteError {
    /// Whether retrying into the same place cannot help: the file system is full, over quota,
    /// read-only, or refuses the file (permission, size limit, missing directory). A
    /// supervised recorder that fails so exits with
    /// [`EXIT_NO_RESTART`](snapbus_bus::runtime::EXIT_NO_RESTART) instead of being restarted
    /// into the same failure.
    pub fn is_permanent(&self) -> bool {
        match self {
            WriteError::Create { source, .. } | WriteError::Io { error: source, .. } => {
                is_permanent_io(source)
            }
            WriteError::Exists(_) | WriteError::Refused(_) => true,
            WriteError::Mcap { .. } => false,
            WriteError::Failed { permanent, .. } => *permanent,
        }
    }
}

/// See [`WriteError::is_permanent`].
fn is_permanent_io(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::StorageFull
            | K::QuotaExceeded
            | K::ReadOnlyFilesystem
            | K::PermissionDenied
            | K::FileTooLarge
            | K::NotFound
            | K::NotADirectory
            | K::IsADirectory
    )
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
    /// How chunks are compressed (default LZ4).
    pub compression: Compression,
}

impl WriterOptions {
    /// 1 MiB chunks, LZ4, no overwriting.
    pub fn new(source: impl Into<String>, bus: impl Into<String>) -> WriterOptions {
        WriterOptions {
            source: source.into(),
            bus: bus.into(),
            chunk_bytes: 1 << 20,
            overwrite: false,
            compression: Compression::default(),
        }
    }
}

/// (lane id, producer's schema key, emitter, level). The lane id, not the broker's producer
/// id: a restarted broker numbers producers anew, and a schema key means something only
/// within its lane.
type ChannelKey = (u64, u16, u16, u8);

/// Where a producer's history in a recording starts (see [`RecordingWriter::write_history`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct History {
    /// How the reader started in the lane: `oldest`, `latest`, `time` (see `start_nanos`), or
    /// `continued` (a later part of a rotated recording).
    pub start: HistoryStart,
    /// The lane sequence number of the first record in the file (`None`: none was recorded).
    pub first_seq: Option<u64>,
    /// Its time, CLOCK_REALTIME nanoseconds.
    pub first_nanos: Option<u64>,
    /// Records of the lane overwritten before the first one read, when known exactly (a reader
    /// that started at the oldest record counts them).
    pub overwritten: Option<u64>,
}

/// See [`History`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryStart {
    /// At the oldest record still in the ring.
    Oldest,
    /// At the newest record: earlier records were never meant to be recorded.
    Latest,
    /// At the first record at or after this time (a `--last` window or a restarted recorder).
    Time(u64),
    /// Where the previous part of a rotated recording ended: the earlier records are in the
    /// earlier parts.
    Continued,
}

/// Writes records into one MCAP file. Call [`flush`](Self::flush) regularly (the recorder
/// does every second) and [`finish`](Self::finish) at the end; a file that was never finished
/// is still readable up to its last flushed chunk.
///
/// When a write fails (a full disk), every later call returns [`WriteError::Failed`], and
/// [`finish`](Self::finish) cuts the file back to the end of its last flushed chunk and ends it
/// with a `snapbus.cut` metadata record (the error, and how many records were not written) and
/// a footer, if the file system takes those few bytes; if not, the file ends at that chunk,
/// without a footer. Either way it stays readable and says it is incomplete.
pub struct RecordingWriter {
    path: PathBuf,
    mcap: Option<McapOut<BufWriter<File>>>,
    /// The same file, for its length and for cutting it after a failed write.
    file: File,
    /// (schema id, version, fingerprint) → MCAP schema id.
    schemas: HashMap<(String, u32, u64), u16>,
    channels: HashMap<ChannelKey, u16>,
    /// Lane id → loss channel.
    loss_channels: HashMap<u64, u16>,
    /// Lanes whose `snapbus.producer` metadata is written.
    producers: HashMap<u64, ()>,
    last: Option<(ChannelKey, u16)>,
    messages: u64,
    approx_bytes: u64,
    /// [`WriterOptions::chunk_bytes`].
    chunk_bytes: u64,
    /// Bytes of the records in the chunk being built.
    chunk_fill: u64,
    /// File length and messages after the last successful flush.
    good_len: u64,
    good_messages: u64,
    /// Time range of the messages written since the last successful flush.
    unflushed_nanos: Option<(u64, u64)>,
    /// The first failure: its text and whether it is permanent.
    failed: Option<(String, bool)>,
}

/// Name of the metadata record that ends a recording whose writer failed.
pub const CUT_METADATA: &str = "snapbus.cut";
/// Name of the per-producer history metadata records.
pub const HISTORY_METADATA: &str = "snapbus.history";

impl RecordingWriter {
    /// Creates `path` and writes the MCAP header and the `snapbus.recording` metadata.
    pub fn create(path: &Path, opts: &WriterOptions) -> Result<RecordingWriter, WriteError> {
        // Private (0600), never through a symlink nor into another user's file; `overwrite`
        // replaces a file of ours by rename (see `crate::output`).
        let file = crate::output::create(path, opts.overwrite).map_err(|e| match e {
            OutputError::Exists(p) => WriteError::Exists(p),
            OutputError::Io { path, source } => WriteError::Create { path, source },
            e => WriteError::Refused(e),
        })?;
        let twin = file.try_clone().map_err(|source| WriteError::Create {
            path: path.to_owned(),
            source,
        })?;
        // Chunks are built in memory and written whole: a killed writer leaves complete chunks
        // (and at most one partly written one at the end), never a chunk header that promises
        // data that is not there.
        let mcap = McapOut::new(
            BufWriter::with_capacity(256 << 10, file),
            opts.compression,
            opts.chunk_bytes,
            &format!("snapbus {}", env!("CARGO_PKG_VERSION")),
        )
        .map_err(|e| mcap_error(path, e))?;
        let mut w = RecordingWriter {
            path: path.to_owned(),
            mcap: Some(mcap),
            file: twin,
            schemas: HashMap::new(),
            channels: HashMap::new(),
            loss_channels: HashMap::new(),
            producers: HashMap::new(),
            last: None,
            messages: 0,
            approx_bytes: 64,
            chunk_bytes: opts.chunk_bytes.max(1),
            chunk_fill: 0,
            good_len: 0,
            good_messages: 0,
            unflushed_nanos: None,
            failed: None,
        };
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
        // The header is in the file: a write that fails later cuts the file back to here at
        // most. A file that cannot even hold its header (a full disk) is removed: no empty
        // files left behind (e.g. by a recorder restarted into a full disk).
        if let Err(e) = w
            .metadata(RECORDING_METADATA, meta)
            .and_then(|()| w.flush())
        {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        Ok(w)
    }

    /// Runs `f` on the MCAP writer; the first failure is remembered, later calls fail at once.
    fn with_mcap<T>(
        &mut self,
        f: impl FnOnce(&mut McapOut<BufWriter<File>>) -> mcap::McapResult<T>,
    ) -> Result<T, WriteError> {
        if let Some((first, permanent)) = &self.failed {
            return Err(WriteError::Failed {
                path: self.path.clone(),
                first: first.clone(),
                permanent: *permanent,
            });
        }
        let Some(mcap) = self.mcap.as_mut() else {
            return Err(WriteError::Failed {
                path: self.path.clone(),
                first: "the file was already finished".into(),
                permanent: false,
            });
        };
        f(mcap).map_err(|e| {
            let e = mcap_error(&self.path, e);
            let text = match &e {
                WriteError::Io { error, .. } => error.to_string(),
                other => other.to_string(),
            };
            self.failed = Some((text, e.is_permanent()));
            e
        })
    }

    fn metadata(&mut self, name: &str, meta: BTreeMap<String, String>) -> Result<(), WriteError> {
        self.approx_bytes += 32
            + meta
                .iter()
                .map(|(k, v)| k.len() + v.len() + 8)
                .sum::<usize>() as u64;
        // A metadata record ends the chunk being built.
        self.chunk_fill = 0;
        self.with_mcap(|m| {
            m.write_metadata(&Metadata {
                name: name.into(),
                metadata: meta,
            })
        })
    }

    /// Writes the producer's metadata record, once per lane.
    fn producer(&mut self, producer_id: u64, info: Producer<'_>) -> Result<(), WriteError> {
        if self.producers.contains_key(&info.lane_id) {
            return Ok(());
        }
        let mut meta = BTreeMap::new();
        meta.insert("id".into(), producer_id.to_string());
        meta.insert("pid".into(), info.pid.to_string());
        meta.insert("name".into(), info.name.to_owned());
        meta.insert(
            "cmdline".into(),
            serde_json::to_string(&info.cmdline).unwrap_or_default(),
        );
        if let Some(t) = info.session_tag {
            meta.insert("session_tag".into(), t.to_owned());
        }
        if let Some(t) = info.perf_tag {
            meta.insert("perf_tag".into(), t.to_owned());
        }
        meta.insert("lane_id".into(), format!("{:016x}", info.lane_id));
        meta.insert("started_nanos".into(), info.started_nanos.to_string());
        self.metadata(PRODUCER_METADATA, meta)?;
        self.producers.insert(info.lane_id, ());
        Ok(())
    }

    /// Writes where `producer`'s history in this file starts (a `snapbus.history` metadata
    /// record: `lane_id`, `id`, `start`, `start_nanos`, `first_seq`, `first_nanos`, `earlier`
    /// — the lane's records before the first one in the file, all schemas — and, when known,
    /// `overwritten`). Once per producer, before or after its records.
    pub fn write_history(
        &mut self,
        producer_id: u64,
        producer: Producer<'_>,
        history: &History,
    ) -> Result<(), WriteError> {
        self.producer(producer_id, producer)?;
        let mut meta = BTreeMap::new();
        meta.insert("lane_id".into(), format!("{:016x}", producer.lane_id));
        meta.insert("id".into(), producer_id.to_string());
        let (start, start_nanos) = match history.start {
            HistoryStart::Oldest => ("oldest", None),
            HistoryStart::Latest => ("latest", None),
            HistoryStart::Time(t) => ("time", Some(t)),
            HistoryStart::Continued => ("continued", None),
        };
        meta.insert("start".into(), start.into());
        if let Some(t) = start_nanos {
            meta.insert("start_nanos".into(), t.to_string());
        }
        if let Some(seq) = history.first_seq {
            meta.insert("first_seq".into(), seq.to_string());
            meta.insert("earlier".into(), seq.to_string());
        }
        if let Some(t) = history.first_nanos {
            meta.insert("first_nanos".into(), t.to_string());
        }
        if let Some(n) = history.overwritten {
            meta.insert("overwritten".into(), n.to_string());
        }
        self.metadata(HISTORY_METADATA, meta)
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
        self.chunk_fill +=
            9 + 2 + 12 + (schema.id().len() + SCHEMA_ENCODING.len() + data.len()) as u64;
        let id = self.with_mcap(|m| m.add_schema(schema.id(), SCHEMA_ENCODING, &data))?;
        self.schemas.insert(key, id);
        Ok(id)
    }

    fn channel(
        &mut self,
        key: ChannelKey,
        producer_id: u64,
        producer: Producer<'_>,
        schema: &SchemaDescriptor,
        emitter: Option<&str>,
    ) -> Result<u16, WriteError> {
        if let Some(&id) = self.channels.get(&key) {
            return Ok(id);
        }
        let (_, _, _, level) = key;
        self.producer(producer_id, producer)?;
        let schema_id = self.schema(schema)?;
        let mut meta = BTreeMap::new();
        meta.insert("producer_id".into(), producer_id.to_string());
        meta.insert("lane_id".into(), format!("{:016x}", producer.lane_id));
        meta.insert("producer".into(), producer.name.to_owned());
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
        self.chunk_fill += channel_record_bytes(schema.id(), &meta);
        let id =
            self.with_mcap(|m| m.add_channel(schema_id, schema.id(), MESSAGE_ENCODING, &meta))?;
        self.channels.insert(key, id);
        Ok(id)
    }

    /// Writes one record of `producer`'s lane. `producer_id` is the broker's id of the
    /// producer (stored for display); records are filed by the producer's lane id, which a
    /// restarted broker does not change.
    pub fn write(
        &mut self,
        producer_id: u64,
        producer: Producer<'_>,
        schema: &Arc<SchemaDescriptor>,
        emitter: Option<&str>,
        header: &RecordHeader,
        payload: &[u8],
    ) -> Result<(), WriteError> {
        let key = (
            producer.lane_id,
            header.schema_key,
            header.emitter_id,
            header.level.as_u8(),
        );
        let channel_id = match self.last {
            Some((k, id)) if k == key => id,
            _ => {
                let id = self.channel(key, producer_id, producer, schema, emitter)?;
                self.last = Some((key, id));
                id
            }
        };
        self.write_message(channel_id, header.seq, header.t_nanos, payload)
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
        // Counted before the write: a record the failed write lost is one not written.
        self.messages += 1;
        self.unflushed_nanos = Some(match self.unflushed_nanos {
            Some((a, b)) => (a.min(t_nanos), b.max(t_nanos)),
            None => (t_nanos, t_nanos),
        });
        if let Err(e) = self.with_mcap(|m| m.write_to_known_channel(&header, payload)) {
            if matches!(e, WriteError::Failed { .. }) {
                // Not attempted: an earlier write had failed.
                self.messages -= 1;
            }
            return Err(e);
        }
        // Record header (9) + message header (22) + message index entry (16).
        self.approx_bytes += payload.len() as u64 + 47;
        self.chunk_fill += 9 + 22 + payload.len() as u64;
        if self.chunk_fill > self.chunk_bytes {
            // A full chunk (where the MCAP writer would end it before the next message): hand
            // it to the file now, so that a write that fails later (a full disk) cuts the file
            // back to here, not to where the caller last flushed (a snapshot flushes only at
            // its end). Not waiting for its compression (a second thread's): the file is cut
            // back to the chunk before it at most.
            let (unwritten, range) = self.with_mcap(|m| m.hand_over())?;
            self.chunk_fill = 0;
            if let Ok(m) = self.file.metadata() {
                self.good_len = m.len();
                self.good_messages = self.messages - unwritten;
                self.unflushed_nanos = range;
            }
        }
        Ok(())
    }

    /// Writes an explicit loss record: `lost` records of `producer` were overwritten unread.
    pub fn write_loss(
        &mut self,
        producer_id: u64,
        producer: Producer<'_>,
        (lost, damaged): (u64, u64),
        t_nanos: u64,
    ) -> Result<(), WriteError> {
        let channel_id = match self.loss_channels.get(&producer.lane_id) {
            Some(&id) => id,
            None => {
                self.producer(producer_id, producer)?;
                let desc = LossRecord::descriptor();
                let schema_id = self.schema(desc)?;
                let mut meta = BTreeMap::new();
                meta.insert("producer_id".into(), producer_id.to_string());
                meta.insert("lane_id".into(), format!("{:016x}", producer.lane_id));
                meta.insert("producer".into(), producer.name.to_owned());
                meta.insert("pid".into(), producer.pid.to_string());
                self.chunk_fill += channel_record_bytes(desc.id(), &meta);
                let id = self
                    .with_mcap(|m| m.add_channel(schema_id, desc.id(), MESSAGE_ENCODING, &meta))?;
                self.loss_channels.insert(producer.lane_id, id);
                id
            }
        };
        let rec = LossRecord {
            producer_id,
            producer_pid: producer.pid,
            lost,
            damaged,
        };
        // A struct of integers always encodes.
        let buf = rec.encode_to_vec().unwrap_or_default();
        self.write_message(channel_id, 0, t_nanos, &buf)
    }

    /// Finishes the current chunk and hands it to the operating system: after this, a crash of
    /// this process loses nothing written so far.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        self.with_mcap(|m| m.flush())?;
        self.chunk_fill = 0;
        if let Ok(m) = self.file.metadata() {
            self.good_len = m.len();
            self.good_messages = self.messages;
            self.unflushed_nanos = None;
        }
        Ok(())
    }

    /// Writes the summary (indexes, statistics) and the footer, and closes the file. Returns
    /// the messages written. After a failed write, ends the file as the type's documentation
    /// says and returns the first failure.
    pub fn finish(mut self) -> Result<u64, WriteError> {
        let finished = self.flush().and_then(|()| self.with_mcap(|m| m.finish()));
        match finished {
            Ok(()) => {
                let Some(mcap) = self.mcap.take() else {
                    return Ok(self.messages);
                };
                // Finished: the summary and footer may still sit in the buffered writer.
                let mut w = mcap.into_inner();
                match w.flush() {
                    Ok(()) => Ok(self.messages),
                    Err(error) => {
                        self.failed = Some((error.to_string(), is_permanent_io(&error)));
                        let e = WriteError::Io {
                            path: self.path.clone(),
                            error,
                        };
                        drop(w.into_parts());
                        self.cut_file();
                        Err(e)
                    }
                }
            }
            Err(e) => {
                if let Some(mcap) = self.mcap.take() {
                    // Whatever the buffered writer still holds is dropped, not written.
                    drop(mcap.into_inner().into_parts());
                }
                self.cut_file();
                Err(e)
            }
        }
    }

    /// After a failed write: cuts the file back to its last flushed chunk, and appends a
    /// `snapbus.cut` record, a data end and a footer (if there is room).
    fn cut_file(&mut self) {
        if self.file.set_len(self.good_len).is_err() {
            return;
        }
        let unwritten = self.messages.saturating_sub(self.good_messages);
        let mut meta = BTreeMap::new();
        let (error, _) = self.failed.clone().unwrap_or_default();
        meta.insert("error".to_owned(), error);
        meta.insert("unwritten".to_owned(), unwritten.to_string());
        if let Some((a, b)) = self.unflushed_nanos {
            meta.insert("unwritten_first_nanos".to_owned(), a.to_string());
            meta.insert("unwritten_last_nanos".to_owned(), b.to_string());
        }
        meta.insert(
            "cut_nanos".to_owned(),
            snapbus_bus::lane::now_realtime_nanos().to_string(),
        );
        let tail = cut_tail(&meta);
        let mut f = &self.file;
        let written = f
            .seek(SeekFrom::Start(self.good_len))
            .and_then(|_| f.write_all(&tail))
            .and_then(|()| f.sync_data());
        if written.is_err() {
            // No room even for the tail: the file ends at its last complete chunk.
            let _ = self.file.set_len(self.good_len);
        }
    }

    /// Messages written (including loss records).
    pub fn messages(&self) -> u64 {
        self.messages
    }

    /// About how many bytes the file holds (for rotation and `ls`).
    pub fn approx_bytes(&self) -> u64 {
        // Bytes written (compressed chunks at their size), plus the chunks not yet written at
        // their uncompressed size.
        match &self.mcap {
            Some(m) => m.approx_len(),
            None => self.approx_bytes,
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The bytes of a channel record of `topic` with `meta` (for [`RecordingWriter`]'s
/// `chunk_fill`): record header, ids, topic, encoding, metadata map.
fn channel_record_bytes(topic: &str, meta: &BTreeMap<String, String>) -> u64 {
    let map: usize = meta.iter().map(|(k, v)| 8 + k.len() + v.len()).sum();
    (9 + 2 + 2 + 4 + topic.len() + 4 + MESSAGE_ENCODING.len() + 4 + map) as u64
}

fn mcap_error(path: &Path, e: mcap::McapError) -> WriteError {
    match e {
        mcap::McapError::Io(error) => WriteError::Io {
            path: path.to_owned(),
            error,
        },
        source => WriteError::Mcap {
            path: path.to_owned(),
            source,
        },
    }
}

/// A `snapbus.cut` metadata record, a data end (no CRC), a footer (no summary) and the end
/// magic, as MCAP bytes.
fn cut_tail(meta: &BTreeMap<String, String>) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    let mut map = Vec::new();
    for (k, v) in meta {
        string(&mut map, k);
        string(&mut map, v);
    }
    let mut body = Vec::new();
    string(&mut body, CUT_METADATA);
    body.extend_from_slice(&(map.len() as u32).to_le_bytes());
    body.extend_from_slice(&map);
    let mut out = Vec::new();
    out.push(mcap::records::op::METADATA);
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    out.push(mcap::records::op::DATA_END);
    out.extend_from_slice(&4u64.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.push(mcap::records::op::FOOTER);
    out.extend_from_slice(&20u64.to_le_bytes());
    out.extend_from_slice(&[0u8; 20]);
    out.extend_from_slice(mcap::MAGIC);
    out
}
