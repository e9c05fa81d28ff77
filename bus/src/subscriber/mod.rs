//! The consumer side of a bus: subscribe with schema-id globs, then read matching records
//! straight from the producers' lanes.
//!
//! [`Subscriber::connect`] returns once the broker has handed over every lane that exists, so
//! nothing emitted after it returns is missed. Lanes of producers that join later arrive on
//! their own and are read from their oldest record. Keys are resolved through each producer's
//! catalog, so a schema that first appears after the subscription is matched too. If the
//! broker goes away the lanes keep being read, and the subscriber rejoins a new broker.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use snapbus_schemas::SchemaDescriptor;
use thiserror::Error;

use crate::control::{Conn, ControlError, ProducerInfo, RefusedLane};
use crate::doorbell::DoorbellPage;
use crate::lane::{FrameMeta, PayloadView, StartAt};
use crate::mem::ShmMem;
use crate::runtime::BusDir;
use crate::status::StatusBoard;

mod batch;
mod control;
mod glob;
mod lanes;
mod read;

pub use batch::BatchReads;
pub use glob::{Glob, GlobError};
use lanes::SubLane;

/// How long to wait for the broker's answers.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often counters go to the broker (for `snapbus ls`).
const STATS_EVERY: Duration = Duration::from_millis(500);
/// How often to look for a broker after losing it.
const RECONNECT_EVERY: Duration = Duration::from_millis(200);
/// A busy subscriber serves its control socket after this many records…
const PUMP_EVERY_RECORDS: u32 = 1024;
/// …or this long, whichever comes first (checked every 16 records).
const PUMP_EVERY: Duration = Duration::from_millis(20);

/// Why subscribing or reading failed.
#[derive(Debug, Error)]
pub enum SubscribeError {
    /// No broker is running for the bus.
    #[error("no bus '{0}' is running — start one with `snapbus up`")]
    NoBus(String),
    /// The broker refused.
    #[error("the broker refused: {0}")]
    Refused(String),
    /// The control connection failed.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// A glob is malformed.
    #[error(transparent)]
    Glob(#[from] GlobError),
    /// The broker did not answer as expected.
    #[error("unexpected reply from the broker: {0}")]
    Protocol(String),
}

/// What a subscriber asks for.
#[derive(Debug, Clone)]
pub struct SubscribeOptions {
    /// The consumer's kind (`echo`, `hz`, …), for `snapbus ls`.
    pub kind: String,
    /// Schema-id globs; empty: every schema.
    pub globs: Vec<Glob>,
    /// Where to start in lanes that exist when subscribing.
    pub start: StartAt,
    /// A consistent cut (`snapbus snapshot`): read each lane only up to where its producer had
    /// written when the subscription was made, then report it [`Event::Ended`]; lanes that
    /// appear later are not read.
    pub cut: bool,
    /// Lanes (by [`ProducerInfo::lane_id`]) not to read at all: a consumer that also produces
    /// (the aggregator) leaves its own lane alone, so "every producer ended" can come true.
    pub skip_lanes: Vec<u64>,
    /// In lanes read from their oldest record, count the records already overwritten when
    /// reading began as lost (see [`LaneReader::count_loss_from_lane_start`]): for consumers
    /// that account for a producer's whole run, like the aggregator.
    ///
    /// [`LaneReader::count_loss_from_lane_start`]: crate::lane::LaneReader::count_loss_from_lane_start
    pub count_history_as_lost: bool,
}

/// A delivered record: who sent it, its schema and header, and its payload `P`, which is how
/// the record is held:
///
/// - [`Record`] (`P = &[u8]`): the payload copied out of the ring ([`Subscriber::next`]);
/// - [`InPlaceRecord`] (`P = &RingPayload`): the payload where it lies in the ring, for a
///   reading closure ([`Subscriber::next_in_place`]): what is read through it is only to be
///   trusted if the closure's result is delivered (the producer may overwrite the frame while
///   the closure runs, and then the result is thrown away);
/// - `RecordRef<'_, R>` in [`InPlaceEvent::Record`]: what the closure made of the payload,
///   delivered once the frame was found not overwritten while it ran.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a, P> {
    /// The broker's id of the producer.
    pub producer_id: u64,
    /// The producer.
    pub producer: &'a ProducerInfo,
    /// The payload's schema.
    pub schema: &'a Arc<SchemaDescriptor>,
    /// The name of the telemetry handle that emitted it, if known.
    pub emitter: Option<&'a str>,
    /// The frame header.
    pub meta: FrameMeta,
    /// The payload (wire format of `schema`), as `P` holds it.
    pub payload: P,
}

/// A record with its payload copied out of the ring ([`Subscriber::next`]).
pub type Record<'a> = RecordRef<'a, &'a [u8]>;

/// A record's payload where it lies in its producer's ring (see
/// [`Subscriber::next_in_place`]): read through it with atomic loads, never as a `&[u8]`.
pub type RingPayload<'a> = PayloadView<'a, ShmMem>;

/// A record as [`Subscriber::next_in_place`] shows it to its reading closure: the header and
/// where its payload lies in the ring, not a copy of it (see [`RecordRef`]).
pub type InPlaceRecord<'a> = RecordRef<'a, &'a RingPayload<'a>>;

/// What [`Subscriber::next_in_place`] returns.
#[derive(Debug)]
pub enum InPlaceEvent<'a, R> {
    /// A record that was not overwritten while the reading closure ran; its `payload` is
    /// the closure's result.
    Record(RecordRef<'a, R>),
    /// Anything else: never [`Event::Record`].
    Other(Event<'a>),
}
/// What [`Subscriber::next`] returns.
#[derive(Debug)]
pub enum Event<'a> {
    /// A record of a subscribed schema.
    Record(Record<'a>),
    /// Records of this producer's lane that cannot be delivered: `lost` were overwritten
    /// before they could be read (or left unfinished by a dead producer), `damaged` were
    /// under garbage in the ring. Each missing record is counted once, in one of the two.
    Lagged {
        /// The broker's id of the producer.
        producer_id: u64,
        /// The producer.
        producer: &'a ProducerInfo,
        /// How many were overwritten (or left unfinished by a dead producer).
        lost: u64,
        /// How many were lost to damaged memory in the ring (garbage where they were).
        damaged: u64,
    },
    /// A producer's lane became readable.
    Joined(&'a ProducerInfo),
    /// A producer died; what it wrote is still read to the end.
    Died(&'a ProducerInfo),
    /// A producer's lane was read to its end (closed, or dead and drained).
    Ended(&'a ProducerInfo),
}

/// Counters of a subscriber.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubscriberStats {
    /// Records delivered.
    pub delivered: u64,
    /// Records of subscribed lanes lost to overwrites (all schemas: a lane's sequence numbers
    /// do not say which schema a lost record had), or left unfinished by a dead producer.
    pub lost: u64,
    /// Records lost to damaged memory in the rings (garbage skipped where they were); not in
    /// `lost`. Both are reported by [`Event::Lagged`].
    pub damaged: u64,
    /// Garbage spots skipped in the rings (invalid frames or headers).
    pub garbage: u64,
    /// Frames whose schema key no catalog entry explains.
    pub unknown_keys: u64,
}

/// What a lane gave.
enum Found<R> {
    Record(usize, FrameMeta, R),
    /// A lane, the records it lost to overwrites and those it lost to damage.
    Lagged(usize, u64, u64),
    Ended(usize),
}

/// What one wait of the subscriber found.
enum Next<R> {
    Notice(Notice),
    Found(Found<R>),
}

/// What the control socket brought.
enum Notice {
    Joined(usize),
    Died(usize),
}

/// A consumer's connection to a bus.
pub struct Subscriber {
    dir: BusDir,
    opts: SubscribeOptions,
    conn: Option<Conn>,
    page: Option<DoorbellPage>,
    bell: u32,
    /// The broker's id for this consumer (said again when rejoining a restarted broker, which
    /// gives it back).
    consumer_id: Option<u64>,
    lanes: Vec<SubLane>,
    next_lane: usize,
    scratch: Vec<u8>,
    notices: VecDeque<Notice>,
    stats: SubscriberStats,
    /// Lanes that did not validate, never read.
    refused: Vec<RefusedLane>,
    /// The consumer's own status, sent with the counters ([`Subscriber::report_status`]).
    board: Option<StatusBoard>,
    /// Reading in batches ([`Subscriber::read_in_batches`]).
    batch: Option<BatchReads>,
    last_report: Instant,
    last_reconnect: Instant,
    /// Calls of `next` since the control socket was last served, and when that was.
    since_pump: u32,
    last_pump: Instant,
}

impl Subscriber {
    /// Subscribes to the bus of `dir`. Returns once every existing lane is mapped.
    pub fn connect(dir: &BusDir, opts: SubscribeOptions) -> Result<Subscriber, SubscribeError> {
        let mut s = Subscriber {
            dir: dir.clone(),
            opts,
            conn: None,
            page: None,
            bell: 0,
            consumer_id: None,
            lanes: Vec::new(),
            next_lane: 0,
            scratch: Vec::new(),
            notices: VecDeque::new(),
            stats: SubscriberStats::default(),
            refused: Vec::new(),
            board: None,
            batch: None,
            last_report: Instant::now(),
            last_reconnect: Instant::now(),
            since_pump: 0,
            last_pump: Instant::now(),
        };
        s.join(true)?;
        Ok(s)
    }

    /// The next event, waiting up to `timeout` (sleeping on the doorbell, not spinning).
    /// `Ok(None)`: nothing within the timeout. With `Duration::ZERO` it only polls (for a
    /// caller that spins: no system call while nothing arrives; new producers and deaths are
    /// noticed within 1024 calls or 20 ms). A record's payload is copied out of the ring
    /// (once, into a buffer the subscriber reuses); [`Subscriber::next_in_place`] reads it
    /// where it lies instead.
    pub fn next(&mut self, timeout: Duration) -> Result<Option<Event<'_>>, SubscribeError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let next = self.wait(timeout, &mut |r: &InPlaceRecord<'_>| {
            scratch.resize(r.payload.len(), 0);
            // A failed copy is out of bounds, which validation already excludes: skipped.
            r.payload.copy_to(&mut scratch).then_some(())
        });
        self.scratch = scratch;
        Ok(next.map(|n| match n {
            Next::Found(Found::Record(k, meta, ())) => {
                Event::Record(self.lanes[k].record(meta, &self.scratch[..meta.payload_len]))
            }
            other => self.other_event(other),
        }))
    }

    /// [`Subscriber::next`] without copying the payload: `read` looks at the record where it
    /// lies in the producer's ring (through [`RingPayload`]'s atomic loads: a checksum, the few
    /// fields a consumer needs, a tensor reduced as it is read), and its result is delivered
    /// only if the frame was not overwritten while `read` ran. If it was, the result is
    /// dropped, the loss is counted like any other ([`Event::Lagged`] follows) and `read` runs
    /// again on the next record: it may run more than once per call, so it must not have side
    /// effects that matter when its result is thrown away (keep them for the delivered
    /// value). A record read in place costs one pass over its bytes, not a copy and a pass.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use snapbus_bus::subscriber::{InPlaceEvent, RecordRef, Subscriber};
    /// # fn f(sub: &mut Subscriber) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut scratch = [0u8; 4096];
    /// if let Some(InPlaceEvent::Record(RecordRef { payload: sum, .. })) =
    ///     sub.next_in_place(Duration::from_millis(100), |r| {
    ///         let mut sum = 0u64;
    ///         r.payload.for_each_chunk(&mut scratch, |piece| {
    ///             sum = piece.iter().fold(sum, |s, &b| s.wrapping_add(u64::from(b)));
    ///         });
    ///         sum
    ///     })?
    /// {
    ///     println!("byte sum {sum}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn next_in_place<R>(
        &mut self,
        timeout: Duration,
        mut read: impl FnMut(&InPlaceRecord<'_>) -> R,
    ) -> Result<Option<InPlaceEvent<'_, R>>, SubscribeError> {
        let next = self.wait(timeout, &mut |r: &InPlaceRecord<'_>| Some(read(r)));
        Ok(next.map(|n| self.in_place_event(n)))
    }

    /// Sends `board`'s entries with this subscriber's counters from now on (about twice a
    /// second, and at once), so that `snapbus ls` shows what the consumer says about its work.
    pub fn report_status(&mut self, board: StatusBoard) {
        self.board = Some(board);
        self.report();
    }

    /// Counters.
    pub fn stats(&self) -> SubscriberStats {
        SubscriberStats {
            garbage: self.lanes.iter().map(|l| l.reader.stats().garbage).sum(),
            ..self.stats
        }
    }

    /// Lanes that were refused (their header or catalog did not validate) and are not read.
    pub fn refused_lanes(&self) -> &[RefusedLane] {
        &self.refused
    }

    /// Whether the broker is connected now.
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// The producers whose lanes are read (live or not yet drained).
    pub fn producers(&self) -> impl Iterator<Item = &ProducerInfo> {
        self.lanes.iter().filter(|l| !l.ended).map(|l| &l.info)
    }

    /// The globs no schema on the bus matches yet (every catalog is read first; empty when no
    /// producer is on the bus, where nothing could match). Records of a matching schema that
    /// appears later are still delivered.
    pub fn unmatched_globs(&mut self) -> Vec<&str> {
        if self.lanes.is_empty() {
            return Vec::new();
        }
        let mut ids = Vec::new();
        for l in &mut self.lanes {
            l.catalog.refresh();
            ids.extend(l.catalog.schemas().map(|(_, d)| d.id().to_owned()));
        }
        self.opts
            .globs
            .iter()
            .filter(|g| !ids.iter().any(|id| g.matches(id)))
            .map(Glob::as_str)
            .collect()
    }

    /// Whether every lane known was read to its end (true when there are none).
    pub fn all_ended(&self) -> bool {
        self.lanes.iter().all(|l| l.ended)
    }
}

impl Drop for Subscriber {
    /// The final counters, so that `snapbus ls` shows what a consumer that left had done.
    fn drop(&mut self) {
        self.report();
    }
}
