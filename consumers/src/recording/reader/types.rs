//! The reader's public types: what a recording holds ([`Item`]), its channels, and what is
//! wrong with a file ([`ReadError`], [`Damage`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use snapbus_bus::Level;
use snapbus_schemas::SchemaDescriptor;
use thiserror::Error;

use crate::recording::{FORMAT_VERSION, LossRecord};

/// The chunks read so far: how many, their records' bytes as stored and uncompressed, and
/// their codecs (`none` for chunks stored as they are). Damaged chunks are not counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkBytes {
    /// Chunks read.
    pub chunks: u64,
    /// Their records' bytes in the file (compressed).
    pub stored: u64,
    /// Their records' bytes uncompressed.
    pub uncompressed: u64,
    /// Their codecs (MCAP names; `none` for uncompressed).
    pub codecs: std::collections::BTreeSet<String>,
}

impl ChunkBytes {
    /// Stored / uncompressed bytes (1 when nothing was read).
    pub fn ratio(&self) -> f64 {
        if self.uncompressed == 0 {
            1.0
        } else {
            self.stored as f64 / self.uncompressed as f64
        }
    }
}

/// What is wrong with a file, and where.
#[derive(Debug, Error)]
#[error("{kind} (at byte offset {offset})")]
pub struct ReadError {
    /// Byte offset in the file where the damaged or unreadable part starts.
    pub offset: u64,
    /// What is wrong.
    pub kind: ReadErrorKind,
}

/// See [`ReadError`].
#[derive(Debug, Error)]
pub enum ReadErrorKind {
    /// Reading the file failed.
    #[error("reading the file: {0}")]
    Io(std::io::Error),
    /// The file does not start with the MCAP magic.
    #[error("not an MCAP file (the first bytes are {0:02x?}, not the MCAP magic)")]
    NotMcap(Vec<u8>),
    /// The file is empty.
    #[error("the file is empty")]
    Empty,
    /// An MCAP major version this reader does not know.
    #[error("MCAP major version '{0}' is not supported (this snapbus reads MCAP version 0)")]
    McapVersion(char),
    /// The file ends inside a record: the writer was stopped before finishing it (a killed
    /// recorder), or the file was cut. Everything before `offset` was read.
    #[error(
        "the file is cut: it ends inside a record ({have} of its {need} bytes are there); \
         everything before this offset was read — was the writer killed?"
    )]
    Truncated {
        /// Bytes of the record that are in the file.
        have: u64,
        /// Bytes the record declares.
        need: u64,
    },
    /// The file ends between records but without its summary and footer: the writer was
    /// stopped before finishing it (a killed recorder). Everything before `offset` was read.
    #[error(
        "the file ends without its footer: the writer did not finish it (was it killed?); \
         every record before this offset was read"
    )]
    Unfinished,
    /// A record fails its CRC or does not parse.
    #[error("damaged record: {0}")]
    Corrupt(String),
    /// Written by a newer snapbus.
    #[error(
        "written by a newer snapbus: recording format version {found}, this snapbus reads \
         version {FORMAT_VERSION} or older — upgrade snapbus"
    )]
    FutureVersion {
        /// The file's format version.
        found: u32,
    },
    /// An MCAP file that is not a snapbus recording, or a schema or channel this reader cannot
    /// use.
    #[error("{0}")]
    NotSnapbus(String),
}

/// A channel: one schema's records of one producer (and emitter and level).
#[derive(Debug, Clone)]
pub struct ChannelInfo {
    /// The MCAP channel id.
    pub id: u16,
    /// The schema (`topic` is its id).
    pub schema: Arc<SchemaDescriptor>,
    /// The producer's id on the bus it was recorded from (the broker's, when the channel was
    /// first written: for display).
    pub producer_id: u64,
    /// The producer's lane id: its identity, stable across broker restarts (`None` in files
    /// of older snapbus versions).
    pub lane_id: Option<u64>,
    /// The producer's name.
    pub producer: String,
    /// The producer's pid.
    pub pid: u32,
    /// The emitter name, if recorded.
    pub emitter: Option<String>,
    /// The records' level.
    pub level: Level,
    /// Whether this channel carries [`LossRecord`]s.
    pub is_loss: bool,
    /// The channel's MCAP metadata, as written.
    pub metadata: BTreeMap<String, String>,
}

/// A recorded record.
#[derive(Debug, Clone)]
pub struct Message {
    /// Its channel (schema, producer).
    pub channel: Arc<ChannelInfo>,
    /// CLOCK_REALTIME when it was emitted, nanoseconds.
    pub t_nanos: u64,
    /// The low 32 bits of its lane sequence number.
    pub sequence: u32,
    /// The payload, in the wire format of `channel.schema`.
    pub data: Vec<u8>,
    /// Byte offset of the chunk (or record) it was read from.
    pub offset: u64,
}

/// What a recording holds, in file order.
#[derive(Debug, Clone)]
pub enum Item {
    /// A record.
    Message(Message),
    /// Records of a producer were lost before they were recorded.
    Loss {
        /// The loss channel.
        channel: Arc<ChannelInfo>,
        /// When the loss was seen.
        t_nanos: u64,
        /// The gap.
        record: LossRecord,
    },
    /// A metadata record (`snapbus.recording`, `snapbus.producer`, or another tool's).
    Metadata {
        /// Its name.
        name: String,
        /// Its fields.
        fields: BTreeMap<String, String>,
    },
    /// A damaged part of the file, skipped: none of its records are delivered, reading goes on
    /// after it.
    Damaged(Damage),
}

/// A damaged part of a recording that the reader skipped (see [`Item::Damaged`]).
#[derive(Debug, Clone)]
pub struct Damage {
    /// Byte offset where it starts.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
    /// What is wrong with it.
    pub error: String,
    /// What it held, as far as the file says (a chunk's header and its message indexes, which
    /// may be damaged too).
    pub held: Option<Held>,
}

/// What a damaged chunk held, as its header and message indexes say.
#[derive(Debug, Clone, Default)]
pub struct Held {
    /// Time of its first and last record (CLOCK_REALTIME nanoseconds), from its header.
    pub first_nanos: u64,
    /// See `first_nanos`.
    pub last_nanos: u64,
    /// How many records its message indexes list (`None`: no index followed it).
    pub records: Option<u64>,
    /// Records per channel, from its message indexes; channels declared before it carry
    /// their [`ChannelInfo`].
    pub channels: Vec<(u16, Option<Arc<ChannelInfo>>, u64)>,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "damaged at byte offset {}: bytes {}..{} ({} bytes) were skipped: {}",
            self.offset,
            self.offset,
            self.offset + self.len,
            self.len,
            self.error
        )?;
        if let Some(h) = &self.held {
            match h.records {
                Some(n) => write!(f, "; they held {n} records")?,
                None => write!(f, "; they held records")?,
            }
            write!(f, " from t={} to t={} ns", h.first_nanos, h.last_nanos)?;
            let names: Vec<String> = h
                .channels
                .iter()
                .map(|(id, c, n)| match c {
                    Some(c) => format!("{n} of {} from {}", c.schema.id(), c.producer),
                    None => format!("{n} of channel {id}"),
                })
                .collect();
            if !names.is_empty() {
                write!(f, " ({})", names.join(", "))?;
            }
        }
        Ok(())
    }
}
