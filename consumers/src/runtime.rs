//! The consumer trait and the run loop every consumer uses.

use std::cell::RefCell;
use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use snapbus_bus::Level;
use snapbus_bus::ProducerInfo;
use snapbus_bus::lane::{FrameMeta, StartAt};
use snapbus_bus::runtime::BusDir;
use snapbus_bus::schemas::SchemaDescriptor;
use snapbus_bus::status::StatusBoard;
use snapbus_bus::subscriber::{
    self, BatchReads, Event, Glob, InPlaceEvent, RecordRef, RingPayload, SubscribeError,
    SubscribeOptions, Subscriber,
};
use thiserror::Error;

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

/// A record of a subscribed schema, as [`Consumer::on_event`] gets it.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The broker's id of the producer (for display: see [`Consumer::on_lag`]).
    pub producer_id: u64,
    /// The producer.
    pub producer: Producer<'a>,
    /// The payload's schema.
    pub schema: &'a Arc<SchemaDescriptor>,
    /// The name of the telemetry handle that emitted it, if known.
    pub emitter: Option<&'a str>,
    /// Its header.
    pub header: RecordHeader,
    /// The payload (wire format of `schema`; decode with [`snapbus_bus::schemas::decode`]).
    pub payload: &'a [u8],
}

impl<'a> From<&subscriber::Record<'a>> for Record<'a> {
    fn from(r: &subscriber::Record<'a>) -> Record<'a> {
        Record {
            producer_id: r.producer_id,
            producer: Producer::from(r.producer),
            schema: r.schema,
            emitter: r.emitter,
            header: RecordHeader::from(&r.meta),
            payload: r.payload,
        }
    }
}

/// A record of a subscribed schema where it lies in its producer's ring, as
/// [`Consumer::read_in_place`] sees it: the header, and the payload to read through
/// (numbers with [`Plan::extract_from`](crate::fields::Plan::extract_from), or
/// [`RingPayload`]'s own methods), not a copy of it.
#[derive(Clone, Copy)]
pub struct InPlace<'a> {
    /// The broker's id of the producer (for display: see [`Consumer::on_lag`]).
    pub producer_id: u64,
    /// The producer.
    pub producer: Producer<'a>,
    /// The payload's schema.
    pub schema: &'a Arc<SchemaDescriptor>,
    /// The name of the telemetry handle that emitted it, if known.
    pub emitter: Option<&'a str>,
    /// Its header.
    pub header: RecordHeader,
    /// The payload in the ring (wire format of `schema`). What is read through it is only to
    /// be trusted once the record is delivered ([`Consumer::on_read_in_place`]).
    pub payload: &'a RingPayload<'a>,
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

/// A consumer: every hook has a default body, so a consumer implements only what it needs.
///
/// Back-pressure contract: hooks run on the consumer's own thread, in its own process, and may
/// take as long as they like — the producers never wait for them. A consumer that falls more
/// than a ring behind loses records, and is told exactly how many ([`Consumer::on_lag`]).
pub trait Consumer {
    /// A record of a subscribed schema.
    fn on_event(&mut self, record: &Record<'_>) -> Result<Flow, HookError> {
        let _ = record;
        Ok(Flow::Continue)
    }

    /// `Some(min_bytes)`: this consumer takes what it needs from records of at least
    /// `min_bytes` where they lie in the ring ([`Consumer::read_in_place`]) instead of from a
    /// copy (smaller ones cost less to copy once than to read field by field from the ring:
    /// see [`IN_PLACE_MIN_BYTES`](crate::fields::IN_PLACE_MIN_BYTES)). `None` (the default):
    /// every record is copied. Asked once, when the run starts.
    fn reads_in_place(&self) -> Option<usize> {
        None
    }

    /// A record of a subscribed schema, where it lies in its producer's ring (only if
    /// [`Consumer::reads_in_place`], for records of the size it says). Take what [`Consumer::on_read_in_place`] will need into
    /// the consumer's own scratch (numbers with
    /// [`Plan::extract_from`](crate::fields::Plan::extract_from): one pass over the bytes, no
    /// copy of the payload) and return `true`; or return `false`, and the record is copied
    /// and given to [`Consumer::on_event`] as usual.
    ///
    /// It runs **before** the record is validated. If the producer overwrote the record
    /// meanwhile, what was taken is garbage: the record is not delivered (it counts as lost,
    /// and [`Consumer::on_lag`] follows) and this runs again on the next record. So it must
    /// change nothing but that scratch, which the next call overwrites. The first record of
    /// each schema goes to [`Consumer::on_event`], after [`Consumer::on_schema`]. A consumer
    /// that implements this implements [`Consumer::on_read_in_place`] too: its default hands
    /// [`Consumer::on_event`] an empty payload.
    fn read_in_place(&mut self, record: &InPlace<'_>) -> bool {
        let _ = record;
        false
    }

    /// The record [`Consumer::read_in_place`] took from the ring was not overwritten while it
    /// did: use what it took. `record.payload` is empty. The default hands it to
    /// [`Consumer::on_event`].
    fn on_read_in_place(&mut self, record: &Record<'_>) -> Result<Flow, HookError> {
        self.on_event(record)
    }

    /// `lost` records of a producer were overwritten before they could be read.
    ///
    /// `producer_id` is the broker's current id of the producer, for display only: a
    /// restarted broker numbers producers anew (a re-adopted consumer sees the same lane under
    /// another id, and an old id may then name another producer). A consumer that keeps
    /// state per producer keys it by [`Producer::lane_id`], which does not change; the
    /// same holds for [`Record::producer_id`].
    fn on_lag(
        &mut self,
        producer_id: u64,
        producer: Producer<'_>,
        lost: u64,
    ) -> Result<Flow, HookError> {
        let _ = (producer_id, producer, lost);
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
}

/// How to run a consumer.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Its kind, for `snapbus ls`.
    pub kind: String,
    /// Schema-id globs (empty: everything).
    pub globs: Vec<Glob>,
    /// Where to start in lanes that exist already.
    pub start: StartAt,
    /// How often [`Consumer::flush`] is called while running.
    pub flush_every: Duration,
    /// Return once every producer on the bus has ended.
    pub until_end: bool,
    /// Return on SIGINT or SIGTERM (after a flush). Off when the caller handles signals.
    pub handle_signals: bool,
    /// Read only what the lanes hold now, then stop (see [`SubscribeOptions::cut`]; use with
    /// `until_end`).
    ///
    /// [`SubscribeOptions::cut`]: snapbus_bus::subscriber::SubscribeOptions::cut
    pub cut: bool,
    /// Lanes not to read (see [`SubscribeOptions::skip_lanes`]).
    ///
    /// [`SubscribeOptions::skip_lanes`]: snapbus_bus::subscriber::SubscribeOptions::skip_lanes
    pub skip_lanes: Vec<u64>,
    /// Count records overwritten before reading began as lost (see
    /// [`SubscribeOptions::count_history_as_lost`]).
    ///
    /// [`SubscribeOptions::count_history_as_lost`]: snapbus_bus::subscriber::SubscribeOptions::count_history_as_lost
    pub count_history_as_lost: bool,
    /// The consumer's own status board, sent with its counters so that `snapbus ls` shows it
    /// (see [`snapbus_bus::status`]); keep a clone to update it from any thread.
    pub status: Option<StatusBoard>,
    /// Read in batches (see [`BatchReads`]): for consumers that do not need microseconds (a
    /// recorder, an aggregator, an exporter). `None` (the default): each record at once.
    pub batch: Option<BatchReads>,
    /// On a signal or the stop flag, first read what the producers had emitted until then
    /// (their lanes cut where they were, [`Subscriber::cut_now`]), for at most this long (a
    /// second signal ends it); what is left unread then is reported
    /// ([`RunSummary::unread_bytes`]). Zero: stop at once. Lanes reaching their cut are not
    /// reported to the consumer as ended: their producers go on.
    pub drain_on_stop: Duration,
}

impl RunOptions {
    /// Every schema, from the latest record, flushing every second, until interrupted.
    pub fn new(kind: impl Into<String>) -> RunOptions {
        RunOptions {
            kind: kind.into(),
            globs: Vec::new(),
            start: StartAt::Latest,
            flush_every: Duration::from_secs(1),
            until_end: false,
            handle_signals: true,
            cut: false,
            skip_lanes: Vec::new(),
            count_history_as_lost: false,
            status: None,
            batch: None,
            drain_on_stop: DRAIN_ON_STOP,
        }
    }
}

/// How long a stopped run goes on reading what was emitted before the stop, by default.
pub const DRAIN_ON_STOP: Duration = Duration::from_secs(2);

/// Why the run loop stopped with an error.
#[derive(Debug, Error)]
pub enum RunError {
    /// Subscribing or reading failed (no bus running, the broker refused, …).
    #[error(transparent)]
    Subscribe(#[from] SubscribeError),
    /// A hook failed.
    #[error("the consumer failed: {0}")]
    Hook(HookError),
    /// The signal handler could not be installed.
    #[error("installing a signal handler: {0}")]
    Signals(std::io::Error),
}

/// Why the run loop returned normally, and what it saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary {
    /// Records delivered (to `on_event`, or to `on_read_in_place`).
    pub delivered: u64,
    /// Of those, the records read where they lay in the ring (`on_read_in_place`).
    pub read_in_place: u64,
    /// Records lost (reported to `on_lag`).
    pub lost: u64,
    /// Why it returned.
    pub reason: StopReason,
    /// Bytes of frames (records, their headers and padding) emitted before a stop (signal or
    /// stop flag) that were still unread when the run returned (the drain ran out of time, was
    /// cut short by a second signal, or was off): lost to this consumer. Zero when it read
    /// everything up to the stop, and when it never was told to stop.
    pub unread_bytes: u64,
}

/// See [`RunSummary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A hook returned [`Flow::Stop`].
    Consumer,
    /// SIGINT or SIGTERM.
    Signal,
    /// Every producer ended (`until_end`).
    AllEnded,
    /// The caller's stop flag.
    Stopped,
}

/// Subscribes to the bus of `dir` and feeds `consumer` until it, a signal, `until_end` or
/// `stop` says to stop; flushes before returning (also on a hook error). Idle consumers sleep
/// on their doorbell: no CPU is used while nothing arrives.
pub fn run<C: Consumer + ?Sized>(
    dir: &BusDir,
    opts: &RunOptions,
    consumer: &mut C,
    stop: Option<&AtomicBool>,
) -> Result<RunSummary, RunError> {
    let signalled = Arc::new(AtomicBool::new(false));
    if opts.handle_signals {
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, Arc::clone(&signalled)).map_err(RunError::Signals)?;
        }
    }
    let mut sub = Subscriber::connect(
        dir,
        SubscribeOptions {
            kind: opts.kind.clone(),
            globs: opts.globs.clone(),
            start: opts.start,
            cut: opts.cut,
            skip_lanes: opts.skip_lanes.clone(),
            count_history_as_lost: opts.count_history_as_lost,
        },
    )?;
    if let Some(board) = &opts.status {
        sub.report_status(board.clone());
    }
    let mut schemas = SeenSchemas::default();
    let mut last_flush = Instant::now();
    let mut since_clock = 0u32;
    if let Some(batch) = opts.batch {
        sub.read_in_batches(Some(batch));
    }
    let (mut delivered, mut lost, mut read_in_place) = (0u64, 0u64, 0u64);
    // Consumers that read in place: the copy of a record they do not take (reused).
    let in_place_from = consumer.reads_in_place();
    let mut copy = Vec::new();
    // Told to stop: why, and until when what was emitted before is read.
    let mut draining: Option<(StopReason, Instant)> = None;
    let result = loop {
        match draining {
            None => {
                let why = if signalled.load(Ordering::Relaxed) {
                    Some(StopReason::Signal)
                } else if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                    Some(StopReason::Stopped)
                } else {
                    None
                };
                if let Some(why) = why {
                    // Where the producers are now: what is read from here on is what was
                    // emitted before the stop.
                    sub.cut_now();
                    if opts.drain_on_stop.is_zero() {
                        break Ok(why);
                    }
                    sub.read_in_batches(None);
                    // A second signal ends the drain.
                    signalled.store(false, Ordering::Relaxed);
                    draining = Some((why, Instant::now() + opts.drain_on_stop));
                }
            }
            Some((why, until)) => {
                if sub.all_ended() || Instant::now() >= until || signalled.load(Ordering::Relaxed) {
                    break Ok(why);
                }
            }
        }
        // The clock is read every 64 records (and after every idle wait).
        since_clock += 1;
        if since_clock >= 64 {
            since_clock = 0;
            if last_flush.elapsed() >= opts.flush_every {
                last_flush = Instant::now();
                if let Err(e) = consumer.flush() {
                    break Err(e);
                }
            }
        }
        let timeout = Duration::from_millis(100);
        let flow = if let Some(min_bytes) = in_place_from {
            // Everything a batch holds, in one call (`drain_in_place`): the reading closure
            // and the event callback both reach the consumer (never at the same time: a
            // record is read, then handed over), so it is shared through a `RefCell`.
            let st = RefCell::new(InPlaceState {
                consumer: &mut *consumer,
                schemas: &mut schemas,
                copy: &mut copy,
                delivered: &mut delivered,
                read_in_place: &mut read_in_place,
                lost: &mut lost,
            });
            let mut flow = Ok(Flow::Continue);
            let read = |r: &subscriber::InPlaceRecord<'_>| {
                let st = &mut *st.borrow_mut();
                if r.payload.len() >= min_bytes && st.schemas.announced(r.schema) {
                    let rec = InPlace {
                        producer_id: r.producer_id,
                        producer: Producer::from(r.producer),
                        schema: r.schema,
                        emitter: r.emitter,
                        header: RecordHeader::from(&r.meta),
                        payload: r.payload,
                    };
                    if st.consumer.read_in_place(&rec) {
                        return Read::Taken;
                    }
                }
                st.copy.resize(r.payload.len(), 0);
                // A failed copy is out of bounds, which validation already excludes.
                if r.payload.copy_to(st.copy) {
                    Read::Copied
                } else {
                    Read::Unreadable
                }
            };
            let on = |ev: InPlaceEvent<'_, Read>| {
                flow = st.borrow_mut().on_event(ev);
                match flow {
                    Ok(Flow::Continue) => ControlFlow::Continue(()),
                    _ => ControlFlow::Break(()),
                }
            };
            match sub.drain_in_place(timeout, usize::MAX, read, on) {
                Ok(0) => {
                    since_clock = 64;
                    Ok(Flow::Continue)
                }
                Ok(n) => {
                    since_clock = since_clock.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
                    flow
                }
                Err(e) => return flush_then(consumer, Err(RunError::Subscribe(e))),
            }
        } else {
            match sub.next(timeout) {
                Ok(None) => {
                    since_clock = 64;
                    Ok(Flow::Continue)
                }
                Ok(Some(event)) => {
                    dispatch(consumer, event, &mut schemas, &mut delivered, &mut lost)
                }
                Err(e) => return flush_then(consumer, Err(RunError::Subscribe(e))),
            }
        };
        match flow {
            Ok(Flow::Continue) => {}
            Ok(Flow::Stop) => break Ok(StopReason::Consumer),
            Err(e) => break Err(e),
        }
        if opts.until_end && draining.is_none() && sub.all_ended() {
            break Ok(StopReason::AllEnded);
        }
    };
    let unread_bytes =
        if draining.is_some() || matches!(result, Ok(StopReason::Signal | StopReason::Stopped)) {
            sub.unread_bytes()
        } else {
            0
        };
    let result = result
        .map(|reason| RunSummary {
            delivered,
            read_in_place,
            lost,
            reason,
            unread_bytes,
        })
        .map_err(RunError::Hook);
    flush_then(consumer, result)
}

/// The schemas a run loop has announced ([`Consumer::on_schema`]). Fingerprints cover id,
/// version and type; the last schema's address saves the lookup for runs of one schema.
#[derive(Default)]
struct SeenSchemas {
    fingerprints: HashSet<u64>,
    last: Option<Arc<SchemaDescriptor>>,
}

impl SeenSchemas {
    /// Whether [`Consumer::on_schema`] was called for `schema`.
    fn announced(&self, schema: &Arc<SchemaDescriptor>) -> bool {
        self.last.as_ref().is_some_and(|l| Arc::ptr_eq(l, schema))
            || self.fingerprints.contains(&schema.fingerprint())
    }
}

/// What the run loop's in-place reading and its event callback share (through a `RefCell`:
/// both reach the consumer, one after the other).
struct InPlaceState<'a, C: ?Sized> {
    consumer: &'a mut C,
    schemas: &'a mut SeenSchemas,
    /// The copy of a record the consumer did not take in place (reused).
    copy: &'a mut Vec<u8>,
    delivered: &'a mut u64,
    read_in_place: &'a mut u64,
    lost: &'a mut u64,
}

impl<C: Consumer + ?Sized> InPlaceState<'_, C> {
    /// Hands one event of an in-place read to the consumer's hooks.
    fn on_event(&mut self, ev: InPlaceEvent<'_, Read>) -> Result<Flow, HookError> {
        match ev {
            InPlaceEvent::Record(RecordRef {
                producer_id,
                producer,
                schema,
                emitter,
                meta,
                payload: value,
            }) => {
                let mut record = Record {
                    producer_id,
                    producer: Producer::from(producer),
                    schema,
                    emitter,
                    header: RecordHeader::from(&meta),
                    payload: &[],
                };
                match value {
                    Read::Taken => {
                        *self.delivered += 1;
                        *self.read_in_place += 1;
                        self.consumer.on_read_in_place(&record)
                    }
                    Read::Copied => {
                        record.payload = &self.copy[..meta.payload_len];
                        deliver(self.consumer, &record, self.schemas, self.delivered)
                    }
                    Read::Unreadable => Ok(Flow::Continue),
                }
            }
            InPlaceEvent::Other(event) => dispatch(
                self.consumer,
                event,
                self.schemas,
                self.delivered,
                self.lost,
            ),
        }
    }
}

/// How a record read in place was read.
enum Read {
    /// [`Consumer::read_in_place`] took what it needs.
    Taken,
    /// Copied (into the run loop's buffer) for [`Consumer::on_event`].
    Copied,
    /// Not readable (out of bounds: never, once validated).
    Unreadable,
}

/// Hands a record to [`Consumer::on_event`] (`on_schema` first for a schema not seen yet),
/// counting it delivered.
fn deliver<C: Consumer + ?Sized>(
    consumer: &mut C,
    record: &Record<'_>,
    schemas: &mut SeenSchemas,
    delivered: &mut u64,
) -> Result<Flow, HookError> {
    if !schemas
        .last
        .as_ref()
        .is_some_and(|l| Arc::ptr_eq(l, record.schema))
    {
        schemas.last = Some(Arc::clone(record.schema));
        if schemas.fingerprints.insert(record.schema.fingerprint())
            && consumer.on_schema(record.schema)? == Flow::Stop
        {
            return Ok(Flow::Stop);
        }
    }
    *delivered += 1;
    consumer.on_event(record)
}

/// Hands one subscriber event to the consumer's hook (`on_schema` first for a schema not seen
/// yet), counting records delivered and lost.
fn dispatch<C: Consumer + ?Sized>(
    consumer: &mut C,
    event: Event<'_>,
    schemas: &mut SeenSchemas,
    delivered: &mut u64,
    lost: &mut u64,
) -> Result<Flow, HookError> {
    match event {
        Event::Record(r) => deliver(consumer, &Record::from(&r), schemas, delivered),
        Event::Lagged {
            producer_id,
            producer,
            lost: n,
        } => {
            *lost += n;
            consumer.on_lag(producer_id, producer.into(), n)
        }
        Event::Joined(p) => consumer.on_producer(ProducerChange::Joined(p.into())),
        Event::Died(p) => consumer.on_producer(ProducerChange::Died(p.into())),
        Event::Ended(p) => consumer.on_producer(ProducerChange::Ended(p.into())),
    }
}

/// Flushes, then returns `result` (a flush error replaces a success).
fn flush_then<C: Consumer + ?Sized>(
    consumer: &mut C,
    result: Result<RunSummary, RunError>,
) -> Result<RunSummary, RunError> {
    let flushed = consumer.flush();
    match (result, flushed) {
        (Ok(_), Err(e)) => Err(RunError::Hook(e)),
        (r, _) => r,
    }
}
