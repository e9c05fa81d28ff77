//! Process resource samples (`snapbus.resource`, the producer's sampler) as the OpenTelemetry
//! process metrics (semantic conventions 1.27, experimental): `process.cpu.time` (a cumulative
//! sum in seconds, `cpu.mode` = `user` / `system`), `process.memory.usage` (bytes),
//! `process.paging.faults` (cumulative, `process.paging.fault_type` = `major` / `minor`) and
//! `process.thread.count`; the last sample of each export interval, stamped with its time.

use std::sync::Arc;

use snapbus_schemas::Wire;
use snapbus_schemas::builtin::ResourceSample;

use super::convert::kv_str;
use super::exporter::OtlpExporter;
use super::metrics::{Point, PointData, Res};
use super::stats::{DropReason, Signal};
use crate::runtime::Record;

/// A process metric: name, unit, its one attribute, its point.
type ProcessMetric = (
    &'static str,
    &'static str,
    Option<(&'static str, &'static str)>,
    PointData,
);

/// Adds the process metrics of resource sample `r`.
pub(crate) fn add_points(x: &mut OtlpExporter, r: &Record<'_>, res: &Arc<Res>) {
    let Ok(s) = ResourceSample::decode_exact(r.payload) else {
        return;
    };
    let (t, start) = (r.header.t_nanos, r.producer.started_nanos);
    let sum = |value: f64| PointData::Sum {
        start_nanos: start,
        t_nanos: t,
        value,
        monotonic: true,
    };
    let updown = |value: f64| PointData::Sum {
        start_nanos: start,
        t_nanos: t,
        value,
        monotonic: false,
    };
    let points: [ProcessMetric; 6] = [
        (
            "process.cpu.time",
            "s",
            Some(("cpu.mode", "user")),
            sum(s.cpu_user_nanos as f64 / 1e9),
        ),
        (
            "process.cpu.time",
            "s",
            Some(("cpu.mode", "system")),
            sum(s.cpu_sys_nanos as f64 / 1e9),
        ),
        (
            "process.memory.usage",
            "By",
            None,
            updown(s.rss_bytes as f64),
        ),
        (
            "process.paging.faults",
            "{fault}",
            Some(("process.paging.fault_type", "minor")),
            sum(s.minor_faults as f64),
        ),
        (
            "process.paging.faults",
            "{fault}",
            Some(("process.paging.fault_type", "major")),
            sum(s.major_faults as f64),
        ),
        (
            "process.thread.count",
            "{thread}",
            None,
            updown(f64::from(s.threads)),
        ),
    ];
    for (name, unit, attr, data) in points {
        let key = format!("{:x}/{name}/{}", res.key, attr.map_or("", |a| a.1));
        let res = Arc::clone(res);
        let new = data.clone();
        let ok = x.metrics_table().keyed(
            key,
            || Point {
                res,
                name: Arc::from(name),
                unit,
                attrs: Arc::new(attr.map(|(k, v)| kv_str(k, v)).into_iter().collect()),
                data: new,
            },
            |p| p.data = data,
        );
        if !ok {
            x.outbox()
                .note_dropped(Signal::Metrics, DropReason::Cardinality, 1, t, t);
        }
    }
}
