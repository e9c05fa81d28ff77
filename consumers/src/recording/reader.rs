//! Reading recordings: a streaming reader (constant memory, any file size) that checks every
//! chunk's CRC and reports damage with the byte offset where it starts.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Read;
use std::sync::Arc;

use mcap::records::Record;
use mcap::sans_io::{LinearReadEvent, LinearReader, LinearReaderOptions};
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
    /// The producer's id on the bus it was recorded from.
    pub producer_id: u64,
    /// The producer's name.
    pub producer: String,
    /// The producer's pid.
    pub pid: u32,
    /// The emitter name, if recorded.
    pub emitter: Option<String>,
    /// The records' level.
    pub level: u8,
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
}

/// Reads a recording from start to end. An iterator of [`Item`]s; after the first error it
/// ends. [`RecordingReader::complete`] says whether the file ended with its footer.
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
}

impl<R: Read> RecordingReader<R> {
    /// A reader over `src` (a `File`, ideally buffered by the caller or not: reads are large).
    pub fn new(src: R) -> RecordingReader<R> {
        let options = LinearReaderOptions::default()
            .with_emit_chunks(true)
            .with_validate_data_section_crc(true)
            .with_validate_summary_section_crc(true)
            .with_record_length_limit(RECORD_LIMIT);
        RecordingReader {
            src,
            lin: LinearReader::new_with_options(options),
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
        Some(Err(ReadError { offset, kind }))
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
        if header.uncompressed_crc != 0 {
            let crc = crc32fast::hash(data);
            if crc != header.uncompressed_crc {
                return Err(corrupt(format!(
                    "chunk: CRC {crc:08x}, its header says {:08x}",
                    header.uncompressed_crc
                )));
            }
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
            producer: get("producer").cloned().unwrap_or_default(),
            pid: get("pid").and_then(|v| v.parse().ok()).unwrap_or(0),
            emitter: get("emitter").cloned(),
            level: get("level").and_then(|v| v.parse().ok()).unwrap_or(2),
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
                return None;
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
                    if !used(opcode) {
                        continue;
                    }
                    let record = match mcap::parse_record(opcode, data) {
                        Ok(r) => r.into_owned(),
                        Err(e) => {
                            return self.fail(
                                at,
                                ReadErrorKind::Corrupt(format!("record 0x{opcode:02x}: {e}")),
                            );
                        }
                    };
                    if let Err(e) = self.take_record(record, at) {
                        self.done = true;
                        // Items of a damaged chunk are not delivered.
                        self.pending.clear();
                        return Some(Err(e));
                    }
                }
                Err(mcap::McapError::UnexpectedEof) => {
                    let have = self.fed.saturating_sub(at);
                    if have == 0 {
                        return self.fail(at, ReadErrorKind::Unfinished);
                    }
                    return self.fail(
                        at,
                        ReadErrorKind::Truncated {
                            have,
                            need: self.wanted.max(have + 1),
                        },
                    );
                }
                Err(e) => return self.fail(at, ReadErrorKind::Corrupt(e.to_string())),
            }
        }
    }
}
