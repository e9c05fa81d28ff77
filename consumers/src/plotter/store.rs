//! What the plotter holds: per series a bounded history of points, per image series the latest
//! frame, and the counters the page shows. Shared between the consumer thread (writes) and the
//! HTTP threads (read), behind one mutex held briefly.

use std::collections::VecDeque;

use serde_json::{Value as Json, json};

/// One point: time (seconds since the epoch), sample number, value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    pub(crate) t: f64,
    pub(crate) step: u64,
    pub(crate) v: f64,
}

/// Which x a request wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    /// Seconds since the epoch (record time).
    Time,
    /// The sample number (the n-th record of the series).
    Step,
}

impl XAxis {
    /// `time` or `step`.
    pub fn parse(s: &str) -> Option<XAxis> {
        match s {
            "time" => Some(XAxis::Time),
            "step" => Some(XAxis::Step),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            XAxis::Time => "time",
            XAxis::Step => "step",
        }
    }
}

impl Point {
    #[inline]
    pub(crate) fn x(&self, axis: XAxis) -> f64 {
        match axis {
            XAxis::Time => self.t,
            XAxis::Step => self.step as f64,
        }
    }
}

/// What a series or an image shows: a field of one schema from one producer.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub(crate) schema: String,
    pub(crate) producer: String,
    pub(crate) pid: u32,
    /// Its producer's lane (the identity of one run of one process).
    pub(crate) lane: u64,
    /// When its producer started (seconds since the epoch).
    pub(crate) started: f64,
    /// When its producer was seen to end or die (seconds since the epoch; `None`: live).
    pub(crate) ended: Option<f64>,
    pub(crate) field: String,
}

impl Source {
    /// Its entry in `/api/series`: `id`, where it comes from, then the `rest`.
    fn json(&self, id: usize, rest: Json) -> Json {
        let mut j = json!({
            "id": id,
            "schema": self.schema,
            "producer": self.producer,
            "pid": self.pid,
            "started": self.started,
            "ended": self.ended,
            "field": self.field,
        });
        if let (Some(j), Json::Object(rest)) = (j.as_object_mut(), rest) {
            j.extend(rest);
        }
        j
    }
}

/// A numeric field of one schema from one producer.
#[derive(Debug)]
pub(crate) struct Series {
    pub(crate) src: Source,
    pub(crate) points: VecDeque<Point>,
    /// Records of this series so far (the next sample number).
    pub(crate) samples: u64,
}

impl Series {
    /// A series with no records yet.
    pub(crate) fn new(src: Source) -> Series {
        Series {
            src,
            points: VecDeque::new(),
            samples: 0,
        }
    }
}

/// A tensor field of one schema from one producer (an image, points, a series): its latest
/// frame.
#[derive(Debug)]
pub(crate) struct Image {
    pub(crate) src: Source,
    /// `image`, `points` or `series` ([`View::kind`](crate::fields::View::kind)).
    pub(crate) kind: &'static str,
    pub(crate) frame: Option<Frame>,
    /// Frames seen (also those not kept: frames are kept at a bounded rate).
    pub(crate) frames: u64,
}

/// The latest value of a tensor: an image scaled to 0..=255, points or a series.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    pub(crate) seq: u64,
    pub(crate) t: f64,
    pub(crate) shape: Vec<u64>,
    pub(crate) channels: u64,
    pub(crate) dtype: &'static str,
    pub(crate) min: f64,
    pub(crate) max: f64,
    /// Pixels, row-major (an image).
    pub(crate) data: Vec<u8>,
    /// x, y, z per point (points), or the values (a series), as they are.
    pub(crate) values: Vec<f64>,
}

/// Points the store holds at most, over all its series (24 bytes each: about 240 MB): each
/// series keeps `history_points`, or an equal share of this when there are more series than
/// that allows.
pub const POINT_BUDGET: usize = 10_000_000;
/// Series the store makes at most (a share of [`POINT_BUDGET`] is then still 1,220 points);
/// the numeric leaves past it are not plotted, and counted ([`Store::cut`]).
pub const MAX_SERIES: usize = 8_192;

/// What the plotter does not plot, so that its memory stays bounded: shown on the page and
/// in the consumer's status in `snapbus ls`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// Numeric leaves of the schemas that got no series (past the series limits).
    pub leaves: u64,
    /// Values of dynamic fields not plotted (their leaf got no series).
    pub dynamic_values: u64,
}

/// Everything the page can ask for.
#[derive(Debug, Default)]
pub struct Store {
    pub(crate) series: Vec<Series>,
    pub(crate) images: Vec<Image>,
    pub(crate) history_points: usize,
    pub(crate) records: u64,
    pub(crate) lost: u64,
    /// Increases when a series or image appears.
    pub(crate) version: u64,
    /// (time, records) samples for the rate, about one per second.
    rate: VecDeque<(f64, u64)>,
    /// What was not plotted.
    pub(crate) cut: Cut,
    /// [`POINT_BUDGET`] (smaller in tests).
    point_budget: usize,
}

impl Store {
    /// An empty store keeping at most `history_points` points per series.
    pub fn new(history_points: usize) -> Store {
        Store {
            history_points: history_points.max(1),
            point_budget: POINT_BUDGET,
            ..Store::default()
        }
    }

    /// Appends a point (the oldest go beyond [`points_per_series`](Self::points_per_series)).
    pub(crate) fn push(&mut self, id: usize, t: f64, v: f64) {
        let limit = self.points_per_series();
        if let Some(s) = self.series.get_mut(id) {
            let step = s.samples;
            s.samples += 1;
            if v.is_nan() {
                return;
            }
            while s.points.len() >= limit {
                s.points.pop_front();
            }
            // A series whose share shrank (more series came) gives the memory back.
            if s.points.capacity() > 2 * limit + 64 {
                s.points.shrink_to(limit);
            }
            s.points.push_back(Point { t, step, v });
        }
    }

    /// Points each series keeps: `history_points`, or its share of [`POINT_BUDGET`].
    pub fn points_per_series(&self) -> usize {
        (self.point_budget / self.series.len().max(1)).clamp(1, self.history_points)
    }

    /// Makes a series for `src`, unless the store has [`MAX_SERIES`] (then `None`, and the
    /// leaf is counted in [`Cut::leaves`]).
    pub(crate) fn add_series(&mut self, src: Source) -> Option<usize> {
        if self.series.len() >= MAX_SERIES {
            self.cut.leaves += 1;
            return None;
        }
        self.series.push(Series::new(src));
        self.version += 1;
        Some(self.series.len() - 1)
    }

    /// Series made.
    pub fn series_count(&self) -> usize {
        self.series.len()
    }

    /// Points held now, over all series.
    pub fn points_held(&self) -> usize {
        self.series.iter().map(|s| s.points.len()).sum()
    }

    /// What was not plotted.
    pub fn cut(&self) -> Cut {
        self.cut
    }

    /// Marks the series and images of the producer of `lane` as ended at `now` (their data
    /// stays, labelled with the run it came from).
    pub(crate) fn end_producer(&mut self, lane: u64, now: f64) {
        let mut changed = false;
        let series = self.series.iter_mut().map(|s| &mut s.src);
        let images = self.images.iter_mut().map(|i| &mut i.src);
        for src in series.chain(images).filter(|src| src.lane == lane) {
            changed |= src.ended.is_none();
            src.ended.get_or_insert(now);
        }
        if changed {
            self.version += 1;
        }
    }

    /// Counts a record, and samples the rate about once a second (`now` in seconds).
    pub(crate) fn count_record(&mut self, now: f64) {
        self.records += 1;
        if self.rate.back().is_none_or(|(t, _)| now - t >= 1.0) {
            self.rate.push_back((now, self.records));
            while self.rate.len() > 6 {
                self.rate.pop_front();
            }
        }
    }

    /// Records per second over the last few seconds (0 when idle for 5 s).
    pub(crate) fn rate_hz(&self, now: f64) -> f64 {
        match (self.rate.front(), self.rate.back()) {
            (Some(&(t0, n0)), Some(&(t1, _))) if now - t1 < 5.0 && now > t0 => {
                (self.records - n0) as f64 / (now - t0).max(1e-3)
            }
            _ => 0.0,
        }
    }

    /// `/api/series`.
    pub fn series_json(&self, now: f64) -> Json {
        json!({
            "series": self.series.iter().enumerate().map(|(id, s)| s.src.json(id, json!({
                "points": s.points.len(),
                "first": s.points.front().map(|p| p.t),
                "last": s.points.back().map(|p| p.t),
                "samples": s.samples,
            }))).collect::<Vec<_>>(),
            "images": self.images.iter().enumerate().map(|(id, i)| i.src.json(id, json!({
                "kind": i.kind,
                "shape": i.frame.as_ref().map(|f| f.shape.clone()),
                "dtype": i.frame.as_ref().map(|f| f.dtype),
                "frames": i.frames,
                "seq": i.frame.as_ref().map(|f| f.seq),
            }))).collect::<Vec<_>>(),
            "stats": self.stats_json(now),
        })
    }

    /// The counters.
    pub fn stats_json(&self, now: f64) -> Json {
        json!({
            "records": self.records,
            "rate_hz": self.rate_hz(now),
            "lost": self.lost,
            "series": self.series.len(),
            "points_per_series": self.points_per_series(),
            "cut_leaves": self.cut.leaves,
            "cut_dynamic_values": self.cut.dynamic_values,
            "now": now,
            "version": self.version,
        })
    }

    /// `/api/data`: the envelope of each series in [from, to] (default: the series' held
    /// range); unknown ids are left out.
    pub fn data_json(
        &self,
        ids: &[usize],
        axis: XAxis,
        from: Option<f64>,
        to: Option<f64>,
        width: usize,
    ) -> Json {
        let chosen: Vec<(usize, &Series)> = ids
            .iter()
            .filter_map(|id| self.series.get(*id).map(|s| (*id, s)))
            .collect();
        let bound = |first: bool| {
            chosen
                .iter()
                .filter_map(|(_, s)| {
                    let p = if first {
                        s.points.front()
                    } else {
                        s.points.back()
                    }?;
                    Some(p.x(axis))
                })
                .fold(None, |acc: Option<f64>, x| {
                    Some(acc.map_or(x, |a| if first { a.min(x) } else { a.max(x) }))
                })
        };
        let from = from.or_else(|| bound(true)).unwrap_or(0.0);
        let to = to.or_else(|| bound(false)).unwrap_or(from);
        json!({
            "x": axis.name(),
            "from": from,
            "to": to,
            "width": width,
            "series": chosen.iter().map(|(id, s)| {
                let (columns, points) = envelope(&s.points, axis, from, to, width);
                json!({"id": id, "points": points, "columns": columns})
            }).collect::<Vec<_>>(),
        })
    }

    /// `/api/data` for the last `span` seconds (time) up to the newest point of any of `ids`,
    /// or (step) each series' own last `span` samples: sample numbers count per series (a
    /// per-episode schema has far fewer than a per-step one), so each series then carries its
    /// own `from` and `to`.
    pub fn recent_json(&self, ids: &[usize], axis: XAxis, span: f64, width: usize) -> Json {
        if axis == XAxis::Step {
            let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
            let series: Vec<Json> = ids
                .iter()
                .filter_map(|id| self.series.get(*id).map(|s| (*id, s)))
                .map(|(id, s)| {
                    let to = s.points.back().map_or(0.0, |p| p.step as f64);
                    let from = to - span;
                    (lo, hi) = (lo.min(from), hi.max(to));
                    let (columns, points) = envelope(&s.points, axis, from, to, width);
                    json!({"id": id, "points": points, "columns": columns, "from": from, "to": to})
                })
                .collect();
            if series.is_empty() {
                (lo, hi) = (0.0, 0.0);
            }
            return json!({"x": axis.name(), "from": lo, "to": hi, "width": width, "series": series});
        }
        let newest = ids
            .iter()
            .filter_map(|id| self.series.get(*id)?.points.back().map(|p| p.x(axis)))
            .fold(f64::NEG_INFINITY, f64::max);
        if newest.is_finite() {
            self.data_json(ids, axis, Some(newest - span), Some(newest), width)
        } else {
            self.data_json(ids, axis, None, None, width)
        }
    }

    /// `/api/frame`.
    pub fn frame_json(&self, id: usize) -> Option<Json> {
        let f = self.images.get(id)?.frame.as_ref()?;
        Some(json!({
            "id": id,
            "kind": self.images.get(id)?.kind,
            "seq": f.seq,
            "t": f.t,
            "shape": f.shape,
            "channels": f.channels,
            "dtype": f.dtype,
            "min": f.min,
            "max": f.max,
            "data": f.data,
            "values": f.values,
        }))
    }

    /// Image id → latest frame seq.
    pub fn frames_json(&self) -> Json {
        Json::Object(
            self.images
                .iter()
                .enumerate()
                .filter_map(|(id, i)| Some((id.to_string(), json!(i.frame.as_ref()?.seq))))
                .collect(),
        )
    }
}

/// The min/max envelope of `points` over [from, to] cut into `width` equal columns: per
/// non-empty column `[left edge, min, max]`, and the number of points in the range. Points
/// must be in x order (a series' points are: time and sample number only grow).
pub(crate) fn envelope(
    points: &VecDeque<Point>,
    axis: XAxis,
    from: f64,
    to: f64,
    width: usize,
) -> (Vec<[f64; 3]>, usize) {
    let width = width.max(1);
    let start = points.partition_point(|p| p.x(axis) < from);
    let span = to - from;
    let mut columns: Vec<[f64; 3]> = Vec::new();
    let mut current: Option<(usize, f64, f64)> = None;
    let mut count = 0;
    for p in points.range(start..) {
        let x = p.x(axis);
        if x > to {
            break;
        }
        count += 1;
        let col = if span > 0.0 {
            (((x - from) / span * width as f64) as usize).min(width - 1)
        } else {
            0
        };
        match &mut current {
            Some((c, lo, hi)) if *c == col => {
                *lo = lo.min(p.v);
                *hi = hi.max(p.v);
            }
            _ => {
                if let Some((c, lo, hi)) = current.take() {
                    columns.push([edge(from, span, width, c), lo, hi]);
                }
                current = Some((col, p.v, p.v));
            }
        }
    }
    if let Some((c, lo, hi)) = current {
        columns.push([edge(from, span, width, c), lo, hi]);
    }
    (columns, count)
}

fn edge(from: f64, span: f64, width: usize, col: usize) -> f64 {
    from + span * col as f64 / width as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A series of `field` of schema `schema` from a live producer on lane 1.
    fn series(schema: &str, field: &str) -> Series {
        Series::new(Source {
            schema: schema.into(),
            producer: "p".into(),
            pid: 1,
            lane: 1,
            started: 0.0,
            ended: None,
            field: field.into(),
        })
    }

    /// Brute force: every point's column computed on its own, then min and max per column.
    fn reference(points: &[Point], axis: XAxis, from: f64, to: f64, width: usize) -> Vec<[f64; 3]> {
        let span = to - from;
        let mut cols: std::collections::BTreeMap<usize, (f64, f64)> = Default::default();
        for p in points {
            let x = p.x(axis);
            if x < from || x > to {
                continue;
            }
            let c = if span > 0.0 {
                (((x - from) / span * width as f64) as usize).min(width - 1)
            } else {
                0
            };
            let e = cols.entry(c).or_insert((p.v, p.v));
            e.0 = e.0.min(p.v);
            e.1 = e.1.max(p.v);
        }
        cols.into_iter()
            .map(|(c, (lo, hi))| [from + span * c as f64 / width as f64, lo, hi])
            .collect()
    }

    fn points(n: u64, seed: u64) -> Vec<Point> {
        let mut x = seed;
        let mut t = 1_700_000_000.0;
        (0..n)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Irregular spacing, bursts and gaps.
                t += ((x >> 40) % 1000) as f64 * 1e-4 * if i % 97 == 0 { 50.0 } else { 1.0 };
                Point {
                    t,
                    step: i,
                    v: ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 100.0,
                }
            })
            .collect()
    }

    #[test]
    fn the_envelope_equals_a_brute_force_reference() {
        for (n, seed) in [(0, 1), (1, 2), (17, 3), (10_000, 4)] {
            let pts = points(n, seed);
            let deque: VecDeque<Point> = pts.iter().copied().collect();
            for axis in [XAxis::Time, XAxis::Step] {
                let (lo, hi) = match (pts.first(), pts.last()) {
                    (Some(a), Some(b)) => (a.x(axis), b.x(axis)),
                    _ => (0.0, 1.0),
                };
                let ranges = [
                    (lo, hi),
                    (lo + (hi - lo) * 0.3, lo + (hi - lo) * 0.31),
                    (lo - 10.0, lo - 1.0),
                    (hi, hi),
                    (lo + (hi - lo) / 2.0, hi + 100.0),
                ];
                for (from, to) in ranges {
                    for width in [1, 7, 600, 4000] {
                        let (got, count) = envelope(&deque, axis, from, to, width);
                        assert_eq!(
                            got,
                            reference(&pts, axis, from, to, width),
                            "n {n} {axis:?} [{from}, {to}] width {width}"
                        );
                        let want = pts
                            .iter()
                            .filter(|p| p.x(axis) >= from && p.x(axis) <= to)
                            .count();
                        assert_eq!(count, want);
                        assert!(got.len() <= width);
                    }
                }
            }
        }
    }

    #[test]
    fn recent_samples_are_each_series_own_last_span() {
        let mut s = Store::new(1000);
        for field in ["step", "episode"] {
            s.series.push(series(field, field));
        }
        for i in 0..500 {
            s.push(0, f64::from(i), f64::from(i % 50));
            if i % 50 == 49 {
                s.push(1, f64::from(i), f64::from(i / 50));
            }
        }
        let j = s.recent_json(&[0, 1], XAxis::Step, 20.0, 100);
        let range = |k: usize| {
            (
                j["series"][k]["from"].as_f64(),
                j["series"][k]["to"].as_f64(),
            )
        };
        assert_eq!(range(0), (Some(479.0), Some(499.0)));
        assert_eq!(range(1), (Some(-11.0), Some(9.0)));
        // All ten episodes are in the episode series' window, the last 21 steps in the other.
        assert_eq!(j["series"][1]["points"], 10);
        assert_eq!(j["series"][0]["points"], 21);
        assert_eq!(
            (j["from"].as_f64(), j["to"].as_f64()),
            (Some(-11.0), Some(499.0))
        );
    }

    #[test]
    fn history_is_bounded_and_nan_is_a_sample_without_a_point() {
        let mut s = Store::new(3);
        s.series.push(series("a", "x"));
        for i in 0..5 {
            s.push(0, f64::from(i), f64::from(i) * 2.0);
        }
        s.push(0, 9.0, f64::NAN);
        let steps: Vec<u64> = s.series[0].points.iter().map(|p| p.step).collect();
        assert_eq!(steps, [2, 3, 4]);
        assert_eq!(s.series[0].samples, 6);
    }

    /// However many series come, the store holds at most its point budget, each series its
    /// share (counted, not measured); past [`MAX_SERIES`] leaves are cut and counted.
    #[test]
    fn points_held_stay_within_the_budget_and_series_within_the_limit() {
        let mut s = Store::new(1_000);
        s.point_budget = 2_000;
        let mut ids = vec![s.add_series(series("a", "x").src).expect("a series")];
        for i in 0..500u32 {
            s.push(ids[0], f64::from(i), 1.0);
        }
        assert_eq!(s.points_held(), 500, "one series keeps its history_points");
        for k in 1..10 {
            let id = s
                .add_series(series("a", &format!("x{k}")).src)
                .expect("series");
            ids.push(id);
        }
        for i in 0..1_000u32 {
            for &id in &ids {
                s.push(id, f64::from(i), 1.0);
            }
        }
        assert_eq!(s.points_per_series(), 200);
        assert!(s.points_held() <= 2_000, "{} points held", s.points_held());
        assert!(s.series.iter().all(|x| x.points.capacity() <= 2 * 200 + 64));
        while s.series.len() < MAX_SERIES {
            s.series.push(series("b", "y"));
        }
        assert!(s.add_series(series("c", "z").src).is_none());
        assert_eq!(s.cut().leaves, 1);
        assert_eq!(s.series_count(), MAX_SERIES);
    }
}
