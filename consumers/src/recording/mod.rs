//! Recordings: snapbus records in [MCAP](https://mcap.dev) files, written by the recorder and
//! by `snapbus snapshot`, read by `replay`, `inspect` and `export`.
//!
//! # Layout
//!
//! A recording is an ordinary chunked, CRC-checked, indexed MCAP file (profile `snapbus`), so
//! any MCAP tool opens it. On top of MCAP it holds:
//!
//! - a **metadata record `snapbus.recording`** first: `format_version` ([`FORMAT_VERSION`]),
//!   `source` (`recorder` or `snapshot`), `bus`, `started_nanos`, `snapbus_version`;
//! - a **metadata record `snapbus.producer`** per producer, before its first message: `id`,
//!   `pid`, `name`, `cmdline` (JSON array), `session_tag`, `perf_tag`, `lane_id`,
//!   `started_nanos`;
//! - **one MCAP schema per snapbus schema** (id, version, descriptor): name = schema id,
//!   encoding [`SCHEMA_ENCODING`], data = the descriptor's canonical bytes;
//! - a **metadata record `snapbus.history`** per producer ([`HISTORY_METADATA`]): where its
//!   history in the file starts — `lane_id`, `id`, `start` (`oldest`, `latest` or `time`, with
//!   `start_nanos`; `continued` in the later parts of a rotated recording), `first_seq` and
//!   `first_nanos` of its first record in the file, `earlier`
//!   (records of the lane before it, any schema, not in the file) and, when the reader started
//!   at the oldest record, `overwritten` (of those, how many the ring had overwritten). Files
//!   of older snapbus versions have none: their history start is not known;
//! - **one channel per (schema, producer)**: topic = schema id, message encoding
//!   [`MESSAGE_ENCODING`] (our wire format), metadata `producer_id`, `lane_id`, `producer`, `pid`,
//!   `schema_version`, `fingerprint` and, where they differ between records of one producer,
//!   `emitter` and `level` (a channel is split by emitter and level so that replay restores
//!   both; usually a schema has one of each per producer);
//! - messages: `log_time` = `publish_time` = the record's CLOCK_REALTIME timestamp, `sequence`
//!   = the low 32 bits of the lane's record number, data = the payload bytes as the producer
//!   wrote them;
//! - **loss records**: messages of schema [`LossRecord`] (`snapbus.loss`) on topic
//!   `snapbus.loss` (a channel per producer, with its `lane_id`), one per gap, saying how many
//!   records of which producer were overwritten before the recorder could read them (`lost`)
//!   or lost to garbage in its ring (`damaged`). Nothing is lost silently.
//!
//! A producer is identified by its **lane id** (`lane_id`, 16 hex digits): the broker's
//! producer id (`id`, `producer_id`) is kept for display, but a restarted broker numbers
//! producers anew, so records are filed by lane (a schema key means something only within its
//! lane).
//!
//! # Crash safety
//!
//! The writer finishes a chunk and flushes it to the file at least every second (and when a
//! chunk reaches [`WriterOptions::chunk_bytes`]), so after a `kill -9` the file holds every
//! chunk completed before the kill. [`RecordingReader`] reads such a file up to its last
//! complete record and then reports a [`ReadError`] naming the byte offset where the reading
//! stopped: kind [`ReadErrorKind::Unfinished`] when the file ends between records (the usual
//! case after a kill: chunks are written whole), [`ReadErrorKind::Truncated`] when it ends
//! inside one (a file cut short, or a kill in the middle of writing a chunk).
//!
//! # Damaged files
//!
//! Every chunk carries a CRC. A chunk that fails it (or whose records do not parse) is
//! skipped, not the end of the read: the reader delivers an [`Item::Damaged`] with the byte
//! range and what the chunk held (its time range from its header, its records per channel from
//! the message indexes after it), then goes on with the next chunk. Records of channels that
//! only a damaged chunk declared are counted and reported the same way. Damage to a chunk's
//! length (or anything that breaks the framing) ends the read there with a [`ReadError`],
//! unless the reader can seek ([`RecordingReader::with_resync`], as the CLI's readers do):
//! then it goes on at the next intact chunk (a chunk opcode with a consistent header whose
//! CRC matches) and reports the bytes in between. Damage to a record outside the chunks
//! (metadata) is found by the data section's CRC, at its end. The writer puts schemas,
//! channels and messages only into chunks, and always sets a chunk's CRC: a top-level one of
//! those, or a chunk without a CRC, is damage (the reader lost the framing), never a record.
//!
//! # A full disk
//!
//! When a write fails (no space, over quota, read-only), the writer cuts the file back to its
//! last flushed chunk and ends it with a **metadata record `snapbus.cut`** ([`CUT_METADATA`]:
//! `error`, `unwritten` — records received but not written — and their time range) and a
//! footer without a summary; if even that does not fit, the file ends at the last flushed
//! chunk without a footer. [`WriteError::is_permanent`] tells a recorder not to be restarted
//! into the same failure.

pub(crate) mod mcap_out;
mod reader;
mod writer;

pub use mcap_out::Compression;
pub use reader::{
    ChannelInfo, ChunkBytes, Damage, Held, Item, Message, ReadError, ReadErrorKind, RecordingReader,
};
pub use writer::{
    CUT_METADATA, HISTORY_METADATA, History, HistoryStart, RecordingWriter, WriteError,
    WriterOptions,
};

use snapbus_schemas::Snapshot;

/// Version of the snapbus layout on top of MCAP; a newer file is refused with a clear error.
pub const FORMAT_VERSION: u32 = 1;
/// The MCAP header profile of snapbus recordings.
pub const PROFILE: &str = "snapbus";
/// Encoding of MCAP schema records: a snapbus descriptor's canonical bytes.
pub const SCHEMA_ENCODING: &str = "snapbus.descriptor";
/// Encoding of MCAP messages: the snapbus wire format of the channel's schema.
pub const MESSAGE_ENCODING: &str = "snapbus";
/// Name of the first metadata record.
pub const RECORDING_METADATA: &str = "snapbus.recording";
/// Name of the per-producer metadata records.
pub const PRODUCER_METADATA: &str = "snapbus.producer";

/// An explicit gap: `lost` records of producer `producer_id` were overwritten in its ring
/// before the recorder (or snapshot) read them.
#[derive(Snapshot, Debug, Clone, Copy, PartialEq, Eq)]
#[snapshot(id = "snapbus.loss", version = 2)]
pub struct LossRecord {
    /// The broker's id of the producer when the loss was seen (for display: the loss
    /// channel's `lane_id` identifies the producer).
    pub producer_id: u64,
    /// The producer's pid.
    pub producer_pid: u32,
    /// How many records were lost (overwritten before they could be read, or left unfinished
    /// by a dead producer).
    pub lost: u64,
    /// How many records were lost to garbage in the producer's ring (not in `lost`; 0 in
    /// files of version 1 of this record).
    #[snapshot(since = 2)]
    pub damaged: u64,
}
