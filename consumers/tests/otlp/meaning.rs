//! OTLP that means what it says: `logging` records and text-bearing events as log records
//! (body = the message, attributes = the fields), spans of the producer API with their
//! parents, units on gauges, `schema_url` on resources and scopes.

use super::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::AnyValue;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;
use snapbus_consumers::otlp::SCHEMA_URL;

/// Python's `log.record` (`snapbus.SnapbusHandler`, python/snapbus/handler.py).
#[allow(non_snake_case)]
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "log.record", version = 1)]
struct PyLogRecord {
    name: String,
    levelno: i64,
    message: String,
    created: f64,
    pathname: String,
    lineno: i64,
    funcName: String,
    thread: Option<u64>,
    process: Option<u32>,
    exc_text: Option<String>,
}

/// A text-bearing event with numbers too.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "otlp.phase", version = 1)]
struct Phase {
    episode: u64,
    phase: String,
    latency_ms: f64,
}

fn str_of(v: &Option<AnyValue>) -> Option<&str> {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Some(s),
        _ => None,
    }
}

fn attr<'a>(l: &'a LogRecord, k: &str) -> Option<&'a AnyValue> {
    l.attributes
        .iter()
        .find(|a| a.key == k)
        .and_then(|a| a.value.as_ref())
}

fn all_spans(arrivals: &[Arrival]) -> Vec<Span> {
    arrivals
        .iter()
        .filter(|a| a.accepted() && a.path == "/v1/traces")
        .flat_map(|a| {
            ExportTraceServiceRequest::decode(&a.body[..])
                .expect("a traces request")
                .resource_spans
        })
        .flat_map(|r| {
            assert_eq!(r.schema_url, SCHEMA_URL);
            r.scope_spans
        })
        .flat_map(|s| s.spans)
        .collect()
}

#[test]
fn logging_records_and_text_events_are_log_records_with_bodies_not_metrics() {
    let r = Receiver::start();
    let (mut x, mut f) = export_to(&r);
    let log = Arc::new(PyLogRecord::descriptor().clone());
    let phase = Arc::new(Phase::descriptor().clone());
    let p = PyLogRecord {
        name: "trainer".into(),
        levelno: 20,
        message: "epoch 3 done".into(),
        created: 1.5,
        pathname: "/src/train.py".into(),
        lineno: 42,
        funcName: "fit".into(),
        thread: Some(7),
        process: Some(4242),
        exc_text: None,
    }
    .encode_to_vec()
    .expect("encode");
    f.send(&mut x, &log, &p, 1_000);
    let p = Phase {
        episode: 3,
        phase: "explore".into(),
        latency_ms: 2.5,
    }
    .encode_to_vec()
    .expect("encode");
    f.send(&mut x, &phase, &p, 1_100);
    x.flush().expect("flush");
    x.shutdown();
    let a = r.arrivals();
    let logs: Vec<LogRecord> = accepted_log_records(&a).collect();
    let rec = logs
        .iter()
        .find(|l| l.event_name == "log.record")
        .expect("the logging record is a log record");
    assert_eq!(str_of(&rec.body), Some("epoch 3 done"), "{rec:?}");
    assert_eq!(rec.severity_text, "INFO");
    assert_eq!(
        attr(rec, "lineno").and_then(|v| v.value.clone()),
        Some(any_value::Value::IntValue(42))
    );
    assert_eq!(str_of(&attr(rec, "funcName").cloned()), Some("fit"));
    assert_eq!(str_of(&attr(rec, "name").cloned()), Some("trainer"));
    assert!(
        attr(rec, "exc_text").is_none(),
        "an absent option is no attribute"
    );
    let ev = logs
        .iter()
        .find(|l| l.event_name == "otlp.phase")
        .expect("the text-bearing event is a log record");
    assert_eq!(str_of(&ev.body), Some("explore"), "{ev:?}");
    assert_eq!(
        attr(ev, "episode").and_then(|v| v.value.clone()),
        Some(any_value::Value::IntValue(3))
    );
    let metrics: Vec<_> = a
        .iter()
        .filter(|a| a.accepted() && a.path == "/v1/metrics")
        .flat_map(|a| a.metrics().resource_metrics)
        .flat_map(|r| {
            assert_eq!(r.schema_url, SCHEMA_URL);
            r.scope_metrics
        })
        .flat_map(|s| {
            assert_eq!(s.schema_url, SCHEMA_URL);
            s.metrics
        })
        .collect();
    let names: Vec<(&str, &str)> = metrics
        .iter()
        .map(|m| (m.name.as_str(), m.unit.as_str()))
        .collect();
    assert!(
        !names.iter().any(|(n, _)| n.starts_with("log.record")),
        "no metrics of a logging record: {names:?}"
    );
    assert!(
        names.contains(&("otlp.phase.latency_ms", "ms")),
        "a gauge with its unit: {names:?}"
    );
    assert!(
        names.contains(&("otlp.phase.episode", "")),
        "no unit where the name says none: {names:?}"
    );
    for r in a
        .iter()
        .filter(|a| a.accepted() && a.path == "/v1/logs")
        .flat_map(|a| a.logs().resource_logs)
    {
        assert_eq!(r.schema_url, SCHEMA_URL);
        assert!(r.scope_logs.iter().all(|s| s.schema_url == SCHEMA_URL));
    }
}

#[test]
fn duration_samples_with_ids_are_spans_with_parents() {
    let r = Receiver::start();
    let (mut x, mut f) = export_to(&r);
    let trace = 0x1234_5678_9abc_def0_0fed_cba9_8765_4321_u128;
    let sample = |label: &str, span_id, parent_id, duration_nanos| {
        DurationSample {
            label: label.into(),
            duration_nanos,
            trace_id: trace,
            span_id,
            parent_id,
        }
        .encode_to_vec()
        .expect("encode")
    };
    let d = Arc::clone(&f.duration);
    f.send(&mut x, &d, &sample("env.step", 2, 1, 300), 10_000);
    f.send(&mut x, &d, &sample("episode", 1, 0, 5_000), 12_000);
    // A version-1 sample (no ids): a histogram count, no span.
    let v1 = Arc::new(
        SchemaDescriptor::new(
            "snapbus.duration",
            1,
            snapbus_schemas::TypeDesc::Struct {
                fields: vec![
                    snapbus_schemas::Field::new("label", snapbus_schemas::TypeDesc::String),
                    snapbus_schemas::Field::new("duration_nanos", snapbus_schemas::TypeDesc::U64),
                ],
            },
        )
        .expect("v1"),
    );
    let mut p = Vec::new();
    p.extend_from_slice(&3u64.to_le_bytes());
    p.extend_from_slice(b"old");
    p.extend_from_slice(&7u64.to_le_bytes());
    f.send(&mut x, &v1, &p, 13_000);
    x.flush().expect("flush");
    x.shutdown();
    let a = r.arrivals();
    let spans = all_spans(&a);
    assert_eq!(spans.len(), 2, "{spans:?}");
    let step = spans.iter().find(|s| s.name == "env.step").expect("step");
    let episode = spans.iter().find(|s| s.name == "episode").expect("episode");
    assert_eq!(step.trace_id, trace.to_be_bytes());
    assert_eq!(episode.trace_id, trace.to_be_bytes());
    assert_eq!(
        step.parent_span_id, episode.span_id,
        "the child names its parent"
    );
    assert!(episode.parent_span_id.is_empty(), "a root span");
    assert_eq!(
        (step.start_time_unix_nano, step.end_time_unix_nano),
        (9_700, 10_000)
    );
    assert_eq!(
        (episode.start_time_unix_nano, episode.end_time_unix_nano),
        (7_000, 12_000)
    );
    let hist = a
        .iter()
        .filter(|a| a.accepted() && a.path == "/v1/metrics")
        .flat_map(|a| a.metrics().resource_metrics)
        .flat_map(|r| r.scope_metrics)
        .flat_map(|s| s.metrics)
        .filter(|m| m.name == "snapbus.duration")
        .filter_map(|m| match m.data {
            Some(metric::Data::Histogram(h)) => Some(h),
            _ => None,
        })
        .flat_map(|h| h.data_points)
        .fold(std::collections::BTreeMap::new(), |mut by_label, p| {
            let label = format!("{:?}", p.attributes);
            let n: &mut u64 = by_label.entry(label).or_default();
            *n = (*n).max(p.count);
            by_label
        });
    // Cumulative: the last count of each label's histogram.
    assert_eq!(
        hist.values().sum::<u64>(),
        3,
        "every sample counts in the histograms, v1 too: {hist:?}"
    );
}
