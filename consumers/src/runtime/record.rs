//! What consumers are handed: records, producers, and producers' lifecycle changes.

use std::sync::Arc;

use snapbus_bus::Level;
use snapbus_bus::ProducerInfo;
use snapbus_bus::lane::FrameMeta;
use snapbus_bus::schemas::SchemaDescriptor;
use snapbus_bus::subscriber::{InPlaceRecord, RingPayload};

use crate::fields::Extracted;

/// A producer as consumers see it (borrowed from the subscriber; cheap to copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Producer<'a> {
    /// Process id.
    pub pid: u32,
    /// A short name (the program's, unless the experiment sets one).
    pub name: &'a str,
    /// The command line.
    pub cmdline: &'a [String],
    /// Run metadata: a session tag (groups runs of one study).
    pub session_tag: Option<&'a str>,
    /// Run metadata: a performance tag (e.g. the hardware or config variant).
    pub perf_tag: Option<&'a str>,
    /// The identity of its lane: the same across broker restarts (key per-producer state by
    /// it).
    pub lane_id: u64,
    /// When the producer started, CLOCK_REALTIME nanoseconds.
    pub started_nanos: u64,
    /// Its records are re-emitted from another machine's bus by a bridge
    /// ([`ProducerInfo::relayed`]).
    pub relayed: bool,
}

impl<'a> From<&'a ProducerInfo> for Producer<'a> {
    fn from(p: &'a ProducerInfo) -> Producer<'a> {
        Producer {
            pid: p.pid,
            name: &p.name,
            cmdline: &p.cmdline,
            session_tag: p.session_tag.as_deref(),
            perf_tag: p.perf_tag.as_deref(),
            lane_id: p.lane_id,
            started_nanos: p.started_nanos,
            relayed: p.relayed,
        }
    }
}

/// What a record says about itself besides its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecordHeader {
    /// The record's number in its producer's lane.
    pub seq: u64,
    /// When it was written (claimed), CLOCK_REALTIME nanoseconds.
    pub t_nanos: u64,
    /// Its severity.
    pub level: Level,
    /// The producer's key for the record's schema (one lane's numbering).
    pub schema_key: u16,
    /// The payload's schema version.
    pub schema_version: u16,
    /// The producer's id of the emitter (telemetry handle) that wrote it (0: none).
    pub emitter_id: u16,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl From<&FrameMeta> for RecordHeader {
    fn from(m: &FrameMeta) -> RecordHeader {
        RecordHeader {
            seq: m.seq,
            t_nanos: m.t_nanos,
            level: Level::from_wire(m.level),
            schema_key: m.schema_key,
            schema_version: m.schema_version,
            emitter_id: m.emitter,
            payload_len: m.payload_len,
        }
    }
}

/// A record of a subscribed schema: who wrote it, its schema and header, and its payload in
/// the form `P` ([`Record`]: the bytes; [`InPlace`]: where they lie in the ring; a binding's
/// own object, read by [`Reader::next_with`](crate::Reader::next_with)).
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a, P> {
    /// The broker's id of the producer (for display: see [`Consumer::on_lag`]).
    ///
    /// [`Consumer::on_lag`]: crate::Consumer::on_lag
    pub producer_id: u64,
    /// The producer.
    pub producer: Producer<'a>,
    /// The payload's schema.
    pub schema: &'a Arc<SchemaDescriptor>,
    /// The name of the telemetry handle that emitted it, if known.
    pub emitter: Option<&'a str>,
    /// Its header.
    pub header: RecordHeader,
    /// The payload.
    pub payload: P,
    /// The numbers the consumer asked for ([`Consumer::extract`]), taken from the record
    /// where it lay in the ring; then `payload` is empty. `None`: take them from `payload`.
    ///
    /// [`Consumer::extract`]: crate::Consumer::extract
    pub extracted: Option<&'a Extracted>,
}

/// A record as [`Consumer::on_event`](crate::Consumer::on_event) gets it: the payload in the
/// wire format of `schema` (decode with [`snapbus_bus::schemas::decode`]), or empty when the
/// numbers asked for were taken in place ([`RecordRef::extracted`]).
pub type Record<'a> = RecordRef<'a, &'a [u8]>;

/// A record where it lies in its producer's ring, as the reading closure of
/// [`Reader::next_with`](crate::Reader::next_with) sees it: what is read through `payload` is
/// only to be trusted once the record is delivered.
pub type InPlace<'a> = RecordRef<'a, &'a RingPayload<'a>>;

impl<'a, P> RecordRef<'a, P> {
    /// The record of a frame of `producer`'s lane, with `payload`.
    pub(crate) fn of(
        producer_id: u64,
        producer: &'a ProducerInfo,
        schema: &'a Arc<SchemaDescriptor>,
        emitter: Option<&'a str>,
        meta: &FrameMeta,
        payload: P,
    ) -> RecordRef<'a, P> {
        RecordRef {
            producer_id,
            producer: Producer::from(producer),
            schema,
            emitter,
            header: RecordHeader::from(meta),
            payload,
            extracted: None,
        }
    }

    /// The same record with its payload in another form.
    pub fn map<Q>(self, f: impl FnOnce(P) -> Q) -> RecordRef<'a, Q> {
        RecordRef {
            producer_id: self.producer_id,
            producer: self.producer,
            schema: self.schema,
            emitter: self.emitter,
            header: self.header,
            payload: f(self.payload),
            extracted: self.extracted,
        }
    }
}

impl<'a> From<&'a InPlaceRecord<'a>> for InPlace<'a> {
    fn from(r: &'a InPlaceRecord<'a>) -> InPlace<'a> {
        RecordRef::of(
            r.producer_id,
            r.producer,
            r.schema,
            r.emitter,
            &r.meta,
            r.payload,
        )
    }
}

/// Records of a producer that cannot be read: `lost` were overwritten before they could be
/// read (or left unfinished by a dead producer), `damaged` were under garbage in its ring.
#[derive(Debug, Clone, Copy)]
pub struct Lag<'a> {
    /// The broker's current id of the producer, for display only: a restarted broker numbers
    /// producers anew (a re-adopted consumer sees the same lane under another id, and an old id
    /// may then name another producer). A consumer that keeps state per producer keys it by
    /// [`Producer::lane_id`], which does not change; the same holds for
    /// [`RecordRef::producer_id`].
    pub producer_id: u64,
    /// The producer.
    pub producer: Producer<'a>,
    /// How many were overwritten (or left unfinished).
    pub lost: u64,
    /// How many were lost to garbage in the ring (not in `lost`).
    pub damaged: u64,
}

/// A producer's lane appearing or going.
#[derive(Debug, Clone, Copy)]
pub enum ProducerChange<'a> {
    /// Its lane became readable.
    Joined(Producer<'a>),
    /// It died; what it wrote is still delivered.
    Died(Producer<'a>),
    /// Its lane was read to the end.
    Ended(Producer<'a>),
}
