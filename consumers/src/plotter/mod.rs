//! The live plotter: a consumer that keeps a bounded history of every numeric field of the
//! subscribed schemas (and the latest frame of every 2-D/3-D tensor) and serves a web page on
//! 127.0.0.1 that plots them live.
//!
//! - **Series**: one per (producer, schema, numeric leaf) — the same leaves the aggregator
//!   summarizes (`reward`, `position.0`, `observation.mean`, …). Each point has the record's
//!   time and its sample number (the n-th record of that series), so the page can plot by time
//!   or by step. At most `history_points` points per series are kept (the oldest go first).
//! - **Bounds**: at most [`MAX_FEED_SERIES`] series per schema and producer (a schema's first
//!   leaves, then its dynamic leaves as they come), at most [`MAX_SERIES`] in all, and at most
//!   [`POINT_BUDGET`] points in all (each series keeps its share when `history_points` each
//!   would pass it). What is not plotted is counted ([`Cut`]), shown on the page and in the
//!   consumer's status in `snapbus ls` ([`Plotter::board`]).
//! - **Images, point clouds, profiles**: every tensor of a record, at any depth (in a list or
//!   a dict of structs too: `sensors.0.rgba`, `by_name.wrist.rgba`), shown as its
//!   [`View`](crate::fields::View) says: rank 2 or 3 an image (`[h, w]` grey, `[h, w, c]`:
//!   c = 3 RGB, 4 RGBA, otherwise channel 0; scaled to 0–255, u8 as is, other types from
//!   their min and max; larger than 512 × 512 subsampled), `[n, 3]` a cloud of points drawn
//!   from above (x, y, coloured by z; at most [`MAX_POINTS`]), `[n]` a profile over its index
//!   (at most [`MAX_SERIES_VALUES`]). At most [`MAX_FEED_VIEWS`] per schema and producer; the
//!   latest frame of each is kept, at most `max_frame_hz` times per second.
//! - **Serving** ([`serve`]): the page (`web/`: our own HTML, JavaScript and CSS, embedded in
//!   the binary — no CDN, works offline), JSON endpoints, and a server-sent-events stream that
//!   pushes, about four times a second, the min/max envelope (one column per pixel) of the
//!   series a page shows over its visible span. However fast the producers emit, a page gets at
//!   most `width` columns per series per message, so it stays responsive. Any number of pages
//!   can watch; closing them, or stopping the plotter, never affects a producer.
//!
//! The endpoints: `GET /api/series`, `/api/data?ids=&x=time|step&from=&to=&width=`,
//! `/api/frame?id=`, `/api/stream?ids=&x=&span=&width=` (see `http.rs`).

mod frames;
mod http;
mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use snapbus_schemas::SchemaDescriptor;

use crate::fields::{Extracted, Plan, has_tensors};
use crate::{Consumer, Extract, Flow, HookError, Lag, ProducerChange, Record};
use frames::set_frames;
pub use frames::{MAX_FEED_VIEWS, MAX_POINTS, MAX_SERIES_VALUES};
pub use http::{STREAM_EVERY, Server, serve};
use snapbus_bus::status::StatusBoard;
use store::Source;
pub use store::{Cut, MAX_SERIES, POINT_BUDGET, Store, XAxis};

/// Images larger than this per side are subsampled.
pub const MAX_IMAGE_SIDE: u64 = 512;

/// How the plotter keeps data.
#[derive(Debug, Clone)]
pub struct PlotterOptions {
    /// Points kept per series.
    pub history_points: usize,
    /// Frames kept per second per image series, at most.
    pub max_frame_hz: f64,
}

impl Default for PlotterOptions {
    /// 100,000 points per series, 30 frames per second.
    fn default() -> PlotterOptions {
        PlotterOptions {
            history_points: 100_000,
            max_frame_hz: 30.0,
        }
    }
}

/// The plotter consumer: feeds a [`Store`] that [`serve`] serves.
pub struct Plotter {
    store: Arc<Mutex<Store>>,
    opts: PlotterOptions,
    /// (lane, schema fingerprint) → what its records feed.
    schemas: HashMap<(u64, u64), Feeds>,
    last: Option<(u64, u64)>,
    scratch: Extracted,
    /// Lanes whose producer ended or died → when (what it wrote may still arrive after).
    ended: HashMap<u64, f64>,
    /// Its status in `snapbus ls`: series, points per series, what was cut.
    board: StatusBoard,
}

/// What the records of one schema from one producer feed.
struct Feeds {
    plan: Plan,
    /// Series id per leaf of the plan (`None`: cut).
    series: Vec<Option<usize>>,
    /// Image id per dotted path of a tensor with a [`View`](crate::fields::View), made as records show them (a
    /// tensor in a list or a dict of structs has a path per element).
    images: HashMap<String, usize>,
    /// Whether its records can hold a tensor (their frames need the record's bytes).
    has_tensors: bool,
    /// Series id per numeric leaf of a dynamic field, made as records show them.
    dynamic: HashMap<String, usize>,
    /// The source of this feed's series, less the field (for dynamic leaves).
    source: Source,
    last_frame: Option<Instant>,
    /// The newest record not yet turned into frames (payload, seq, time): frames are made at
    /// most `max_frame_hz` times a second, and the newest one at the next flush.
    pending: Option<(Vec<u8>, u64, f64)>,
    schema: Arc<SchemaDescriptor>,
}

impl Plotter {
    /// A plotter feeding a new store.
    pub fn new(opts: PlotterOptions) -> Plotter {
        Plotter {
            store: Arc::new(Mutex::new(Store::new(opts.history_points))),
            opts,
            schemas: HashMap::new(),
            last: None,
            scratch: Extracted::default(),
            ended: HashMap::new(),
            board: StatusBoard::new(),
        }
    }

    /// Its status board (for `RunOptions::status`): `series`, `points_per_series` and, once
    /// something is not plotted, `cut.leaves` and `cut.dynamic_values`.
    pub fn board(&self) -> StatusBoard {
        self.board.clone()
    }

    /// Brings the board up to date with `store`.
    fn report(&self, store: &Store) {
        let b = &self.board;
        b.set("series", store.series_count() as u64);
        b.set("points_per_series", store.points_per_series() as u64);
        let cut = store.cut();
        if cut != Cut::default() {
            b.set("cut.leaves", cut.leaves);
            b.set("cut.dynamic_values", cut.dynamic_values);
        }
    }

    /// The store, for [`serve`].
    pub fn store(&self) -> Arc<Mutex<Store>> {
        Arc::clone(&self.store)
    }

    fn feeds(&mut self, r: &Record<'_>) -> Result<(), HookError> {
        let key = (r.producer.lane_id, r.schema.fingerprint());
        if self.schemas.contains_key(&key) {
            return Ok(());
        }
        let plan = Plan::numeric(r.schema.root());
        let started = r.producer.started_nanos as f64 / 1e9;
        let ended = self.ended.get(&r.producer.lane_id).copied();
        let mut store = lock(&self.store)?;
        let base = Source {
            schema: r.schema.id().to_owned(),
            producer: r.producer.name.to_owned(),
            pid: r.producer.pid,
            lane: r.producer.lane_id,
            started,
            ended,
            field: String::new(),
        };
        let source = |field: String| Source {
            field,
            ..base.clone()
        };
        let leaves = plan.leaves();
        let series = leaves[..leaves.len().min(MAX_FEED_SERIES)]
            .iter()
            .map(|l| store.add_series(source(l.to_owned())))
            .collect();
        store.cut.leaves += leaves.len().saturating_sub(MAX_FEED_SERIES) as u64;
        store.version += 1;
        self.report(&store);
        drop(store);
        self.schemas.insert(
            key,
            Feeds {
                plan,
                series,
                images: HashMap::new(),
                has_tensors: has_tensors(r.schema.root()),
                dynamic: HashMap::new(),
                source: base,
                last_frame: None,
                pending: None,
                schema: Arc::clone(r.schema),
            },
        );
        Ok(())
    }
}

/// Series per schema and producer at most: its first leaves (a schema of 65,536 leaves gets
/// 1,024 series), and as many dynamic leaves (a field whose keys never repeat, an id per
/// record, must not grow the store without end).
pub const MAX_FEED_SERIES: usize = 1024;

/// The series of dynamic leaf `path` of `feeds`, made the first time it is seen (`None`
/// beyond [`MAX_FEED_SERIES`] or [`MAX_SERIES`]: the value is counted as cut).
fn dynamic_series(store: &mut Store, feeds: &mut Feeds, path: &str) -> Option<usize> {
    if let Some(id) = feeds.dynamic.get(path) {
        return Some(*id);
    }
    let made = (feeds.dynamic.len() < MAX_FEED_SERIES)
        .then(|| {
            store.add_series(Source {
                field: path.to_owned(),
                ..feeds.source.clone()
            })
        })
        .flatten();
    match made {
        Some(id) => {
            feeds.dynamic.insert(path.to_owned(), id);
        }
        None => store.cut.dynamic_values += 1,
    }
    made
}

/// The store, locked (a panic while it was held poisons it: an error, not a second panic).
fn lock(store: &Mutex<Store>) -> Result<MutexGuard<'_, Store>, HookError> {
    store
        .lock()
        .map_err(|_| "the plotter's store was poisoned by a panic".into())
}

/// Seconds since the epoch, now.
pub(crate) fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Consumer for Plotter {
    /// Records of [`IN_PLACE_MIN_BYTES`](crate::fields::IN_PLACE_MIN_BYTES) or more of a schema whose feeds are set up and that
    /// carries no image (a frame needs the record's bytes) are read in place: their numbers
    /// are extracted from the ring, one pass over the payload, no copy of it.
    fn extract(&mut self, schema: &Arc<SchemaDescriptor>) -> Option<Extract> {
        let fp = schema.fingerprint();
        let (_, feeds) = self.schemas.iter().find(|((_, f), _)| *f == fp)?;
        feeds
            .images
            .is_empty()
            .then(|| Extract::new(Arc::new(feeds.plan.clone())))
    }

    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        let key = (r.producer.lane_id, r.schema.fingerprint());
        if self.last != Some(key) {
            self.feeds(r)?;
            self.last = Some(key);
        }
        let Some(feeds) = self.schemas.get_mut(&key) else {
            return Ok(Flow::Continue);
        };
        let t = r.header.t_nanos as f64 / 1e9;
        let extracted = match r.extracted {
            Some(x) => Some(x),
            None => feeds
                .plan
                .extract(r.payload, &mut self.scratch)
                .is_ok()
                .then_some(&self.scratch),
        };
        // The monotonic clock is read only for records that carry images.
        let now = (feeds.has_tensors).then(Instant::now);
        let frame_due = now.is_some_and(|now| {
            feeds
                .last_frame
                .is_none_or(|l| now.duration_since(l).as_secs_f64() * self.opts.max_frame_hz >= 1.0)
        });
        let value = if frame_due {
            feeds.last_frame = now;
            feeds.pending = None;
            r.schema.decode(r.payload).ok()
        } else {
            if feeds.has_tensors {
                let (buf, seq, time) = feeds.pending.get_or_insert_with(|| (Vec::new(), 0, 0.0));
                buf.clear();
                buf.extend_from_slice(r.payload);
                (*seq, *time) = (r.header.seq, t);
            }
            None
        };
        let mut store = lock(&self.store)?;
        store.count_record(now_secs());
        if let Some(x) = extracted {
            for (id, v) in feeds.series.iter().zip(&x.values) {
                if let Some(id) = id {
                    store.push(*id, t, *v);
                }
            }
            for (path, v) in &x.dynamic {
                if let Some(id) = dynamic_series(&mut store, feeds, path) {
                    store.push(id, t, *v);
                }
            }
        }
        for id in feeds.images.values() {
            if let Some(img) = store.images.get_mut(*id) {
                img.frames += 1;
            }
        }
        if let Some(v) = &value {
            set_frames(&mut store, feeds, v, r.header.seq, t);
        }
        Ok(Flow::Continue)
    }

    /// Turns the newest records not yet shown into frames.
    fn flush(&mut self) -> Result<(), HookError> {
        let mut store = lock(&self.store)?;
        self.report(&store);
        for feeds in self.schemas.values_mut() {
            if let Some((payload, seq, t)) = feeds.pending.take() {
                let schema = Arc::clone(&feeds.schema);
                if let Ok(v) = schema.decode(&payload) {
                    set_frames(&mut store, feeds, &v, seq, t);
                }
            }
        }
        Ok(())
    }

    /// A producer that ended or died: its series and images are marked ended (a page shows
    /// its last frame as the end of that run, never as the image of a newer one).
    fn on_producer(&mut self, change: ProducerChange<'_>) -> Result<Flow, HookError> {
        if let ProducerChange::Ended(p) | ProducerChange::Died(p) = change {
            let now = *self.ended.entry(p.lane_id).or_insert_with(now_secs);
            lock(&self.store)?.end_producer(p.lane_id, now);
        }
        Ok(Flow::Continue)
    }

    fn on_lag(&mut self, lag: Lag<'_>) -> Result<Flow, HookError> {
        lock(&self.store)?.lost += lag.lost + lag.damaged;
        Ok(Flow::Continue)
    }
}
