//! The lanes a subscriber reads: each producer's lane with its reader, catalog and key
//! classes, taken on as the broker hands them over, and the look at a record where it lies
//! that decides whether it is delivered.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;

use snapbus_schemas::SchemaDescriptor;

use super::{
    Event, Found, Glob, InPlaceRecord, Notice, RecordRef, RingPayload, Subscriber, SubscriberStats,
};
use crate::catalog::Catalog;
use crate::control::{LaneInfo, ProducerInfo, RefusedLane};
use crate::lane::{FrameMeta, LaneReader, ShmLane, StartAt};
use crate::mem::ShmMem;

/// A producer's lane, as the subscriber reads it.
pub(super) struct SubLane {
    pub(super) producer_id: u64,
    pub(super) info: ProducerInfo,
    pub(super) reader: LaneReader<ShmMem>,
    pub(super) catalog: Catalog,
    /// Schema key → whether it matches the globs (with its descriptor).
    pub(super) matches: KeyMap,
    pub(super) dead: bool,
    pub(super) ended: bool,
    /// With [`SubscribeOptions::cut`](super::SubscribeOptions::cut) or
    /// [`Subscriber::cut_now`]: the lane position to stop at.
    pub(super) cut_at: Option<u64>,
    /// The cut is [`Subscriber::cut_now`]'s: reaching it ends the lane silently (no
    /// [`Event::Ended`]: its producer has not ended).
    pub(super) cut_silently: bool,
    /// The reader's damaged-record count already split out of a `Lagged`.
    pub(super) damaged_seen: u64,
    /// Reading in batches: since when the lane has held bytes not yet read (`None`: nothing
    /// pending, or a batch is being read).
    pub(super) pending_since: Option<Instant>,
    /// Reading in batches: a batch is being read (until the lane is empty).
    pub(super) in_batch: bool,
}

/// What a schema key of a lane is to the subscriber.
#[derive(Clone, Default)]
pub(super) enum KeyClass {
    /// Not classified yet (no record of it seen, or its schema not in the catalog yet).
    #[default]
    Unknown,
    /// No glob matches its schema: its records are skipped.
    Skip,
    /// Its schema matches: its records are delivered.
    Match(Arc<SchemaDescriptor>),
}

/// Schema key → its [`KeyClass`], indexed by the key: a lookup per record is an index, not a
/// hash.
#[derive(Default)]
pub(super) struct KeyMap(Vec<KeyClass>);

impl KeyMap {
    #[inline]
    pub(super) fn get(&self, key: u16) -> &KeyClass {
        self.0.get(usize::from(key)).unwrap_or(&KeyClass::Unknown)
    }

    /// Classifies `key` with `f` unless it is classified already.
    fn classify(&mut self, key: u16, f: impl FnOnce() -> KeyClass) {
        let k = usize::from(key);
        if self.0.len() <= k {
            self.0.resize(k + 1, KeyClass::Unknown);
        }
        if let KeyClass::Unknown = self.0[k] {
            self.0[k] = f();
        }
    }
}

impl SubLane {
    /// Record `meta` of this lane, with its payload held as `payload`.
    #[inline(always)]
    pub(super) fn record<P>(&self, meta: FrameMeta, payload: P) -> RecordRef<'_, P> {
        let KeyClass::Match(schema) = self.matches.get(meta.schema_key) else {
            unreachable!("a found record's key matches")
        };
        RecordRef {
            producer_id: self.producer_id,
            producer: &self.info,
            schema,
            emitter: self.catalog.emitter(meta.emitter).map(|n| &**n),
            meta,
            payload,
        }
    }

    /// Counts a record skipped (by the globs, or for a key no catalog entry explains).
    #[inline(always)]
    pub(super) fn count_skipped(&self, meta: &FrameMeta, stats: &mut SubscriberStats) {
        if let KeyClass::Unknown = self.matches.get(meta.schema_key) {
            stats.unknown_keys += 1;
        }
    }
}

impl Subscriber {
    /// Whether a lane not read to its end holds bytes not read yet.
    pub(super) fn any_pending(&self) -> bool {
        self.lanes
            .iter()
            .any(|l| !l.ended && l.reader.has_pending_bytes())
    }

    /// Takes on a lane the broker handed over (a rejoin's known lanes keep their reader).
    pub(super) fn add_lane(
        &mut self,
        info: LaneInfo,
        mut fds: Vec<OwnedFd>,
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
        let Ok::<[OwnedFd; 2], _>([lane_fd, cat_fd]) = std::mem::take(&mut fds).try_into() else {
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
                self.refuse(&info.producer, reason);
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

    /// A lane that does not validate is never read (nor trusted), and said so: on stderr
    /// once, and to the broker for `snapbus ls`.
    fn refuse(&mut self, producer: &ProducerInfo, reason: String) {
        let lane_id = producer.lane_id;
        if !self.refused.iter().any(|r| r.lane_id == lane_id) {
            let producer = format!("'{}' (pid {})", producer.name, producer.pid);
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
    }

    /// The broker says a producer died: its lane is read to the end.
    pub(super) fn lane_died(&mut self, producer_id: u64) {
        if let Some(k) = self.lanes.iter().position(|l| l.producer_id == producer_id) {
            let l = &mut self.lanes[k];
            if !l.dead {
                l.dead = true;
                l.reader.set_writer_gone(true);
                self.notices.push_back(Notice::Died(k));
            }
        }
    }
}

/// The event of a lane's find other than a record.
pub(super) fn lane_event<R>(l: &SubLane, f: Found<R>) -> Event<'_> {
    match f {
        Found::Lagged(_, lost, damaged) => Event::Lagged {
            producer_id: l.producer_id,
            producer: &l.info,
            lost,
            damaged,
        },
        Found::Ended(_) => Event::Ended(&l.info),
        Found::Record(..) => unreachable!("records are mapped by the caller"),
    }
}

/// Looks at a record where it lies for the subscriber's reads: classifies a key seen for the first time (its schema is in
/// the producer's catalog by then: registered before its first record; only the first record
/// of each key pays for this), skips a record no glob matches (`None`), else what `read` makes
/// of it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn visit<R>(
    globs: &[Glob],
    matches: &mut KeyMap,
    catalog: &mut Catalog,
    info: &ProducerInfo,
    producer_id: u64,
    m: &FrameMeta,
    view: &RingPayload<'_>,
    read: &mut impl FnMut(&InPlaceRecord<'_>) -> Option<R>,
) -> Option<R> {
    if let KeyClass::Unknown = matches.get(m.schema_key) {
        catalog.refresh();
        for (key, d) in catalog.schemas() {
            matches.classify(key, || {
                if globs.is_empty() || globs.iter().any(|g| g.matches(d.id())) {
                    KeyClass::Match(Arc::clone(d))
                } else {
                    KeyClass::Skip
                }
            });
        }
    }
    let KeyClass::Match(schema) = matches.get(m.schema_key) else {
        return None;
    };
    read(&RecordRef {
        producer_id,
        producer: info,
        schema,
        emitter: catalog.emitter(m.emitter).map(|n| &**n),
        meta: *m,
        payload: view,
    })
}
