//! Reading recordings: a streaming reader (constant memory, any file size) that checks every
//! chunk's CRC and reports damage with the byte offset where it starts.
//!
//! [`RecordingReader`] and its iterator (the read loop, one named step per reader event) are
//! here; the public types are in `types`, the records and the schema and channel tables in
//! `records`, skipping and describing damage (and resynchronising) in `damage`.

mod damage;
mod records;
mod types;

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::sync::Arc;

use mcap::records::Record;
use mcap::sans_io::{LinearReadEvent, LinearReader, LinearReaderOptions};
use snapbus_schemas::SchemaDescriptor;

use super::RECORDING_METADATA;
pub use types::{ChannelInfo, ChunkBytes, Damage, Held, Item, Message, ReadError, ReadErrorKind};

/// The MCAP magic (`\x89MCAP0\r\n`); byte 5 is the major version.
const MAGIC: &[u8; 8] = b"\x89MCAP0\r\n";
/// Largest record accepted (a chunk holds at most a chunk's worth plus one large payload).
const RECORD_LIMIT: usize = 1 << 30;
/// Largest single read.
const READ_PIECE: usize = 1 << 20;

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
    schemas: Schemas,
    channels: Channels,
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
    /// chunk, and not in the summary).
    orphans: Option<Orphans>,
    /// The schemas and channels the summary section declares (loaded when a damaged part
    /// may have declared one in use; empty when the file has no usable summary).
    summary: Option<(Schemas, Channels)>,
    /// The error to return once the pending items are delivered.
    deferred: Option<ReadError>,
    /// Seeks the source (set by [`RecordingReader::with_resync`]).
    seek: Option<SeekFn<R>>,
    /// Where the last top-level record the reader framed starts: when the framing breaks
    /// after it, its length may be what is damaged (resynchronising searches from there).
    last_at: Option<u64>,
    /// The data end record was read: what follows is the summary.
    data_ended: bool,
    /// The intact chunks read.
    chunk_bytes: ChunkBytes,
}

/// Schemas by MCAP id: the descriptor, or why it cannot be used.
type Schemas = HashMap<u16, Result<Arc<SchemaDescriptor>, String>>;
/// Channels by MCAP id: the channel, or why it cannot be used.
type Channels = HashMap<u16, Result<Arc<ChannelInfo>, String>>;

/// Records of channels that only a damaged part of the file declared: where the first is,
/// how many, and their time range.
struct Orphans {
    offset: u64,
    records: u64,
    first_nanos: u64,
    last_nanos: u64,
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
            summary: None,
            last_at: None,
            deferred: None,
            seek: None,
            data_ended: false,
            chunk_bytes: ChunkBytes::default(),
        }
    }

    /// The intact chunks read so far: their bytes stored and uncompressed, their codecs.
    pub fn chunk_bytes(&self) -> &ChunkBytes {
        &self.chunk_bytes
    }

    /// Whether the whole file was read, through its footer and end magic.
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// Byte offset of the next top-level record (after an error: where the damage starts).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Ends the read with `error`, after the items already queued (and the damage being
    /// described).
    fn fail(&mut self, error: ReadError) -> Option<Result<Item, ReadError>> {
        self.done = true;
        // A footer followed by damage (a bad end magic, trailing bytes) is not a complete file.
        self.complete = false;
        self.deferred = Some(error);
        self.end_damage();
        self.next()
    }

    /// The source has no more records: the end of the read.
    fn at_end(&mut self, at: u64) -> Step {
        self.done = true;
        self.end_damage();
        if self.format_checked || self.damaged {
            // The queued items are delivered, then the iterator ends. (A file whose first
            // records are damaged is read as a recording: its channels say whether it is one.)
            return Step::Go;
        }
        Step::Stop(ReadError {
            offset: at,
            kind: ReadErrorKind::NotSnapbus(format!(
                "an MCAP file without the '{RECORDING_METADATA}' metadata: not a snapbus \
                 recording"
            )),
        })
    }

    /// The reader needs `need` more bytes of the record at `at`: read (up to a piece of) them.
    fn feed(&mut self, at: u64, need: usize) -> Step {
        self.wanted = self.fed.saturating_sub(at) + need as u64;
        let want = need.clamp(1, READ_PIECE);
        let buf = self.lin.insert(want);
        let n = loop {
            match self.src.read(buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Step::Stop(ReadError {
                        offset: at,
                        kind: ReadErrorKind::Io(e),
                    });
                }
            }
        };
        self.lin.notify_read(n);
        self.fed += n as u64;
        Step::Go
    }

    /// A whole top-level record at `at`: checked against where it stands (the recording
    /// metadata first, only data-section records before the data end), hashed into the data
    /// section's CRC, then taken.
    fn on_record(&mut self, at: u64, opcode: u8, data: &[u8]) -> Step {
        self.offset += 9 + data.len() as u64;
        self.last_at = Some(at);
        if opcode == mcap::records::op::MESSAGE_INDEX
            && data.get(2..6).is_none_or(|n| {
                data.len() as u64 != 6 + u64::from(u32::from_le_bytes([n[0], n[1], n[2], n[3]]))
            })
        {
            // Its length field is damaged: it may have swallowed the chunks after it.
            let why = "a message index's length field disagrees with its entries".to_owned();
            return self.resync_or(at, why);
        }
        if !self.format_checked
            && !self.damaged
            && !matches!(
                opcode,
                mcap::records::op::HEADER | mcap::records::op::METADATA
            )
        {
            return Step::Stop(ReadError {
                offset: at,
                kind: ReadErrorKind::NotSnapbus(format!(
                    "an MCAP file without the '{RECORDING_METADATA}' metadata first: not a \
                     snapbus recording"
                )),
            });
        }
        if !self.data_ended && !in_data_section(opcode) {
            let why = format!(
                "a record with opcode 0x{opcode:02x}, which a recording does not have outside \
                 its chunks"
            );
            return self.resync_or(at, why);
        }
        if let Err(e) = self.hash_data_section(at, opcode, data) {
            return Step::Stop(e);
        }
        if opcode == mcap::records::op::MESSAGE_INDEX && self.damage.is_some() {
            self.take_index(data);
            return Step::Go;
        }
        self.end_damage();
        if !used(opcode) {
            return Step::Go;
        }
        self.take_top_level(at, opcode, data)
    }

    /// Hashes a data-section record into the data section's CRC; at the data end record,
    /// checks the CRC it holds.
    fn hash_data_section(&mut self, at: u64, opcode: u8, data: &[u8]) -> Result<(), ReadError> {
        if opcode != mcap::records::op::DATA_END {
            if let Some(h) = self.crc.as_mut() {
                h.update(&[opcode]);
                h.update(&(data.len() as u64).to_le_bytes());
                h.update(data);
            }
            return Ok(());
        }
        self.data_ended = true;
        let Some(h) = self.crc.take() else {
            return Ok(());
        };
        let computed = h.finalize();
        let saved = data
            .get(..4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        // After a skipped chunk the CRC cannot match; the damage is reported already.
        if saved != 0 && saved != computed && !self.damaged {
            return Err(ReadError {
                offset: at,
                kind: ReadErrorKind::Corrupt(format!(
                    "the data section's CRC is {computed:08x}, its data end record says \
                     {saved:08x}: a record outside the chunks (metadata, schema or channel) is \
                     damaged"
                )),
            });
        }
        Ok(())
    }

    /// Parses a used top-level record and takes it; a damaged chunk is skipped (or, when its
    /// length may be what is damaged, resynchronised after).
    fn take_top_level(&mut self, at: u64, opcode: u8, data: &[u8]) -> Step {
        let len = 9 + data.len() as u64;
        let record = match mcap::parse_record(opcode, data) {
            Ok(r) => r,
            Err(e) if opcode == mcap::records::op::CHUNK => {
                let why = format!("chunk: {e}");
                if !self.resync(at, &why) {
                    self.skip_chunk(at, len, why, None);
                }
                return Step::Go;
            }
            Err(e) => {
                // Its length is intact (the reader framed it): skip it as damage.
                self.skip_chunk(at, len, format!("record 0x{opcode:02x}: {e}"), None);
                return Step::Go;
            }
        };
        // A chunk's time range, and whether its length agrees with its header (if not, its
        // length field may be what is damaged).
        let chunk = match &record {
            Record::Chunk { header, data } => Some((
                (header.message_start_time, header.message_end_time),
                !header.compression.is_empty() || header.uncompressed_size == data.len() as u64,
            )),
            _ => None,
        };
        if let Record::Chunk {
            header,
            data: records,
        } = &record
        {
            // start and end time, uncompressed size, CRC, compression, records length, records.
            let framed = 8 * 3 + 4 + 4 + header.compression.len() + 8 + records.len();
            if framed != data.len() {
                // Its length field is damaged (longer than the chunk: the bytes after it are
                // the next chunks): go on at the next intact chunk after its start.
                let why = format!(
                    "a chunk's length field says {} bytes, its header {framed}",
                    data.len()
                );
                return self.resync_or(at, why);
            }
        }
        let Err(e) = self.take_record(record, at) else {
            return Step::Go;
        };
        match (chunk, e.kind) {
            (Some((_, false)), ReadErrorKind::Corrupt(why)) if self.resync(at, &why) => Step::Go,
            (Some((times, _)), ReadErrorKind::Corrupt(why)) => {
                self.skip_chunk(at, len, why, Some(times));
                Step::Go
            }
            (_, kind) => {
                self.done = true;
                // Items of a damaged chunk are not delivered.
                self.pending.clear();
                Step::Stop(ReadError {
                    offset: e.offset,
                    kind,
                })
            }
        }
    }

    /// The reader failed on the record at `at`: its framing is broken, or the file ends inside
    /// it (or between records, without the footer).
    fn on_error(&mut self, at: u64, e: mcap::McapError) -> Step {
        let mcap::McapError::UnexpectedEof = e else {
            return self.resync_or(at, e.to_string());
        };
        let have = self.fed.saturating_sub(at);
        if have == 0 {
            return Step::Stop(ReadError {
                offset: at,
                kind: ReadErrorKind::Unfinished,
            });
        }
        // A damaged length can point past the end: an intact chunk after `at` says the file
        // goes on.
        if self.resync(at, "a record's length runs past the end of the file") {
            return Step::Go;
        }
        Step::Stop(ReadError {
            offset: at,
            kind: ReadErrorKind::Truncated {
                have,
                need: self.wanted.max(have + 1),
            },
        })
    }

    /// Broken framing at `at`: resynchronise if the reader can, else end with `why`.
    fn resync_or(&mut self, at: u64, why: String) -> Step {
        if self.resync(at, &why) {
            return Step::Go;
        }
        Step::Stop(ReadError {
            offset: at,
            kind: ReadErrorKind::Corrupt(why),
        })
    }
}

/// What the read loop does after one step.
enum Step {
    /// Go on: deliver what is queued, or take the next reader event.
    Go,
    /// End the read with this error (after what is queued).
    Stop(ReadError),
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
            let step = match self.lin.next_event() {
                None => self.at_end(at),
                Some(Ok(LinearReadEvent::ReadRequest(need))) => self.feed(at, need),
                Some(Ok(LinearReadEvent::Record { data, opcode })) => {
                    // Owned (the parsed record was copied anyway): the reader's state is
                    // updated while it is looked at.
                    let data = data.to_vec();
                    self.on_record(at, opcode, &data)
                }
                Some(Err(e)) => self.on_error(at, e),
            };
            if let Step::Stop(e) = step {
                return self.fail(e);
            }
        }
    }
}
