//! The consumer side of a bus: subscribe with schema-id globs, then read matching records
//! straight from the producers' lanes.
//!
//! [`Subscriber::connect`] returns once the broker has handed over every lane that exists, so
//! nothing emitted after it returns is missed. Lanes of producers that join later arrive on
//! their own and are read from their oldest record. Keys are resolved through each producer's
//! catalog, so a schema that first appears after the subscription is matched too. If the
//! broker goes away the lanes keep being read, and the subscriber rejoins a new broker.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use snapbus_schemas::SchemaDescriptor;
use thiserror::Error;

use crate::catalog::Catalog;
use crate::control::{
    Conn, ConsumerInfo, ControlError, FromBroker, LaneCursor, LaneInfo, PROTOCOL_VERSION,
    ProducerInfo, RefusedLane, ToBroker,
};
use crate::doorbell::DoorbellPage;
use crate::lane::{FrameMeta, LaneReader, NoFrame, PayloadView, ShmLane, StartAt};
use crate::mem::ShmMem;
use crate::runtime::BusDir;
use crate::status::StatusBoard;

mod glob;
pub use glob::{Glob, GlobError};

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

/// A delivered record.
#[derive(Debug)]
pub struct Record<'a> {
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
    /// The payload (wire format of `schema`).
    pub payload: &'a [u8],
}

/// A record's payload where it lies in its producer's ring (see
/// [`Subscriber::next_in_place`]): read through it with atomic loads, never as a `&[u8]`.
pub type RingPayload<'a> = PayloadView<'a, ShmMem>;

/// A record as [`Subscriber::next_in_place`] shows it to its reading closure: the header and
/// where its payload lies in the ring, not a copy of it.
pub struct InPlaceRecord<'a> {
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
    /// The payload in the ring. What is read through it is only to be trusted if
    /// [`Subscriber::next_in_place`] delivers the closure's result: the producer may overwrite
    /// the frame while the closure runs, and then the result is thrown away.
    pub payload: &'a RingPayload<'a>,
}

/// What [`Subscriber::next_in_place`] returns.
#[derive(Debug)]
pub enum InPlaceEvent<'a, R> {
    /// What the reading closure made of a record, which was not overwritten while it ran.
    Record {
        /// The broker's id of the producer.
        producer_id: u64,
        /// The producer.
        producer: &'a ProducerInfo,
        /// The payload's schema.
        schema: &'a Arc<SchemaDescriptor>,
        /// The name of the telemetry handle that emitted it, if known.
        emitter: Option<&'a str>,
        /// The frame header.
        meta: FrameMeta,
        /// The closure's result.
        value: R,
    },
    /// Anything else: never [`Event::Record`].
    Other(Event<'a>),
}

/// What [`Subscriber::next`] returns.
#[derive(Debug)]
pub enum Event<'a> {
    /// A record of a subscribed schema.
    Record(Record<'a>),
    /// `lost` records of this producer's lane were overwritten before they could be read.
    Lagged {
        /// The broker's id of the producer.
        producer_id: u64,
        /// The producer.
        producer: &'a ProducerInfo,
        /// How many.
        lost: u64,
    },
    /// A producer's lane became readable.
    Joined(&'a ProducerInfo),
    /// A producer died; what it wrote is still read to the end.
    Died(&'a ProducerInfo),
    /// A producer's lane was read to its end (closed, or dead and drained).
    Ended(&'a ProducerInfo),
}

/// Reading in batches ([`Subscriber::read_in_batches`]): a lane is read only once it holds
/// `min_bytes` not yet read, or once its oldest unread byte has waited `max_wait`; then
/// everything it holds is read.
///
/// A consumer that reads right behind its producer keeps taking the cache line the producer
/// is writing (both CPUs trade it, for every record). One that stays a batch behind reads
/// lines the producer is done with, and goes back to sleep for a whole batch at a time. The
/// price is latency (up to `max_wait`): for consumers that do not need microseconds (a
/// recorder, an aggregator, an exporter), not for a live view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchReads {
    /// Bytes a lane must hold unread before it is read (64 KiB by default).
    pub min_bytes: u64,
    /// The longest a byte waits to be read (5 ms by default).
    pub max_wait: Duration,
}

impl Default for BatchReads {
    fn default() -> BatchReads {
        BatchReads {
            min_bytes: 64 << 10,
            max_wait: Duration::from_millis(5),
        }
    }
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

struct SubLane {
    producer_id: u64,
    info: ProducerInfo,
    reader: LaneReader<ShmMem>,
    catalog: Catalog,
    /// Schema key → its descriptor if it matches the globs, `None` if it does not.
    matches: KeyMap,
    dead: bool,
    ended: bool,
    /// With [`SubscribeOptions::cut`] or [`Subscriber::cut_now`]: the lane position to stop at.
    cut_at: Option<u64>,
    /// The cut is [`Subscriber::cut_now`]'s: reaching it ends the lane silently (no
    /// [`Event::Ended`]: its producer has not ended).
    cut_silently: bool,
    /// The reader's damaged-record count already split out of a `Lagged`.
    damaged_seen: u64,
    /// Reading in batches: since when the lane has held bytes not yet read (`None`: nothing
    /// pending, or a batch is being read).
    pending_since: Option<Instant>,
    /// Reading in batches: a batch is being read (until the lane is empty).
    in_batch: bool,
}

/// Schema key → whether it matches (with its descriptor), indexed by the key: a lookup per
/// record is an index, not a hash.
#[derive(Default)]
struct KeyMap(Vec<Option<Option<Arc<SchemaDescriptor>>>>);

impl KeyMap {
    /// `None`: the key was never classified.
    #[inline]
    fn get(&self, key: u16) -> Option<&Option<Arc<SchemaDescriptor>>> {
        self.0.get(usize::from(key)).and_then(Option::as_ref)
    }

    fn insert_new(&mut self, key: u16, f: impl FnOnce() -> Option<Arc<SchemaDescriptor>>) {
        let k = usize::from(key);
        if self.0.len() <= k {
            self.0.resize(k + 1, None);
        }
        if self.0[k].is_none() {
            self.0[k] = Some(f());
        }
    }
}

enum Found<R> {
    Record(usize, FrameMeta, R),
    Lagged(usize, u64),
    Ended(usize),
}

/// What one wait of the subscriber found.
enum Next<R> {
    Notice(Notice),
    Found(Found<R>),
}

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

    /// Hello, welcome, then every existing lane up to the broker's `Ok`.
    fn join(&mut self, first: bool) -> Result<(), SubscribeError> {
        let sock = self.dir.socket_path();
        let mut conn =
            Conn::connect(&sock).map_err(|_| SubscribeError::NoBus(self.dir.name().to_string()))?;
        let hello = ToBroker::HelloConsumer {
            version: PROTOCOL_VERSION,
            info: ConsumerInfo {
                pid: std::process::id(),
                kind: self.opts.kind.clone(),
                subscriptions: self
                    .opts
                    .globs
                    .iter()
                    .map(|g| g.as_str().to_owned())
                    .collect(),
            },
            previous_id: self.consumer_id,
        };
        let (reply, mut fds): (FromBroker, _) = conn.request(&hello, REPLY_TIMEOUT)?;
        match reply {
            FromBroker::WelcomeConsumer {
                bell, consumer_id, ..
            } => {
                self.bell = bell;
                self.consumer_id = Some(consumer_id);
                self.page = fds.pop().and_then(|fd| DoorbellPage::open(fd).ok());
            }
            FromBroker::Error { message } => return Err(SubscribeError::Refused(message)),
            other => return Err(SubscribeError::Protocol(format!("{other:?}"))),
        }
        let start = self.opts.start;
        loop {
            let Some((msg, fds)) = conn.recv::<FromBroker>(Some(REPLY_TIMEOUT))? else {
                return Err(ControlError::Timeout(REPLY_TIMEOUT).into());
            };
            match msg {
                FromBroker::Ok => break,
                FromBroker::Lane(info) => {
                    // On a rejoin, lanes we already read keep their cursor; new ones start at
                    // their oldest record (nothing was read from them yet).
                    self.add_lane(
                        info,
                        fds,
                        if first { start } else { StartAt::Oldest },
                        first,
                    );
                }
                FromBroker::LaneDead { producer_id } => self.lane_died(producer_id),
                _ => {}
            }
        }
        // Every lane is mapped with its start position fixed: tell the broker (an `attach`
        // waiting for this consumer returns now).
        conn.send(&ToBroker::Subscribed, &[])?;
        self.conn = Some(conn);
        Ok(())
    }

    fn add_lane(
        &mut self,
        info: LaneInfo,
        mut fds: Vec<std::os::fd::OwnedFd>,
        start: StartAt,
        first: bool,
    ) {
        if (self.opts.cut && !first) || self.opts.skip_lanes.contains(&info.producer.lane_id) {
            return;
        }
        if let Some(k) = self
            .lanes
            .iter()
            .position(|l| l.info.lane_id == info.producer.lane_id)
        {
            self.lanes[k].producer_id = info.producer_id;
            return;
        }
        let Ok::<[std::os::fd::OwnedFd; 2], _>([lane_fd, cat_fd]) =
            std::mem::take(&mut fds).try_into()
        else {
            return;
        };
        let opened = ShmLane::open(lane_fd)
            .map_err(|e| format!("its lane is refused: {e}"))
            .and_then(|l| {
                Catalog::open(cat_fd)
                    .map(|c| (l, c))
                    .map_err(|e| format!("its catalog is refused: {e}"))
            });
        let (lane, catalog) = match opened {
            Ok(lc) => lc,
            Err(reason) => {
                // A lane that does not validate is never read (nor trusted), and said so: on
                // stderr once, and to the broker for `snapbus ls`.
                let lane_id = info.producer.lane_id;
                if !self.refused.iter().any(|r| r.lane_id == lane_id) {
                    let producer = format!("'{}' (pid {})", info.producer.name, info.producer.pid);
                    crate::say!(
                        "snapbus: not reading producer {producer} of bus '{}': {reason}",
                        self.dir.name()
                    );
                    self.refused.push(RefusedLane {
                        lane_id,
                        producer,
                        reason,
                    });
                }
                return;
            }
        };
        let cut_at = self.opts.cut.then(|| lane.lane().stats().claim_tail);
        let mut reader = lane.lane().reader(start);
        if self.opts.count_history_as_lost && matches!(start, StartAt::Oldest) {
            reader.count_loss_from_lane_start();
        }
        if info.dead {
            reader.set_writer_gone(true);
        }
        self.lanes.push(SubLane {
            producer_id: info.producer_id,
            info: info.producer,
            reader,
            catalog,
            matches: KeyMap::default(),
            dead: info.dead,
            ended: false,
            cut_at,
            cut_silently: false,
            damaged_seen: 0,
            pending_since: None,
            in_batch: false,
        });
        self.notices.push_back(Notice::Joined(self.lanes.len() - 1));
    }

    fn lane_died(&mut self, producer_id: u64) {
        if let Some(k) = self.lanes.iter().position(|l| l.producer_id == producer_id) {
            let l = &mut self.lanes[k];
            if !l.dead {
                l.dead = true;
                l.reader.set_writer_gone(true);
                self.notices.push_back(Notice::Died(k));
            }
        }
    }

    /// Handles what the broker sent; rejoins a broker after losing one; reports counters.
    fn pump_control(&mut self) {
        self.since_pump = 0;
        self.last_pump = Instant::now();
        if let Some(conn) = self.conn.as_mut() {
            let mut msgs = Vec::new();
            let mut lost_conn = false;
            loop {
                match conn.try_recv::<FromBroker>() {
                    Ok(Some(m)) => msgs.push(m),
                    Ok(None) => break,
                    Err(_) => {
                        lost_conn = true;
                        break;
                    }
                }
            }
            for (msg, fds) in msgs {
                match msg {
                    FromBroker::Lane(info) => self.add_lane(info, fds, StartAt::Oldest, false),
                    FromBroker::LaneDead { producer_id } => self.lane_died(producer_id),
                    _ => {}
                }
            }
            if lost_conn {
                self.conn = None;
                self.last_reconnect = Instant::now();
            }
        } else if self.last_reconnect.elapsed() >= RECONNECT_EVERY {
            self.last_reconnect = Instant::now();
            let _ = self.join(false);
        }
        if self.last_report.elapsed() >= STATS_EVERY {
            self.last_report = Instant::now();
            self.report();
        }
    }

    /// Sends the counters and cursors to the broker (for `snapbus ls`, which works out lag
    /// and overwrites past the cursors itself, so they stay true while this consumer does
    /// not report).
    fn report(&self) {
        if let Some(conn) = &self.conn {
            let stats = self.stats();
            let lanes = self
                .lanes
                .iter()
                .filter(|l| !l.ended)
                .map(|l| LaneCursor {
                    lane_id: l.info.lane_id,
                    position: l.reader.position(),
                    expected_seq: l.reader.expected_seq(),
                })
                .collect();
            let _ = conn.send(
                &ToBroker::ConsumerStats {
                    delivered: stats.delivered,
                    lost: stats.lost,
                    damaged: stats.damaged,
                    garbage: stats.garbage,
                    lanes,
                    refused: self.refused.clone(),
                    board: self
                        .board
                        .as_ref()
                        .map(StatusBoard::entries)
                        .unwrap_or_default(),
                },
                &[],
            );
        }
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
                let l = &self.lanes[k];
                let schema = l
                    .matches
                    .get(meta.schema_key)
                    .and_then(|m| m.as_ref())
                    .expect("a found record's key matches");
                Event::Record(Record {
                    producer_id: l.producer_id,
                    producer: &l.info,
                    schema,
                    emitter: l.catalog.emitter(meta.emitter).map(|n| &**n),
                    meta,
                    payload: &self.scratch[..meta.payload_len],
                })
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
    /// # use snapbus_bus::subscriber::{InPlaceEvent, Subscriber};
    /// # fn f(sub: &mut Subscriber) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut scratch = [0u8; 4096];
    /// if let Some(InPlaceEvent::Record { value: sum, .. }) =
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

    /// The in-place event of what a wait found.
    #[inline]
    fn in_place_event<R>(&self, next: Next<R>) -> InPlaceEvent<'_, R> {
        match next {
            Next::Found(Found::Record(k, meta, value)) => record_event(&self.lanes[k], meta, value),
            other => InPlaceEvent::Other(self.other_event(other)),
        }
    }

    /// The event of anything but a record.
    fn other_event<R>(&self, next: Next<R>) -> Event<'_> {
        match next {
            Next::Notice(Notice::Joined(k)) => Event::Joined(&self.lanes[k].info),
            Next::Notice(Notice::Died(k)) => Event::Died(&self.lanes[k].info),
            Next::Found(f) => lane_event(&self.lanes[found_lane(&f)], f),
        }
    }

    /// Waits up to `timeout` for a notice or a record (`read` makes the latter's value, `None`
    /// to skip it).
    fn wait<R>(
        &mut self,
        timeout: Duration,
        read: &mut impl FnMut(&InPlaceRecord<'_>) -> Option<R>,
    ) -> Option<Next<R>> {
        let mut deadline = None;
        loop {
            // The control socket (new lanes, deaths) and the counters for `ls` are served when
            // idle, and while busy every few records (a syscall per record would halve the
            // rate of a fast consumer).
            self.since_pump += 1;
            if self.since_pump >= PUMP_EVERY_RECORDS
                || (self.since_pump % 128 == 0 && self.last_pump.elapsed() >= PUMP_EVERY)
            {
                self.pump_control();
            }
            if let Some(n) = self.notices.pop_front() {
                return Some(Next::Notice(n));
            }
            if let Some(f) = self.poll_lanes(read) {
                if let Found::Record(..) = f {
                    self.stats.delivered += 1;
                }
                return Some(Next::Found(f));
            }
            if timeout.is_zero() {
                // A caller that spins: no clock read, no system call per empty poll (the
                // periodic pump above still serves the control socket).
                return None;
            }
            self.pump_control();
            if !self.notices.is_empty() {
                continue;
            }
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + timeout);
            if now >= deadline {
                return None;
            }
            let nap = (deadline - now).min(Duration::from_millis(100));
            if let Some(b) = self.batch
                && self
                    .lanes
                    .iter()
                    .any(|l| !l.ended && l.reader.has_pending_bytes())
            {
                // Bytes are there but not a batch yet: the doorbell would ring at once; nap
                // for a slice of the longest wait instead.
                std::thread::sleep(nap.min(b.max_wait / 4).max(Duration::from_micros(50)));
                continue;
            }
            match &self.page {
                Some(page) => {
                    if let Some(bell) = page.bell(self.bell as usize) {
                        let lanes = &self.lanes;
                        bell.wait_until(
                            || {
                                lanes
                                    .iter()
                                    .any(|l| !l.ended && l.reader.has_pending_bytes())
                            },
                            64,
                            nap,
                        );
                    }
                }
                None => std::thread::sleep(nap.min(Duration::from_millis(10))),
            }
        }
    }

    /// One round over the lanes, starting after the last one that gave something.
    fn poll_lanes<R>(
        &mut self,
        read: &mut impl FnMut(&InPlaceRecord<'_>) -> Option<R>,
    ) -> Option<Found<R>> {
        let n = self.lanes.len();
        for i in 0..n {
            let k = (self.next_lane + i) % n;
            if let Some(f) = self.poll_lane(k, read) {
                self.next_lane = k + 1;
                return Some(f);
            }
        }
        None
    }

    fn poll_lane<R>(
        &mut self,
        k: usize,
        read: &mut impl FnMut(&InPlaceRecord<'_>) -> Option<R>,
    ) -> Option<Found<R>> {
        let globs = &self.opts.globs;
        let lane = &mut self.lanes[k];
        if lane.ended {
            return None;
        }
        if let Some(b) = self.batch
            && !lane.in_batch
            && lane.cut_at.is_none()
        {
            // Not before a batch is there, or its first byte has waited long enough (a lane
            // with nothing pending is read as usual: its end, or its producer's death). A
            // batch is at most a quarter of the ring, so a small ring is read before it wraps.
            let pending = lane.reader.pending_bytes();
            if pending > 0 {
                let since = *lane.pending_since.get_or_insert_with(Instant::now);
                let min = b.min_bytes.min(lane.reader.lane().geometry().capacity / 4);
                if pending < min && since.elapsed() < b.max_wait {
                    return None;
                }
                lane.in_batch = true;
            }
        }
        // Bounded work per call, so one busy lane cannot starve the others.
        for _ in 0..4096 {
            // At the cut (checked before every frame: skipped records must not carry the
            // reader past it).
            if lane.cut_at.is_some_and(|cut| lane.reader.position() >= cut) {
                lane.ended = true;
                if lane.cut_silently {
                    return None;
                }
                return Some(Found::Ended(k));
            }
            match read_record(lane, globs, read) {
                Ok((meta, Some(value))) => return Some(Found::Record(k, meta, value)),
                Ok((meta, None)) => {
                    if lane.matches.get(meta.schema_key).is_none() {
                        self.stats.unknown_keys += 1;
                    }
                }
                Err(no) => return no_frame(lane, &mut self.stats, k, no),
            }
        }
        None
    }

    /// Reads records in place, like [`next_in_place`](Self::next_in_place), but hands `on`
    /// every event it finds in one call, up to `max`: it waits up to `timeout` for the first,
    /// then goes on reading that record's lane, record after record, until the lane has
    /// nothing more to give now (its end, a lap, a record being written), `max` events, or the
    /// subscriber's periodic service of the control socket is due (every 1,024 records, or
    /// 20 ms: the next call serves it). Records come straight from
    /// the lane's reader to `on`, without the per-call work of `next_in_place` (the wait, the
    /// round over the lanes): the way to read many small records, as the batch mode's
    /// consumers do. `on` returning [`ControlFlow::Break`] ends the call after that event.
    /// Returns how many events `on` got (0: nothing within the timeout). `read` may run more
    /// than once per record, as with `next_in_place`.
    ///
    /// **Speed.** The subscriber's side of the loop is inlined; keep `read` and `on` so too
    /// (`#[inline(always)]` on the closures, and on what they call per record). A value `read`
    /// returns from a call that is not inlined comes back through the stack when it is larger
    /// than two words, and copying it on right away waits for the stores that just wrote it:
    /// `compare`'s 64-byte batch consumer, whose `read` returns 72 bytes, went from 25 to 38 M
    /// records/s inlined (BENCHMARKS.md, issue #21).
    ///
    /// ```no_run
    /// # use std::ops::ControlFlow;
    /// # use std::time::Duration;
    /// # use snapbus_bus::subscriber::{InPlaceEvent, Subscriber};
    /// # fn f(sub: &mut Subscriber) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut seqs = Vec::new();
    /// sub.drain_in_place(Duration::from_millis(100), 4096, |r| r.payload.word(0), |ev| {
    ///     if let InPlaceEvent::Record { meta, .. } = ev {
    ///         seqs.push(meta.seq);
    ///     }
    ///     ControlFlow::Continue(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn drain_in_place<R>(
        &mut self,
        timeout: Duration,
        max: usize,
        mut read: impl FnMut(&InPlaceRecord<'_>) -> R,
        mut on: impl FnMut(InPlaceEvent<'_, R>) -> ControlFlow<()>,
    ) -> Result<usize, SubscribeError> {
        if max == 0 {
            return Ok(0);
        }
        // Inlined wherever it is called, as `read_record`'s closure is, so the caller's value
        // does not come back through the stack ("Speed") — in the loop below, that is; `wait`
        // (the first record of a call) is not inlined, and its one record a call pays it.
        let mut read = std::convert::identity(
            #[inline(always)]
            |r: &InPlaceRecord<'_>| Some(read(r)),
        );
        let Some(first) = self.wait(timeout, &mut read) else {
            return Ok(0);
        };
        let lane_k = match first {
            Next::Found(Found::Record(k, ..)) => Some(k),
            _ => None,
        };
        let flow = on(self.in_place_event(first));
        let mut n = 1;
        if flow.is_break() {
            return Ok(n);
        }
        let Some(k) = lane_k else {
            return Ok(n);
        };
        let Subscriber {
            lanes,
            stats,
            opts,
            since_pump,
            last_pump,
            ..
        } = self;
        let globs = &opts.globs;
        let lane = &mut lanes[k];
        // A cut is checked before every frame by the general path: leave cut lanes to it. (A
        // lane ends only where the loop below stops.)
        if lane.cut_at.is_some() || lane.ended {
            return Ok(n);
        }
        // The control socket is due as `wait` says: every 1,024 records, or 20 ms (the clock
        // read every 128 records: `on` may be slow). Counted here, stored when the loop ends.
        let mut since = *since_pump;
        while n < max {
            since += 1;
            if since >= PUMP_EVERY_RECORDS
                || (since % 128 == 0 && last_pump.elapsed() >= PUMP_EVERY)
            {
                // The caller's next wait serves it (its first step counts to the limit).
                since = PUMP_EVERY_RECORDS - 1;
                break;
            }
            match read_record(lane, globs, &mut read) {
                Ok((meta, Some(value))) => {
                    stats.delivered += 1;
                    n += 1;
                    let flow = on(record_event(lane, meta, value));
                    if flow.is_break() {
                        break;
                    }
                }
                Ok((meta, None)) => {
                    if lane.matches.get(meta.schema_key).is_none() {
                        stats.unknown_keys += 1;
                    }
                }
                Err(no) => {
                    if let Some(f) = no_frame::<R>(lane, stats, k, no) {
                        n += 1;
                        // The last event of this call either way.
                        let _ = on(InPlaceEvent::Other(lane_event(lane, f)));
                    }
                    break;
                }
            }
        }
        *since_pump = since;
        Ok(n)
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

    /// Stops where the producers are now: each lane is read up to what its producer has
    /// claimed at this moment, then no further; lanes that appear later are not read (what
    /// [`SubscribeOptions::cut`] does at subscription time). For a consumer told to stop (a
    /// recorder on Ctrl-C) that first takes in what was emitted before it was told. A lane
    /// that reaches its cut ends without an [`Event::Ended`] (its producer has not ended; one
    /// that does end before the cut is reported as usual); [`Subscriber::all_ended`] is true
    /// once every lane is at its cut or ended.
    pub fn cut_now(&mut self) {
        // Lanes the broker has announced but this subscriber has not taken yet are cut too.
        self.pump_control();
        self.opts.cut = true;
        for l in &mut self.lanes {
            if l.cut_at.is_none() && !l.ended {
                l.cut_at = Some(l.reader.lane().stats().claim_tail);
                l.cut_silently = true;
            }
        }
    }

    /// Bytes of frames (records with their headers and padding) claimed in the lanes not read
    /// to their end (up to their cut, if any) and not read yet: what a consumer that stops now
    /// leaves behind.
    pub fn unread_bytes(&self) -> u64 {
        self.lanes
            .iter()
            .filter(|l| !l.ended)
            .map(|l| {
                let pending = l.reader.pending_bytes();
                match l.cut_at {
                    Some(cut) => pending.min(cut.saturating_sub(l.reader.position())),
                    None => pending,
                }
            })
            .sum()
    }

    /// Reads in batches from now on ([`BatchReads`]): each lane once it holds
    /// `batch.min_bytes` not yet read or its oldest unread byte has waited `batch.max_wait`,
    /// then to its end. `None`: record by record, as soon as each is there (the default).
    pub fn read_in_batches(&mut self, batch: Option<BatchReads>) {
        self.batch = batch;
        if batch.is_none() {
            for l in &mut self.lanes {
                l.in_batch = false;
                l.pending_since = None;
            }
        }
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

/// The lane a find is of.
fn found_lane<R>(f: &Found<R>) -> usize {
    match f {
        Found::Record(k, ..) | Found::Lagged(k, _) | Found::Ended(k) => *k,
    }
}

/// The in-place event of a record found in lane `l`.
#[inline(always)]
fn record_event<R>(l: &SubLane, meta: FrameMeta, value: R) -> InPlaceEvent<'_, R> {
    InPlaceEvent::Record {
        producer_id: l.producer_id,
        producer: &l.info,
        schema: l
            .matches
            .get(meta.schema_key)
            .and_then(|m| m.as_ref())
            .expect("a found record's key matches"),
        emitter: l.catalog.emitter(meta.emitter).map(|n| &**n),
        meta,
        value,
    }
}

/// The event of a lane's find other than a record.
fn lane_event<R>(l: &SubLane, f: Found<R>) -> Event<'_> {
    match f {
        Found::Lagged(_, lost) => Event::Lagged {
            producer_id: l.producer_id,
            producer: &l.info,
            lost,
        },
        Found::Ended(_) => Event::Ended(&l.info),
        Found::Record(..) => unreachable!("records are mapped by the caller"),
    }
}

/// Reads a lane's next record in place ([`visit`] makes what `read` says of it): the reader's
/// outcome, for [`Subscriber::poll_lane`] and [`Subscriber::drain_in_place`].
#[inline(always)]
fn read_record<R>(
    lane: &mut SubLane,
    globs: &[Glob],
    read: &mut impl FnMut(&InPlaceRecord<'_>) -> Option<R>,
) -> Result<(FrameMeta, Option<R>), NoFrame> {
    let SubLane {
        reader,
        matches,
        catalog,
        info,
        producer_id,
        ..
    } = lane;
    // Inlined (so are `visit` and `read_in_place`): out of line, the closure's result (the
    // caller's value, of any size) came back through the stack, and copying it on stalled on
    // the stores that had just written it (`Subscriber::drain_in_place`, "Speed").
    reader.read_in_place(
        #[inline(always)]
        |m, view| visit(globs, matches, catalog, info, *producer_id, m, view, read),
    )
}

/// Looks at a record where it lies for [`Subscriber::poll_lane`] and
/// [`Subscriber::drain_in_place`]: classifies a key seen for the first time (its schema is in
/// the producer's catalog by then: registered before its first record; only the first record
/// of each key pays for this), skips a record no glob matches (`None`), else what `read` makes
/// of it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn visit<R>(
    globs: &[Glob],
    matches: &mut KeyMap,
    catalog: &mut Catalog,
    info: &ProducerInfo,
    producer_id: u64,
    m: &FrameMeta,
    view: &RingPayload<'_>,
    read: &mut impl FnMut(&InPlaceRecord<'_>) -> Option<R>,
) -> Option<R> {
    if matches.get(m.schema_key).is_none() {
        catalog.refresh();
        for (key, d) in catalog.schemas() {
            matches.insert_new(key, || {
                (globs.is_empty() || globs.iter().any(|g| g.matches(d.id()))).then(|| Arc::clone(d))
            });
        }
    }
    let Some(Some(schema)) = matches.get(m.schema_key) else {
        return None;
    };
    read(&InPlaceRecord {
        producer_id,
        producer: info,
        schema,
        emitter: catalog.emitter(m.emitter).map(|n| &**n),
        meta: *m,
        payload: view,
    })
}

/// What a lane's reader said other than a record: counted, and what it makes the subscriber
/// report, if anything. `Empty` ends a batch being read (and, of a dead producer's lane read
/// to its end, the lane). Inlined: a spinning reader meets `Empty` at every poll.
#[inline(always)]
fn no_frame<R>(
    lane: &mut SubLane,
    stats: &mut SubscriberStats,
    k: usize,
    no: NoFrame,
) -> Option<Found<R>> {
    match no {
        NoFrame::Lagged(lost) => {
            // Split what the reader counted as damage from overwrite loss.
            let damaged = lane.reader.stats().damaged;
            let new_damage = damaged.saturating_sub(lane.damaged_seen).min(lost);
            lane.damaged_seen = damaged;
            stats.damaged += new_damage;
            stats.lost += lost - new_damage;
            Some(Found::Lagged(k, lost))
        }
        NoFrame::Closed => {
            lane.ended = true;
            Some(Found::Ended(k))
        }
        NoFrame::Empty => {
            // A batch read to the end of what was there.
            lane.in_batch = false;
            lane.pending_since = None;
            if lane.dead && !lane.reader.has_pending_bytes() {
                lane.ended = true;
                return Some(Found::Ended(k));
            }
            None
        }
        NoFrame::Pending => None,
    }
}
