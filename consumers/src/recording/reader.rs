//! Reading recordings: a streaming reader (constant memory, any file size) that checks every
//! chunk's CRC and reports damage with the byte offset where it starts.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Read;
use std::sync::Arc;

use mcap::records::Record;
use mcap::sans_io::{LinearReadEvent, LinearReader, LinearReaderOptions};
use snapbus_bus::Level;
use snapbus_schemas::{SchemaDescriptor, Snapshot, decode_versioned};
use thiserror::Error;

use super::{FORMAT_VERSION, LossRecord, MESSAGE_ENCODING, RECORDING_METADATA, SCHEMA_ENCODING};

/// The MCAP magic (`\x89MCAP0\r\n`); byte 5 is the major version.
const MAGIC: &[u8; 8] = b"\x89MCAP0\r\n";
/// Largest record accepted (a chunk holds at most a chunk's worth plus one large payload).
const RECORD_LIMIT: usize = 1 << 30;
/// Largest single read.
const READ_PIECE: usize = 1 << 20;

/// Whether the reader uses records of this opcode. The others (attachments, indexes,
/// statistics, data end, summary offsets, unknown opcodes) are skipped without being parsed:
/// nothing needs them, and `mcap::parse_record` panics on some damaged ones (an attachment
/// shorter than its header: a slice index out of range).
fn used(opcode: u8) -> bool {
    use mcap::records::op;
    matches!(
        opcode,
        op::HEADER | op::FOOTER | op::SCHEMA | op::CHANNEL | op::MESSAGE | op::CHUNK | op::METADATA
    )
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

/// Reads a recording from start to end. An iterator of [`Item`]s; after the first error it
/// ends. A damaged chunk whose length is intact (a failed CRC, records that do not parse) does
/// not end it: it is skipped and reported as an [`Item::Damaged`] (its byte range and what its
/// header and message indexes say it held), and reading goes on with the next record.
/// [`RecordingReader::complete`] says whether the file ended with its footer.
pub struct RecordingReader<R: Read> {
    src: R,
    lin: LinearReader,
    started: bool,
    /// Offset of the next top-level record.
    offset: u64,
    /// Bytes fed to the reader so far.
    fed: u64,
    pending: VecDeque<Item>,
    schemas: HashMap<u16, Result<Arc<SchemaDescriptor>, String>>,
    channels: HashMap<u16, Result<Arc<ChannelInfo>, String>>,
    done: bool,
    complete: bool,
    format_checked: bool,
    /// Size of the record being loaded, as far as the reader has asked for it.
    wanted: u64,
    /// The channel of the last message (a channel record clears it: ids can be redeclared).
    last_channel: Option<Arc<ChannelInfo>>,
    /// The data section's CRC so far (until its data end record).
    crc: Option<crc32fast::Hasher>,
    /// A damaged chunk being described (its message indexes follow it).
    damage: Option<Damage>,
    /// Damage was reported.
    damaged: bool,
    /// Messages of channels that no record declared, after damage (declared in a damaged
    /// chunk): (first offset, count).
    orphans: Option<(u64, u64)>,
    /// The error to return once the pending items are delivered.
    deferred: Option<ReadError>,
    /// Seeks the source (set by [`RecordingReader::with_resync`]).
    seek: Option<SeekFn<R>>,
    /// The data end record was read: what follows is the summary.
    data_ended: bool,
}

/// Seeks a source; returns the new position.
type SeekFn<R> = fn(&mut R, std::io::SeekFrom) -> std::io::Result<u64>;

fn linear_options() -> LinearReaderOptions {
    LinearReaderOptions::default()
        .with_emit_chunks(true)
        // Checked here (`crc`): a damaged chunk, skipped, must not end the read at the data
        // end record.
        .with_validate_data_section_crc(false)
        .with_validate_summary_section_crc(true)
        .with_record_length_limit(RECORD_LIMIT)
}

/// Bytes of a chunk record before its records: opcode, length, start and end time,
/// uncompressed size, CRC, compression (empty), records length.
const CHUNK_HEAD: usize = 1 + 8 + 8 + 8 + 8 + 4 + 4 + 8;

/// Whether a record of this opcode may appear in a snapbus recording's data section, outside
/// the chunks: the writer puts schemas, channels and messages into chunks, so a top-level one
/// (like an unknown opcode) means the reader lost the framing — damage.
fn in_data_section(opcode: u8) -> bool {
    use mcap::records::op;
    matches!(
        opcode,
        op::HEADER | op::CHUNK | op::MESSAGE_INDEX | op::METADATA | op::DATA_END
    )
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(a)
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Reads until `buf` is full or the source ends; returns the bytes read.
fn read_full<R: Read>(src: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match src.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: Read + std::io::Seek> RecordingReader<R> {
    /// Also skip damage that breaks a record's framing (a chunk's length field, an unknown
    /// record): the reader looks for the next intact chunk after it (a chunk opcode with a
    /// consistent header whose CRC matches), reports the bytes in between as an
    /// [`Item::Damaged`], and goes on from there. Needs a source that seeks (a file).
    pub fn with_resync(mut self) -> RecordingReader<R> {
        self.seek = Some(|src, to| src.seek(to));
        self
    }
}

impl<R: Read> RecordingReader<R> {
    /// A reader over `src` (a `File`, ideally buffered by the caller or not: reads are large).
    pub fn new(src: R) -> RecordingReader<R> {
        RecordingReader {
            src,
            lin: LinearReader::new_with_options(linear_options()),
            started: false,
            offset: 0,
            fed: 0,
            pending: VecDeque::new(),
            schemas: HashMap::new(),
            channels: HashMap::new(),
            done: false,
            complete: false,
            format_checked: false,
            wanted: 0,
            last_channel: None,
            crc: Some(crc32fast::Hasher::new()),
            damage: None,
            damaged: false,
            orphans: None,
            deferred: None,
            seek: None,
            data_ended: false,
        }
    }

    /// Whether the whole file was read, through its footer and end magic.
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// Byte offset of the next top-level record (after an error: where the damage starts).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn fail(&mut self, offset: u64, kind: ReadErrorKind) -> Option<Result<Item, ReadError>> {
        self.done = true;
        // A footer followed by damage (a bad end magic, trailing bytes) is not a complete file.
        self.complete = false;
        self.deferred = Some(ReadError { offset, kind });
        self.end_damage();
        self.next()
    }

    /// Queues the damage being described, and the messages of undeclared channels.
    fn end_damage(&mut self) {
        if let Some(d) = self.damage.take() {
            self.pending.push_back(Item::Damaged(d));
        }
        if self.done {
            if let Some((offset, n)) = self.orphans.take() {
                self.pending.push_back(Item::Damaged(Damage {
                    offset,
                    len: 0,
                    error: format!(
                        "{n} records from this offset on belong to channels declared in a \
                         damaged part of the file: they cannot be decoded"
                    ),
                    held: None,
                }));
            }
        }
    }

    /// A chunk failed: skip it, and describe it from its header and the message indexes
    /// that follow it.
    fn skip_chunk(&mut self, at: u64, len: u64, error: String, header: Option<(u64, u64)>) {
        // Items of a damaged chunk are not delivered.
        self.pending.clear();
        self.end_damage();
        self.damaged = true;
        self.damage = Some(Damage {
            offset: at,
            len,
            error,
            held: header.map(|(first_nanos, last_nanos)| Held {
                first_nanos,
                last_nanos,
                ..Held::default()
            }),
        });
    }

    /// Damage at `at` that breaks the framing: with a seekable source, go on at the next intact
    /// chunk and report the bytes in between; `false` if there is none (or no seeking).
    fn resync(&mut self, at: u64, why: &str) -> bool {
        if !self.format_checked || self.data_ended {
            return false;
        }
        let Some(seek) = self.seek else { return false };
        let Some(next) = self.find_chunk(seek, at + 1) else {
            return false;
        };
        if seek(&mut self.src, std::io::SeekFrom::Start(next)).is_err() {
            return false;
        }
        self.pending.clear();
        self.end_damage();
        self.damaged = true;
        self.damage = Some(Damage {
            offset: at,
            len: next - at,
            error: format!("{why}; reading goes on with the next intact chunk"),
            held: None,
        });
        self.lin = LinearReader::new_with_options(linear_options().with_skip_start_magic(true));
        self.offset = next;
        self.fed = next;
        self.wanted = 0;
        self.crc = None;
        true
    }

    /// The offset of the first intact chunk at or after `from`.
    fn find_chunk(&mut self, seek: SeekFn<R>, from: u64) -> Option<u64> {
        let end = seek(&mut self.src, std::io::SeekFrom::End(0)).ok()?;
        let mut buf = vec![0u8; READ_PIECE + CHUNK_HEAD];
        let mut pos = from;
        while pos + CHUNK_HEAD as u64 <= end {
            seek(&mut self.src, std::io::SeekFrom::Start(pos)).ok()?;
            let n = read_full(&mut self.src, &mut buf).ok()?;
            if n < CHUNK_HEAD {
                return None;
            }
            for i in 0..=n - CHUNK_HEAD {
                if buf[i] != mcap::records::op::CHUNK {
                    continue;
                }
                let h = &buf[i..i + CHUNK_HEAD];
                let (len, size, crc, clen, rlen) = (
                    u64_at(h, 1),
                    u64_at(h, 25),
                    u32_at(h, 33),
                    u32_at(h, 37),
                    u64_at(h, 41),
                );
                let at = pos + i as u64;
                let plausible = clen == 0
                    && crc != 0
                    && rlen == size
                    && rlen <= RECORD_LIMIT as u64
                    && len == (CHUNK_HEAD as u64 - 9) + rlen
                    && u64_at(h, 9) <= u64_at(h, 17)
                    && at + 9 + len <= end;
                if plausible && self.chunk_crc_matches(seek, at + CHUNK_HEAD as u64, rlen, crc) {
                    return Some(at);
                }
            }
            pos += (n - CHUNK_HEAD + 1) as u64;
        }
        None
    }

    fn chunk_crc_matches(&mut self, seek: SeekFn<R>, from: u64, len: u64, crc: u32) -> bool {
        if seek(&mut self.src, std::io::SeekFrom::Start(from)).is_err() {
            return false;
        }
        let mut h = crc32fast::Hasher::new();
        let mut piece = vec![0u8; READ_PIECE.min(usize::try_from(len).unwrap_or(READ_PIECE))];
        let mut left = len;
        while left > 0 {
            let k = usize::try_from(left).unwrap_or(usize::MAX).min(piece.len());
            match read_full(&mut self.src, &mut piece[..k]) {
                Ok(n) if n == k => h.update(&piece[..k]),
                _ => return false,
            }
            left -= k as u64;
        }
        h.finalize() == crc
    }

    /// A message index record after a damaged chunk: what the chunk held.
    fn take_index(&mut self, body: &[u8]) {
        let Some(held) = self.damage.as_mut().and_then(|d| d.held.as_mut()) else {
            return;
        };
        let (Some(id), Some(len)) = (body.get(..2), body.get(2..6)) else {
            return;
        };
        let id = u16::from_le_bytes([id[0], id[1]]);
        let n = u64::from(u32::from_le_bytes([len[0], len[1], len[2], len[3]])) / 16;
        let channel = match self.channels.get(&id) {
            Some(Ok(c)) => Some(Arc::clone(c)),
            _ => None,
        };
        *held.records.get_or_insert(0) += n;
        held.channels.push((id, channel, n));
    }

    fn check_magic(&mut self) -> Result<(), ReadError> {
        let mut head = [0u8; 8];
        let mut n = 0;
        while n < head.len() {
            match self.src.read(&mut head[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(ReadError {
                        offset: n as u64,
                        kind: ReadErrorKind::Io(e),
                    });
                }
            }
        }
        let bad = |kind| Err(ReadError { offset: 0, kind });
        if n == 8 && head == *MAGIC {
            // The reader checks the magic again, and hashes it into the data section CRC.
            self.lin.insert(8).copy_from_slice(&head);
            self.lin.notify_read(8);
            if let Some(h) = self.crc.as_mut() {
                h.update(&head);
            }
            self.offset = 8;
            self.fed = 8;
            return Ok(());
        }
        if n >= 6 && head[..5] == MAGIC[..5] && head[5] != MAGIC[5] {
            return Err(ReadError {
                offset: 5,
                kind: ReadErrorKind::McapVersion(head[5] as char),
            });
        }
        if n == 0 {
            return bad(ReadErrorKind::Empty);
        }
        if n < 8 && head[..n] == MAGIC[..n] {
            return bad(ReadErrorKind::Truncated {
                have: n as u64,
                need: 8,
            });
        }
        bad(ReadErrorKind::NotMcap(head[..n].to_vec()))
    }

    /// Turns one top-level record into items.
    fn take_record(&mut self, record: Record<'_>, at: u64) -> Result<(), ReadError> {
        let corrupt = |m: String| ReadError {
            offset: at,
            kind: ReadErrorKind::Corrupt(m),
        };
        match record {
            // Uncompressed chunks (all that snapbus writes) are parsed here: CRC first, then
            // the records with checked lengths. mcap's ChunkReader parses records before it
            // checks the CRC, overflows on a record length near u64::MAX (a panic), and
            // allocates per record.
            Record::Chunk { header, data } if header.compression.is_empty() => {
                self.take_plain_chunk(&header, &data, at)
            }
            Record::Chunk { header, data } => {
                let chunk = mcap::read::ChunkReader::new(header, &data)
                    .map_err(|e| corrupt(format!("chunk: {e}")))?;
                for inner in chunk {
                    let inner = inner.map_err(|e| corrupt(format!("chunk: {e}")))?;
                    self.take_inner(inner, at)?;
                }
                Ok(())
            }
            Record::Footer(_) => {
                self.complete = true;
                Ok(())
            }
            other => self.take_inner(other, at),
        }
    }

    /// A record inside or outside a chunk.
    fn take_inner(&mut self, record: Record<'_>, at: u64) -> Result<(), ReadError> {
        let err = |kind| ReadError { offset: at, kind };
        match record {
            Record::Schema { header, data } => {
                let schema = if header.encoding != SCHEMA_ENCODING {
                    Err(format!(
                        "schema {} '{}' has encoding '{}', not '{SCHEMA_ENCODING}': this is not \
                         a snapbus recording",
                        header.id, header.name, header.encoding
                    ))
                } else {
                    SchemaDescriptor::from_canonical_bytes(&data)
                        .map(Arc::new)
                        .map_err(|e| format!("schema {} '{}': {e}", header.id, header.name))
                };
                self.schemas.insert(header.id, schema);
            }
            Record::Channel(c) => {
                let info = self.channel(c);
                self.last_channel = None;
                self.channels.insert(info.0, info.1);
            }
            Record::Message { header, data } => {
                self.take_message(
                    header.channel_id,
                    header.sequence,
                    header.log_time,
                    &data,
                    at,
                )?;
            }
            Record::Metadata(m) => {
                if m.name == RECORDING_METADATA {
                    let v = m.metadata.get("format_version").map(String::as_str);
                    match v.map(str::parse::<u32>) {
                        Some(Ok(found)) if found > FORMAT_VERSION => {
                            return Err(err(ReadErrorKind::FutureVersion { found }));
                        }
                        Some(Ok(_)) => {}
                        _ => {
                            return Err(err(ReadErrorKind::Corrupt(format!(
                                "{RECORDING_METADATA} metadata has no valid format_version \
                                 ({v:?})"
                            ))));
                        }
                    }
                    self.format_checked = true;
                }
                self.pending.push_back(Item::Metadata {
                    name: m.name,
                    fields: m.metadata,
                });
            }
            // Indexes, statistics, attachments: nothing a linear read needs.
            _ => {}
        }
        Ok(())
    }

    /// The records of an uncompressed chunk, after its CRC is checked.
    fn take_plain_chunk(
        &mut self,
        header: &mcap::records::ChunkHeader,
        data: &[u8],
        at: u64,
    ) -> Result<(), ReadError> {
        let corrupt = |m: String| ReadError {
            offset: at,
            kind: ReadErrorKind::Corrupt(m),
        };
        if header.uncompressed_size != data.len() as u64 {
            return Err(corrupt(format!(
                "chunk: {} bytes of records, its header says {}",
                data.len(),
                header.uncompressed_size
            )));
        }
        // The writer always sets the CRC: a chunk without one is damaged.
        let crc = crc32fast::hash(data);
        if crc != header.uncompressed_crc {
            return Err(corrupt(format!(
                "chunk: CRC {crc:08x}, its header says {:08x}",
                header.uncompressed_crc
            )));
        }
        let mut rest = data;
        while let Some((&opcode, tail)) = rest.split_first() {
            let Some((len, tail)) = tail.split_first_chunk::<8>() else {
                return Err(corrupt("chunk: a record header is cut".into()));
            };
            let body = usize::try_from(u64::from_le_bytes(*len))
                .ok()
                .and_then(|n| tail.get(..n))
                .ok_or_else(|| {
                    corrupt(format!("chunk: record 0x{opcode:02x} runs past the chunk"))
                })?;
            rest = &tail[body.len()..];
            if opcode == mcap::records::op::MESSAGE {
                // channel_id u16, sequence u32, log_time u64, publish_time u64, data.
                let Some((h, payload)) = body.split_first_chunk::<22>() else {
                    return Err(corrupt("chunk: a message record is too short".into()));
                };
                let channel_id = u16::from_le_bytes([h[0], h[1]]);
                let sequence = u32::from_le_bytes([h[2], h[3], h[4], h[5]]);
                let mut log_time = [0u8; 8];
                log_time.copy_from_slice(&h[6..14]);
                let log_time = u64::from_le_bytes(log_time);
                self.take_message(channel_id, sequence, log_time, payload, at)?;
            } else if used(opcode) {
                let record = mcap::parse_record(opcode, body)
                    .map_err(|e| corrupt(format!("chunk: record 0x{opcode:02x}: {e}")))?;
                self.take_inner(record, at)?;
            }
        }
        Ok(())
    }

    /// A message record, inside or outside a chunk.
    fn take_message(
        &mut self,
        channel_id: u16,
        sequence: u32,
        t_nanos: u64,
        data: &[u8],
        at: u64,
    ) -> Result<(), ReadError> {
        let err = |kind| ReadError { offset: at, kind };
        let channel = match &self.last_channel {
            // Most messages follow one of the same channel: skip the hash lookup.
            Some(c) if c.id == channel_id => Arc::clone(c),
            _ => match self.channels.get(&channel_id) {
                Some(Ok(c)) => {
                    self.last_channel = Some(Arc::clone(c));
                    Arc::clone(c)
                }
                Some(Err(why)) => return Err(err(ReadErrorKind::NotSnapbus(why.clone()))),
                None if self.damaged => {
                    // Declared in a damaged chunk: counted, reported at the end.
                    self.orphans.get_or_insert((at, 0)).1 += 1;
                    return Ok(());
                }
                None => {
                    return Err(err(ReadErrorKind::Corrupt(format!(
                        "a message names channel {channel_id}, which was not declared before it"
                    ))));
                }
            },
        };
        if channel.is_loss {
            let record = decode_versioned::<LossRecord>(data, 1)
                .map_err(|e| err(ReadErrorKind::Corrupt(format!("a loss record: {e}"))))?;
            self.pending.push_back(Item::Loss {
                channel,
                t_nanos,
                record,
            });
        } else {
            self.pending.push_back(Item::Message(Message {
                channel,
                t_nanos,
                sequence,
                data: data.to_vec(),
                offset: at,
            }));
        }
        Ok(())
    }

    fn channel(&self, c: mcap::records::Channel) -> (u16, Result<Arc<ChannelInfo>, String>) {
        let id = c.id;
        let schema = match self.schemas.get(&c.schema_id) {
            Some(Ok(s)) => Arc::clone(s),
            Some(Err(why)) => return (id, Err(why.clone())),
            None => {
                return (
                    id,
                    Err(format!(
                        "channel {id} '{}' names schema {}, which was not declared before it",
                        c.topic, c.schema_id
                    )),
                );
            }
        };
        if c.message_encoding != MESSAGE_ENCODING {
            return (
                id,
                Err(format!(
                    "channel {id} '{}' has message encoding '{}', not '{MESSAGE_ENCODING}'",
                    c.topic, c.message_encoding
                )),
            );
        }
        let get = |k: &str| c.metadata.get(k);
        let is_loss = schema.id() == LossRecord::SCHEMA_ID;
        let info = ChannelInfo {
            id,
            producer_id: get("producer_id").and_then(|v| v.parse().ok()).unwrap_or(0),
            lane_id: get("lane_id").and_then(|v| u64::from_str_radix(v, 16).ok()),
            producer: get("producer").cloned().unwrap_or_default(),
            pid: get("pid").and_then(|v| v.parse().ok()).unwrap_or(0),
            emitter: get("emitter").cloned(),
            level: get("level")
                .and_then(|v| v.parse().ok())
                .and_then(Level::from_u8)
                .unwrap_or(Level::INFO),
            is_loss,
            schema,
            metadata: c.metadata,
        };
        (id, Ok(Arc::new(info)))
    }
}

impl<R: Read> Iterator for RecordingReader<R> {
    type Item = Result<Item, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(Ok(item));
            }
            if self.done {
                return self.deferred.take().map(Err);
            }
            if !self.started {
                self.started = true;
                if let Err(e) = self.check_magic() {
                    self.done = true;
                    return Some(Err(e));
                }
            }
            let at = self.offset;
            let event = match self.lin.next_event() {
                None => {
                    self.done = true;
                    self.end_damage();
                    if !self.pending.is_empty() && self.format_checked {
                        continue;
                    }
                    if !self.format_checked {
                        return self.fail(
                            at,
                            ReadErrorKind::NotSnapbus(format!(
                                "an MCAP file without the '{RECORDING_METADATA}' metadata: not \
                                 a snapbus recording"
                            )),
                        );
                    }
                    return None;
                }
                Some(e) => e,
            };
            match event {
                Ok(LinearReadEvent::ReadRequest(need)) => {
                    self.wanted = self.fed.saturating_sub(at) + need as u64;
                    let want = need.clamp(1, READ_PIECE);
                    let buf = self.lin.insert(want);
                    let n = loop {
                        match self.src.read(buf) {
                            Ok(n) => break n,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => return self.fail(at, ReadErrorKind::Io(e)),
                        }
                    };
                    self.lin.notify_read(n);
                    self.fed += n as u64;
                }
                Ok(LinearReadEvent::Record { data, opcode }) => {
                    // Owned (the parsed record was copied anyway): the reader's state is
                    // updated while it is looked at.
                    let data = data.to_vec();
                    let data = &data[..];
                    self.offset += 9 + data.len() as u64;
                    if !self.format_checked
                        && !matches!(
                            opcode,
                            mcap::records::op::HEADER | mcap::records::op::METADATA
                        )
                    {
                        return self.fail(
                            at,
                            ReadErrorKind::NotSnapbus(format!(
                                "an MCAP file without the '{RECORDING_METADATA}' metadata first: \
                                 not a snapbus recording"
                            )),
                        );
                    }
                    if !self.data_ended && !in_data_section(opcode) {
                        let why = format!(
                            "a record with opcode 0x{opcode:02x}, which a recording does not \
                             have outside its chunks"
                        );
                        if self.resync(at, &why) {
                            continue;
                        }
                        return self.fail(at, ReadErrorKind::Corrupt(why));
                    }
                    if opcode == mcap::records::op::DATA_END {
                        self.data_ended = true;
                        if let Some(h) = self.crc.take() {
                            let computed = h.finalize();
                            let saved = data
                                .get(..4)
                                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                            // After a skipped chunk the CRC cannot match; the damage is
                            // reported already.
                            if saved != 0 && saved != computed && !self.damaged {
                                return self.fail(
                                    at,
                                    ReadErrorKind::Corrupt(format!(
                                        "the data section's CRC is {computed:08x}, its data end \
                                         record says {saved:08x}: a record outside the chunks \
                                         (metadata, schema or channel) is damaged"
                                    )),
                                );
                            }
                        }
                    } else if let Some(h) = self.crc.as_mut() {
                        h.update(&[opcode]);
                        h.update(&(data.len() as u64).to_le_bytes());
                        h.update(data);
                    }
                    if opcode == mcap::records::op::MESSAGE_INDEX && self.damage.is_some() {
                        self.take_index(data);
                        continue;
                    }
                    self.end_damage();
                    if !used(opcode) {
                        continue;
                    }
                    let len = 9 + data.len() as u64;
                    let record = match mcap::parse_record(opcode, data) {
                        Ok(r) => r,
                        Err(e) if opcode == mcap::records::op::CHUNK => {
                            let why = format!("chunk: {e}");
                            if !self.resync(at, &why) {
                                self.skip_chunk(at, len, why, None);
                            }
                            continue;
                        }
                        Err(e) => {
                            return self.fail(
                                at,
                                ReadErrorKind::Corrupt(format!("record 0x{opcode:02x}: {e}")),
                            );
                        }
                    };
                    // A chunk's time range, and whether its length agrees with its header
                    // (if not, its length field may be what is damaged).
                    let chunk = match &record {
                        Record::Chunk { header, data } => Some((
                            (header.message_start_time, header.message_end_time),
                            header.uncompressed_size == data.len() as u64,
                        )),
                        _ => None,
                    };
                    if let Err(e) = self.take_record(record, at) {
                        match (chunk, e.kind) {
                            (Some((_, false)), ReadErrorKind::Corrupt(why))
                                if self.resync(at, &why) =>
                            {
                                continue;
                            }
                            (Some((times, _)), ReadErrorKind::Corrupt(why)) => {
                                self.skip_chunk(at, len, why, Some(times));
                                continue;
                            }
                            (_, kind) => {
                                self.done = true;
                                // Items of a damaged chunk are not delivered.
                                self.pending.clear();
                                return self.fail(e.offset, kind);
                            }
                        }
                    }
                }
                Err(mcap::McapError::UnexpectedEof) => {
                    let have = self.fed.saturating_sub(at);
                    if have == 0 {
                        return self.fail(at, ReadErrorKind::Unfinished);
                    }
                    // A damaged length can point past the end: an intact chunk after `at`
                    // says the file goes on.
                    if self.resync(at, "a record's length runs past the end of the file") {
                        continue;
                    }
                    return self.fail(
                        at,
                        ReadErrorKind::Truncated {
                            have,
                            need: self.wanted.max(have + 1),
                        },
                    );
                }
                Err(e) => {
                    if self.resync(at, &e.to_string()) {
                        continue;
                    }
                    return self.fail(at, ReadErrorKind::Corrupt(e.to_string()));
                }
            }
        }
    }
}
