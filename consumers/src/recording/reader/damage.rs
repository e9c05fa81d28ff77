//! Damage: skipping a damaged chunk and describing it from its header and message indexes,
//! and (with a seekable source) resynchronising at the next intact chunk after broken framing.

use std::io::Read;
use std::sync::Arc;

use mcap::sans_io::LinearReader;
use snapbus_schemas::SchemaDescriptor;

use super::records::{channel_entry, schema_entry};
use super::{
    Channels, Damage, Held, Item, READ_PIECE, RECORD_LIMIT, RecordingReader, Schemas, SeekFn,
    linear_options,
};

/// The footer record (opcode, length, summary start, summary offset start, summary CRC) and
/// the end magic: the last bytes of a finished file.
const FOOTER_TAIL: u64 = 1 + 8 + 8 + 8 + 4 + 8;
/// Largest summary section loaded to find channels declared in damaged parts.
const SUMMARY_LIMIT: u64 = 256 << 20;

/// Bytes of a chunk record before its records: opcode, length, start and end time,
/// uncompressed size, CRC, compression (empty), records length.
const CHUNK_HEAD: usize = 1 + 8 + 8 + 8 + 8 + 4 + 4 + 8;

/// The same for an LZ4 chunk (compression `lz4`).
const LZ4_HEAD: usize = CHUNK_HEAD + 3;

/// A chunk header found while resynchronising.
struct Candidate {
    /// The record's length field.
    len: u64,
    start: u64,
    end: u64,
    /// Uncompressed size of its records.
    size: u64,
    crc: u32,
    /// Compressed with LZ4 (else stored).
    lz4: bool,
    /// Bytes of the record before its records.
    head: usize,
    /// Its records' length as stored.
    records: u64,
}

impl Candidate {
    /// The header at the start of `b` (a chunk opcode), if its compression is one snapbus
    /// writes and `b` holds all of it.
    fn parse(b: &[u8]) -> Option<Candidate> {
        let (lz4, head) = match u32_at(b, 37) {
            0 => (false, CHUNK_HEAD),
            3 if b.get(41..44) == Some(b"lz4") && b.len() >= LZ4_HEAD => (true, LZ4_HEAD),
            _ => return None,
        };
        Some(Candidate {
            len: u64_at(b, 1),
            start: u64_at(b, 9),
            end: u64_at(b, 17),
            size: u64_at(b, 25),
            crc: u32_at(b, 33),
            lz4,
            head,
            records: u64_at(b, head - 8),
        })
    }
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

impl<R: Read> RecordingReader<R> {
    /// Queues the damage being described, and the messages of undeclared channels.
    pub(super) fn end_damage(&mut self) {
        if let Some(d) = self.damage.take() {
            self.pending.push_back(Item::Damaged(d));
        }
        if self.done {
            if let Some(o) = self.orphans.take() {
                self.pending.push_back(Item::Damaged(Damage {
                    offset: o.offset,
                    len: 0,
                    error: format!(
                        "{} records from this offset on belong to channels declared only in a \
                         damaged part of the file (and not in a summary at its end): they \
                         cannot be decoded",
                        o.records
                    ),
                    held: Some(Held {
                        first_nanos: o.first_nanos,
                        last_nanos: o.last_nanos,
                        records: Some(o.records),
                        channels: Vec::new(),
                    }),
                }));
            }
        }
    }

    /// A chunk failed: skip it, and describe it from its header and the message indexes
    /// that follow it.
    pub(super) fn skip_chunk(
        &mut self,
        at: u64,
        len: u64,
        error: String,
        header: Option<(u64, u64)>,
    ) {
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
    pub(super) fn resync(&mut self, at: u64, why: &str) -> bool {
        // Also before the recording metadata was read (damage to the header or to it): the
        // chunks after it are still read, and their channels say whether this is a recording.
        if !self.started || self.data_ended {
            return false;
        }
        let Some(seek) = self.seek else { return false };
        // From the start of the record before `at` when there is one: a damaged length of
        // that record (a message index, metadata) can have carried the reader past intact
        // chunks to `at`.
        let before = self.last_at.filter(|&l| l < at);
        let Some(next) = self.find_chunk(seek, before.unwrap_or(at) + 1) else {
            // The search moved the source: put it back where reading stopped, so the caller
            // reports the damage at `at` and reads nothing from elsewhere. (Fuzzer finding:
            // without this, reading went on from where the search left off, and parts past
            // the end of the file were reported as damaged.)
            if seek(&mut self.src, std::io::SeekFrom::Start(self.fed)).is_err() {
                self.done = true;
            }
            return false;
        };
        if seek(&mut self.src, std::io::SeekFrom::Start(next)).is_err() {
            return false;
        }
        self.pending.clear();
        self.end_damage();
        self.damaged = true;
        // Chunks between that record and `at`: the damage starts at that record.
        let from = before.filter(|_| next < at).unwrap_or(at);
        self.damage = Some(Damage {
            offset: from,
            len: next.saturating_sub(from),
            error: format!("{why}; reading goes on with the next intact chunk"),
            held: None,
        });
        self.last_at = None;
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
        let mut buf = vec![0u8; READ_PIECE + LZ4_HEAD];
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
                let at = pos + i as u64;
                let Some(c) = Candidate::parse(&buf[i..n]) else {
                    continue;
                };
                let plausible = c.crc != 0
                    && c.records <= RECORD_LIMIT as u64
                    && c.size <= RECORD_LIMIT as u64
                    && (c.lz4 || c.records == c.size)
                    && c.len == (c.head as u64 - 9) + c.records
                    && c.start <= c.end
                    && at + 9 + c.len <= end;
                if plausible && self.chunk_crc_matches(seek, at + c.head as u64, &c) {
                    return Some(at);
                }
            }
            // The next piece overlaps this one by a chunk header.
            pos += (n.saturating_sub(LZ4_HEAD) + 1) as u64;
        }
        None
    }

    fn chunk_crc_matches(&mut self, seek: SeekFn<R>, from: u64, c: &Candidate) -> bool {
        if seek(&mut self.src, std::io::SeekFrom::Start(from)).is_err() {
            return false;
        }
        if c.lz4 {
            // The CRC is over the records uncompressed.
            let Ok(len) = usize::try_from(c.records) else {
                return false;
            };
            let mut packed = vec![0u8; len];
            return match read_full(&mut self.src, &mut packed) {
                Ok(n) if n == len => crate::recording::mcap_out::lz4_unframe(&packed, c.size)
                    .is_ok_and(|plain| crc32fast::hash(&plain) == c.crc),
                _ => false,
            };
        }
        let len = c.records;
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
        h.finalize() == c.crc
    }

    /// A message index record after a damaged chunk: what the chunk held.
    pub(super) fn take_index(&mut self, body: &[u8]) {
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

    /// The channel `id` as the summary section at the end of the file declares it (loaded
    /// once; none without seeking, a summary, or with one that fails its CRC).
    pub(super) fn summary_channel(&mut self, id: u16) -> Option<Arc<super::ChannelInfo>> {
        match self.summary().1.get(&id)? {
            Ok(c) => Some(Arc::clone(c)),
            Err(_) => None,
        }
    }

    /// The schema `id` as the summary section declares it (see [`Self::summary_channel`]).
    pub(super) fn summary_schema(&mut self, id: u16) -> Option<Arc<SchemaDescriptor>> {
        match self.summary().0.get(&id)? {
            Ok(s) => Some(Arc::clone(s)),
            Err(_) => None,
        }
    }

    /// The summary's schemas and channels, loaded the first time.
    fn summary(&mut self) -> &(Schemas, Channels) {
        if self.summary.is_none() {
            let loaded = match self.seek {
                Some(seek) => {
                    let loaded = self.load_summary(seek).unwrap_or_default();
                    // Back to where reading is.
                    if seek(&mut self.src, std::io::SeekFrom::Start(self.fed)).is_err() {
                        self.done = true;
                    }
                    loaded
                }
                None => (Schemas::new(), Channels::new()),
            };
            self.summary = Some(loaded);
        }
        self.summary.get_or_insert_default()
    }

    /// The schema and channel records of the summary section, if the footer points to one and
    /// its CRC matches (a damaged summary is not trusted: it could name wrong schemas).
    fn load_summary(&mut self, seek: SeekFn<R>) -> Option<(Schemas, Channels)> {
        let end = seek(&mut self.src, std::io::SeekFrom::End(0)).ok()?;
        let footer_at = end.checked_sub(FOOTER_TAIL)?;
        seek(&mut self.src, std::io::SeekFrom::Start(footer_at)).ok()?;
        let mut tail = [0u8; FOOTER_TAIL as usize];
        if read_full(&mut self.src, &mut tail).ok()? != tail.len()
            || tail[0] != mcap::records::op::FOOTER
            || u64_at(&tail, 1) != 20
            || tail[29..] != mcap::MAGIC[..]
        {
            return None;
        }
        let start = u64_at(&tail, 9);
        let crc = u32_at(&tail, 25);
        if start == 0 || start >= footer_at || footer_at - start > SUMMARY_LIMIT {
            return None;
        }
        seek(&mut self.src, std::io::SeekFrom::Start(start)).ok()?;
        let mut summary = vec![0u8; usize::try_from(footer_at - start).ok()?];
        if read_full(&mut self.src, &mut summary).ok()? != summary.len() {
            return None;
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&summary);
        h.update(&tail[..25]);
        if crc == 0 || h.finalize() != crc {
            return None;
        }
        Some(summary_channels(&summary))
    }
}

/// The schemas and channels that the schema and channel records of a summary section declare.
fn summary_channels(mut rest: &[u8]) -> (Schemas, Channels) {
    use mcap::records::op;
    let mut schemas = Schemas::new();
    let mut channels = Channels::new();
    while rest.len() >= 9 {
        let opcode = rest[0];
        let Some(body) = usize::try_from(u64_at(rest, 1))
            .ok()
            .and_then(|n| rest.get(9..9usize.checked_add(n)?))
        else {
            break;
        };
        rest = &rest[9 + body.len()..];
        // Only these two are parsed (`mcap::parse_record` panics on some damaged others).
        if !matches!(opcode, op::SCHEMA | op::CHANNEL) {
            continue;
        }
        match mcap::parse_record(opcode, body) {
            Ok(mcap::records::Record::Schema { header, data }) => {
                schemas.insert(header.id, schema_entry(&header, &data));
            }
            Ok(mcap::records::Record::Channel(c)) => {
                let (id, info) = channel_entry(&schemas, c);
                channels.insert(id, info);
            }
            _ => {}
        }
    }
    (schemas, channels)
}
