//! The MCAP writer of recordings: chunked, CRC-checked, indexed MCAP, with chunks compressed
//! by LZ4 (MCAP's `lz4`: an LZ4 frame, encoded by the pure-Rust `lz4_flex`) or stored as they
//! are.
//!
//! snapbus writes its own records instead of using `mcap::Writer`: that writer's codecs are C
//! libraries (lz4-sys, zstd-sys) and it takes no other. The methods are those of the
//! `mcap::Writer` subset the recording writer uses, with the same record layout (a chunk's
//! schemas, channels and messages in it, its message indexes after it, metadata records
//! between chunks, and a summary with schemas, channels, statistics, metadata and chunk
//! indexes, and summary offsets).

use std::collections::BTreeMap;
use std::io::Write;

use mcap::records::{MessageHeader, Metadata, op};
use mcap::{McapError, McapResult};

use super::PROFILE;

/// How a recording's chunks are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Stored as they are (the fastest; files are several times larger).
    None,
    /// LZ4 frames (MCAP's `lz4`): about 1 GB/s to compress, readable by every MCAP reader.
    #[default]
    Lz4,
}

impl Compression {
    /// The MCAP name of the codec (`""` for none).
    pub fn mcap_name(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Lz4 => "lz4",
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = String;

    fn from_str(s: &str) -> Result<Compression, String> {
        match s {
            "none" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            other => Err(format!(
                "unknown compression '{other}': expected 'lz4' (the default) or 'none'"
            )),
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
        })
    }
}

/// A finished chunk: its records uncompressed, its messages' time range, its message index
/// entries per channel (log time, offset in the records).
struct Built {
    plain: Vec<u8>,
    times: (u64, u64),
    index: BTreeMap<u16, Vec<(u64, u64)>>,
}

/// A chunk ready to write: its CRC (of the records uncompressed) and its compressed records
/// (`None`: stored as they are).
struct Packed {
    built: Built,
    crc: u32,
    packed: Option<Vec<u8>>,
}

/// The thread that compresses chunks while the next one is built (one at a time: the writer
/// waits for a chunk before it hands over the next, so memory stays at two chunks).
struct Worker {
    jobs: std::sync::mpsc::SyncSender<(Built, Vec<u8>)>,
    done: std::sync::mpsc::Receiver<McapResult<Packed>>,
    /// A chunk was handed over and not yet taken back.
    pending: bool,
}

impl Worker {
    fn start() -> McapResult<Worker> {
        let (jobs, rx) = std::sync::mpsc::sync_channel::<(Built, Vec<u8>)>(1);
        let (tx, done) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("snapbus-lz4".into())
            .spawn(move || {
                for (built, mut packed) in rx {
                    let crc = crc32fast::hash(&built.plain);
                    packed.clear();
                    let result = lz4_frame(&built.plain, &mut packed).map(|()| Packed {
                        built,
                        crc,
                        packed: Some(packed),
                    });
                    if tx.send(result).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Worker {
            jobs,
            done,
            pending: false,
        })
    }
}

fn worker_gone() -> McapError {
    McapError::Io(std::io::Error::other("the chunk compressing thread ended"))
}

/// A schema or channel kept for the summary: its id and its record's body.
type Kept = (u16, Vec<u8>);

/// Writes MCAP records into `W`, keeping the data section's CRC and the summary.
pub(super) struct McapOut<W: Write> {
    out: W,
    /// Bytes written so far (the offset of the next record).
    pos: u64,
    data_crc: crc32fast::Hasher,
    compression: Compression,
    chunk_size: u64,
    /// The records of the chunk being built, uncompressed.
    chunk: Vec<u8>,
    /// Its messages' time range.
    chunk_times: Option<(u64, u64)>,
    /// Its message index entries per channel: (log time, offset in the chunk's records).
    chunk_index: BTreeMap<u16, Vec<(u64, u64)>>,
    /// The compressed records of the last chunk (kept: its buffer is reused).
    packed: Vec<u8>,
    /// The records buffer of the last chunk written (reused for the next chunk).
    spare: Vec<u8>,
    /// The thread that compresses chunks (started with the first LZ4 chunk).
    worker: Option<Worker>,
    /// Uncompressed bytes of the chunk being compressed.
    in_flight: u64,
    /// Time range of the chunk being compressed.
    in_flight_times: Option<(u64, u64)>,
    /// Messages added, and messages whose chunk is written.
    messages: u64,
    written: u64,
    schemas: Vec<Kept>,
    channels: Vec<Kept>,
    chunk_indexes: Vec<Vec<u8>>,
    metadata_indexes: Vec<Vec<u8>>,
    channel_counts: BTreeMap<u16, u64>,
    times: Option<(u64, u64)>,
    chunk_count: u32,
    metadata_count: u32,
}

/// Appends an MCAP string (u32 length + bytes).
fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends an MCAP map of strings (u32 byte length + key, value pairs).
fn put_map(out: &mut Vec<u8>, map: &BTreeMap<String, String>) {
    let len: usize = map.iter().map(|(k, v)| 8 + k.len() + v.len()).sum();
    out.extend_from_slice(&(len as u32).to_le_bytes());
    for (k, v) in map {
        put_str(out, k);
        put_str(out, v);
    }
}

/// Appends a record: opcode, u64 length, body.
fn put_record(out: &mut Vec<u8>, opcode: u8, body: &[u8]) {
    out.push(opcode);
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(body);
}

impl<W: Write> McapOut<W> {
    /// Writes the magic and the header record.
    pub(super) fn new(
        out: W,
        compression: Compression,
        chunk_size: u64,
        library: &str,
    ) -> McapResult<McapOut<W>> {
        let mut w = McapOut {
            out,
            pos: 0,
            data_crc: crc32fast::Hasher::new(),
            compression,
            chunk_size: chunk_size.max(1),
            chunk: Vec::new(),
            chunk_times: None,
            chunk_index: BTreeMap::new(),
            packed: Vec::new(),
            spare: Vec::new(),
            worker: None,
            in_flight: 0,
            in_flight_times: None,
            messages: 0,
            written: 0,
            schemas: Vec::new(),
            channels: Vec::new(),
            chunk_indexes: Vec::new(),
            metadata_indexes: Vec::new(),
            channel_counts: BTreeMap::new(),
            times: None,
            chunk_count: 0,
            metadata_count: 0,
        };
        w.emit(mcap::MAGIC)?;
        let mut body = Vec::new();
        put_str(&mut body, PROFILE);
        put_str(&mut body, library);
        w.emit_record(op::HEADER, &body)?;
        Ok(w)
    }

    /// Writes bytes of the data section.
    fn emit(&mut self, bytes: &[u8]) -> McapResult<()> {
        self.out.write_all(bytes)?;
        self.data_crc.update(bytes);
        self.pos += bytes.len() as u64;
        Ok(())
    }

    fn emit_record(&mut self, opcode: u8, body: &[u8]) -> McapResult<()> {
        let mut head = [0u8; 9];
        head[0] = opcode;
        head[1..].copy_from_slice(&(body.len() as u64).to_le_bytes());
        self.emit(&head)?;
        self.emit(body)
    }

    /// Declares a schema (in the current chunk); returns its id.
    pub(super) fn add_schema(
        &mut self,
        name: &str,
        encoding: &str,
        data: &[u8],
    ) -> McapResult<u16> {
        let id = u16::try_from(self.schemas.len() + 1).map_err(|_| McapError::TooManySchemas)?;
        let mut body = Vec::with_capacity(14 + name.len() + encoding.len() + data.len());
        body.extend_from_slice(&id.to_le_bytes());
        put_str(&mut body, name);
        put_str(&mut body, encoding);
        body.extend_from_slice(&(data.len() as u32).to_le_bytes());
        body.extend_from_slice(data);
        put_record(&mut self.chunk, op::SCHEMA, &body);
        self.schemas.push((id, body));
        Ok(id)
    }

    /// Declares a channel (in the current chunk); returns its id.
    pub(super) fn add_channel(
        &mut self,
        schema_id: u16,
        topic: &str,
        encoding: &str,
        meta: &BTreeMap<String, String>,
    ) -> McapResult<u16> {
        let id = u16::try_from(self.channels.len()).map_err(|_| McapError::TooManyChannels)?;
        let mut body = Vec::new();
        body.extend_from_slice(&id.to_le_bytes());
        body.extend_from_slice(&schema_id.to_le_bytes());
        put_str(&mut body, topic);
        put_str(&mut body, encoding);
        put_map(&mut body, meta);
        put_record(&mut self.chunk, op::CHANNEL, &body);
        self.channels.push((id, body));
        Ok(id)
    }

    /// Adds a message to the current chunk (the caller ends chunks: [`hand_over`](Self::hand_over)).
    pub(super) fn write_to_known_channel(
        &mut self,
        header: &MessageHeader,
        data: &[u8],
    ) -> McapResult<()> {
        let offset = self.chunk.len() as u64;
        let c = &mut self.chunk;
        c.push(op::MESSAGE);
        c.extend_from_slice(&(22 + data.len() as u64).to_le_bytes());
        c.extend_from_slice(&header.channel_id.to_le_bytes());
        c.extend_from_slice(&header.sequence.to_le_bytes());
        c.extend_from_slice(&header.log_time.to_le_bytes());
        c.extend_from_slice(&header.publish_time.to_le_bytes());
        c.extend_from_slice(data);
        let t = header.log_time;
        self.chunk_times = Some(match self.chunk_times {
            Some((a, b)) => (a.min(t), b.max(t)),
            None => (t, t),
        });
        self.chunk_index
            .entry(header.channel_id)
            .or_default()
            .push((t, offset));
        *self.channel_counts.entry(header.channel_id).or_default() += 1;
        self.messages += 1;
        Ok(())
    }

    /// Writes a metadata record (after finishing the current chunk).
    pub(super) fn write_metadata(&mut self, m: &Metadata) -> McapResult<()> {
        self.finish_chunk()?;
        self.drain()?;
        let mut body = Vec::new();
        put_str(&mut body, &m.name);
        put_map(&mut body, &m.metadata);
        let offset = self.pos;
        self.emit_record(op::METADATA, &body)?;
        let mut index = Vec::new();
        index.extend_from_slice(&offset.to_le_bytes());
        index.extend_from_slice(&(9 + body.len() as u64).to_le_bytes());
        put_str(&mut index, &m.name);
        self.metadata_indexes.push(index);
        self.metadata_count += 1;
        Ok(())
    }

    /// Ends the chunk being built: stored at once, or handed to the compressing thread (the
    /// chunk before it, compressed meanwhile, is written first).
    fn finish_chunk(&mut self) -> McapResult<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        let spare = std::mem::take(&mut self.spare);
        let built = Built {
            plain: std::mem::replace(&mut self.chunk, spare),
            times: self.chunk_times.take().unwrap_or((0, 0)),
            index: std::mem::take(&mut self.chunk_index),
        };
        match self.compression {
            Compression::None => {
                let crc = crc32fast::hash(&built.plain);
                self.write_chunk(Packed {
                    built,
                    crc,
                    packed: None,
                })
            }
            Compression::Lz4 => {
                self.drain()?;
                self.in_flight = built.plain.len() as u64;
                self.in_flight_times = Some(built.times);
                let worker = match &mut self.worker {
                    Some(w) => w,
                    None => self.worker.insert(Worker::start()?),
                };
                let packed = std::mem::take(&mut self.packed);
                worker
                    .jobs
                    .send((built, packed))
                    .map_err(|_| worker_gone())?;
                worker.pending = true;
                Ok(())
            }
        }
    }

    /// Waits for the chunk being compressed, and writes it.
    fn drain(&mut self) -> McapResult<()> {
        let Some(worker) = self.worker.as_mut().filter(|w| w.pending) else {
            return Ok(());
        };
        worker.pending = false;
        self.in_flight = 0;
        self.in_flight_times = None;
        let done = worker.done.recv().map_err(|_| worker_gone())?;
        self.write_chunk(done?)
    }

    /// Writes a chunk record and its message indexes, and keeps its chunk index.
    fn write_chunk(&mut self, done: Packed) -> McapResult<()> {
        let Packed { built, crc, packed } = done;
        let name = self.compression.mcap_name();
        let records: &[u8] = packed.as_deref().unwrap_or(&built.plain);
        let (start, end) = built.times;
        let mut head = Vec::with_capacity(9 + 40 + name.len());
        head.push(op::CHUNK);
        let body_len = 8 * 3 + 4 + 4 + name.len() as u64 + 8 + records.len() as u64;
        head.extend_from_slice(&body_len.to_le_bytes());
        head.extend_from_slice(&start.to_le_bytes());
        head.extend_from_slice(&end.to_le_bytes());
        head.extend_from_slice(&(built.plain.len() as u64).to_le_bytes());
        head.extend_from_slice(&crc.to_le_bytes());
        put_str(&mut head, name);
        head.extend_from_slice(&(records.len() as u64).to_le_bytes());
        let chunk_start = self.pos;
        self.emit(&head)?;
        self.emit(records)?;
        let (compressed, uncompressed) = (records.len() as u64, built.plain.len() as u64);
        let chunk_len = self.pos - chunk_start;
        let index_start = self.pos;
        let mut offsets = Vec::new();
        let mut body = Vec::new();
        for (channel, entries) in &built.index {
            offsets.extend_from_slice(&channel.to_le_bytes());
            offsets.extend_from_slice(&self.pos.to_le_bytes());
            body.clear();
            body.extend_from_slice(&channel.to_le_bytes());
            body.extend_from_slice(&(entries.len() as u32 * 16).to_le_bytes());
            for (t, off) in entries {
                body.extend_from_slice(&t.to_le_bytes());
                body.extend_from_slice(&off.to_le_bytes());
            }
            self.emit_record(op::MESSAGE_INDEX, &body)?;
        }
        let mut index = Vec::new();
        index.extend_from_slice(&start.to_le_bytes());
        index.extend_from_slice(&end.to_le_bytes());
        index.extend_from_slice(&chunk_start.to_le_bytes());
        index.extend_from_slice(&chunk_len.to_le_bytes());
        index.extend_from_slice(&(offsets.len() as u32).to_le_bytes());
        index.extend_from_slice(&offsets);
        index.extend_from_slice(&(self.pos - index_start).to_le_bytes());
        put_str(&mut index, name);
        index.extend_from_slice(&compressed.to_le_bytes());
        index.extend_from_slice(&uncompressed.to_le_bytes());
        self.chunk_indexes.push(index);
        self.times = Some(match self.times {
            Some((x, y)) => (x.min(start), y.max(end)),
            None => (start, end),
        });
        self.chunk_count += 1;
        self.written += built.index.values().map(|e| e.len() as u64).sum::<u64>();
        // The buffers go back for the next chunks.
        let mut plain = built.plain;
        plain.clear();
        if plain.capacity() > 4 * self.chunk_size as usize {
            plain.shrink_to(self.chunk_size as usize * 2);
        }
        self.spare = plain;
        if let Some(p) = packed {
            self.packed = p;
        }
        Ok(())
    }

    /// Ends the current chunk without waiting for it to be compressed (the chunk before it is
    /// written first), and flushes what is written. Returns the messages not yet in the file
    /// and their time range.
    pub(super) fn hand_over(&mut self) -> McapResult<(u64, Option<(u64, u64)>)> {
        self.finish_chunk()?;
        self.out.flush()?;
        Ok((self.messages - self.written, self.in_flight_times))
    }

    /// Finishes the current chunk and flushes the output.
    pub(super) fn flush(&mut self) -> McapResult<()> {
        self.finish_chunk()?;
        self.drain()?;
        self.out.flush()?;
        Ok(())
    }

    /// Writes the data end, the summary (schemas, channels, statistics, metadata and chunk
    /// indexes), the summary offsets, the footer and the closing magic.
    pub(super) fn finish(&mut self) -> McapResult<()> {
        self.finish_chunk()?;
        self.drain()?;
        let crc = std::mem::replace(&mut self.data_crc, crc32fast::Hasher::new()).finalize();
        self.emit_record(op::DATA_END, &crc.to_le_bytes())?;
        let summary_start = self.pos;
        let mut s = Vec::new();
        let mut groups: Vec<(u8, u64, u64)> = Vec::new();
        let mut group = |s: &mut Vec<u8>, opcode: u8, bodies: &mut dyn Iterator<Item = &[u8]>| {
            let at = s.len() as u64;
            for b in bodies {
                put_record(s, opcode, b);
            }
            if s.len() as u64 > at {
                groups.push((opcode, summary_start + at, s.len() as u64 - at));
            }
        };
        group(
            &mut s,
            op::SCHEMA,
            &mut self.schemas.iter().map(|k| &k.1[..]),
        );
        group(
            &mut s,
            op::CHANNEL,
            &mut self.channels.iter().map(|k| &k.1[..]),
        );
        let stats = self.statistics();
        group(&mut s, op::STATISTICS, &mut std::iter::once(&stats[..]));
        let metadata = &self.metadata_indexes;
        group(
            &mut s,
            op::METADATA_INDEX,
            &mut metadata.iter().map(|b| &b[..]),
        );
        let chunks = &self.chunk_indexes;
        group(&mut s, op::CHUNK_INDEX, &mut chunks.iter().map(|b| &b[..]));
        let offsets_start = summary_start + s.len() as u64;
        for (opcode, start, len) in groups {
            let mut body = vec![opcode];
            body.extend_from_slice(&start.to_le_bytes());
            body.extend_from_slice(&len.to_le_bytes());
            put_record(&mut s, op::SUMMARY_OFFSET, &body);
        }
        s.push(op::FOOTER);
        s.extend_from_slice(&20u64.to_le_bytes());
        s.extend_from_slice(&summary_start.to_le_bytes());
        s.extend_from_slice(&offsets_start.to_le_bytes());
        let summary_crc = crc32fast::hash(&s);
        s.extend_from_slice(&summary_crc.to_le_bytes());
        s.extend_from_slice(mcap::MAGIC);
        self.out.write_all(&s)?;
        self.pos += s.len() as u64;
        self.out.flush()?;
        Ok(())
    }

    fn statistics(&self) -> Vec<u8> {
        let (start, end) = self.times.unwrap_or((0, 0));
        let mut b = Vec::new();
        b.extend_from_slice(&self.channel_counts.values().sum::<u64>().to_le_bytes());
        b.extend_from_slice(&(self.schemas.len() as u16).to_le_bytes());
        b.extend_from_slice(&(self.channels.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&self.metadata_count.to_le_bytes());
        b.extend_from_slice(&self.chunk_count.to_le_bytes());
        b.extend_from_slice(&start.to_le_bytes());
        b.extend_from_slice(&end.to_le_bytes());
        b.extend_from_slice(&(self.channel_counts.len() as u32 * 10).to_le_bytes());
        for (id, n) in &self.channel_counts {
            b.extend_from_slice(&id.to_le_bytes());
            b.extend_from_slice(&n.to_le_bytes());
        }
        b
    }

    /// Bytes written, plus the chunks not yet written at their uncompressed size.
    pub(super) fn approx_len(&self) -> u64 {
        self.pos + self.chunk.len() as u64 + self.in_flight
    }

    /// The output (after [`finish`](Self::finish), or to drop what it buffers).
    pub(super) fn into_inner(self) -> W {
        self.out
    }
}

/// `data` as one LZ4 frame (linked blocks of 64 KiB — LZ4's window — so that a reader needs
/// no more than that per chunk; no checksums: the chunk's CRC covers the records), appended to
/// `out`.
fn lz4_frame(data: &[u8], out: &mut Vec<u8>) -> McapResult<()> {
    let info = lz4_flex::frame::FrameInfo::new()
        .block_size(lz4_flex::frame::BlockSize::Max64KB)
        .block_mode(lz4_flex::frame::BlockMode::Linked)
        .content_size(Some(data.len() as u64));
    let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, std::mem::take(out));
    enc.write_all(data)?;
    *out = enc
        .finish()
        .map_err(|e| McapError::Io(std::io::Error::other(e)))?;
    Ok(())
}

/// Decompresses an LZ4 frame that should hold `size` bytes; why not, if it does not (damage).
pub(crate) fn lz4_unframe(data: &[u8], size: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    if size > 1 << 30 {
        return Err(format!(
            "chunk: its header says {size} bytes of records: too large"
        ));
    }
    // Grown as the frame decodes (never more than `size` + 1): a damaged size allocates
    // nothing up front.
    let mut out = Vec::with_capacity(size.min(16 << 20) as usize);
    let mut dec = lz4_flex::frame::FrameDecoder::new(data).take(size + 1);
    dec.read_to_end(&mut out)
        .map_err(|e| format!("chunk: lz4: {e}"))?;
    if out.len() as u64 != size {
        return Err(format!(
            "chunk: lz4 holds {} bytes of records, its header says {size}",
            out.len()
        ));
    }
    Ok(out)
}
