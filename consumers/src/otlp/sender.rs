//! The sender thread: takes work from the outbox and posts it with synchronous HTTP, retrying
//! as the OTLP specification says (429, 502, 503, 504, connection errors and timeouts, after
//! `Retry-After` if given, else exponential backoff with full jitter), dropping and counting
//! what the receiver refuses (400 and every other status), never disabling itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use prost::Message as _;

use super::convert::{SCHEMA_URL, exporter_resource, kv_int, kv_str, now_nanos, scope};
use super::endpoint::Endpoints;
use super::metrics::{self, Point, PointData};
use super::outbox::{Gap, Outbox, Work};
use super::stats::{DropReason, ExportState, ExporterStats, Signal};

/// The event name (and body) of the log record sent once the receiver is back after data was
/// dropped.
pub const DATA_GAP_EVENT: &str = "snapbus.exporter.data_gap";

/// Timeouts and backoff of the sender.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Connecting (default 1 s).
    pub connect_timeout: Duration,
    /// A whole request, connecting included (default 10 s).
    pub request_timeout: Duration,
    /// The first backoff (default 1 s); each retryable failure doubles it.
    pub initial_backoff: Duration,
    /// The longest backoff (default 30 s); also the probing period while `down`.
    pub max_backoff: Duration,
    /// The longest backoff after a refused connection (default 1 s; jittered as the others):
    /// nothing listens, so an attempt costs the receiver nothing (no request is sent before
    /// the connection is made) and is the cheapest probe; export resumes within about this
    /// long of the receiver's return, however long the outage was.
    pub max_refused_backoff: Duration,
    /// Consecutive failures after which the state is `down` (default 5).
    pub down_after_failures: u32,
    /// The longest `Retry-After` honoured (default 5 min).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(10),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            max_refused_backoff: Duration::from_secs(1),
            down_after_failures: 5,
            max_retry_after: Duration::from_secs(300),
        }
    }
}

/// How one request ended.
#[derive(Debug)]
enum Outcome {
    /// Accepted; `rejected` items refused by a partial success.
    Ok { rejected: u64 },
    /// Worth another attempt (after `after`, if the receiver said).
    Retry {
        after: Option<Duration>,
        error: String,
        /// The connection was refused: nothing listens there (yet).
        refused: bool,
    },
    /// Refused for good (`status`: the HTTP status).
    Reject { error: String, status: u16 },
}

pub(crate) struct Sender {
    pub(crate) agent: ureq::Agent,
    pub(crate) endpoints: Endpoints,
    pub(crate) policy: RetryPolicy,
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) stats: Arc<ExporterStats>,
    pub(crate) host: String,
    failures: u32,
    backoff_until: Option<Instant>,
    rng: u64,
}

impl Sender {
    pub(crate) fn new(
        endpoints: Endpoints,
        policy: RetryPolicy,
        outbox: Arc<Outbox>,
        stats: Arc<ExporterStats>,
        host: String,
    ) -> Sender {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(policy.connect_timeout))
            .timeout_global(Some(policy.request_timeout))
            .max_idle_connections_per_host(2)
            .build()
            .into();
        Sender {
            agent,
            endpoints,
            policy,
            outbox,
            stats,
            host,
            failures: 0,
            backoff_until: None,
            rng: now_nanos() | 1,
        }
    }

    /// Sends until the outbox is closed and empty (or its deadline passed).
    pub(crate) fn run(mut self) {
        loop {
            match self.outbox.next(self.backoff_until) {
                Work::Stop => return,
                Work::Metrics(points) => self.send_metrics(points),
                Work::Batch(id, batch) => {
                    let Some(url) = self.endpoints.get(batch.signal).map(str::to_owned) else {
                        self.outbox.finish(id);
                        continue;
                    };
                    match self.post(&url, &batch.body, batch.signal) {
                        Outcome::Ok { rejected } => {
                            self.outbox.finish(id);
                            let rejected = rejected.min(batch.items);
                            self.stats
                                .add_exported(batch.signal, batch.items - rejected);
                            self.outbox.note_dropped(
                                batch.signal,
                                DropReason::Rejected,
                                rejected,
                                batch.first_t,
                                batch.last_t,
                            );
                            self.succeeded();
                        }
                        Outcome::Retry {
                            after,
                            error,
                            refused,
                        } => {
                            self.outbox.release(id);
                            self.failed(after, &error, refused);
                        }
                        Outcome::Reject { error, status } => {
                            self.outbox.finish(id);
                            self.outbox.note_dropped(
                                batch.signal,
                                DropReason::Rejected,
                                batch.items,
                                batch.first_t,
                                batch.last_t,
                            );
                            self.refused(&error, status);
                        }
                    }
                }
            }
        }
    }

    fn send_metrics(&mut self, points: BTreeMap<u64, Point>) {
        let Some(url) = self.endpoints.metrics.clone() else {
            self.outbox.metrics_done();
            return;
        };
        let n = points.len() as u64;
        let body = metrics::encode(points.values());
        match self.post(&url, &body, Signal::Metrics) {
            Outcome::Ok { rejected } => {
                let rejected = rejected.min(n);
                self.stats.add_exported(Signal::Metrics, n - rejected);
                let (from, to) = time_range(&points);
                self.outbox
                    .note_dropped(Signal::Metrics, DropReason::Rejected, rejected, from, to);
                self.outbox.metrics_done();
                self.succeeded();
            }
            Outcome::Retry {
                after,
                error,
                refused,
            } => {
                // State, not events: a newer point of a series supersedes this one.
                self.outbox.return_metrics(points);
                self.failed(after, &error, refused);
            }
            Outcome::Reject { error, status } => {
                let (from, to) = time_range(&points);
                self.outbox
                    .note_dropped(Signal::Metrics, DropReason::Rejected, n, from, to);
                self.outbox.metrics_done();
                self.refused(&error, status);
            }
        }
    }

    /// After a request the receiver accepted: state `ok`, and the data gap reported if any.
    fn succeeded(&mut self) {
        self.stats.add_ok();
        self.stats.set_status(200);
        self.failures = 0;
        self.backoff_until = None;
        self.stats.set_state(ExportState::Ok);
        if let Some(gap) = self.outbox.take_gap() {
            self.send_gap(gap);
        }
    }

    /// After a request the receiver refused for good (a 404 from a wrong path, a 400): the
    /// receiver is up, so no backoff, but the state is `error` (with the status and the
    /// error) until a request succeeds: a wrong endpoint that refuses every batch must not
    /// look healthy in `snapbus ls`.
    fn refused(&mut self, error: &str, status: u16) {
        self.stats.set_error(error);
        self.stats.set_status(status);
        self.failures = 0;
        self.backoff_until = None;
        self.stats.set_state(ExportState::Error);
        // Data dropped earlier is still reported (a receiver that refuses the report too
        // ends this: the gap is taken once).
        if let Some(gap) = self.outbox.take_gap() {
            self.send_gap(gap);
        }
    }

    fn send_gap(&mut self, gap: Gap) {
        let Some(url) = self.endpoints.logs.clone() else {
            return;
        };
        let n = gap.counts.len() as u64;
        let body = gap_request(&gap, &self.host).encode_to_vec();
        match self.post(&url, &body, Signal::Logs) {
            Outcome::Ok { .. } => self.stats.add_gap_records(n),
            Outcome::Retry {
                after,
                error,
                refused,
            } => {
                self.outbox.return_gap(gap);
                self.failed(after, &error, refused);
            }
            // A receiver that refuses the gap record would refuse it again.
            Outcome::Reject { error, status } => self.refused(&error, status),
        }
    }

    fn failed(&mut self, after: Option<Duration>, error: &str, refused: bool) {
        self.stats.add_retry();
        self.stats.set_error(error);
        self.failures = self.failures.saturating_add(1);
        let state = if self.failures >= self.policy.down_after_failures {
            ExportState::Down
        } else {
            ExportState::Backoff
        };
        self.stats.set_state(state);
        // A `Retry-After` is honoured, but never below the first backoff step (`0` would
        // have the sender loop without pause).
        let delay = match after {
            Some(d) => d
                .min(self.policy.max_retry_after)
                .max(self.policy.initial_backoff),
            None => self.jittered_backoff(refused),
        };
        self.backoff_until = Some(Instant::now() + delay);
    }

    /// Jittered: uniform in [exp/2, exp], exp = min(max, initial · 2^(failures-1)) (so that
    /// exporters that failed together, after a collector restart, do not retry in lockstep,
    /// from the first retry on).
    /// A refused connection caps it at `max_refused_backoff` (see there).
    fn jittered_backoff(&mut self, refused: bool) -> Duration {
        let p = &self.policy;
        let cap = if refused {
            p.max_backoff.min(p.max_refused_backoff)
        } else {
            p.max_backoff
        };
        let exp = p
            .initial_backoff
            .saturating_mul(1u32 << self.failures.saturating_sub(1).min(16))
            .min(cap);
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let frac = (self.rng >> 11) as f64 / (1u64 << 53) as f64;
        exp / 2 + (exp / 2).mul_f64(frac)
    }

    fn post(&self, url: &str, body: &[u8], signal: Signal) -> Outcome {
        let mut timeout = self.policy.request_timeout;
        if let Some(deadline) = self.outbox.deadline() {
            timeout = timeout.min(deadline.saturating_duration_since(Instant::now()));
            if timeout.is_zero() {
                return Outcome::Retry {
                    after: None,
                    error: "shutdown deadline reached".into(),
                    refused: false,
                };
            }
        }
        let result = self
            .agent
            .post(url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", "application/x-protobuf")
            .send(body);
        let mut resp = match result {
            Ok(r) => r,
            Err(e) => {
                let refused = match &e {
                    ureq::Error::ConnectionFailed => true,
                    ureq::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
                    _ => false,
                };
                return Outcome::Retry {
                    after: None,
                    error: format!("POST {url}: {e}"),
                    refused,
                };
            }
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .unwrap_or_default();
        match status {
            200..=299 => Outcome::Ok {
                rejected: rejected_items(signal, &bytes),
            },
            429 | 502 | 503 | 504 => {
                self.stats.set_status(status);
                Outcome::Retry {
                    after: retry_after,
                    error: format!("POST {url}: HTTP {status}{}", message(&bytes)),
                    refused: false,
                }
            }
            _ => Outcome::Reject {
                error: format!("POST {url}: HTTP {status}{}", message(&bytes)),
                status,
            },
        }
    }
}

/// The items a success response's `partial_success` refused.
fn rejected_items(signal: Signal, body: &[u8]) -> u64 {
    let n = match signal {
        Signal::Metrics => ExportMetricsServiceResponse::decode(body)
            .ok()
            .and_then(|r| r.partial_success)
            .map_or(0, |p| p.rejected_data_points),
        Signal::Logs => ExportLogsServiceResponse::decode(body)
            .ok()
            .and_then(|r| r.partial_success)
            .map_or(0, |p| p.rejected_log_records),
        Signal::Traces => ExportTraceServiceResponse::decode(body)
            .ok()
            .and_then(|r| r.partial_success)
            .map_or(0, |p| p.rejected_spans),
    };
    u64::try_from(n).unwrap_or(0)
}

/// `: <text>` of an error body that is short readable text (many receivers send one).
fn message(body: &[u8]) -> String {
    match std::str::from_utf8(body) {
        Ok(s) if !s.trim().is_empty() && s.len() < 300 => format!(": {}", s.trim()),
        _ => String::new(),
    }
}

fn time_range(points: &BTreeMap<u64, Point>) -> (u64, u64) {
    let mut r = (0u64, 0u64);
    for p in points.values() {
        let t = match p.data {
            PointData::Gauge { t_nanos, .. }
            | PointData::Sum { t_nanos, .. }
            | PointData::Histogram { t_nanos, .. } => t_nanos,
        };
        if r.0 == 0 || t < r.0 {
            r.0 = t;
        }
        r.1 = r.1.max(t);
    }
    r
}

/// One `snapbus.exporter.data_gap` log record per (reason, signal) of the gap.
pub(crate) fn gap_request(gap: &Gap, host: &str) -> ExportLogsServiceRequest {
    let now = now_nanos();
    let records = gap
        .counts
        .iter()
        .map(|((reason, signal), n)| LogRecord {
            time_unix_nano: now,
            observed_time_unix_nano: now,
            severity_number: 13,
            severity_text: "WARN".into(),
            event_name: DATA_GAP_EVENT.into(),
            body: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                value: Some(
                    opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(format!(
                        "{n} {signal} items were not exported ({reason})"
                    )),
                ),
            }),
            attributes: vec![
                kv_str("snapbus.gap.reason", *reason),
                kv_str("snapbus.gap.signal", *signal),
                kv_int("snapbus.gap.count", i64::try_from(*n).unwrap_or(i64::MAX)),
                kv_int(
                    "snapbus.gap.from_unix_nano",
                    i64::try_from(gap.from_t).unwrap_or(0),
                ),
                kv_int(
                    "snapbus.gap.to_unix_nano",
                    i64::try_from(gap.to_t).unwrap_or(0),
                ),
                kv_str(
                    "snapbus.gap.kind",
                    if *reason == "shutdown" {
                        "NO_TELEMETRY_DATA"
                    } else {
                        "INCOMPLETE_TELEMETRY_DATA"
                    },
                ),
            ],
            ..Default::default()
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(exporter_resource(host)),
            scope_logs: vec![ScopeLogs {
                scope: Some(scope()),
                log_records: records,
                schema_url: SCHEMA_URL.into(),
            }],
            schema_url: SCHEMA_URL.into(),
        }],
    }
}
