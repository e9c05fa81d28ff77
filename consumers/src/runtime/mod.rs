//! The consumer trait and the run loop every consumer uses: [`run`] pushes what a
//! [`Reader`] pulls to a [`Consumer`]'s hooks.

use std::sync::Arc;

use snapbus_bus::Level;
use snapbus_bus::schemas::SchemaDescriptor;

use crate::fields::Plan;

mod options;
mod reader;
mod record;
mod run;

pub use options::{DRAIN_ON_STOP, RunError, RunOptions, RunSummary, StopReason};
pub use reader::{Item, Reader};
pub use record::{InPlace, Lag, Producer, ProducerChange, Record, RecordHeader, RecordRef};
pub use run::run;

/// What a hook asks the run loop to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep going.
    Continue,
    /// Flush and return.
    Stop,
}

/// An error a consumer's hook returns (the run loop flushes what it can and returns it).
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

/// What a consumer takes from the records of a schema when it wants only their numbers
/// ([`Consumer::extract`]).
#[derive(Debug, Clone)]
pub struct Extract {
    /// What to extract.
    pub plan: Arc<Plan>,
    /// Records smaller than this are copied instead (a small record costs less to copy once
    /// than to read field by field from the ring: see
    /// [`IN_PLACE_MIN_BYTES`](crate::fields::IN_PLACE_MIN_BYTES)).
    pub min_bytes: usize,
    /// `Some(level)`: records of this level or above are copied instead (a consumer that
    /// logs them needs every byte).
    pub below_level: Option<Level>,
}

impl Extract {
    /// `plan`'s numbers, from records of at least
    /// [`IN_PLACE_MIN_BYTES`](crate::fields::IN_PLACE_MIN_BYTES) of any level.
    pub fn new(plan: Arc<Plan>) -> Extract {
        Extract {
            plan,
            min_bytes: crate::fields::IN_PLACE_MIN_BYTES,
            below_level: None,
        }
    }

    /// Whether a record of `len` bytes and `level` is read in place.
    #[inline]
    pub(crate) fn takes(&self, len: usize, level: u8) -> bool {
        len >= self.min_bytes && self.below_level.is_none_or(|l| Level::from_wire(level) < l)
    }
}

/// A consumer: every hook has a default body, so a consumer implements only what it needs.
///
/// Back-pressure contract: hooks run on the consumer's own thread, in its own process, and may
/// take as long as they like — the producers never wait for them. A consumer that falls more
/// than a ring behind loses records, and is told exactly how many ([`Consumer::on_lag`]).
pub trait Consumer {
    /// A record of a subscribed schema. Its numbers may have been extracted where it lay in
    /// the ring ([`Consumer::extract`]): then `record.extracted` holds them and
    /// `record.payload` is empty.
    fn on_event(&mut self, record: &Record<'_>) -> Result<Flow, HookError> {
        let _ = record;
        Ok(Flow::Continue)
    }

    /// `Some`: of the records of `schema` of at least `min_bytes`, this consumer needs only
    /// what `plan` extracts. The run loop then extracts it where the record lies in the ring
    /// (one pass over the bytes, no copy of the payload) and hands [`Consumer::on_event`]
    /// the values ([`RecordRef::extracted`]) and an empty payload; a record the producer
    /// overwrote meanwhile is not delivered (it counts as lost, and [`Consumer::on_lag`]
    /// follows). `None` (the default): every record is copied. Asked once per schema, after
    /// its first record (which is copied) was handed to [`Consumer::on_event`].
    fn extract(&mut self, schema: &Arc<SchemaDescriptor>) -> Option<Extract> {
        let _ = schema;
        None
    }

    /// Records of a producer were overwritten before they could be read (key per-producer
    /// state by [`Producer::lane_id`], not [`Lag::producer_id`]).
    fn on_lag(&mut self, lag: Lag<'_>) -> Result<Flow, HookError> {
        let _ = lag;
        Ok(Flow::Continue)
    }

    /// A schema (id, version and descriptor) seen for the first time, before its first record.
    fn on_schema(&mut self, schema: &Arc<SchemaDescriptor>) -> Result<Flow, HookError> {
        let _ = schema;
        Ok(Flow::Continue)
    }

    /// A producer joined, died or ended.
    fn on_producer(&mut self, change: ProducerChange<'_>) -> Result<Flow, HookError> {
        let _ = change;
        Ok(Flow::Continue)
    }

    /// Make everything received so far durable or visible (called every
    /// [`RunOptions::flush_every`] and before the run loop returns).
    fn flush(&mut self) -> Result<(), HookError> {
        Ok(())
    }

    /// The run loop handed over everything its reader held when it last woke (called after
    /// each batch of records, and after each wait that found none): a consumer that holds
    /// records back to send them together sends them now, so that holding back adds no
    /// latency beyond the batch.
    fn caught_up(&mut self) -> Result<(), HookError> {
        Ok(())
    }
}
