//! The exporter's own counters: what was exported and what was dropped, by signal and reason.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// An OTLP signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    /// Metric data points.
    Metrics,
    /// Log records.
    Logs,
    /// Spans.
    Traces,
}

impl Signal {
    /// Every signal, in index order.
    pub const ALL: [Signal; 3] = [Signal::Metrics, Signal::Logs, Signal::Traces];

    /// Its name in counters and in `--signals`: `metrics`, `logs`, `traces`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Metrics => "metrics",
            Signal::Logs => "logs",
            Signal::Traces => "traces",
        }
    }

    /// The unit its counters count: data points, log records or spans.
    pub fn items(self) -> &'static str {
        match self {
            Signal::Metrics => "data points",
            Signal::Logs => "log records",
            Signal::Traces => "spans",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Why data was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The outbox was full (its byte cap): the oldest log or span batch went.
    QueueFull,
    /// The receiver refused it (a 400 or another non-retryable status, or a partial success).
    Rejected,
    /// A new metric series over `max_series`.
    Cardinality,
    /// Still unsent when the shutdown deadline passed.
    Shutdown,
    /// A span start over the open-span table's capacity (its end is then exported without a
    /// parent link to the start's attributes).
    SpanTable,
}

impl DropReason {
    /// Every reason, in index order.
    pub const ALL: [DropReason; 5] = [
        DropReason::QueueFull,
        DropReason::Rejected,
        DropReason::Cardinality,
        DropReason::Shutdown,
        DropReason::SpanTable,
    ];

    /// Its name in counters: `queue_full`, `rejected`, `cardinality`, `shutdown`,
    /// `span_table`.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::Rejected => "rejected",
            DropReason::Cardinality => "cardinality",
            DropReason::Shutdown => "shutdown",
            DropReason::SpanTable => "span_table",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The sender's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportState {
    /// The last request succeeded (or none failed yet).
    Ok,
    /// A request failed with a retryable error: waiting before the next attempt.
    Backoff,
    /// Several attempts in a row failed: still probing (every backoff period, at most 30 s
    /// apart by default, 1 s while connections are refused), and back to `ok` by itself on
    /// the first success.
    Down,
    /// The receiver refused the last request for good (a 404 from a wrong path, a 400, any
    /// status but 2xx, 429, 502, 503, 504): its data was dropped and counted `rejected`;
    /// `last_status` and `last_error` say why. Back to `ok` on the first success.
    Error,
}

impl ExportState {
    /// `ok`, `backoff`, `down` or `error`.
    pub fn name(self) -> &'static str {
        match self {
            ExportState::Ok => "ok",
            ExportState::Backoff => "backoff",
            ExportState::Down => "down",
            ExportState::Error => "error",
        }
    }
}

/// The exporter's counters, shared by its reader and sender threads (all monotonic except the
/// gauges `queue_bytes`, `series`, `open_spans` and the state).
#[derive(Debug, Default)]
pub struct ExporterStats {
    exported: [AtomicU64; 3],
    dropped: [[AtomicU64; 3]; 5],
    /// Items handed to the outbox (logs and spans: records made; metrics: data points).
    pub(crate) emitted: [AtomicU64; 3],
    retries: AtomicU64,
    requests_ok: AtomicU64,
    gap_records: AtomicU64,
    queue_bytes: AtomicU64,
    series: AtomicU64,
    open_spans: AtomicU64,
    last_status: AtomicU64,
    state: AtomicU8,
    last_error: Mutex<String>,
}

/// A copy of [`ExporterStats`] at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Exported (accepted by the receiver), per signal in [`Signal::ALL`] order.
    pub exported: [u64; 3],
    /// Dropped, per reason in [`DropReason::ALL`] order, per signal.
    pub dropped: [[u64; 3]; 5],
    /// Log records and spans made from records (metrics: data points handed to the outbox).
    pub emitted: [u64; 3],
    /// Attempts that failed with a retryable error.
    pub retries: u64,
    /// Requests that succeeded.
    pub requests_ok: u64,
    /// `snapbus.exporter.data_gap` log records exported.
    pub gap_records: u64,
    /// Bytes of encoded log and span batches waiting (including the one being sent).
    pub queue_bytes: u64,
    /// Metric series known.
    pub series: u64,
    /// Spans started and not yet ended.
    pub open_spans: u64,
    /// The HTTP status of the receiver's last answer (0 before any).
    pub last_status: u64,
    /// The sender's state.
    pub state: ExportState,
    /// The last error (empty if none yet).
    pub last_error: String,
}

impl StatsSnapshot {
    /// Exported items of `signal`.
    pub fn exported(&self, signal: Signal) -> u64 {
        self.exported[signal.index()]
    }

    /// Dropped items of `signal` for `reason`.
    pub fn dropped(&self, signal: Signal, reason: DropReason) -> u64 {
        self.dropped[reason.index()][signal.index()]
    }

    /// Dropped items for `reason`, every signal.
    pub fn dropped_all(&self, reason: DropReason) -> u64 {
        self.dropped[reason.index()].iter().sum()
    }

    /// Dropped items of `signal`, every reason.
    pub fn dropped_total(&self, signal: Signal) -> u64 {
        DropReason::ALL
            .iter()
            .map(|r| self.dropped(signal, *r))
            .sum()
    }

    /// Items of `signal` made.
    pub fn emitted(&self, signal: Signal) -> u64 {
        self.emitted[signal.index()]
    }

    /// The counters as `(key, value)` pairs for the status board (`snapbus ls`): `state`,
    /// `exported.<signal>`, `dropped.<reason>` (all signals), `retries`, `queue_bytes`,
    /// `series`, `open_spans`, `last_error` (when there was one).
    pub fn entries(&self) -> Vec<(String, StatEntry)> {
        let mut out = vec![(
            "state".to_owned(),
            StatEntry::Text(self.state.name().into()),
        )];
        for s in Signal::ALL {
            out.push((
                format!("exported.{}", s.name()),
                StatEntry::Count(self.exported(s)),
            ));
        }
        for r in DropReason::ALL {
            out.push((
                format!("dropped.{}", r.name()),
                StatEntry::Count(self.dropped_all(r)),
            ));
        }
        out.extend([
            ("retries".to_owned(), StatEntry::Count(self.retries)),
            ("queue_bytes".to_owned(), StatEntry::Count(self.queue_bytes)),
            ("series".to_owned(), StatEntry::Count(self.series)),
            ("open_spans".to_owned(), StatEntry::Count(self.open_spans)),
            ("gap_records".to_owned(), StatEntry::Count(self.gap_records)),
        ]);
        if self.last_status != 0 {
            out.push(("last_status".to_owned(), StatEntry::Count(self.last_status)));
        }
        if !self.last_error.is_empty() {
            out.push((
                "last_error".to_owned(),
                StatEntry::Text(self.last_error.clone()),
            ));
        }
        out
    }

    /// The counters in the Prometheus text format (`--metrics-listen`).
    pub fn prometheus_text(&self) -> String {
        let mut s = String::new();
        s.push_str("# TYPE snapbus_otlp_exported_total counter\n");
        for sig in Signal::ALL {
            s.push_str(&format!(
                "snapbus_otlp_exported_total{{signal=\"{}\"}} {}\n",
                sig.name(),
                self.exported(sig)
            ));
        }
        s.push_str("# TYPE snapbus_otlp_dropped_total counter\n");
        for r in DropReason::ALL {
            for sig in Signal::ALL {
                s.push_str(&format!(
                    "snapbus_otlp_dropped_total{{signal=\"{}\",reason=\"{}\"}} {}\n",
                    sig.name(),
                    r.name(),
                    self.dropped(sig, r)
                ));
            }
        }
        for (name, kind, v) in [
            ("snapbus_otlp_retries_total", "counter", self.retries),
            (
                "snapbus_otlp_requests_ok_total",
                "counter",
                self.requests_ok,
            ),
            (
                "snapbus_otlp_gap_records_total",
                "counter",
                self.gap_records,
            ),
            ("snapbus_otlp_queue_bytes", "gauge", self.queue_bytes),
            ("snapbus_otlp_series", "gauge", self.series),
            ("snapbus_otlp_open_spans", "gauge", self.open_spans),
        ] {
            s.push_str(&format!("# TYPE {name} {kind}\n{name} {v}\n"));
        }
        s.push_str("# TYPE snapbus_otlp_state gauge\n");
        for st in [
            ExportState::Ok,
            ExportState::Backoff,
            ExportState::Down,
            ExportState::Error,
        ] {
            s.push_str(&format!(
                "snapbus_otlp_state{{state=\"{}\"}} {}\n",
                st.name(),
                u8::from(st == self.state)
            ));
        }
        s
    }
}

/// A value of [`StatsSnapshot::entries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatEntry {
    /// A count.
    Count(u64),
    /// A text (`state`, `last_error`).
    Text(String),
}

impl ExporterStats {
    /// A copy of every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            exported: self.exported.each_ref().map(load),
            dropped: self.dropped.each_ref().map(|r| r.each_ref().map(load)),
            emitted: self.emitted.each_ref().map(load),
            retries: load(&self.retries),
            requests_ok: load(&self.requests_ok),
            gap_records: load(&self.gap_records),
            queue_bytes: load(&self.queue_bytes),
            series: load(&self.series),
            open_spans: load(&self.open_spans),
            last_status: load(&self.last_status),
            state: match self.state.load(Ordering::Relaxed) {
                0 => ExportState::Ok,
                1 => ExportState::Backoff,
                2 => ExportState::Down,
                _ => ExportState::Error,
            },
            last_error: self
                .last_error
                .lock()
                .map(|e| e.clone())
                .unwrap_or_default(),
        }
    }

    pub(crate) fn add_exported(&self, s: Signal, n: u64) {
        self.exported[s.index()].fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_dropped(&self, s: Signal, r: DropReason, n: u64) {
        self.dropped[r.index()][s.index()].fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_emitted(&self, s: Signal, n: u64) {
        self.emitted[s.index()].fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_ok(&self) {
        self.requests_ok.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_gap_records(&self, n: u64) {
        self.gap_records.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn set_queue_bytes(&self, n: u64) {
        self.queue_bytes.store(n, Ordering::Relaxed);
    }

    pub(crate) fn set_series(&self, n: u64) {
        self.series.store(n, Ordering::Relaxed);
    }

    pub(crate) fn set_open_spans(&self, n: u64) {
        self.open_spans.store(n, Ordering::Relaxed);
    }

    pub(crate) fn set_status(&self, status: u16) {
        self.last_status.store(u64::from(status), Ordering::Relaxed);
    }

    pub(crate) fn set_state(&self, s: ExportState) {
        self.state.store(s as u8, Ordering::Relaxed);
    }

    pub(crate) fn set_error(&self, e: &str) {
        if let Ok(mut last) = self.last_error.lock() {
            e.clone_into(&mut last);
        }
    }
}
