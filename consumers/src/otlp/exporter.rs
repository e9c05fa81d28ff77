//! The exporter consumer: what each record becomes, on the reader's thread, without ever
//! waiting for the network.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;
use snapbus_bus::Level;
use snapbus_bus::status::{StatusBoard, StatusValue};
use snapbus_schemas::builtin::{DurationSample, ResourceSample, SpanEnd, SpanEvent, SpanStart};
use snapbus_schemas::{SchemaDescriptor, Snapshot, Value, Wire};

use super::convert::{
    any_value, host_name, kv_int, kv_str, now_nanos, producer_resource, severity,
};
use super::endpoint::Endpoints;
use super::metrics::{self, MetricTable, Res};
use super::outbox::Outbox;
use super::sender::{RetryPolicy, Sender};
use super::signals::{self, Open, Pending, SpanTable};
use super::stats::{DropReason, ExporterStats, Signal, StatEntry};
use crate::fields::{Extracted, Plan, unit_of};
use crate::runtime::{Consumer, Extract, Flow, HookError, Producer, ProducerChange, Record};
use crate::summary_name::SUMMARY_SUFFIX;

/// How the exporter runs.
#[derive(Debug, Clone)]
pub struct OtlpOptions {
    /// Where each signal goes (a signal without a URL is not exported).
    pub endpoints: Endpoints,
    /// How often metric points (the last value of each series) are sent (default 10 s).
    pub interval: Duration,
    /// The byte cap of the queue of encoded log and span batches (default 16 MiB).
    pub max_queue_bytes: usize,
    /// The most metric series (default 10 000); points of new series beyond it are dropped
    /// and counted `cardinality`.
    pub max_series: usize,
    /// The most open spans remembered (default 100 000).
    pub max_open_spans: usize,
    /// Records at this level or above become log records even if they have numeric fields
    /// (default WARN). Records of schemas without numeric fields always do.
    pub log_level: Level,
    /// Timeouts and backoff.
    pub retry: RetryPolicy,
    /// How long [`OtlpExporter::shutdown`] keeps sending (default 5 s).
    pub shutdown_deadline: Duration,
}

impl OtlpOptions {
    /// The defaults, sending to `endpoints`.
    pub fn new(endpoints: Endpoints) -> OtlpOptions {
        OtlpOptions {
            endpoints,
            interval: Duration::from_secs(10),
            max_queue_bytes: 16 << 20,
            max_series: 10_000,
            max_open_spans: 100_000,
            log_level: Level::WARN,
            retry: RetryPolicy::default(),
            shutdown_deadline: Duration::from_secs(5),
        }
    }
}

/// The schema of Python `logging` records that carry no event (`snapbus.SnapbusHandler`):
/// log records whose body is the message, never metrics.
pub const LOG_RECORD_SCHEMA: &str = "log.record";

/// Records of a schema with a string field (text-bearing: a message, a phase, a name) at this
/// level or above are also log records (at DEBUG and TRACE, only their numbers are gauges).
pub const TEXT_LOG_LEVEL: Level = Level::INFO;

/// The fields a text-bearing record's body is taken from, the first present first (else its
/// first string field).
const BODY_FIELDS: [&str; 4] = ["message", "msg", "text", "body"];

/// What a schema's records become.
enum Kind {
    /// Numeric leaves as gauges (`names` by leaf, with their `units`); every record also a
    /// log record if the schema has no numeric leaves or carries text (`text`: the index of
    /// its body field among the root's fields).
    Numeric {
        plan: Plan,
        names: Arc<[Arc<str>]>,
        units: Arc<[&'static str]>,
        text: Option<usize>,
    },
    /// An aggregator summary: gauges with a `stat` attribute, and a log record.
    Summary,
    Duration,
    /// A process resource sample: the OpenTelemetry process metrics.
    Resource,
    SpanStart,
    SpanEnd,
    SpanEvent,
}

/// The OTLP exporter: a [`Consumer`] whose records become metric points, log records and
/// spans, sent by its own sender thread (see the [module docs](super)).
pub struct OtlpExporter {
    opts: OtlpOptions,
    stats: Arc<ExporterStats>,
    outbox: Arc<Outbox>,
    sender: Option<JoinHandle<()>>,
    host: String,
    kinds: HashMap<u64, Kind>,
    resources: HashMap<u64, Arc<Res>>,
    metrics: MetricTable,
    logs: Pending<LogRecord>,
    spans: Pending<Span>,
    open: SpanTable,
    extracted: Extracted,
    last_metrics: Instant,
    /// When the next export is due, in producer time: the run loop reads the clock only
    /// every 64 records, so a slow stream is also checked against its records' own times.
    next_push_nanos: u64,
    board: Option<StatusBoard>,
}

impl OtlpExporter {
    /// Starts the sender thread.
    pub fn start(opts: OtlpOptions) -> std::io::Result<OtlpExporter> {
        let stats = Arc::new(ExporterStats::default());
        let cap = opts.max_queue_bytes;
        let next_push_nanos =
            now_nanos().saturating_add(u64::try_from(opts.interval.as_nanos()).unwrap_or(u64::MAX));
        let outbox = Arc::new(Outbox::new(opts.max_queue_bytes, Arc::clone(&stats)));
        let host = host_name();
        let sender = Sender::new(
            opts.endpoints.clone(),
            opts.retry.clone(),
            Arc::clone(&outbox),
            Arc::clone(&stats),
            host.clone(),
        );
        let sender = std::thread::Builder::new()
            .name("snapbus-otlp-sender".into())
            .spawn(move || sender.run())?;
        Ok(OtlpExporter {
            metrics: MetricTable::new(opts.max_series),
            open: SpanTable::new(opts.max_open_spans),
            opts,
            stats,
            outbox,
            sender: Some(sender),
            host,
            kinds: HashMap::new(),
            resources: HashMap::new(),
            logs: Pending::new(Signal::Logs, cap),
            spans: Pending::new(Signal::Traces, cap),
            extracted: Extracted::default(),
            last_metrics: Instant::now(),
            next_push_nanos,
            board: None,
        })
    }

    /// The counters (shared with the sender thread: read them any time).
    pub fn stats(&self) -> &Arc<ExporterStats> {
        &self.stats
    }

    /// Keeps `board` up to date with the counters (`state`, `exported.<signal>`,
    /// `dropped.<reason>`, `retries`, `queue_bytes`, `series`, `last_error`, …) at every
    /// flush, so that `snapbus ls` shows them.
    pub fn report_to(&mut self, board: StatusBoard) {
        self.board = Some(board);
        self.publish();
    }

    /// Copies the counters to the status board, if any.
    fn publish(&self) {
        let Some(board) = &self.board else {
            return;
        };
        for (k, v) in self.stats.snapshot().entries() {
            match v {
                StatEntry::Count(n) => board.set(&k, StatusValue::Count(n)),
                StatEntry::Text(t) => board.set(&k, StatusValue::Text(t)),
            }
        }
    }

    /// Sends the metric points and batches pending now and waits until the sender has sent
    /// (or dropped) everything; false if `deadline` came first. For backfill (`snapbus export
    /// --format otlp`): each interval of recorded time gets its own points, and the reader is
    /// held back while the receiver is slow instead of dropping.
    pub fn drain(&mut self, deadline: Instant) -> bool {
        self.push_metrics();
        self.push_batches();
        let sent = self.outbox.wait_sent(deadline);
        self.publish();
        sent
    }

    /// Whether the queue of log and span batches holds more than half its cap (a backfill
    /// then [`drains`](Self::drain) before reading on).
    pub fn queue_half_full(&self) -> bool {
        self.stats.snapshot().queue_bytes as usize > self.opts.max_queue_bytes / 2
    }

    /// Hands everything pending to the sender, lets it send until it is done or the shutdown
    /// deadline passes (what is left is counted `shutdown`), and stops it.
    pub fn shutdown(&mut self) {
        self.push_metrics();
        self.push_batches();
        self.outbox
            .close(Instant::now() + self.opts.shutdown_deadline);
        if let Some(h) = self.sender.take() {
            let _ = h.join();
        }
        self.publish();
    }

    fn enabled(&self, s: Signal) -> bool {
        self.opts.endpoints.get(s).is_some()
    }

    fn kind(schema: &SchemaDescriptor) -> Kind {
        let fp = schema.fingerprint();
        if fp == DurationSample::descriptor().fingerprint() {
            return Kind::Duration;
        }
        if fp == SpanStart::descriptor().fingerprint() {
            return Kind::SpanStart;
        }
        if fp == ResourceSample::descriptor().fingerprint() {
            return Kind::Resource;
        }
        if fp == SpanEnd::descriptor().fingerprint() {
            return Kind::SpanEnd;
        }
        if fp == SpanEvent::descriptor().fingerprint() {
            return Kind::SpanEvent;
        }
        let has = |f: &str| schema.root().field(f).is_some();
        if schema.id() == DurationSample::SCHEMA_ID && has("label") && has("duration_nanos") {
            // Version 1 (no ids) too: recordings made before.
            return Kind::Duration;
        }
        if schema.id().ends_with(SUMMARY_SUFFIX) && has("stats") && has("window") {
            return Kind::Summary;
        }
        let text = text_field(schema);
        let plan = if schema.id() == LOG_RECORD_SCHEMA && text.is_some() {
            // Line numbers, thread ids and times are attributes, not metrics.
            Plan::numeric(&snapbus_schemas::TypeDesc::Struct { fields: Vec::new() })
        } else {
            Plan::numeric(schema.root())
        };
        let names = plan
            .leaves()
            .iter()
            .map(|l| Arc::from(format!("{}.{l}", schema.id())))
            .collect();
        let units = plan
            .leaves()
            .iter()
            .map(|l| unit_of(l).map_or("", |u| u.ucum))
            .collect();
        Kind::Numeric {
            plan,
            names,
            units,
            text,
        }
    }

    fn resource(&mut self, p: &Producer<'_>) -> Arc<Res> {
        if let Some(r) = self.resources.get(&p.lane_id) {
            return Arc::clone(r);
        }
        let r = Arc::new(Res {
            key: p.lane_id,
            resource: producer_resource(p, &self.host),
        });
        self.resources.insert(p.lane_id, Arc::clone(&r));
        r
    }

    fn push_metrics(&mut self) {
        self.last_metrics = Instant::now();
        let interval = u64::try_from(self.opts.interval.as_nanos()).unwrap_or(u64::MAX);
        self.next_push_nanos = now_nanos().saturating_add(interval);
        let points = self.metrics.take_dirty();
        self.stats.add_emitted(Signal::Metrics, points.len() as u64);
        self.stats.set_series(self.metrics.series() as u64);
        self.outbox.put_metrics(points);
    }

    fn push_batches(&mut self) {
        if let Some(b) = self.logs.take(signals::encode_logs) {
            self.outbox.push(b);
        }
        if let Some(b) = self.spans.take(signals::encode_spans) {
            self.outbox.push(b);
        }
        self.stats.set_open_spans(self.open.len() as u64);
    }

    fn log(&mut self, res: &Arc<Res>, t: u64, rec: LogRecord) {
        self.stats.add_emitted(Signal::Logs, 1);
        if self.logs.add(res, t, rec) {
            if let Some(b) = self.logs.take(signals::encode_logs) {
                self.outbox.push(b);
            }
        }
    }

    fn span(&mut self, res: &Arc<Res>, t: u64, span: Span) {
        self.stats.add_emitted(Signal::Traces, 1);
        if self.spans.add(res, t, span) {
            if let Some(b) = self.spans.take(signals::encode_spans) {
                self.outbox.push(b);
            }
        }
    }

    /// A log record of a text-bearing record `r` (decoded: `v`): body = its field `body`
    /// (the message), attributes = its other fields.
    fn text_record(r: &Record<'_>, v: &Value<'_>, body: usize) -> LogRecord {
        let Value::Struct(fields) = v else {
            return Self::event_record(r, v);
        };
        let Some((_, message)) = fields.get(body) else {
            return Self::event_record(r, v);
        };
        let mut rec = Self::event_record(r, message);
        for (i, (name, value)) in fields.iter().enumerate() {
            let value = any_value(value);
            if i != body && value.value.is_some() {
                rec.attributes.push(KeyValue {
                    key: name.to_string(),
                    value: Some(value),
                    ..Default::default()
                });
            }
        }
        rec
    }

    /// A log record of `r` whose body is `body`.
    fn event_record(r: &Record<'_>, body: &Value<'_>) -> LogRecord {
        let (severity_number, text) = severity(r.header.level);
        let mut attributes = vec![
            kv_str("snapbus.schema", r.schema.id()),
            kv_int("snapbus.schema_version", i64::from(r.schema.version())),
            kv_int(
                "snapbus.seq",
                i64::try_from(r.header.seq).unwrap_or(i64::MAX),
            ),
        ];
        if let Some(e) = r.emitter {
            attributes.push(kv_str("snapbus.target", e));
        }
        LogRecord {
            time_unix_nano: r.header.t_nanos,
            observed_time_unix_nano: now_nanos(),
            severity_number,
            severity_text: text.into(),
            body: Some(any_value(body)),
            attributes,
            event_name: r.schema.id().to_owned(),
            ..Default::default()
        }
    }

    fn on_numeric(&mut self, r: &Record<'_>, res: &Arc<Res>) -> Result<(), HookError> {
        let fp = r.schema.fingerprint();
        let Some(Kind::Numeric {
            plan,
            names,
            units,
            text,
        }) = self.kinds.get(&fp)
        else {
            return Ok(());
        };
        let text = *text;
        let as_log = names.is_empty()
            || r.header.level >= self.opts.log_level
            || (text.is_some() && r.header.level >= TEXT_LOG_LEVEL);
        if !names.is_empty()
            && self.enabled(Signal::Metrics)
            && plan.extract(r.payload, &mut self.extracted).is_ok()
        {
            let (names, units) = (Arc::clone(names), Arc::clone(units));
            let values = std::mem::take(&mut self.extracted.values);
            self.set_gauges(res, fp, (&names, &units), r.header.t_nanos, &values);
            self.extracted.values = values;
        }
        if as_log && self.enabled(Signal::Logs) {
            if let Ok(v) = r.schema.decode(r.payload) {
                let rec = match text {
                    Some(body) => Self::text_record(r, &v, body),
                    None => Self::event_record(r, &v),
                };
                self.log(res, r.header.t_nanos, rec);
            }
        }
        Ok(())
    }

    /// Sets the gauges of a numeric record from its extracted `values` (or counts them
    /// dropped, over the series cap).
    fn set_gauges(
        &mut self,
        res: &Arc<Res>,
        fp: u64,
        (names, units): (&Arc<[Arc<str>]>, &Arc<[&'static str]>),
        t_nanos: u64,
        values: &[f64],
    ) {
        match self.metrics.row(res, fp, names, units) {
            Some(i) => self.metrics.set(i, t_nanos, values),
            None => self.outbox.note_dropped(
                Signal::Metrics,
                DropReason::Cardinality,
                names.len() as u64,
                t_nanos,
                t_nanos,
            ),
        }
    }

    /// Exports what is due, judged by a record's time as well as the clock (see
    /// `next_push_nanos`).
    fn push_if_due(&mut self, t_nanos: u64) {
        if t_nanos >= self.next_push_nanos {
            self.push_metrics();
            self.push_batches();
            self.publish();
            // A record stamped ahead of this clock (a producer's clock, or garbage in shared
            // memory) must not make every following record push again.
            let interval = u64::try_from(self.opts.interval.as_nanos()).unwrap_or(u64::MAX);
            self.next_push_nanos = self.next_push_nanos.max(t_nanos.saturating_add(interval));
        }
    }

    fn on_summary(&mut self, r: &Record<'_>, res: &Arc<Res>) {
        let Ok(v) = r.schema.decode(r.payload) else {
            return;
        };
        if self.enabled(Signal::Metrics) {
            super::summary::add_points(self, r, &v);
        }
        if self.enabled(Signal::Logs) {
            let rec = Self::event_record(r, &v);
            self.log(res, r.header.t_nanos, rec);
        }
    }

    fn on_duration(&mut self, r: &Record<'_>, res: &Arc<Res>) {
        let version = u32::from(r.header.schema_version);
        let Ok(d) = snapbus_schemas::decode_versioned::<DurationSample>(r.payload, version) else {
            return;
        };
        let t = r.header.t_nanos;
        if d.span_id != 0 && d.trace_id != 0 && self.enabled(Signal::Traces) {
            let span = signals::duration_span(&d, t);
            self.span(res, t, span);
        }
        if !self.enabled(Signal::Metrics) {
            return;
        }
        let secs = d.duration_nanos as f64 / 1e9;
        let key = format!("{:x}/duration/{}", res.key, d.label);
        let name: Arc<str> = Arc::from("snapbus.duration");
        let attrs = vec![kv_str("label", d.label.clone())];
        // A cumulative histogram counts from the producer's start (known since its first
        // sample: its start time, when the bus knows it).
        let start = match r.producer.started_nanos {
            0 => t,
            s => s.min(t),
        };
        let ok = self.metrics.keyed(
            key,
            || metrics::histogram(res, name, attrs, start),
            |p| metrics::observe(p, t, secs),
        );
        if !ok {
            self.outbox
                .note_dropped(Signal::Metrics, DropReason::Cardinality, 1, t, t);
        }
    }

    fn on_span(&mut self, r: &Record<'_>, res: &Arc<Res>, kind: SpanKind) {
        let t = r.header.t_nanos;
        let lane = r.producer.lane_id;
        let trace_id = signals::trace_id(r.producer.session_tag, lane);
        match kind {
            SpanKind::Start => {
                let Ok(s) = SpanStart::decode_exact(r.payload) else {
                    return;
                };
                let open = Open {
                    name: s.name,
                    parent: s.parent_id,
                    start_nanos: t,
                    attributes: signals::attributes(&s.attributes),
                    trace_id,
                };
                if !self.open.start(lane, s.span_id, open) {
                    self.outbox
                        .note_dropped(Signal::Traces, DropReason::SpanTable, 1, t, t);
                }
            }
            SpanKind::End => {
                let Ok(e) = SpanEnd::decode_exact(r.payload) else {
                    return;
                };
                // A span that started before the exporter did (or whose start did not fit
                // the table): its start from its duration.
                let open = self.open.end(lane, e.span_id).unwrap_or_else(|| Open {
                    name: "(start not seen)".into(),
                    parent: None,
                    start_nanos: t.saturating_sub(e.duration_nanos),
                    attributes: Vec::new(),
                    trace_id,
                });
                let span =
                    signals::span(e.span_id, open, t, signals::attributes(&e.attributes), None);
                self.span(res, t, span);
            }
            SpanKind::Event => {
                let Ok(ev) = SpanEvent::decode_exact(r.payload) else {
                    return;
                };
                if !self.enabled(Signal::Logs) {
                    return;
                }
                let Ok(v) = r.schema.decode(r.payload) else {
                    return;
                };
                let mut rec = Self::event_record(r, &v);
                rec.event_name = ev.name.clone();
                rec.attributes.extend(signals::attributes(&ev.attributes));
                rec.trace_id = trace_id.to_vec();
                if let Some(id) = ev.span_id {
                    rec.span_id = signals::span_id(id);
                }
                self.log(res, t, rec);
            }
        }
    }

    /// Ends the open spans of a producer that died or ended, with an error status.
    fn end_open_spans(&mut self, p: &Producer<'_>, why: &str) {
        let open = self.open.drain_lane(p.lane_id);
        if open.is_empty() {
            return;
        }
        let res = self.resource(p);
        let now = now_nanos();
        for (id, o) in open {
            let span = signals::span(id, o, now, Vec::new(), Some(why));
            self.span(&res, now, span);
        }
    }

    pub(crate) fn metrics_table(&mut self) -> &mut MetricTable {
        &mut self.metrics
    }

    pub(crate) fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    pub(crate) fn resource_of_lane(&self, lane: u64) -> Option<Arc<Res>> {
        self.resources.get(&lane).cloned()
    }
}

#[derive(Clone, Copy)]
enum SpanKind {
    Start,
    End,
    Event,
}

impl Consumer for OtlpExporter {
    fn on_schema(&mut self, schema: &Arc<SchemaDescriptor>) -> Result<Flow, HookError> {
        self.kinds
            .entry(schema.fingerprint())
            .or_insert_with(|| Self::kind(schema));
        Ok(Flow::Continue)
    }

    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        let fp = r.schema.fingerprint();
        if let Some(x) = r.extracted {
            // Numbers read in place: gauges only (see `extract`).
            if let Some(Kind::Numeric { names, units, .. }) = self.kinds.get(&fp) {
                let (names, units) = (Arc::clone(names), Arc::clone(units));
                let res = self.resource(&r.producer);
                self.set_gauges(&res, fp, (&names, &units), r.header.t_nanos, &x.values);
            }
            self.push_if_due(r.header.t_nanos);
            return Ok(Flow::Continue);
        }
        self.kinds.entry(fp).or_insert_with(|| Self::kind(r.schema));
        let res = self.resource(&r.producer);
        match self.kinds.get(&fp) {
            Some(Kind::Numeric { .. }) => self.on_numeric(r, &res)?,
            Some(Kind::Summary) => self.on_summary(r, &res),
            Some(Kind::Duration) => self.on_duration(r, &res),
            Some(Kind::Resource) if self.enabled(Signal::Metrics) => {
                super::resource::add_points(self, r, &res)
            }
            Some(Kind::SpanStart) if self.enabled(Signal::Traces) => {
                self.on_span(r, &res, SpanKind::Start)
            }
            Some(Kind::SpanEnd) if self.enabled(Signal::Traces) => {
                self.on_span(r, &res, SpanKind::End)
            }
            Some(Kind::SpanEvent) => self.on_span(r, &res, SpanKind::Event),
            _ => {}
        }
        self.push_if_due(r.header.t_nanos);
        Ok(Flow::Continue)
    }

    /// Numeric records of [`IN_PLACE_MIN_BYTES`](crate::fields::IN_PLACE_MIN_BYTES) or more that only become gauges (not also
    /// a log record: their level is below `log_level`) are read in place: their numbers are
    /// extracted from the ring, one pass over the payload, no copy of it.
    fn extract(&mut self, schema: &Arc<SchemaDescriptor>) -> Option<Extract> {
        let Some(Kind::Numeric {
            plan, names, text, ..
        }) = self.kinds.get(&schema.fingerprint())
        else {
            return None;
        };
        // A record that is also logged needs all its bytes decoded: copied.
        if names.is_empty() || !self.enabled(Signal::Metrics) {
            return None;
        }
        let below = match text {
            Some(_) => self.opts.log_level.min(TEXT_LOG_LEVEL),
            None => self.opts.log_level,
        };
        Some(Extract {
            below_level: Some(below),
            ..Extract::new(Arc::new(plan.clone()))
        })
    }

    fn on_producer(&mut self, change: ProducerChange<'_>) -> Result<Flow, HookError> {
        let ended = match change {
            ProducerChange::Died(p) => {
                self.end_open_spans(&p, "producer died");
                p.lane_id
            }
            ProducerChange::Ended(p) => {
                self.end_open_spans(&p, "producer ended with the span open");
                p.lane_id
            }
            ProducerChange::Joined(_) => return Ok(Flow::Continue),
        };
        // Its last values go out, then its series stop counting against the cap (a
        // long-running exporter sees producers come and go).
        if let Some(res) = self.resources.remove(&ended) {
            self.push_metrics();
            self.metrics.forget(res.key);
            self.stats.set_series(self.metrics.series() as u64);
        }
        Ok(Flow::Continue)
    }

    fn flush(&mut self) -> Result<(), HookError> {
        if self.last_metrics.elapsed() >= self.opts.interval {
            self.push_metrics();
        }
        self.push_batches();
        self.publish();
        Ok(())
    }
}

impl Drop for OtlpExporter {
    fn drop(&mut self) {
        if self.sender.is_some() {
            self.outbox.close(Instant::now());
            if let Some(h) = self.sender.take() {
                let _ = h.join();
            }
        }
    }
}

/// The index of the field a text-bearing schema's log records take their body from: the first
/// of [`BODY_FIELDS`] that is a string, else its first string field; `None` if its root has no
/// string field.
fn text_field(schema: &SchemaDescriptor) -> Option<usize> {
    let fields = schema.root().fields();
    let is_text = |i: &usize| text_type(&fields[*i].ty);
    BODY_FIELDS
        .iter()
        .find_map(|name| fields.iter().position(|f| f.name == *name).filter(is_text))
        .or_else(|| (0..fields.len()).find(is_text))
}

/// A string, or an optional one.
fn text_type(ty: &snapbus_schemas::TypeDesc) -> bool {
    match ty {
        snapbus_schemas::TypeDesc::String => true,
        snapbus_schemas::TypeDesc::Option { some } => {
            matches!(**some, snapbus_schemas::TypeDesc::String)
        }
        _ => false,
    }
}
