//! What records become in OTLP: spans, log records, metric series under their cap.

use super::*;

/// Spans: start and end become one span with the producer's times, its parent, attributes of
/// both; a span event is a log record in the same trace; a span still open when its producer
/// dies ends with an error status.
#[test]
fn spans_carry_producer_times_parents_and_end_with_an_error_when_the_producer_dies() {
    use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
    use snapbus_schemas::builtin::{AttrValue, SpanEnd, SpanEvent, SpanStart};
    let r = Receiver::start();
    let (mut x, mut f) = export_to(&r);
    let start = Arc::new(SpanStart::descriptor().clone());
    let end = Arc::new(SpanEnd::descriptor().clone());
    let event = Arc::new(SpanEvent::descriptor().clone());
    let p = SpanStart {
        span_id: 1,
        parent_id: None,
        name: "episode".into(),
        attributes: [("episode".to_owned(), AttrValue::U64(3))].into(),
    }
    .encode_to_vec()
    .expect("encode");
    f.send(&mut x, &start, &p, 1_000);
    let p = SpanStart {
        span_id: 2,
        parent_id: Some(1),
        name: "step".into(),
        attributes: Default::default(),
    }
    .encode_to_vec()
    .expect("encode");
    f.send(&mut x, &start, &p, 1_100);
    let p = SpanEvent {
        span_id: Some(2),
        name: "checkpoint".into(),
        attributes: Default::default(),
    }
    .encode_to_vec()
    .expect("encode");
    f.send(&mut x, &event, &p, 1_150);
    let p = SpanEnd {
        span_id: 2,
        duration_nanos: 100,
        attributes: [("result".to_owned(), AttrValue::Str("ok".into()))].into(),
    }
    .encode_to_vec()
    .expect("encode");
    f.send(&mut x, &end, &p, 1_200);
    // Span 1 is still open when its producer dies.
    let cmdline = vec!["exp".to_owned()];
    let dead = Producer {
        pid: 4242,
        name: "exp",
        cmdline: &cmdline,
        session_tag: Some("study-1"),
        perf_tag: None,
        lane_id: 7,
        started_nanos: 1,
        relayed: false,
    };
    x.on_producer(ProducerChange::Died(dead)).expect("died");
    x.shutdown();
    let a = r.arrivals();
    let spans: Vec<_> = a
        .iter()
        .filter(|a| a.path == "/v1/traces")
        .flat_map(|a| {
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(
                &a.body[..],
            )
            .expect("a traces request")
            .resource_spans
        })
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect();
    assert_eq!(spans.len(), 2, "{spans:?}");
    let step = spans
        .iter()
        .find(|s| s.name == "step")
        .expect("the step span");
    let episode = spans
        .iter()
        .find(|s| s.name == "episode")
        .expect("the episode");
    assert_eq!(
        (step.start_time_unix_nano, step.end_time_unix_nano),
        (1_100, 1_200)
    );
    assert_eq!(step.parent_span_id, episode.span_id);
    assert_eq!(step.trace_id, episode.trace_id);
    assert_eq!(step.trace_id.len(), 16);
    assert!(step.attributes.iter().any(|k| k.key == "result"));
    assert_eq!(episode.start_time_unix_nano, 1_000);
    let status = episode.status.clone().expect("an error status");
    assert_eq!(status.code, StatusCode::Error as i32);
    assert!(status.message.contains("died"), "{}", status.message);
    let logs: Vec<_> = a
        .iter()
        .filter(|a| a.path == "/v1/logs")
        .flat_map(|a| a.logs().resource_logs)
        .flat_map(|r| r.scope_logs)
        .flat_map(|s| s.log_records)
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0].event_name, "checkpoint");
    assert_eq!(logs[0].trace_id, step.trace_id);
    assert_eq!(logs[0].span_id, step.span_id);
    assert_eq!(logs[0].time_unix_nano, 1_150);
}

/// A log record's body is the decoded event, with the producer's time, the level's
/// severity, and the producer as the resource.
#[test]
fn log_records_hold_the_decoded_event_and_the_producer() {
    let r = Receiver::start();
    let (mut x, mut f) = export_to(&r);
    f.notes(&mut x, 1);
    x.shutdown();
    let req = r
        .arrivals()
        .iter()
        .find(|a| a.path == "/v1/logs")
        .expect("a logs request")
        .logs();
    let rl = &req.resource_logs[0];
    let attrs: Vec<(String, String)> = rl
        .resource
        .as_ref()
        .expect("a resource")
        .attributes
        .iter()
        .map(|kv| (kv.key.clone(), format!("{:?}", kv.value)))
        .collect();
    for key in [
        "service.name",
        "service.instance.id",
        "process.pid",
        "host.name",
        "snapbus.session_tag",
    ] {
        assert!(
            attrs.iter().any(|(k, _)| k == key),
            "{key} not in {attrs:?}"
        );
    }
    let rec = &rl.scope_logs[0].log_records[0];
    assert_eq!(rec.time_unix_nano, 1_000);
    assert!(rec.observed_time_unix_nano > 1_000_000_000_000_000_000);
    assert_eq!(
        (rec.severity_number, rec.severity_text.as_str()),
        (9, "INFO")
    );
    assert_eq!(rec.event_name, "otlp.note");
    // A text-bearing event: its text is the body.
    assert!(
        matches!(&rec.body.as_ref().and_then(|v| v.value.clone()),
            Some(any_value::Value::StringValue(s)) if s.starts_with("note 0 ")),
        "{rec:?}"
    );
}

/// Series over the cap are dropped and counted, the ones under it still exported.
#[test]
fn series_over_the_cap_are_dropped_and_counted() {
    let r = Receiver::start();
    let mut o = options(&r.url());
    // otlp.step has two leaves: one producer's row fits, a second producer's does not.
    o.max_series = 3;
    let mut x = OtlpExporter::start(o).expect("start");
    let mut f = Feed::new();
    let step = Step {
        step: 1,
        reward: 0.5,
    }
    .encode_to_vec()
    .expect("encode");
    let schema = Arc::clone(&f.step);
    f.send(&mut x, &schema, &step, 10);
    let cmdline = vec!["other".to_owned()];
    let other = Producer {
        pid: 1,
        name: "other",
        cmdline: &cmdline,
        session_tag: None,
        perf_tag: None,
        lane_id: 99,
        started_nanos: 1,
        relayed: false,
    };
    let rec = Record {
        producer_id: 2,
        producer: other,
        schema: &schema,
        emitter: None,
        header: RecordHeader {
            seq: 0,
            t_nanos: 11,
            level: Level::INFO,
            schema_key: 0,
            schema_version: 1,
            emitter_id: 0,
            payload_len: step.len(),
        },
        payload: &step,
        extracted: None,
    };
    x.on_event(&rec).expect("on_event");
    x.shutdown();
    let s = x.stats().snapshot();
    assert_eq!(s.dropped(Signal::Metrics, DropReason::Cardinality), 2);
    assert_eq!(s.exported(Signal::Metrics), 2);
    assert_eq!(s.series, 2);
}

/// Resource samples become the OpenTelemetry process metrics, cumulative where they count.
#[test]
fn resource_samples_become_the_process_metrics() {
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as N;
    use snapbus_schemas::builtin::ResourceSample;
    let r = Receiver::start();
    let (mut x, mut f) = export_to(&r);
    let schema = Arc::new(ResourceSample::descriptor().clone());
    let p = ResourceSample {
        rss_bytes: 5 << 20,
        cpu_user_nanos: 1_500_000_000,
        cpu_sys_nanos: 250_000_000,
        minor_faults: 40,
        major_faults: 2,
        threads: 3,
    }
    .encode_to_vec()
    .expect("encode");
    f.send(&mut x, &schema, &p, 7_000);
    x.shutdown();
    let mut got = Vec::new();
    for m in r
        .arrivals()
        .iter()
        .filter(|a| a.path == "/v1/metrics")
        .flat_map(|a| a.metrics().resource_metrics)
        .flat_map(|r| r.scope_metrics)
        .flat_map(|s| s.metrics)
    {
        let Some(metric::Data::Sum(sum)) = m.data else {
            panic!("{} is not a sum", m.name);
        };
        assert_eq!(sum.aggregation_temporality, 2, "{}: cumulative", m.name);
        for dp in sum.data_points {
            let attr = dp
                .attributes
                .first()
                .and_then(|a| a.value.clone())
                .and_then(|v| v.value)
                .map(|v| format!("{v:?}"))
                .unwrap_or_default();
            let Some(N::AsDouble(v)) = dp.value else {
                panic!("no value");
            };
            assert_eq!((dp.time_unix_nano, dp.start_time_unix_nano), (7_000, 1));
            got.push((m.name.clone(), m.unit.clone(), sum.is_monotonic, attr, v));
        }
    }
    got.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let s = |x: &str| format!("{:?}", any_value::Value::StringValue(x.into()));
    let want = vec![
        (
            "process.cpu.time".into(),
            "s".into(),
            true,
            s("system"),
            0.25,
        ),
        ("process.cpu.time".into(), "s".into(), true, s("user"), 1.5),
        (
            "process.memory.usage".into(),
            "By".into(),
            false,
            String::new(),
            5242880.0,
        ),
        (
            "process.paging.faults".into(),
            "{fault}".into(),
            true,
            s("major"),
            2.0,
        ),
        (
            "process.paging.faults".into(),
            "{fault}".into(),
            true,
            s("minor"),
            40.0,
        ),
        (
            "process.thread.count".into(),
            "{thread}".into(),
            false,
            String::new(),
            3.0,
        ),
    ];
    assert_eq!(got, want);
}

/// A burst bigger than the queue's cap: batches are cut to a quarter of the cap, so the
/// queue keeps its newest batches (and the receiver gets them) instead of refusing one batch
/// bigger than the whole queue; the books balance exactly.
#[test]
fn a_burst_over_a_small_queue_cap_keeps_the_newest_batches() {
    const CAP: usize = 16 << 10;
    let r = Receiver::start();
    let mut o = options(&r.url());
    o.max_queue_bytes = CAP;
    let mut x = OtlpExporter::start(o).expect("start");
    let mut f = Feed::new();
    // About 45 KB of log records, handed over at once by the flush.
    f.notes(&mut x, 300);
    x.flush().expect("flush");
    x.shutdown();
    let s = x.stats().snapshot();
    let received = accepted_logs(&r.arrivals());
    assert!(received >= 50, "only {received} of 300 got through: {s:?}");
    assert_eq!(s.exported(Signal::Logs), received);
    assert_eq!(
        300,
        received
            + s.dropped(Signal::Logs, DropReason::QueueFull)
            + s.dropped(Signal::Logs, DropReason::Shutdown),
        "{s:?}"
    );
    for a in r.arrivals().iter().filter(|a| a.path == "/v1/logs") {
        assert!(a.body.len() <= CAP, "a {} byte request", a.body.len());
    }
}

/// A numeric record of 1 KiB or more (a long array besides its numbers; no text, which would
/// make every INFO record a log record too).
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "otlp.frame", version = 1)]
struct Frame {
    step: u64,
    pad: Vec<u8>,
    reward: f64,
}

/// Numeric records of 1 KiB and more below the log level are read where they lie in the ring
/// (`Consumer::read_in_place`): through a real lane, the gauges exported hold the values of the
/// last record, read in place; a record at the log level (also a log record) is copied.
#[test]
fn gauges_of_records_read_in_place_carry_the_values_emitted() {
    let r = Receiver::start();
    let mut o = options(&r.url());
    o.log_level = Level::WARN;
    let mut x = OtlpExporter::start(o).expect("start");
    let bus = crate::runtime::Bus::start("otlp-inplace");
    let p = bus.publisher();
    let frame = |i: u64| Frame {
        step: i,
        pad: vec![7; 1100],
        reward: i as f64 * 0.5 + 0.25,
    };
    assert!(frame(0).encode_to_vec().expect("encode").len() >= 1024);
    // The first of the schema is copied anyway (after `on_schema`): make it the logged one.
    p.emit(Level::WARN, 0, &frame(0)).expect("emit");
    for i in 1..=20 {
        p.emit(Level::INFO, 0, &frame(i)).expect("emit");
    }
    p.close();
    let mut ro = RunOptions::new("otlp");
    ro.subscribe.start = snapbus_bus::lane::StartAt::Oldest;
    ro.until_end = true;
    ro.handle_signals = false;
    let summary = run(bus.dir(), &ro, &mut x, None).expect("run");
    assert_eq!((summary.delivered, summary.lost), (21, 0));
    assert_eq!(summary.read_in_place, 20, "every INFO record read in place");
    x.shutdown();
    let arrivals = r.arrivals();
    let last_point = |name: &str| {
        arrivals
            .iter()
            .filter(|a| a.accepted() && a.path == "/v1/metrics")
            .flat_map(|a| a.metrics().resource_metrics)
            .flat_map(|r| r.scope_metrics)
            .flat_map(|s| s.metrics)
            .filter(|m| m.name == name)
            .flat_map(|m| match m.data {
                Some(metric::Data::Gauge(g)) => g.data_points,
                _ => Vec::new(),
            })
            .max_by_key(|p| p.time_unix_nano)
            .and_then(|p| p.value)
    };
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as V;
    assert_eq!(
        last_point("otlp.frame.reward"),
        Some(V::AsDouble(20.0 * 0.5 + 0.25))
    );
    assert_eq!(last_point("otlp.frame.step"), Some(V::AsDouble(20.0)));
    let logged: Vec<String> = arrivals
        .iter()
        .filter(|a| a.accepted() && a.path == "/v1/logs")
        .flat_map(|a| a.logs().resource_logs)
        .flat_map(|r| r.scope_logs)
        .flat_map(|s| s.log_records)
        .map(|l| l.event_name)
        .collect();
    assert_eq!(
        logged,
        ["otlp.frame"],
        "the WARN record, and only it, is a log record"
    );
}
