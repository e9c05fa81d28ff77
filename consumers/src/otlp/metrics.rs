//! Metric state: the last value (and time) of every numeric leaf per producer and schema,
//! aggregator summaries as gauges with a `stat` attribute, duration samples as cumulative
//! histograms; and their encoding as an `ExportMetricsServiceRequest`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

use super::convert::{SCHEMA_URL, scope};

/// Upper bounds (seconds) of the duration histograms' buckets (one more bucket above the
/// last).
pub const DURATION_BOUNDS_SECS: [f64; 14] = [
    1e-6, 1e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0,
];

/// A resource and the key that identifies it (a lane id).
#[derive(Debug)]
pub(crate) struct Res {
    pub(crate) key: u64,
    pub(crate) resource: Resource,
}

/// One data point ready to encode.
#[derive(Debug, Clone)]
pub(crate) struct Point {
    pub(crate) res: Arc<Res>,
    pub(crate) name: Arc<str>,
    pub(crate) unit: &'static str,
    pub(crate) attrs: Arc<Vec<KeyValue>>,
    pub(crate) data: PointData,
}

/// A gauge value, a cumulative sum or a cumulative histogram.
#[derive(Debug, Clone)]
pub(crate) enum PointData {
    Gauge {
        t_nanos: u64,
        value: f64,
    },
    Sum {
        start_nanos: u64,
        t_nanos: u64,
        value: f64,
        monotonic: bool,
    },
    Histogram {
        start_nanos: u64,
        t_nanos: u64,
        count: u64,
        sum: f64,
        min: f64,
        max: f64,
        buckets: Vec<u64>,
    },
}

/// The last values of one (producer, schema), each with the time of the record it came from.
struct Row {
    res: Arc<Res>,
    names: Arc<[Arc<str>]>,
    /// The UCUM unit of each leaf (`""`: none known).
    units: Arc<[&'static str]>,
    values: Vec<f64>,
    times_nanos: Vec<u64>,
    /// Per field: set since the last `take_dirty`.
    fresh: Vec<bool>,
    dirty: bool,
}

/// Series ids: rows' leaves below this bit, keyed points (summaries, histograms) above.
const KEYED: u64 = 1 << 62;

/// The reader's metric state (see the module docs).
pub(crate) struct MetricTable {
    rows: HashMap<(u64, u64), usize>,
    data: Vec<Row>,
    keyed_ids: HashMap<String, u64>,
    keyed: Vec<(Point, bool)>,
    series: usize,
    max_series: usize,
}

impl MetricTable {
    pub(crate) fn new(max_series: usize) -> MetricTable {
        MetricTable {
            rows: HashMap::new(),
            data: Vec::new(),
            keyed_ids: HashMap::new(),
            keyed: Vec::new(),
            series: 0,
            max_series,
        }
    }

    /// Series known.
    pub(crate) fn series(&self) -> usize {
        self.series
    }

    /// The row of (`res`, schema `fingerprint`), created with `names` (and their `units`) if
    /// there is room: `None` if its series would exceed the cap.
    pub(crate) fn row(
        &mut self,
        res: &Arc<Res>,
        fingerprint: u64,
        names: &Arc<[Arc<str>]>,
        units: &Arc<[&'static str]>,
    ) -> Option<usize> {
        if let Some(i) = self.rows.get(&(res.key, fingerprint)) {
            return Some(*i);
        }
        if self.series + names.len() > self.max_series {
            return None;
        }
        self.series += names.len();
        let i = self.data.len();
        self.data.push(Row {
            res: Arc::clone(res),
            names: Arc::clone(names),
            units: Arc::clone(units),
            values: vec![f64::NAN; names.len()],
            times_nanos: vec![0; names.len()],
            fresh: vec![false; names.len()],
            dirty: false,
        });
        self.rows.insert((res.key, fingerprint), i);
        Some(i)
    }

    /// Forgets the series of the producer whose resource key is `key` (it ended or died; its
    /// last values were handed to the outbox first): they no longer count against the cap.
    /// Their ids are not reused (a row keeps its slot, emptied), so a point still pending in
    /// the outbox cannot be mistaken for another series'.
    pub(crate) fn forget(&mut self, key: u64) {
        let before = self.rows.len();
        let data = &mut self.data;
        let mut freed = 0usize;
        self.rows.retain(|&(k, _), &mut i| {
            if k != key {
                return true;
            }
            let row = &mut data[i];
            freed += row.names.len();
            row.names = Arc::from(Vec::new());
            row.units = Arc::from(Vec::new());
            row.values = Vec::new();
            row.times_nanos = Vec::new();
            row.fresh = Vec::new();
            row.dirty = false;
            false
        });
        let keyed = &mut self.keyed;
        let before_keyed = self.keyed_ids.len();
        self.keyed_ids.retain(|_, &mut id| {
            let (point, dirty) = &mut keyed[id as usize];
            if point.res.key != key {
                return true;
            }
            *dirty = false;
            false
        });
        freed += before_keyed - self.keyed_ids.len();
        debug_assert!(self.rows.len() <= before);
        self.series = self.series.saturating_sub(freed);
    }

    /// Sets the last values of row `i` (NaN: absent in this record, the previous value stays,
    /// with its own time: it is not sent again as if new).
    #[inline]
    pub(crate) fn set(&mut self, i: usize, t_nanos: u64, values: &[f64]) {
        let row = &mut self.data[i];
        for (((slot, t), fresh), v) in row
            .values
            .iter_mut()
            .zip(row.times_nanos.iter_mut())
            .zip(row.fresh.iter_mut())
            .zip(values)
        {
            if !v.is_nan() {
                *slot = *v;
                *t = t_nanos;
                *fresh = true;
            }
        }
        row.dirty = true;
    }

    /// A keyed point (a summary gauge or a histogram) by `key`, made by `make` when new (if
    /// there is room) and updated by `update`. Returns false when the cap refused it.
    pub(crate) fn keyed(
        &mut self,
        key: String,
        make: impl FnOnce() -> Point,
        update: impl FnOnce(&mut Point),
    ) -> bool {
        let id = match self.keyed_ids.get(&key) {
            Some(id) => *id,
            None => {
                if self.series >= self.max_series {
                    return false;
                }
                self.series += 1;
                let id = self.keyed.len() as u64;
                self.keyed.push((make(), false));
                self.keyed_ids.insert(key, id);
                id
            }
        };
        let (point, dirty) = &mut self.keyed[id as usize];
        update(point);
        *dirty = true;
        true
    }

    /// The points updated since the last call, by series id.
    pub(crate) fn take_dirty(&mut self) -> Vec<(u64, Point)> {
        let mut out = Vec::new();
        for (r, row) in self.data.iter_mut().enumerate() {
            if !std::mem::take(&mut row.dirty) {
                continue;
            }
            for (l, (name, v)) in row.names.iter().zip(&row.values).enumerate() {
                if !std::mem::take(&mut row.fresh[l]) {
                    continue;
                }
                out.push((
                    ((r as u64) << 20) | l as u64,
                    Point {
                        res: Arc::clone(&row.res),
                        name: Arc::clone(name),
                        unit: row.units.get(l).copied().unwrap_or(""),
                        attrs: Arc::default(),
                        data: PointData::Gauge {
                            t_nanos: row.times_nanos[l],
                            value: *v,
                        },
                    },
                ));
            }
        }
        for (id, (p, dirty)) in self.keyed.iter_mut().enumerate() {
            if std::mem::take(dirty) {
                out.push((KEYED | id as u64, p.clone()));
            }
        }
        out
    }
}

/// Adds a duration (seconds) to a histogram point.
pub(crate) fn observe(p: &mut Point, t_nanos: u64, secs: f64) {
    if let PointData::Histogram {
        t_nanos: t,
        count,
        sum,
        min,
        max,
        buckets,
        ..
    } = &mut p.data
    {
        let b = DURATION_BOUNDS_SECS.partition_point(|bound| *bound < secs);
        if let Some(n) = buckets.get_mut(b) {
            *n += 1;
        }
        *count += 1;
        *sum += secs;
        *min = min.min(secs);
        *max = max.max(secs);
        *t = t_nanos;
    }
}

/// The points as one request (grouped by resource, then by metric name); its encoded bytes.
pub(crate) fn encode<'a>(points: impl IntoIterator<Item = &'a Point>) -> Vec<u8> {
    let mut by_res: BTreeMap<u64, (&Resource, BTreeMap<&str, Metric>)> = BTreeMap::new();
    for p in points {
        let (_, metrics) = by_res
            .entry(p.res.key)
            .or_insert_with(|| (&p.res.resource, BTreeMap::new()));
        let m = metrics.entry(&p.name).or_insert_with(|| Metric {
            name: p.name.to_string(),
            unit: p.unit.to_owned(),
            ..Default::default()
        });
        add_point(m, p);
    }
    let req = ExportMetricsServiceRequest {
        resource_metrics: by_res
            .into_values()
            .map(|(res, metrics)| ResourceMetrics {
                resource: Some(res.clone()),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(scope()),
                    metrics: metrics.into_values().collect(),
                    schema_url: SCHEMA_URL.into(),
                }],
                schema_url: SCHEMA_URL.into(),
            })
            .collect(),
    };
    req.encode_to_vec()
}

fn add_point(m: &mut Metric, p: &Point) {
    match &p.data {
        PointData::Gauge { t_nanos, value } => {
            let dp = NumberDataPoint {
                attributes: p.attrs.as_ref().clone(),
                time_unix_nano: *t_nanos,
                value: Some(number_data_point::Value::AsDouble(*value)),
                ..Default::default()
            };
            match &mut m.data {
                Some(metric::Data::Gauge(g)) => g.data_points.push(dp),
                _ => {
                    m.data = Some(metric::Data::Gauge(Gauge {
                        data_points: vec![dp],
                    }))
                }
            }
        }
        PointData::Sum {
            start_nanos,
            t_nanos,
            value,
            monotonic,
        } => {
            let dp = NumberDataPoint {
                attributes: p.attrs.as_ref().clone(),
                start_time_unix_nano: *start_nanos,
                time_unix_nano: *t_nanos,
                value: Some(number_data_point::Value::AsDouble(*value)),
                ..Default::default()
            };
            match &mut m.data {
                Some(metric::Data::Sum(g)) => g.data_points.push(dp),
                _ => {
                    m.data = Some(metric::Data::Sum(Sum {
                        data_points: vec![dp],
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: *monotonic,
                    }))
                }
            }
        }
        PointData::Histogram {
            start_nanos,
            t_nanos,
            count,
            sum,
            min,
            max,
            buckets,
        } => {
            let dp = HistogramDataPoint {
                attributes: p.attrs.as_ref().clone(),
                start_time_unix_nano: *start_nanos,
                time_unix_nano: *t_nanos,
                count: *count,
                sum: Some(*sum),
                bucket_counts: buckets.clone(),
                explicit_bounds: DURATION_BOUNDS_SECS.to_vec(),
                min: (*count > 0).then_some(*min),
                max: (*count > 0).then_some(*max),
                ..Default::default()
            };
            match &mut m.data {
                Some(metric::Data::Histogram(h)) => h.data_points.push(dp),
                _ => {
                    m.data = Some(metric::Data::Histogram(Histogram {
                        data_points: vec![dp],
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    }))
                }
            }
        }
    }
}

/// A new, empty duration histogram point.
pub(crate) fn histogram(res: &Arc<Res>, name: Arc<str>, attrs: Vec<KeyValue>, start: u64) -> Point {
    Point {
        res: Arc::clone(res),
        name,
        unit: "s",
        attrs: Arc::new(attrs),
        data: PointData::Histogram {
            start_nanos: start,
            t_nanos: start,
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            buckets: vec![0; DURATION_BOUNDS_SECS.len() + 1],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(key: u64) -> Arc<Res> {
        Arc::new(Res {
            key,
            resource: Resource::default(),
        })
    }

    #[test]
    fn an_ended_producers_series_stop_counting_against_the_cap() {
        let mut t = MetricTable::new(3);
        let names: Arc<[Arc<str>]> = Arc::from(vec![Arc::from("a"), Arc::from("b")]);
        let units: Arc<[&'static str]> = Arc::from(vec![""; 2]);
        let (one, two) = (res(1), res(2));
        let r1 = t
            .row(&one, 7, &names, &units)
            .expect("room for the first producer");
        t.set(r1, 10, &[1.0, 2.0]);
        assert_eq!(t.series(), 2);
        assert!(t.row(&two, 7, &names, &units).is_none(), "the cap is full");
        assert!(t.keyed("k1".into(), || gauge(&one), |_| {}));
        assert_eq!(t.series(), 3);
        t.forget(1);
        assert_eq!(t.series(), 0);
        let r2 = t.row(&two, 7, &names, &units).expect("room again");
        assert_ne!(r1, r2, "ids are not reused");
        t.set(r2, 20, &[3.0, 4.0]);
        let dirty = t.take_dirty();
        assert_eq!(dirty.len(), 2, "only the live producer's points: {dirty:?}");
        assert!(dirty.iter().all(|(_, p)| p.res.key == 2));
    }

    #[test]
    fn a_field_absent_from_the_latest_record_is_not_sent_again_as_new() {
        let mut t = MetricTable::new(10);
        let names: Arc<[Arc<str>]> = Arc::from(vec![Arc::from("a"), Arc::from("b")]);
        let units: Arc<[&'static str]> = Arc::from(vec![""; 2]);
        let r = t.row(&res(1), 7, &names, &units).expect("room");
        t.set(r, 10, &[1.0, f64::NAN]);
        let first = t.take_dirty();
        assert_eq!(first.len(), 1, "{first:?}");
        t.set(r, 20, &[f64::NAN, 5.0]);
        let second = t.take_dirty();
        assert_eq!(second.len(), 1, "only b is new: {second:?}");
        let (_, p) = &second[0];
        assert_eq!(&*p.name, "b");
        assert!(matches!(p.data, PointData::Gauge { t_nanos: 20, value } if value == 5.0));
        assert!(t.take_dirty().is_empty(), "nothing new");
    }

    fn gauge(r: &Arc<Res>) -> Point {
        Point {
            res: Arc::clone(r),
            name: Arc::from("s"),
            unit: "",
            attrs: Arc::default(),
            data: PointData::Gauge {
                t_nanos: 1,
                value: 1.0,
            },
        }
    }
}
