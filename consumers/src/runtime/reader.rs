//! The pull form of the runtime: a [`Reader`] hands out what [`run`](crate::run) hands to a
//! consumer's hooks, one [`Item`] per call.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use snapbus_bus::runtime::BusDir;
use snapbus_bus::schemas::SchemaDescriptor;
use snapbus_bus::subscriber::{
    Event, InPlaceEvent, InPlaceRecord, RecordRef as BusRecord, SubscribeError, Subscriber,
};

use super::Extract;
use super::options::{RunError, RunOptions, RunSummary, StopReason};
use super::record::{InPlace, Lag, ProducerChange, Record, RecordRef};
use crate::fields::Extracted;

/// The longest [`Reader::next`] waits.
const WAIT: Duration = Duration::from_millis(100);

/// What a [`Reader`] read.
#[derive(Debug)]
pub enum Item<'a, P = &'a [u8]> {
    /// A record of a schema seen before in this run.
    Record(RecordRef<'a, P>),
    /// The first record of a schema not seen before in this run: announce `record.schema`
    /// ([`Consumer::on_schema`](crate::Consumer::on_schema)), then take the record.
    NewSchema(RecordRef<'a, P>),
    /// Records of a producer were overwritten before they could be read.
    Lag(Lag<'a>),
    /// A producer joined, died or ended.
    Producer(ProducerChange<'a>),
    /// Time to make what was received durable or visible ([`RunOptions::flush_every`]).
    Flush,
    /// The run is over (a signal, the stop flag, `until_end`), and why; what was emitted
    /// before a stop was read first ([`RunOptions::drain_on_stop`]). Every later call returns
    /// it again.
    End(RunSummary),
}

/// What the reader says without reading.
#[derive(Clone, Copy)]
enum Tick {
    Flush,
    End(RunSummary),
}

impl<P> From<Tick> for Item<'_, P> {
    fn from(t: Tick) -> Self {
        match t {
            Tick::Flush => Item::Flush,
            Tick::End(s) => Item::End(s),
        }
    }
}

/// A subscription read the way [`run`](crate::run) reads it, one [`Item`] per call to
/// [`next`](Reader::next): batch reads, the status board, signals, `until_end`, the flush
/// cadence and drain-on-stop all behave as in `run` (which is a loop over a `Reader`).
///
/// ```no_run
/// use snapbus_consumers::prelude::*;
/// use snapbus_consumers::{Item, Reader};
///
/// let dir = BusDir::locate(&BusName::resolve(None)?);
/// let mut reader = Reader::open(&dir, &RunOptions::new("pull"))?;
/// loop {
///     match reader.next()? {
///         Some(Item::Record(r) | Item::NewSchema(r)) => println!("{} #{}", r.schema.id(), r.header.seq),
///         Some(Item::End(summary)) => break println!("{summary:?}"),
///         _ => {}
///     }
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Reader {
    sub: Subscriber,
    ctl: Control,
    bufs: Bufs,
}

/// What reading a record in place takes, and where the last one read was put.
#[derive(Default)]
struct Bufs {
    /// What to extract, by schema.
    extracts: Extracts,
    /// Its copy (reused).
    copy: Vec<u8>,
    /// Its numbers.
    extracted: Extracted,
}

impl Reader {
    /// Subscribes to the bus of `dir` as `opts` says (and installs the signal handlers if
    /// `opts.handle_signals`).
    pub fn open(dir: &BusDir, opts: &RunOptions) -> Result<Reader, RunError> {
        let signalled = Arc::new(AtomicBool::new(false));
        if opts.handle_signals {
            for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
                signal_hook::flag::register(sig, Arc::clone(&signalled))
                    .map_err(RunError::Signals)?;
            }
        }
        let mut sub = Subscriber::connect(dir, opts.subscribe.clone())?;
        if let Some(board) = &opts.status {
            sub.report_status(board.clone());
        }
        if let Some(batch) = opts.batch {
            sub.read_in_batches(Some(batch));
        }
        Ok(Reader {
            sub,
            ctl: Control {
                flush_every: opts.flush_every,
                until_end: opts.until_end,
                drain_on_stop: opts.drain_on_stop,
                signalled,
                stop: Arc::new(AtomicBool::new(false)),
                draining: None,
                ended: None,
                after_read: false,
                since_clock: 0,
                last_flush: Instant::now(),
                seen: SeenSchemas::default(),
                delivered: 0,
                read_in_place: 0,
                lost: 0,
            },
            bufs: Bufs::default(),
        })
    }

    /// The next item, waiting up to 100 ms (`None`: nothing came). A record's payload is
    /// copied out of the ring once, unless its numbers are all that is wanted
    /// ([`set_extract`](Reader::set_extract)).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Item<'_>>, SubscribeError> {
        self.next_timeout(WAIT)
    }

    /// [`next`](Reader::next), waiting up to `timeout` (zero: only look).
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Item<'_>>, SubscribeError> {
        let Reader { sub, ctl, bufs } = self;
        if let Some(t) = ctl.before_read(sub) {
            return Ok(Some(t.into()));
        }
        let ev = sub.next_in_place(timeout, |r: &InPlaceRecord<'_>| read_record(bufs, r))?;
        Ok(ctl.after(ev).and_then(|ev| match ctl.sort(ev) {
            Found::Record(r) => ctl.resolve(r, bufs),
            Found::Other(item) => item,
        }))
    }

    /// Hands `on` the items of everything a lane holds now, in one call (up to `max`, or until
    /// `on` breaks): what [`next_timeout`](Reader::next_timeout) would return call after call,
    /// without the per-call round over the lanes (the way [`run`](crate::run) reads: see
    /// [`Subscriber::drain_in_place`]). Returns how many items `on` got (0: nothing within
    /// `timeout`).
    pub fn drain(
        &mut self,
        timeout: Duration,
        max: usize,
        mut on: impl FnMut(Item<'_>) -> ControlFlow<()>,
    ) -> Result<usize, SubscribeError> {
        let Reader { sub, ctl, bufs } = self;
        if let Some(t) = ctl.before_read(sub) {
            let _ = on(t.into());
            return Ok(1);
        }
        // The reading closure fills the buffers, then the record is handed over from them
        // (never at the same time).
        let bufs = RefCell::new(bufs);
        let n = sub.drain_in_place(
            timeout,
            max,
            #[inline(always)]
            |r: &InPlaceRecord<'_>| read_record(&mut bufs.borrow_mut(), r),
            |ev| {
                let b = bufs.borrow();
                let item = match ctl.sort(ev) {
                    Found::Record(r) => ctl.resolve(r, &b),
                    Found::Other(item) => item,
                };
                item.map_or(ControlFlow::Continue(()), &mut on)
            },
        )?;
        ctl.after_read = true;
        if n == 0 {
            ctl.since_clock = 64;
        } else {
            ctl.since_clock = ctl
                .since_clock
                .saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        }
        Ok(n)
    }

    /// [`next_timeout`](Reader::next_timeout), with the record's payload made by `read` from
    /// the record where it lies in the ring (e.g. copied straight into a binding's own
    /// buffer). `read` may run more than once per call, and what it made is delivered only if
    /// the producer did not overwrite the record meanwhile (that counts as lost, reported as
    /// usual): let it change nothing but what it returns. Numbers are not extracted.
    pub fn next_with<R>(
        &mut self,
        timeout: Duration,
        mut read: impl FnMut(&InPlace<'_>) -> R,
    ) -> Result<Option<Item<'_, R>>, SubscribeError> {
        let Reader { sub, ctl, .. } = self;
        if let Some(t) = ctl.before_read(sub) {
            return Ok(Some(t.into()));
        }
        let ev = sub.next_in_place(timeout, |r: &InPlaceRecord<'_>| read(&InPlace::from(r)))?;
        Ok(ctl.after(ev).and_then(|ev| match ctl.sort(ev) {
            Found::Record(r) => Some(ctl.record(r)),
            Found::Other(item) => item,
        }))
    }

    /// From now on, records of `schema` (by fingerprint: id, version and type) of at least
    /// `extract.min_bytes` are read where they lie in the ring, taking only what
    /// `extract.plan` extracts ([`RecordRef::extracted`], with an empty payload); `None`:
    /// copied.
    pub fn set_extract(&mut self, schema: &SchemaDescriptor, extract: Option<Extract>) {
        self.bufs.extracts.set(schema.fingerprint(), extract);
    }

    /// Tells the reader to stop, as a signal would (what was emitted until now is read first,
    /// for up to [`RunOptions::drain_on_stop`], then [`Item::End`] comes with
    /// [`StopReason::Stopped`]). From any thread, through [`Reader::stop_flag`].
    pub fn stop(&self) {
        self.ctl.stop.store(true, Ordering::Relaxed);
    }

    /// The flag [`Reader::stop`] sets, to stop the reader from another thread.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.ctl.stop)
    }

    /// Ends the run here, its consumer's choice: the summary ([`StopReason::Consumer`]), which
    /// [`Item::End`] repeats from now on.
    pub fn end(&mut self) -> RunSummary {
        self.ctl.end(&self.sub, StopReason::Consumer)
    }

    /// The subscriber (its counters, its producers).
    pub fn subscriber(&self) -> &Subscriber {
        &self.sub
    }
}

/// Reads a record where it lies in the ring for [`Reader::next`]: its numbers if they are all
/// that is wanted, else a copy.
#[inline(always)]
fn read_record(
    Bufs {
        extracts,
        copy,
        extracted,
    }: &mut Bufs,
    r: &InPlaceRecord<'_>,
) -> Read {
    if let Some(x) = extracts.get(r.schema)
        && x.takes(r.payload.len(), r.meta.level)
        // A payload that does not match its descriptor is copied: the consumer finds out from
        // the bytes.
        && x.plan.extract_from(r.payload, extracted).is_ok()
    {
        return Read::Extracted;
    }
    copy.resize(r.payload.len(), 0);
    // A failed copy is out of bounds, which validation already excludes.
    if r.payload.copy_to(copy) {
        Read::Copied
    } else {
        Read::Unreadable
    }
}

/// What a read found: a record (its payload as the reading closure made it), or another
/// item (`None`: nothing to hand out).
enum Found<'a, V, P> {
    Record(RecordRef<'a, V>),
    Other(Option<Item<'a, P>>),
}

/// How a record was read in place by [`Reader::next`].
#[derive(Clone, Copy)]
enum Read {
    /// Its numbers were extracted.
    Extracted,
    /// Copied into the reader's buffer.
    Copied,
    /// Not readable (out of bounds: never, once validated).
    Unreadable,
}

/// The run's state besides the subscriber: when to stop, flush and end, and its counts.
struct Control {
    flush_every: Duration,
    until_end: bool,
    drain_on_stop: Duration,
    signalled: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    /// Told to stop: why, and until when what was emitted before is read (`None`: a drain
    /// too long to say).
    draining: Option<(StopReason, Option<Instant>)>,
    ended: Option<RunSummary>,
    /// Whether anything was read yet (`until_end` is checked after a read, as the run loop
    /// always did: lanes are announced by the first one).
    after_read: bool,
    /// Calls since the clock was read (every 64 records, and after every idle wait).
    since_clock: u32,
    last_flush: Instant,
    seen: SeenSchemas,
    delivered: u64,
    read_in_place: u64,
    lost: u64,
}

impl Control {
    /// What to return instead of reading, if anything: the end, or a flush that is due.
    fn before_read(&mut self, sub: &mut Subscriber) -> Option<Tick> {
        if let Some(s) = self.ended {
            return Some(Tick::End(s));
        }
        if self.after_read && self.until_end && self.draining.is_none() && sub.all_ended() {
            return Some(Tick::End(self.end(sub, StopReason::AllEnded)));
        }
        match self.draining {
            None => {
                let why = if self.signalled.load(Ordering::Relaxed) {
                    Some(StopReason::Signal)
                } else if self.stop.load(Ordering::Relaxed) {
                    Some(StopReason::Stopped)
                } else {
                    None
                };
                if let Some(why) = why {
                    // Where the producers are now: what is read from here on is what was
                    // emitted before the stop.
                    sub.cut_now();
                    if self.drain_on_stop.is_zero() {
                        return Some(Tick::End(self.end(sub, why)));
                    }
                    sub.read_in_batches(None);
                    // A second signal ends the drain.
                    self.signalled.store(false, Ordering::Relaxed);
                    self.draining = Some((why, Instant::now().checked_add(self.drain_on_stop)));
                }
            }
            Some((why, until)) => {
                if sub.all_ended()
                    || until.is_some_and(|u| Instant::now() >= u)
                    || self.signalled.load(Ordering::Relaxed)
                {
                    return Some(Tick::End(self.end(sub, why)));
                }
            }
        }
        self.since_clock += 1;
        if self.since_clock >= 64 {
            self.since_clock = 0;
            if self.last_flush.elapsed() >= self.flush_every {
                self.last_flush = Instant::now();
                return Some(Tick::Flush);
            }
        }
        None
    }

    /// Notes a read that found `ev` (`None`: nothing came).
    fn after<E>(&mut self, ev: Option<E>) -> Option<E> {
        self.after_read = true;
        if ev.is_none() {
            // Idle: the clock is read before the next read.
            self.since_clock = 64;
        }
        ev
    }

    /// The run's end, for `reason`.
    fn end(&mut self, sub: &Subscriber, reason: StopReason) -> RunSummary {
        let stopped = matches!(reason, StopReason::Signal | StopReason::Stopped);
        let summary = RunSummary {
            delivered: self.delivered,
            read_in_place: self.read_in_place,
            lost: self.lost,
            reason,
            unread_bytes: if self.draining.is_some() || stopped {
                sub.unread_bytes()
            } else {
                0
            },
            refused_lanes: sub.refused_lanes().len() as u64,
        };
        self.ended = Some(summary);
        summary
    }

    /// A record found, or the item of anything else.
    fn sort<'a, V, P>(&mut self, ev: InPlaceEvent<'a, V>) -> Found<'a, V, P> {
        match ev {
            InPlaceEvent::Record(BusRecord {
                producer_id,
                producer,
                schema,
                emitter,
                meta,
                payload: value,
            }) => Found::Record(RecordRef::of(
                producer_id,
                producer,
                schema,
                emitter,
                &meta,
                value,
            )),
            InPlaceEvent::Other(e) => Found::Other(self.other(e)),
        }
    }

    /// The item of a record read by [`read_record`] (`None`: unreadable, never once
    /// validated).
    fn resolve<'a>(
        &mut self,
        r: RecordRef<'a, Read>,
        Bufs {
            copy, extracted, ..
        }: &'a Bufs,
    ) -> Option<Item<'a>> {
        let (read, len) = (r.payload, r.header.payload_len);
        let mut r: Record<'a> = r.map(|_| &[][..]);
        match read {
            Read::Extracted => {
                self.read_in_place += 1;
                r.extracted = Some(extracted);
            }
            Read::Copied => r.payload = &copy[..len],
            Read::Unreadable => return None,
        }
        Some(self.record(r))
    }

    /// A record's item, counted delivered.
    fn record<'a, P>(&mut self, r: RecordRef<'a, P>) -> Item<'a, P> {
        self.delivered += 1;
        if self.seen.first(r.schema) {
            Item::NewSchema(r)
        } else {
            Item::Record(r)
        }
    }

    /// The item of anything but a record.
    fn other<'a, P>(&mut self, e: Event<'a>) -> Option<Item<'a, P>> {
        Some(match e {
            Event::Lagged {
                producer_id,
                producer,
                lost,
                damaged,
            } => {
                self.lost += lost + damaged;
                Item::Lag(Lag {
                    producer_id,
                    producer: producer.into(),
                    lost,
                    damaged,
                })
            }
            Event::Joined(p) => Item::Producer(ProducerChange::Joined(p.into())),
            Event::Died(p) => Item::Producer(ProducerChange::Died(p.into())),
            Event::Ended(p) => Item::Producer(ProducerChange::Ended(p.into())),
            // Never: records come as `InPlaceEvent::Record`.
            Event::Record(_) => return None,
        })
    }
}

/// The schemas seen in a run. Fingerprints cover id, version and type; the last schema saves
/// the lookup for runs of one schema (held, so that its address is not reused).
#[derive(Default)]
struct SeenSchemas {
    fingerprints: HashSet<u64>,
    last: Option<Arc<SchemaDescriptor>>,
}

impl SeenSchemas {
    /// Whether `schema` is seen for the first time (and now it is seen).
    fn first(&mut self, schema: &Arc<SchemaDescriptor>) -> bool {
        if self.last.as_ref().is_some_and(|l| Arc::ptr_eq(l, schema)) {
            return false;
        }
        self.last = Some(Arc::clone(schema));
        self.fingerprints.insert(schema.fingerprint())
    }
}

/// What is extracted in place, by schema fingerprint; the last schema looked up saves the
/// lookup for runs of one schema (held, so that its address is not reused).
#[derive(Default)]
struct Extracts {
    by_fingerprint: HashMap<u64, Extract>,
    last: Option<(Arc<SchemaDescriptor>, Option<Extract>)>,
}

impl Extracts {
    fn set(&mut self, fingerprint: u64, extract: Option<Extract>) {
        match extract {
            Some(x) => self.by_fingerprint.insert(fingerprint, x),
            None => self.by_fingerprint.remove(&fingerprint),
        };
        self.last = None;
    }

    #[inline]
    fn get(&mut self, schema: &Arc<SchemaDescriptor>) -> Option<&Extract> {
        if self.by_fingerprint.is_empty() {
            return None;
        }
        if !self
            .last
            .as_ref()
            .is_some_and(|(s, _)| Arc::ptr_eq(s, schema))
        {
            let x = self.by_fingerprint.get(&schema.fingerprint()).cloned();
            self.last = Some((Arc::clone(schema), x));
        }
        self.last.as_ref().and_then(|(_, x)| x.as_ref())
    }
}
