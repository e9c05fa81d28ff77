//! The bus's own health as metrics: the broker's state (asked through the bus's client,
//! [`BusClient`](snapbus_bus::client::BusClient)) mapped to series, and the encoding helpers.

use std::borrow::Cow;

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;
use snapbus_bus::client::{BusState, ConsumerState, ProducerState};
use snapbus_bus::status::StatusValue;

/// Label pairs of one sample.
pub(crate) type Pairs = Vec<(Cow<'static, str>, String)>;

/// Encodes a gauge family.
pub(crate) fn gauge<'a>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (&'a [(Cow<'static, str>, String)], f64)>,
) -> Result<(), std::fmt::Error> {
    gauge_with_unit(enc, name, help, None, rows)
}

/// Encodes a gauge family whose name ends with `_<unit>` (OpenMetrics' `# UNIT` line) if a
/// unit is given.
pub(crate) fn gauge_with_unit<'a>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&str>,
    rows: impl IntoIterator<Item = (&'a [(Cow<'static, str>, String)], f64)>,
) -> Result<(), std::fmt::Error> {
    // The encoder appends `_<unit>` to the name: it is given the name without it.
    let with_unit = unit.and_then(|u| {
        name.strip_suffix(u)
            .and_then(|base| base.strip_suffix('_'))
            .filter(|base| !base.is_empty())
            .map(|base| (base, Unit::Other(u.to_owned())))
    });
    let mut m = match &with_unit {
        Some((base, unit)) => enc.encode_descriptor(base, help, Some(unit), MetricType::Gauge)?,
        None => enc.encode_descriptor(name, help, None, MetricType::Gauge)?,
    };
    for (labels, v) in rows {
        if labels.is_empty() {
            m.encode_gauge(&v)?;
        } else {
            m.encode_family(&labels)?.encode_gauge(&v)?;
        }
    }
    Ok(())
}

/// Encodes a counter family (`_total` is appended to `name`).
pub(crate) fn counter<'a>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (&'a [(Cow<'static, str>, String)], u64)>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        if labels.is_empty() {
            m.encode_counter::<NoLabelSet, u64, f64>(&v, None)?;
        } else {
            m.encode_family(&labels)?
                .encode_counter::<NoLabelSet, u64, f64>(&v, None)?;
        }
    }
    Ok(())
}

fn pairs(kv: &[(&'static str, String)]) -> Pairs {
    kv.iter()
        .map(|(k, v)| (Cow::Borrowed(*k), v.clone()))
        .collect()
}

/// Encodes the bus's health from `state` (`snapbus_bus_up` 0 and nothing else without it).
pub(crate) fn encode_health(
    enc: &mut DescriptorEncoder<'_>,
    state: Option<&BusState>,
) -> Result<(), std::fmt::Error> {
    let none: &[(Cow<'static, str>, String)] = &[];
    let up = if state.is_some() { 1.0 } else { 0.0 };
    gauge(
        enc,
        "snapbus_bus_up",
        "Whether the broker answered this scrape",
        [(none, up)],
    )?;
    let Some(s) = state else { return Ok(()) };
    let producers: Vec<(Pairs, &_)> = s
        .producers
        .iter()
        .map(|p| {
            let mut l = vec![
                ("producer", p.info.name.clone()),
                ("pid", p.info.pid.to_string()),
            ];
            if let Some(t) = &p.info.session_tag {
                l.push(("session_tag", t.clone()));
            }
            if let Some(t) = &p.info.perf_tag {
                l.push(("perf_tag", t.clone()));
            }
            (pairs(&l), p)
        })
        .collect();
    let rows =
        |f: fn(&ProducerState) -> f64| producers.iter().map(move |(l, p)| (l.as_slice(), f(p)));
    let count_rows =
        |f: fn(&ProducerState) -> u64| producers.iter().map(move |(l, p)| (l.as_slice(), f(p)));
    counter(
        enc,
        "snapbus_producer_records",
        "Records the producer committed to its lane",
        count_rows(|p| p.frames),
    )?;
    counter(
        enc,
        "snapbus_producer_dropped",
        "Records the producer dropped (refused by its lane or not encoded)",
        count_rows(|p| p.dropped),
    )?;
    gauge(
        enc,
        "snapbus_producer_rate_hz",
        "Records per second over the last few seconds",
        rows(|p| p.rate_hz),
    )?;
    gauge(
        enc,
        "snapbus_producer_lane_bytes",
        "Capacity of the producer's lane",
        rows(|p| p.lane_bytes as f64),
    )?;
    gauge(
        enc,
        "snapbus_producer_live",
        "1 while the producer is writing, 0 once it closed its lane or died",
        rows(|p| if p.status.writing() { 1.0 } else { 0.0 }),
    )?;
    encode_consumers(enc, s)
}

fn encode_consumers(enc: &mut DescriptorEncoder<'_>, s: &BusState) -> Result<(), std::fmt::Error> {
    type C = ConsumerState;
    let consumers: Vec<(Pairs, &C)> = s
        .consumers
        .iter()
        .map(|c| {
            let l = [
                ("consumer", c.id.to_string()),
                ("kind", c.info.kind.clone()),
                ("pid", c.info.pid.to_string()),
            ];
            (pairs(&l), c)
        })
        .collect();
    let count_rows = |f: fn(&C) -> u64| consumers.iter().map(move |(l, c)| (l.as_slice(), f(c)));
    counter(
        enc,
        "snapbus_consumer_delivered",
        "Records delivered to the consumer",
        count_rows(|c| c.delivered),
    )?;
    counter(
        enc,
        "snapbus_consumer_lost",
        "Records the consumer lost (overwritten before it read them)",
        count_rows(|c| c.lost),
    )?;
    gauge(
        enc,
        "snapbus_consumer_lag_bytes",
        "Bytes the consumer is behind the lanes' tails",
        consumers
            .iter()
            .map(|(l, c)| (l.as_slice(), c.lag_bytes as f64)),
    )?;
    let mut board: Vec<(Pairs, f64)> = Vec::new();
    for (l, c) in &consumers {
        for e in &c.board {
            let v = match e.value {
                StatusValue::Count(n) => n as f64,
                StatusValue::Number(x) => x,
                StatusValue::Text(_) => continue,
            };
            let mut l = l.clone();
            l.push(("key".into(), e.key.clone()));
            board.push((l, v));
        }
    }
    gauge(
        enc,
        "snapbus_consumer_status",
        "Numeric entries of the consumer's status board (snapbus ls), by key",
        board.iter().map(|(l, v)| (l.as_slice(), *v)),
    )
}
