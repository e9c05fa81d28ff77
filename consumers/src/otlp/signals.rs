//! Log records and spans on their way to the outbox: per-resource batches encoded once full
//! (or at each flush), and the bounded table of open spans.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, status};
use prost::Message as _;
use snapbus_schemas::builtin::{AttrValue, Attributes, DurationSample};

use super::convert::{SCHEMA_URL, kv_f64, kv_int, kv_str, scope};
use super::metrics::Res;
use super::outbox::Batch;
use super::stats::Signal;

/// A batch is encoded and queued once it holds this many items…
pub const BATCH_ITEMS: u64 = 2048;
/// …or about this many bytes (or a quarter of the queue's cap, if that is less: a batch
/// always fits the queue).
pub const BATCH_BYTES: usize = 1 << 20;

/// Log records or spans not yet encoded.
pub(crate) struct Pending<T> {
    signal: Signal,
    by_res: BTreeMap<u64, (Arc<Res>, Vec<T>)>,
    items: u64,
    bytes: usize,
    max_bytes: usize,
    first_t: u64,
    last_t: u64,
}

impl<T: prost::Message> Pending<T> {
    /// Batches of `signal` for a queue of `queue_cap` bytes.
    pub(crate) fn new(signal: Signal, queue_cap: usize) -> Pending<T> {
        Pending {
            signal,
            max_bytes: (queue_cap / 4).clamp(1024, BATCH_BYTES),
            by_res: BTreeMap::new(),
            items: 0,
            bytes: 0,
            first_t: 0,
            last_t: 0,
        }
    }

    /// Adds an item of producer time `t`; returns whether the batch is full.
    pub(crate) fn add(&mut self, res: &Arc<Res>, t: u64, item: T) -> bool {
        self.bytes += item.encoded_len() + 4;
        self.items += 1;
        if self.first_t == 0 || t < self.first_t {
            self.first_t = t;
        }
        self.last_t = self.last_t.max(t);
        self.by_res
            .entry(res.key)
            .or_insert_with(|| (Arc::clone(res), Vec::new()))
            .1
            .push(item);
        self.items >= BATCH_ITEMS || self.bytes >= self.max_bytes
    }

    /// The batch, encoded by `encode` (`None` if empty); starts a new one.
    pub(crate) fn take(
        &mut self,
        encode: impl FnOnce(Vec<(Arc<Res>, Vec<T>)>) -> Vec<u8>,
    ) -> Option<Batch> {
        if self.items == 0 {
            return None;
        }
        let groups = std::mem::take(&mut self.by_res).into_values().collect();
        let batch = Batch {
            signal: self.signal,
            body: encode(groups),
            items: self.items,
            first_t: self.first_t,
            last_t: self.last_t,
        };
        (self.items, self.bytes, self.first_t, self.last_t) = (0, 0, 0, 0);
        Some(batch)
    }
}

/// The request of log records grouped by resource.
pub(crate) fn encode_logs(groups: Vec<(Arc<Res>, Vec<LogRecord>)>) -> Vec<u8> {
    ExportLogsServiceRequest {
        resource_logs: groups
            .into_iter()
            .map(|(res, log_records)| ResourceLogs {
                resource: Some(res.resource.clone()),
                scope_logs: vec![ScopeLogs {
                    scope: Some(scope()),
                    log_records,
                    schema_url: SCHEMA_URL.into(),
                }],
                schema_url: SCHEMA_URL.into(),
            })
            .collect(),
    }
    .encode_to_vec()
}

/// The request of spans grouped by resource.
pub(crate) fn encode_spans(groups: Vec<(Arc<Res>, Vec<Span>)>) -> Vec<u8> {
    ExportTraceServiceRequest {
        resource_spans: groups
            .into_iter()
            .map(|(res, spans)| ResourceSpans {
                resource: Some(res.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(scope()),
                    spans,
                    schema_url: SCHEMA_URL.into(),
                }],
                schema_url: SCHEMA_URL.into(),
            })
            .collect(),
    }
    .encode_to_vec()
}

/// A span that started and has not ended.
pub(crate) struct Open {
    pub(crate) name: String,
    pub(crate) parent: Option<u64>,
    pub(crate) start_nanos: u64,
    pub(crate) attributes: Vec<KeyValue>,
    pub(crate) trace_id: [u8; 16],
}

/// Open spans by (lane, span id), at most `cap`.
pub(crate) struct SpanTable {
    open: HashMap<(u64, u64), Open>,
    cap: usize,
}

impl SpanTable {
    pub(crate) fn new(cap: usize) -> SpanTable {
        SpanTable {
            open: HashMap::new(),
            cap,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    /// Remembers a started span; false if the table is full.
    pub(crate) fn start(&mut self, lane: u64, span_id: u64, open: Open) -> bool {
        if self.open.len() >= self.cap && !self.open.contains_key(&(lane, span_id)) {
            return false;
        }
        self.open.insert((lane, span_id), open);
        true
    }

    pub(crate) fn end(&mut self, lane: u64, span_id: u64) -> Option<Open> {
        self.open.remove(&(lane, span_id))
    }

    /// Removes every open span of `lane`.
    pub(crate) fn drain_lane(&mut self, lane: u64) -> Vec<(u64, Open)> {
        let ids: Vec<u64> = self
            .open
            .keys()
            .filter(|(l, _)| *l == lane)
            .map(|(_, id)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.open.remove(&(lane, id)).map(|o| (id, o)))
            .collect()
    }
}

/// The trace id of a producer's spans: a hash of its session tag and lane.
pub(crate) fn trace_id(session_tag: Option<&str>, lane: u64) -> [u8; 16] {
    let mut key = session_tag.unwrap_or("").as_bytes().to_vec();
    key.extend_from_slice(&lane.to_le_bytes());
    xxhash_rust::xxh3::xxh3_128(&key).to_be_bytes()
}

/// The OTLP span id of a producer's span id (never all zero).
pub(crate) fn span_id(id: u64) -> Vec<u8> {
    if id == 0 { u64::MAX } else { id }.to_be_bytes().to_vec()
}

/// Span and event attributes as OTLP key-values.
pub(crate) fn attributes(attrs: &Attributes) -> Vec<KeyValue> {
    attrs
        .iter()
        .map(|(k, v)| match v {
            AttrValue::Bool(b) => KeyValue {
                key: k.clone(),
                value: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                    value: Some(
                        opentelemetry_proto::tonic::common::v1::any_value::Value::BoolValue(*b),
                    ),
                }),
                ..Default::default()
            },
            AttrValue::I64(x) => kv_int(k, *x),
            AttrValue::U64(x) => match i64::try_from(*x) {
                Ok(i) => kv_int(k, i),
                Err(_) => kv_str(k, x.to_string()),
            },
            AttrValue::F64(x) => kv_f64(k, *x),
            AttrValue::Str(s) => kv_str(k, s.clone()),
        })
        .collect()
}

/// A finished span.
pub(crate) fn span(
    id: u64,
    open: Open,
    end_nanos: u64,
    mut end_attrs: Vec<KeyValue>,
    error: Option<&str>,
) -> Span {
    let mut attributes = open.attributes;
    attributes.append(&mut end_attrs);
    Span {
        trace_id: open.trace_id.to_vec(),
        span_id: span_id(id),
        parent_span_id: open.parent.map(span_id).unwrap_or_default(),
        name: open.name,
        kind: 1, // internal
        start_time_unix_nano: open.start_nanos,
        end_time_unix_nano: end_nanos.max(open.start_nanos),
        attributes,
        status: error.map(|m| Status {
            message: m.to_owned(),
            code: status::StatusCode::Error as i32,
        }),
        ..Default::default()
    }
}

/// The span of a duration sample that names one (`snapbus.duration` v2: a producer's `span` or
/// `time_it`, ended at `end_nanos`): its trace, its id, its parent's, its label as name.
pub(crate) fn duration_span(d: &DurationSample, end_nanos: u64) -> Span {
    Span {
        trace_id: d.trace_id.to_be_bytes().to_vec(),
        span_id: span_id(d.span_id),
        parent_span_id: if d.parent_id == 0 {
            Vec::new()
        } else {
            span_id(d.parent_id)
        },
        name: d.label.clone(),
        kind: 1, // internal
        start_time_unix_nano: end_nanos.saturating_sub(d.duration_nanos),
        end_time_unix_nano: end_nanos,
        ..Default::default()
    }
}
