//! The OTLP exporter against a fault-injecting receiver: retries as the OTLP specification
//! says, no permanent disable, a bounded outbox, and books that balance exactly.

mod health;
mod mapping;
mod meaning;
mod receiver;

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::metrics::v1::metric;
use prost::Message as _;
use snapbus_bus::Level;
use snapbus_consumers::otlp::{
    DATA_GAP_EVENT, DropReason, Endpoints, ExportState, OtlpExporter, OtlpOptions, RetryPolicy,
    Signal, StatsSnapshot,
};
use snapbus_consumers::prelude::*;
use snapbus_schemas::builtin::DurationSample;
use snapbus_schemas::{SchemaDescriptor, Snapshot, Wire};

use receiver::{Arrival, Receiver, Reply};

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "otlp.note", version = 1)]
struct Note {
    text: String,
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "otlp.step", version = 1)]
struct Step {
    step: u64,
    reward: f64,
}

const WAIT: Duration = Duration::from_secs(20);

/// An exporter to `r` with the test [`options`], and a feed of records for it.
fn export_to(r: &Receiver) -> (OtlpExporter, Feed) {
    let x = OtlpExporter::start(options(&r.url())).expect("start");
    (x, Feed::new())
}

fn options(url: &str) -> OtlpOptions {
    let mut o = OtlpOptions::new(Endpoints::from_base(url).expect("url"));
    o.interval = Duration::ZERO;
    o.retry = RetryPolicy {
        connect_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_millis(700),
        initial_backoff: Duration::from_millis(30),
        max_backoff: Duration::from_millis(200),
        max_refused_backoff: Duration::from_millis(200),
        down_after_failures: 3,
        max_retry_after: Duration::from_secs(10),
    };
    o
}

/// Feeds records to an exporter as the run loop would.
struct Feed {
    cmdline: Vec<String>,
    note: Arc<SchemaDescriptor>,
    step: Arc<SchemaDescriptor>,
    duration: Arc<SchemaDescriptor>,
    seq: u64,
}

impl Feed {
    fn new() -> Feed {
        Feed {
            cmdline: vec!["exp".into()],
            note: Arc::new(Note::descriptor().clone()),
            step: Arc::new(Step::descriptor().clone()),
            duration: Arc::new(DurationSample::descriptor().clone()),
            seq: 0,
        }
    }

    fn send(
        &mut self,
        x: &mut OtlpExporter,
        schema: &Arc<SchemaDescriptor>,
        payload: &[u8],
        t: u64,
    ) {
        let producer = Producer {
            pid: 4242,
            name: "exp",
            cmdline: &self.cmdline,
            session_tag: Some("study-1"),
            perf_tag: None,
            lane_id: 7,
            started_nanos: 1,
            relayed: false,
        };
        let r = Record {
            producer_id: 1,
            producer,
            schema,
            emitter: Some("test"),
            header: RecordHeader {
                seq: self.seq,
                t_nanos: t,
                level: Level::INFO,
                schema_key: 0,
                schema_version: schema.version() as u16,
                emitter_id: 0,
                payload_len: payload.len(),
            },
            payload,
            extracted: None,
        };
        self.seq += 1;
        x.on_event(&r).expect("on_event");
    }

    fn notes(&mut self, x: &mut OtlpExporter, n: u64) {
        for i in 0..n {
            let p = Note {
                text: format!("note {i} {}", "x".repeat(40)),
            }
            .encode_to_vec()
            .expect("encode");
            let schema = Arc::clone(&self.note);
            self.send(x, &schema, &p, 1_000 + self.seq);
        }
    }
}

/// Every log record the receiver accepted, data-gap records included.
fn accepted_log_records(
    arrivals: &[Arrival],
) -> impl Iterator<Item = opentelemetry_proto::tonic::logs::v1::LogRecord> + '_ {
    arrivals
        .iter()
        .filter(|a| a.accepted() && a.path == "/v1/logs")
        .flat_map(|a| a.logs().resource_logs)
        .flat_map(|r| r.scope_logs)
        .flat_map(|s| s.log_records)
}

/// Log records the receiver accepted, not counting data-gap records.
fn accepted_logs(arrivals: &[Arrival]) -> u64 {
    accepted_log_records(arrivals)
        .filter(|l| l.event_name != DATA_GAP_EVENT)
        .count() as u64
}

/// Data-gap records accepted: (reason, signal, count).
fn gaps(arrivals: &[Arrival]) -> Vec<(String, String, i64)> {
    let attr = |l: &opentelemetry_proto::tonic::logs::v1::LogRecord, k: &str| {
        l.attributes
            .iter()
            .find(|a| a.key == k)
            .and_then(|a| a.value.clone())
            .and_then(|v| v.value)
    };
    accepted_log_records(arrivals)
        .filter(|l| l.event_name == DATA_GAP_EVENT)
        .map(|l| {
            let s = |k| match attr(&l, k) {
                Some(any_value::Value::StringValue(s)) => s,
                _ => String::new(),
            };
            let n = match attr(&l, "snapbus.gap.count") {
                Some(any_value::Value::IntValue(n)) => n,
                _ => -1,
            };
            (s("snapbus.gap.reason"), s("snapbus.gap.signal"), n)
        })
        .collect()
}

fn poll(what: &str, x: &OtlpExporter, pred: impl Fn(&StatsSnapshot) -> bool) -> StatsSnapshot {
    let deadline = Instant::now() + WAIT;
    loop {
        let s = x.stats().snapshot();
        if pred(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn retry_after_is_honoured_before_the_next_attempt() {
    let r = Receiver::start();
    r.script([Reply::Status(503, Some(1))]);
    let (mut x, mut f) = export_to(&r);
    f.notes(&mut x, 10);
    x.flush().expect("flush");
    r.wait_for("the retry", WAIT, |a| a.len() >= 2);
    let a = r.arrivals();
    assert_eq!(a[0].status, 503);
    let gap = a[1].at - a[0].at;
    assert!(
        gap >= Duration::from_secs(1),
        "retried after {gap:?}, before Retry-After: 1"
    );
    let s = poll("the export", &x, |s| s.exported(Signal::Logs) == 10);
    assert_eq!(s.retries, 1);
    assert_eq!(s.state, ExportState::Ok);
    assert!(s.last_error.contains("503"), "{}", s.last_error);
    x.shutdown();
    assert_eq!(accepted_logs(&r.arrivals()), 10);
}

#[test]
fn status_429_is_retried_and_400_is_dropped_counted_and_never_retried() {
    let r = Receiver::start();
    r.script([
        Reply::Status(429, None),
        Reply::Ok,
        Reply::Status(400, None),
    ]);
    let (mut x, mut f) = export_to(&r);
    f.notes(&mut x, 5);
    x.flush().expect("flush");
    poll("the retried batch", &x, |s| s.exported(Signal::Logs) == 5);
    f.notes(&mut x, 7);
    x.flush().expect("flush");
    // The refused batch is reported as a gap once the receiver answers (it did: with 400).
    r.wait_for("the data-gap record", WAIT, |a| !gaps(a).is_empty());
    x.shutdown();
    let a = r.arrivals();
    let statuses: Vec<u16> = a.iter().map(|a| a.status).collect();
    // 429, its retry, the 400 and the gap record: the refused batch was sent once.
    assert_eq!(statuses, [429, 200, 400, 200], "{statuses:?}");
    let s = x.stats().snapshot();
    assert_eq!(s.dropped(Signal::Logs, DropReason::Rejected), 7);
    assert_eq!(s.exported(Signal::Logs), 5);
    assert_eq!(s.retries, 1);
    assert_eq!(gaps(&a), [("rejected".into(), "logs".into(), 7)]);
}

#[test]
fn a_hang_and_a_slow_drip_time_out_and_are_retried() {
    let r = Receiver::start();
    r.script([
        Reply::Hang(Duration::from_secs(2)),
        Reply::Drip(Duration::from_millis(100)),
    ]);
    let (mut x, mut f) = export_to(&r);
    f.notes(&mut x, 3);
    x.flush().expect("flush");
    let s = poll("the export", &x, |s| s.exported(Signal::Logs) == 3);
    assert_eq!(s.retries, 2, "{s:?}");
    assert!(
        s.last_error.to_lowercase().contains("timeout"),
        "{}",
        s.last_error
    );
    x.shutdown();
    // The two timed-out attempts and the successful one.
    assert_eq!(r.arrivals().len(), 3);
}

#[test]
fn connection_refused_is_retried_without_limit_and_recovers_by_itself() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let mut x = OtlpExporter::start(options(&url)).expect("start");
    let mut f = Feed::new();
    f.notes(&mut x, 4);
    x.flush().expect("flush");
    let s = poll("down", &x, |s| {
        s.state == ExportState::Down && s.retries >= 5
    });
    assert_eq!(s.exported(Signal::Logs), 0);
    assert!(!s.last_error.is_empty());
    let r = Receiver::on(&format!("127.0.0.1:{port}"));
    let s = poll("recovery", &x, |s| s.exported(Signal::Logs) == 4);
    assert_eq!(s.state, ExportState::Ok);
    x.shutdown();
    assert_eq!(accepted_logs(&r.arrivals()), 4);
}

#[test]
fn a_partial_success_counts_its_rejected_records() {
    let r = Receiver::start();
    r.script([Reply::PartialLogs(3)]);
    let (mut x, mut f) = export_to(&r);
    f.notes(&mut x, 10);
    x.flush().expect("flush");
    x.shutdown();
    let s = x.stats().snapshot();
    assert_eq!(s.exported(Signal::Logs), 7);
    assert_eq!(s.dropped(Signal::Logs, DropReason::Rejected), 3);
}

/// During an outage the queue stays under its byte cap, dropping its oldest batches; after
/// it, every log record made is exported or counted dropped by reason, exactly, and the gap
/// is reported.
#[test]
fn under_an_outage_the_queue_stays_capped_and_the_books_balance() {
    const CAP: usize = 64 << 10;
    let r = Receiver::start();
    r.fallback(Some(Reply::Status(503, None)));
    let mut o = options(&r.url());
    o.max_queue_bytes = CAP;
    let mut x = OtlpExporter::start(o).expect("start");
    let board = StatusBoard::new();
    x.report_to(board.clone());
    let mut f = Feed::new();
    let mut max_queue = 0;
    for _ in 0..200 {
        f.notes(&mut x, 50);
        x.flush().expect("flush");
        let q = board
            .entries()
            .into_iter()
            .find(|e| e.key == "queue_bytes")
            .map(|e| e.value);
        let Some(StatusValue::Count(q)) = q else {
            panic!("no queue_bytes on the board: {:?}", board.entries());
        };
        assert!(q as usize <= CAP, "queue {q} bytes > cap {CAP}");
        max_queue = max_queue.max(q);
    }
    assert!(
        max_queue > (CAP / 2) as u64,
        "the queue never filled: {max_queue}"
    );
    let s = x.stats().snapshot();
    assert!(s.dropped(Signal::Logs, DropReason::QueueFull) > 0, "{s:?}");
    assert!(matches!(s.state, ExportState::Backoff | ExportState::Down));
    r.fallback(None);
    x.shutdown();
    let s = x.stats().snapshot();
    let made = 200 * 50;
    let received = accepted_logs(&r.arrivals());
    assert_eq!(s.emitted(Signal::Logs), made);
    assert_eq!(s.exported(Signal::Logs), received);
    assert_eq!(
        made,
        received
            + s.dropped(Signal::Logs, DropReason::QueueFull)
            + s.dropped(Signal::Logs, DropReason::Rejected)
            + s.dropped(Signal::Logs, DropReason::Shutdown),
        "{s:?}"
    );
    let g = gaps(&r.arrivals());
    assert_eq!(
        g,
        [(
            "queue_full".into(),
            "logs".into(),
            s.dropped(Signal::Logs, DropReason::QueueFull) as i64
        )]
    );
}

/// Metrics are state: after an outage the receiver gets each gauge's last value with its
/// producer time and the histogram's cumulative totals, whatever failed in between.
#[test]
fn metrics_after_an_outage_equal_the_cumulative_truth() {
    let r = Receiver::start();
    r.fallback(Some(Reply::Status(502, None)));
    let (mut x, mut f) = export_to(&r);
    let (mut sum, mut count) = (0u64, 0u64);
    let mut last = (0u64, 0.0f64);
    for i in 0..50u64 {
        let t = 1_700_000_000_000_000_000 + i * 1_000_000;
        let step = Step {
            step: i,
            reward: i as f64 * 0.25,
        }
        .encode_to_vec()
        .expect("encode");
        let s = Arc::clone(&f.step);
        f.send(&mut x, &s, &step, t);
        last = (t, i as f64 * 0.25);
        let d = DurationSample {
            label: "env.step".into(),
            duration_nanos: 1_000 * (i + 1),
            ..Default::default()
        }
        .encode_to_vec()
        .expect("encode");
        let s = Arc::clone(&f.duration);
        f.send(&mut x, &s, &d, t);
        sum += 1_000 * (i + 1);
        count += 1;
        x.flush().expect("flush");
    }
    poll("failed attempts", &x, |s| s.retries >= 3);
    r.fallback(None);
    x.shutdown();
    let a = r.arrivals();
    let ok: Vec<_> = a
        .iter()
        .filter(|a| a.accepted() && a.path == "/v1/metrics")
        .collect();
    assert!(!ok.is_empty(), "no metrics accepted");
    let mut reward = None;
    let mut hist = None;
    for m in ok
        .iter()
        .flat_map(|a| a.metrics().resource_metrics)
        .flat_map(|r| r.scope_metrics)
        .flat_map(|s| s.metrics)
    {
        match (m.name.as_str(), m.data) {
            ("otlp.step.reward", Some(metric::Data::Gauge(g))) => {
                for p in g.data_points {
                    reward = Some((p.time_unix_nano, p.value));
                }
            }
            ("snapbus.duration", Some(metric::Data::Histogram(h))) => {
                assert_eq!(h.aggregation_temporality, 2, "cumulative");
                for p in h.data_points {
                    hist = Some((p.count, p.sum, p.bucket_counts.iter().sum::<u64>()));
                }
            }
            _ => {}
        }
    }
    let (t, v) = reward.expect("a reward point");
    assert_eq!(t, last.0);
    assert_eq!(
        v,
        Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(last.1))
    );
    let (n, s, buckets) = hist.expect("a histogram point");
    assert_eq!(n, count);
    assert_eq!(buckets, count);
    assert!((s.unwrap_or(0.0) - sum as f64 / 1e9).abs() < 1e-12);
    let st = x.stats().snapshot();
    assert_eq!(st.dropped(Signal::Metrics, DropReason::Shutdown), 0);
}

#[test]
fn own_counters_are_served_as_prometheus_text() {
    use std::io::{Read, Write};
    let r = Receiver::start();
    r.script([Reply::Status(400, None)]);
    let (mut x, mut f) = export_to(&r);
    f.notes(&mut x, 4);
    x.flush().expect("flush");
    poll("the rejection", &x, |s| {
        s.dropped(Signal::Logs, DropReason::Rejected) == 4
    });
    let server = snapbus_consumers::otlp::serve_metrics("127.0.0.1:0", Arc::clone(x.stats()))
        .expect("serve");
    let mut s = std::net::TcpStream::connect(server.addr()).expect("connect");
    write!(s, "GET /metrics HTTP/1.0\r\nHost: t\r\n\r\n").expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    assert!(
        text.starts_with("HTTP/1.1 200") || text.starts_with("HTTP/1.0 200"),
        "{text}"
    );
    for line in [
        "snapbus_otlp_dropped_total{signal=\"logs\",reason=\"rejected\"} 4",
        "snapbus_otlp_exported_total{signal=\"logs\"} 0",
        // A 400 refused the batch: the state says so.
        "snapbus_otlp_state{state=\"error\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    x.shutdown();
}

/// With the receiver dead, shutdown returns at its deadline and counts what is left.
#[test]
fn shutdown_gives_up_at_its_deadline_and_counts_the_rest() {
    let r = Receiver::start();
    r.fallback(Some(Reply::Status(503, None)));
    let mut o = options(&r.url());
    o.shutdown_deadline = Duration::from_millis(500);
    let mut x = OtlpExporter::start(o).expect("start");
    let mut f = Feed::new();
    f.notes(&mut x, 30);
    let t = Instant::now();
    x.shutdown();
    let took = t.elapsed();
    assert!(took < Duration::from_secs(3), "shutdown took {took:?}");
    let s = x.stats().snapshot();
    assert_eq!(s.dropped(Signal::Logs, DropReason::Shutdown), 30);
    assert_eq!(s.exported(Signal::Logs), 0);
    assert_eq!(s.queue_bytes, 0);
}
