//! Records: the magic, top-level records, plain chunks' records, messages, and the schema and
//! channel tables they are decoded with.

use std::io::Read;
use std::sync::Arc;

use mcap::records::Record;
use snapbus_bus::Level;
use snapbus_schemas::{SchemaDescriptor, Snapshot, decode_versioned};

use super::types::{ChannelInfo, Item, Message, ReadError, ReadErrorKind};
use super::{MAGIC, Orphans, RecordingReader, Schemas, used};
use crate::recording::{
    FORMAT_VERSION, LossRecord, MESSAGE_ENCODING, RECORDING_METADATA, SCHEMA_ENCODING,
};

impl<R: Read> RecordingReader<R> {
    pub(super) fn check_magic(&mut self) -> Result<(), ReadError> {
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
    pub(super) fn take_record(&mut self, record: Record<'_>, at: u64) -> Result<(), ReadError> {
        let corrupt = |m: String| ReadError {
            offset: at,
            kind: ReadErrorKind::Corrupt(m),
        };
        match record {
            // Uncompressed and LZ4 chunks (what snapbus writes) are parsed here: CRC first, then
            // the records with checked lengths. mcap's ChunkReader parses records before it
            // checks the CRC, overflows on a record length near u64::MAX (a panic), and
            // allocates per record.
            Record::Chunk { header, data } if header.compression.is_empty() => {
                self.take_plain_chunk(&header, &data, at)?;
                self.count_chunk("none", data.len(), data.len());
                Ok(())
            }
            // LZ4 (what snapbus writes by default): decompressed (bounded by the size its
            // header states), then the same checks.
            Record::Chunk { header, data } if header.compression == "lz4" => {
                let plain =
                    crate::recording::mcap_out::lz4_unframe(&data, header.uncompressed_size)
                        .map_err(corrupt)?;
                self.take_plain_chunk(&header, &plain, at)?;
                self.count_chunk("lz4", data.len(), plain.len());
                Ok(())
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

    /// Counts an intact chunk into [`RecordingReader::chunk_bytes`].
    fn count_chunk(&mut self, codec: &str, stored: usize, uncompressed: usize) {
        let c = &mut self.chunk_bytes;
        c.chunks += 1;
        c.stored += stored as u64;
        c.uncompressed += uncompressed as u64;
        if !c.codecs.contains(codec) {
            c.codecs.insert(codec.to_owned());
        }
    }

    /// A record inside or outside a chunk.
    fn take_inner(&mut self, record: Record<'_>, at: u64) -> Result<(), ReadError> {
        let err = |kind| ReadError { offset: at, kind };
        match record {
            Record::Schema { header, data } => {
                self.schemas.insert(header.id, schema_entry(&header, &data));
            }
            Record::Channel(c) => {
                if self.damaged && !self.schemas.contains_key(&c.schema_id) {
                    // Its schema was declared in a damaged part: the summary may have it.
                    if let Some(s) = self.summary_schema(c.schema_id) {
                        self.schemas.insert(c.schema_id, Ok(s));
                    }
                }
                let info = channel_entry(&self.schemas, c);
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
                None if self.damaged => match self.summary_channel(channel_id) {
                    // Declared in a damaged chunk, and in the summary at the end of the file.
                    Some(c) => {
                        self.channels.insert(channel_id, Ok(Arc::clone(&c)));
                        self.last_channel = Some(Arc::clone(&c));
                        c
                    }
                    None => {
                        // Declared only in a damaged chunk: counted, reported at the end.
                        let o = self.orphans.get_or_insert(Orphans {
                            offset: at,
                            records: 0,
                            first_nanos: t_nanos,
                            last_nanos: t_nanos,
                        });
                        o.records += 1;
                        o.first_nanos = o.first_nanos.min(t_nanos);
                        o.last_nanos = o.last_nanos.max(t_nanos);
                        return Ok(());
                    }
                },
                None => {
                    return Err(err(ReadErrorKind::Corrupt(format!(
                        "a message names channel {channel_id}, which was not declared before it"
                    ))));
                }
            },
        };
        if channel.is_loss {
            let record = decode_versioned::<LossRecord>(data, channel.schema.version())
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
}

/// A schema record's entry in a schema table: the descriptor, or why it cannot be used.
pub(super) fn schema_entry(
    header: &mcap::records::SchemaHeader,
    data: &[u8],
) -> Result<Arc<SchemaDescriptor>, String> {
    if header.encoding != SCHEMA_ENCODING {
        return Err(format!(
            "schema {} '{}' has encoding '{}', not '{SCHEMA_ENCODING}': this is not a snapbus \
         recording",
            header.id, header.name, header.encoding
        ));
    }
    SchemaDescriptor::from_canonical_bytes(data)
        .map(Arc::new)
        .map_err(|e| format!("schema {} '{}': {e}", header.id, header.name))
}

/// A channel record's entry in a channel table (its schema from `schemas`): its id, and the
/// channel or why it cannot be used.
pub(super) fn channel_entry(
    schemas: &Schemas,
    c: mcap::records::Channel,
) -> (u16, Result<Arc<ChannelInfo>, String>) {
    let id = c.id;
    let schema = match schemas.get(&c.schema_id) {
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
