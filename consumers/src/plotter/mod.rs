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
//! - **Images**: tensor fields of rank 2 (`[h, w]`, grey) or 3 (`[h, w, c]`: c = 3 RGB, 4 RGBA,
//!   otherwise channel 0), scaled to 0–255 (u8 as is, other types from their min and max),
//!   images larger than 512 × 512 subsampled; the latest frame is kept, at most
//!   `max_frame_hz` times per second.
//! - **Serving** ([`serve`]): the page (`web/`: our own HTML, JavaScript and CSS, embedded in
//!   the binary — no CDN, works offline), JSON endpoints, and a server-sent-events stream that
//!   pushes, about four times a second, the min/max envelope (one column per pixel) of the
//!   series a page shows over its visible span. However fast the producers emit, a page gets at
//!   most `width` columns per series per message, so it stays responsive. Any number of pages
//!   can watch; closing them, or stopping the plotter, never affects a producer.
//!
//! The endpoints: `GET /api/series`, `/api/data?ids=&x=time|step&from=&to=&width=`,
//! `/api/frame?id=`, `/api/stream?ids=&x=&span=&width=` (see `http.rs`).

mod http;
mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use snapbus_schemas::{DType, SchemaDescriptor, Value};

use crate::fields::{Extracted, Plan, tensor_paths};
use crate::{Consumer, Extract, Flow, HookError, Lag, ProducerChange, Record};
pub use http::{STREAM_EVERY, Server, serve};
use snapbus_bus::status::StatusBoard;
pub use store::{Cut, MAX_SERIES, POINT_BUDGET, Store, XAxis};
use store::{Frame, Image, Source};

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
    /// (dotted path, image id) per tensor field.
    images: Vec<(String, usize)>,
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
        let tensors = tensor_paths(r.schema.root());
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
        let images = tensors
            .into_iter()
            .map(|path| {
                store.images.push(Image {
                    src: source(path.clone()),
                    frame: None,
                    frames: 0,
                });
                (path, store.images.len() - 1)
            })
            .collect();
        store.version += 1;
        self.report(&store);
        drop(store);
        self.schemas.insert(
            key,
            Feeds {
                plan,
                series,
                images,
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

/// A tensor as an image, or `None` if it is not 2-D or 3-D.
fn frame_of(t: &snapbus_schemas::TensorView<'_>, seq: u64, time: f64) -> Option<Frame> {
    let (h, w, c) = match t.shape[..] {
        [h, w] => (h, w, 1),
        [h, w, c] => (h, w, c),
        _ => return None,
    };
    if h == 0 || w == 0 || c == 0 {
        return None;
    }
    let channels = if matches!(c, 3 | 4) { c } else { 1 };
    let stride = h.max(w).div_ceil(MAX_IMAGE_SIDE).max(1);
    let (oh, ow) = (h.div_ceil(stride), w.div_ceil(stride));
    let at = |y: u64, x: u64, k: u64| t.get_f64(((y * w + x) * c + k) as usize);
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut values = Vec::with_capacity((oh * ow * channels) as usize);
    for y in (0..h).step_by(stride as usize) {
        for x in (0..w).step_by(stride as usize) {
            for k in 0..channels {
                let v = at(y, x, k)?;
                if v.is_finite() {
                    min = min.min(v);
                    max = max.max(v);
                }
                values.push(v);
            }
        }
    }
    let data = if t.dtype == DType::U8 {
        values.iter().map(|v| *v as u8).collect()
    } else {
        let range = if max > min { max - min } else { 1.0 };
        values
            .iter()
            .map(|v| {
                if v.is_finite() {
                    ((v - min) / range * 255.0).round().clamp(0.0, 255.0) as u8
                } else {
                    0
                }
            })
            .collect()
    };
    Some(Frame {
        seq,
        t: time,
        shape: if c == 1 && t.shape.len() == 2 {
            vec![oh, ow]
        } else {
            vec![oh, ow, channels]
        },
        channels,
        dtype: t.dtype.name(),
        min: if min.is_finite() { min } else { 0.0 },
        max: if max.is_finite() { max } else { 0.0 },
        data,
    })
}

/// Sets the frames of `images` (dotted path, image id) from a decoded record.
fn set_frames(store: &mut Store, images: &[(String, usize)], v: &Value<'_>, seq: u64, t: f64) {
    for (path, id) in images {
        if let (Some(Value::Tensor(tv)), Some(img)) = (v.path(path), store.images.get_mut(*id)) {
            if let Some(frame) = frame_of(tv, seq, t) {
                img.frame = Some(frame);
            }
        }
    }
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
        let now = (!feeds.images.is_empty()).then(Instant::now);
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
            if !feeds.images.is_empty() {
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
        for (_, id) in &feeds.images {
            if let Some(img) = store.images.get_mut(*id) {
                img.frames += 1;
            }
        }
        if let Some(v) = &value {
            set_frames(&mut store, &feeds.images, v, r.header.seq, t);
        }
        Ok(Flow::Continue)
    }

    /// Turns the newest records not yet shown into frames.
    fn flush(&mut self) -> Result<(), HookError> {
        let mut store = lock(&self.store)?;
        self.report(&store);
        for feeds in self.schemas.values_mut() {
            if let Some((payload, seq, t)) = feeds.pending.take() {
                if let Ok(v) = feeds.schema.decode(&payload) {
                    set_frames(&mut store, &feeds.images, &v, seq, t);
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

#[cfg(test)]
mod tests {
    use super::*;
    use snapbus_schemas::{Tensor, Wire, decode};

    #[test]
    fn frames_are_scaled_subsampled_and_shaped() {
        let t = Tensor::new(vec![2, 3], vec![0u16, 100, 200, 300, 400, 1000]).expect("tensor");
        let bytes = snapbus_schemas::Wire::encode_to_vec(&t).expect("encode");
        let desc = Tensor::<u16>::type_desc();
        let Value::Tensor(view) = decode(&desc, &bytes).expect("decode") else {
            panic!("a tensor");
        };
        let f = frame_of(&view, 7, 1.5).expect("2-D is an image");
        assert_eq!(
            (f.shape.clone(), f.channels, f.min, f.max),
            (vec![2, 3], 1, 0.0, 1000.0)
        );
        assert_eq!(f.data, [0, 26, 51, 77, 102, 255]);

        let big = Tensor::new(vec![1030, 4, 3], vec![9u8; 1030 * 4 * 3]).expect("tensor");
        let bytes = snapbus_schemas::Wire::encode_to_vec(&big).expect("encode");
        let desc = Tensor::<u8>::type_desc();
        let Value::Tensor(view) = decode(&desc, &bytes).expect("decode") else {
            panic!("a tensor");
        };
        let f = frame_of(&view, 1, 0.0).expect("3-D RGB");
        assert_eq!((f.shape.clone(), f.channels), (vec![344, 2, 3], 3));
        assert_eq!(f.data.len(), 344 * 2 * 3);

        let v = Tensor::new(vec![5], vec![1u8; 5]).expect("tensor");
        let bytes = snapbus_schemas::Wire::encode_to_vec(&v).expect("encode");
        let Value::Tensor(view) = decode(&desc, &bytes).expect("decode") else {
            panic!("a tensor");
        };
        assert!(frame_of(&view, 1, 0.0).is_none(), "1-D is not an image");
    }
}
