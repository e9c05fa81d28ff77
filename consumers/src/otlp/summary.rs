//! Aggregator summaries (`<schema>.summary`) as gauges: one series per summarized leaf and
//! statistic (`demo.step.summary.reward` with `stat="mean"`, `window="episode"`, and the
//! group-by values as `group.<field>`), stamped with the window's last record time, under the
//! resource of the summarized producer. Never the window index: it is unbounded.

use std::sync::Arc;

use opentelemetry_proto::tonic::common::v1::KeyValue;
use snapbus_schemas::Value;

use super::convert::{kv_str, summary_source_resource};
use super::exporter::OtlpExporter;
use super::metrics::{Point, PointData, Res};
use super::stats::{DropReason, Signal};
use crate::runtime::Record;

/// Adds the gauges of summary `v` (a decoded `<schema>.summary` record `r`).
pub(crate) fn add_points(x: &mut OtlpExporter, r: &Record<'_>, v: &Value<'_>) {
    let text = |k: &str| match v.field(k) {
        Some(Value::Str(s)) => s.to_string(),
        _ => String::new(),
    };
    let num = |k: &str| match v.field(k) {
        Some(Value::U64(n)) => *n,
        Some(Value::U32(n)) => u64::from(*n),
        _ => 0,
    };
    let (lane, window) = (num("producer_lane"), text("window"));
    let t = match num("last_t_nanos") {
        0 => r.header.t_nanos,
        t => t,
    };
    let res = x.resource_of_lane(lane).unwrap_or_else(|| {
        Arc::new(Res {
            key: lane,
            resource: summary_source_resource(
                &text("producer"),
                u32::try_from(num("producer_pid")).unwrap_or(0),
                lane,
                x.host(),
            ),
        })
    });
    let mut attrs = vec![kv_str("window", window)];
    if let Some(Value::Struct(group)) = v.field("group") {
        for (k, g) in group {
            let s = match g {
                Value::Str(s) => s.to_string(),
                other => other.as_f64().map(|f| f.to_string()).unwrap_or_default(),
            };
            attrs.push(kv_str(&format!("group.{k}"), s));
        }
    }
    let Some(stats) = v.field("stats") else {
        return;
    };
    let mut out = Vec::new();
    walk(stats, "", &mut out);
    let base = r.schema.id();
    let group_key: String = attrs
        .iter()
        .map(|a| format!("{:?}", a.value))
        .collect::<Vec<_>>()
        .join("/");
    for (path, stat, value) in out {
        let name: Arc<str> = Arc::from(format!("{base}.{path}"));
        let key = format!("{lane:x}/{name}/{stat}/{group_key}");
        let mut a: Vec<KeyValue> = attrs.clone();
        a.push(kv_str("stat", stat.clone()));
        let res = Arc::clone(&res);
        let ok = x.metrics_table().keyed(
            key,
            || Point {
                res,
                name,
                unit: "",
                attrs: Arc::new(a),
                data: PointData::Gauge { t_nanos: t, value },
            },
            |p| p.data = PointData::Gauge { t_nanos: t, value },
        );
        if !ok {
            x.outbox()
                .note_dropped(Signal::Metrics, DropReason::Cardinality, 1, t, t);
        }
    }
}

/// The (leaf path, stat, value) of every statistic under `v`: a struct whose fields are all
/// numbers is one leaf's statistics; other structs are walked into. NaN statistics are left
/// out.
fn walk(v: &Value<'_>, path: &str, out: &mut Vec<(String, String, f64)>) {
    let Value::Struct(fields) = v else {
        return;
    };
    let is_stats = fields.iter().all(|(_, f)| f.as_f64().is_some());
    if is_stats && !path.is_empty() {
        for (stat, f) in fields {
            if let Some(x) = f.as_f64().filter(|x| !x.is_nan()) {
                out.push((path.to_owned(), stat.to_string(), x));
            }
        }
        return;
    }
    for (k, f) in fields {
        let p = if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        };
        walk(f, &p, out);
    }
}
