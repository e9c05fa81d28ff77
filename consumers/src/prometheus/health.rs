//! The bus's own health, asked from the broker at each scrape, and the encoding helpers.

use std::borrow::Cow;
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use snapbus_bus::control::{BusState, Conn, ControlError, FromBroker, PROTOCOL_VERSION, ToBroker};
use snapbus_bus::runtime::BusDir;
use snapbus_bus::status::StatusValue;
use thiserror::Error;

/// Why the broker's state could not be read.
#[derive(Debug, Error)]
pub enum BusStateError {
    /// No broker listens on the bus's socket.
    #[error("no bus '{0}' is running")]
    NotRunning(String),
    /// The request failed or timed out.
    #[error("talking to the broker of bus '{bus}': {source}")]
    Control {
        /// The bus.
        bus: String,
        /// What failed.
        source: ControlError,
    },
    /// The broker refused or answered something else.
    #[error("the broker of bus '{bus}' answered: {answer}")]
    Refused {
        /// The bus.
        bus: String,
        /// Its answer.
        answer: String,
    },
}

/// Asks the broker of `dir` for the bus's state (what `snapbus ls` shows), waiting at most
/// `timeout` for the answer.
pub fn bus_state(dir: &BusDir, timeout: Duration) -> Result<BusState, BusStateError> {
    let bus = dir.name().to_string();
    let mut conn =
        Conn::connect(&dir.socket_path()).map_err(|_| BusStateError::NotRunning(bus.clone()))?;
    let msg = ToBroker::Ls {
        version: PROTOCOL_VERSION,
    };
    match conn.request(&msg, timeout) {
        Ok((FromBroker::State(s), _fds)) => Ok(*s),
        Ok((other, _fds)) => Err(BusStateError::Refused {
            bus,
            answer: format!("{other:?}"),
        }),
        Err(source) => Err(BusStateError::Control { bus, source }),
    }
}

/// Label pairs of one sample.
pub(crate) type Pairs = Vec<(Cow<'static, str>, String)>;

/// Encodes a gauge family.
pub(crate) fn gauge<'a>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (&'a [(Cow<'static, str>, String)], f64)>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
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
    let rows = |f: fn(&snapbus_bus::control::ProducerState) -> f64| {
        producers.iter().map(move |(l, p)| (l.as_slice(), f(p)))
    };
    let count_rows = |f: fn(&snapbus_bus::control::ProducerState) -> u64| {
        producers.iter().map(move |(l, p)| (l.as_slice(), f(p)))
    };
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
    type C = snapbus_bus::control::ConsumerState;
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
