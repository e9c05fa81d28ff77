//! The OTLP exporter: what is on the bus, sent as OTLP/HTTP protobuf to an OpenTelemetry
//! Collector (or any OTLP receiver) — numeric fields and aggregator summaries as metrics with
//! the producer's own timestamps, events as log records, spans and duration samples as traces
//! and histograms — isolated from the receiver's failures.
//!
//! # Guarantees
//!
//! - **Reading never waits for the network.** [`OtlpExporter`] is a [`Consumer`]: its hooks
//!   run on the reader's thread and only update in-memory state and hand encoded batches to
//!   a bounded outbox; one sender thread does the HTTP (synchronous, no async runtime). A
//!   dead, slow or erroring receiver only grows the outbox and, at worst, this consumer's
//!   lag, which the bus reports exactly; producers never wait for any consumer.
//! - **Bounded memory.** Metric state is one value per series, at most
//!   [`OtlpOptions::max_series`] series (more are dropped and counted `cardinality`); log
//!   and span batches wait in a queue of at most [`OtlpOptions::max_queue_bytes`] (the
//!   batch being sent included), which drops its oldest batch when full (counted
//!   `queue_full`); open spans are at most [`OtlpOptions::max_open_spans`].
//! - **Metrics lose nothing in an outage.** Metrics are state, cumulative temporality
//!   everywhere: a failed export is superseded by the next one, which carries each series'
//!   latest value and the histograms' totals.
//! - **Retries as the OTLP specification says.** 429, 502, 503, 504, connection errors and
//!   timeouts are retried after the `Retry-After` the receiver gave (in seconds), else after
//!   an exponential backoff, jittered (1 s doubling to 30 s); every other status (400
//!   first) drops the request and counts its items `rejected`, as does a `partial_success`.
//!   There is no permanent disable: the state goes `ok → backoff → down` and back to `ok` on
//!   the first success, by itself.
//! - **Every log record is accounted for.** For logs, items made = exported + dropped (by
//!   reason: `queue_full`, `rejected`, `shutdown`) + still queued, exactly
//!   ([`ExporterStats`]; tested). Spans are counted the same way, except that a span whose
//!   start the open-span table refused is counted `span_table` and still exported at its end
//!   (named `(start not seen)`). Metrics are state, not a ledger: a newer value supersedes
//!   a pending one (not a loss), and cumulative sums carry every count into the next
//!   export. When anything was dropped, one `snapbus.exporter.data_gap` log record per reason
//!   and signal goes out once the receiver answers again (count, first and last producer
//!   time).
//! - **Clean shutdown.** [`OtlpExporter::shutdown`] sends what is left until
//!   [`OtlpOptions::shutdown_deadline`] (5 s; a request already in flight may take up to its
//!   own timeout, 10 s), then counts the rest `shutdown`.
//!
//! # Mapping
//!
//! | on the bus | OTLP |
//! |---|---|
//! | numeric leaves of a schema ([`crate::fields`] names: `reward`, `position.0`, `obs.mean`) | a gauge per leaf, `<schema>.<leaf>`, last value and producer time per export interval |
//! | `<schema>.summary` (aggregator) | gauges `<schema>.summary.<leaf>` with `stat`, `window`, `group.<field>` attributes, stamped with the window's last record; and a log record with the whole summary |
//! | `snapbus.duration` | cumulative histogram `snapbus.duration` (seconds), attribute `label` |
//! | `snapbus.resource` | the OpenTelemetry process metrics: `process.cpu.time` (`cpu.mode`), `process.memory.usage`, `process.paging.faults`, `process.thread.count` (semantic conventions 1.27) |
//! | `snapbus.span.start` + `.end` | a span (producer times; trace id from session tag and lane) |
//! | `snapbus.span.event` | a log record with the trace and span ids |
//! | a record of a schema without numeric fields, or at level ≥ [`OtlpOptions::log_level`] (WARN) | a log record: body = the decoded record as a kvlist, severity from the level, time = producer time, observed = now |
//! | the producer | resource: `service.name`, `service.instance.id` (lane), `process.pid`, `host.name`, `snapbus.session_tag`, `snapbus.perf_tag` |
//!
//! Records at INFO and below with numeric fields (the bulk of telemetry) become metrics
//! only: every raw sample belongs in a recording, not in a metrics backend. Episode and step
//! numbers are never attributes (unbounded): they are values of their own gauges.

mod convert;
mod endpoint;
mod exporter;
mod metrics;
mod outbox;
mod resource;
mod sender;
mod signals;
mod stats;
mod summary;

pub use convert::{
    MAX_BODY_ELEMENTS, MAX_BODY_TEXT_BYTES, SCHEMA_URL, any_value, host_name, producer_resource,
    severity,
};
pub use endpoint::{DEFAULT_ENDPOINT, EndpointError, Endpoints, check as check_endpoint};
pub use exporter::{LOG_RECORD_SCHEMA, OtlpExporter, OtlpOptions, TEXT_LOG_LEVEL};
pub use metrics::DURATION_BOUNDS_SECS;
pub use sender::{DATA_GAP_EVENT, RetryPolicy};
pub use signals::{BATCH_BYTES, BATCH_ITEMS};
pub use stats::{DropReason, ExportState, ExporterStats, Signal, StatEntry, StatsSnapshot};

#[cfg(doc)]
use crate::runtime::Consumer;

use std::sync::Arc;

/// A running `--metrics-listen` server (stops when dropped).
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: std::net::SocketAddr,
}

impl MetricsServer {
    /// The address it listens on.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves the exporter's own counters in the Prometheus text format on `addr` (any path).
pub fn serve_metrics(
    addr: &str,
    stats: Arc<ExporterStats>,
) -> Result<MetricsServer, Box<dyn std::error::Error + Send + Sync>> {
    let server = Arc::new(tiny_http::Server::http(addr)?);
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or("the metrics server is not on an IP address")?;
    let s = Arc::clone(&server);
    let thread = std::thread::Builder::new()
        .name("snapbus-otlp-metrics".into())
        .spawn(move || {
            for req in s.incoming_requests() {
                let body = stats.snapshot().prometheus_text();
                let header = tiny_http::Header::from_bytes(
                    &b"Content-Type"[..],
                    &b"text/plain; version=0.0.4; charset=utf-8"[..],
                );
                let mut resp = tiny_http::Response::from_string(body);
                if let Ok(h) = header {
                    resp.add_header(h);
                }
                let _ = req.respond(resp);
            }
        })?;
    Ok(MetricsServer {
        server,
        thread: Some(thread),
        addr: bound,
    })
}
