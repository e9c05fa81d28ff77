//! The OTLP exporter end to end against real peers: VictoriaMetrics reads back what
//! `attach otlp` sent while `snapbus demo` ran (value by value against the demo's formulas)
//! and what `export --format otlp` sent of a recording (with its original timestamps); rotel
//! prints the log records and spans it received and, as an agent, forwards metrics to
//! VictoriaMetrics. Bad input fails with a clear message and a non-zero exit.

mod peers;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use snapbus_bus::Level;
use snapbus_consumers::recording::{RecordingWriter, WriterOptions};
use snapbus_schemas::Snapshot;

use crate::bus::{TestBus, wait_until};
use crate::demo::expected_reward;
use crate::util::{WATCHDOG, run};
use peers::{Rotel, Vm, free_port};

/// Samples of every series whose name matches `re`: name → labels, (timestamp ms, value).
type Series = Vec<(String, BTreeMap<String, String>, Vec<(i64, f64)>)>;

fn series(vm: &Vm, re: &str) -> Series {
    vm.export(&format!("{{__name__=~\"{re}\"}}"))
        .into_iter()
        .map(|s| {
            let mut labels: BTreeMap<String, String> = s["metric"]
                .as_object()
                .expect("labels")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect();
            let name = labels.remove("__name__").expect("a name");
            let points = s["timestamps"]
                .as_array()
                .expect("timestamps")
                .iter()
                .zip(s["values"].as_array().expect("values"))
                .map(|(t, v)| (t.as_i64().expect("ts"), v.as_f64().expect("value")))
                .collect();
            (name, labels, points)
        })
        .collect()
}

/// The demo's `demo.step` leaves for episode `e`, step `s` (8x6 images; `snapbus demo --help`).
fn demo_step(e: u64, s: u64) -> BTreeMap<String, f64> {
    let leaves = crate::demo::demo_leaves(e, s);
    let leaves = leaves
        .into_iter()
        .map(|(k, v)| (format!("demo.step.{k}"), v));
    std::iter::once(("demo.step.episode".to_owned(), e as f64))
        .chain(leaves)
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

/// `attach otlp ARGS` on `bus`: its id.
fn attach_otlp(bus: &TestBus, args: &[&str]) -> String {
    let mut all = vec!["attach", "otlp"];
    all.extend_from_slice(args);
    bus.attach(&all)
}

/// `attach otlp` of `demo.step`'s metrics to `url` every 200 ms on `bus`: its id.
fn attach_demo_metrics(bus: &TestBus, url: &str) -> String {
    attach_otlp(
        bus,
        &[
            "--metrics-endpoint",
            url,
            "--signals",
            "metrics",
            "--interval",
            "200ms",
            "--schema",
            "demo.step",
        ],
    )
}

/// The status board of consumer `id` in `ls --json`.
fn board(bus: &TestBus, id: &str) -> Value {
    bus.consumer_by_id(id)
        .map_or(Value::Null, |c| c["board"].clone())
}

const EPISODES: u64 = 3;
const STEPS: u64 = 8;

#[test]
fn demo_metrics_read_back_from_victoria_metrics_equal_the_demo_formulas() {
    let vm = Vm::start();
    let bus = TestBus::up();
    let id = attach_otlp(
        &bus,
        &[
            "--endpoint",
            "http://127.0.0.1:9",
            "--metrics-endpoint",
            &vm.otlp_url(),
            "--signals",
            "metrics",
            "--interval",
            "150ms",
            "--schema",
            "demo.*",
        ],
    );
    let out = bus.run(&[
        "demo",
        "--episodes",
        &EPISODES.to_string(),
        "--steps",
        &STEPS.to_string(),
        "--rate",
        "25",
    ]);
    assert!(out.status.success(), "demo: {}", out.stderr);
    // The experiment summary comes last: once it is in, so is everything before it.
    wait_until(
        "the experiment summary in VictoriaMetrics",
        WATCHDOG,
        || {
            series(&vm, "demo[.]step[.]summary[.]reward")
                .iter()
                .any(|(_, l, _)| l.get("window").is_some_and(|w| w == "experiment"))
        },
    );
    let b = board(&bus, &id);
    assert_eq!(b["state"], "ok", "{b}");
    assert!(b["exported.metrics"].as_u64().unwrap_or(0) > 0, "{b}");
    assert_eq!(b["dropped.rejected"], 0, "{b}");
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "detach: {}", out.stderr);

    // Every demo.step sample, joined by its (producer) timestamp, is one step of the demo.
    let steps = series(&vm, "demo[.]step[.][a-z].*");
    let mut by_t: BTreeMap<i64, BTreeMap<String, f64>> = BTreeMap::new();
    for (name, labels, points) in &steps {
        if name.starts_with("demo.step.summary") {
            continue;
        }
        assert_eq!(labels.get("service.name").map(String::as_str), Some("demo"));
        assert!(labels.contains_key("process.pid") && labels.contains_key("host.name"));
        assert!(
            !labels.contains_key("episode") && !labels.contains_key("step"),
            "{labels:?}"
        );
        for (t, v) in points {
            by_t.entry(*t).or_default().insert(name.clone(), *v);
        }
    }
    assert!(
        by_t.len() >= 3,
        "only {} export intervals: {by_t:?}",
        by_t.len()
    );
    let mut seen = BTreeSet::new();
    for (t, leaves) in &by_t {
        let e = leaves["demo.step.episode"] as u64;
        let s = leaves["demo.step.step"] as u64;
        assert!(e < EPISODES && s < STEPS, "{t}: {leaves:?}");
        let want = demo_step(e, s);
        assert_eq!(leaves.len(), want.len(), "{t}: {leaves:?}");
        for (k, w) in &want {
            let got = leaves[k.as_str()];
            assert!(close(got, *w), "{t} {k}: {got} != {w}");
        }
        seen.insert((e, s));
    }
    assert!(
        seen.contains(&(EPISODES - 1, STEPS - 1)),
        "the last step is not in: {seen:?}"
    );

    // Summaries: the experiment's mean reward over every step; each episode window's mean is
    // one episode's.
    let episode_means: Vec<f64> = (0..EPISODES)
        .map(|e| (0..STEPS).map(|s| expected_reward(e, s)).sum::<f64>() / STEPS as f64)
        .collect();
    let all_mean = episode_means.iter().sum::<f64>() / EPISODES as f64;
    let mut checked = 0;
    for (_, labels, points) in series(&vm, "demo[.]step[.]summary[.]reward") {
        if labels.get("stat").map(String::as_str) != Some("mean") {
            continue;
        }
        for (_, v) in points {
            match labels.get("window").map(String::as_str) {
                Some("experiment") => assert!(close(v, all_mean), "{v} != {all_mean}"),
                _ => assert!(
                    episode_means.iter().any(|m| close(v, *m)),
                    "{v} is no episode's mean: {episode_means:?}"
                ),
            }
            checked += 1;
        }
    }
    assert!(checked >= 2, "{checked} summary samples");
}

/// An exporter whose receiver is not there yet: the demo runs to its end regardless, `ls`
/// shows the exporter backing off, and once VictoriaMetrics starts on that port the exporter
/// recovers by itself within 2 s, however long the outage (five refused attempts: an
/// exponential backoff alone would wait 8-16 s more), and delivers the last values (metrics
/// are state).
#[test]
fn a_dead_receiver_is_shown_in_ls_and_the_exporter_recovers_when_it_starts() {
    let port = free_port();
    let bus = TestBus::up();
    let url = format!("http://127.0.0.1:{port}/opentelemetry/v1/metrics");
    let id = attach_demo_metrics(&bus, &url);
    bus.demo(2, 10, 50, &[]);
    wait_until("the exporter backing off", WATCHDOG, || {
        let b = board(&bus, &id);
        b["retries"].as_u64().unwrap_or(0) >= 5
            && (b["state"] == "backoff" || b["state"] == "down")
            && b["last_error"].as_str().is_some_and(|e| e.contains(&url))
    });
    let ls = bus.run(&["ls"]);
    let line = format!("consumer {id} (otlp):");
    assert!(
        ls.stdout
            .lines()
            .any(|l| l.contains(&line) && l.contains("state=") && l.contains("retries=")),
        "{}",
        ls.stdout
    );
    let vm = Vm::start_on(port);
    let back = std::time::Instant::now();
    wait_until("the first export accepted", WATCHDOG, || {
        board(&bus, &id)["exported.metrics"]
            .as_u64()
            .is_some_and(|n| n > 0)
    });
    // Seen on the board, published every 200 ms here.
    let took = back.elapsed();
    eprintln!("export resumed {took:?} after VictoriaMetrics came back");
    assert!(
        took <= std::time::Duration::from_secs(2),
        "export resumed {took:?} after VictoriaMetrics came back"
    );
    wait_until("the last values in VictoriaMetrics", WATCHDOG, || {
        let s = series(&vm, "demo[.]step[.](step|episode)");
        let last = |n: &str| {
            s.iter()
                .find(|(name, _, _)| name == n)
                .and_then(|(_, _, p)| p.last().map(|(_, v)| *v))
        };
        last("demo.step.step") == Some(9.0) && last("demo.step.episode") == Some(1.0)
    });
    wait_until("the exporter ok again", WATCHDOG, || {
        board(&bus, &id)["state"] == "ok"
    });
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "detach: {}", out.stderr);
}

/// A wrong endpoint that refuses every batch (VictoriaMetrics answers 400 "unsupported path"
/// on a path it does not serve; the fault-injecting receiver of the consumers' tests answers
/// 404) is `state=error` in `ls`, with the status, not `ok`.
#[test]
fn a_wrong_endpoint_refusing_every_batch_is_state_error_in_ls() {
    let vm = Vm::start();
    let bus = TestBus::up();
    let url = vm
        .otlp_url()
        .replace("/opentelemetry/v1/metrics", "/no/such/path");
    let id = attach_demo_metrics(&bus, &url);
    bus.demo(1, 10, 50, &[]);
    let mut b = Value::Null;
    wait_until("the exporter in state error", WATCHDOG, || {
        b = board(&bus, &id);
        b["state"] == "error"
    });
    let status = b["last_status"].as_u64().expect("a status");
    assert!((400..500).contains(&status), "{b}");
    assert!(
        b["last_error"].as_str().is_some_and(
            |e| e.contains(&format!("HTTP {status}")) && e.contains("unsupported path")
        ),
        "{b}"
    );
    assert_eq!(b["retries"], 0, "a 4xx is not retried: {b}");
    assert!(b["dropped.rejected"].as_u64().is_some_and(|n| n > 0), "{b}");
    let ls = bus.run(&["ls"]);
    let line = format!("consumer {id} (otlp):");
    assert!(
        ls.stdout.lines().any(|l| l.contains(&line)
            && l.contains("state=error")
            && l.contains(&format!("last_status={status}"))),
        "{}",
        ls.stdout
    );
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "detach: {}", out.stderr);
}

/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` in the environment of `attach` (not the broker's)
/// is where the supervised exporter sends.
#[test]
fn the_callers_otel_environment_reaches_the_attached_exporter() {
    let vm = Vm::start();
    let bus = TestBus::up();
    let out = crate::util::run_cmd(
        bus.cmd(&[
            "attach",
            "otlp",
            "--signals",
            "metrics",
            "--interval",
            "200ms",
        ])
        .env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", vm.otlp_url()),
    );
    assert!(out.status.success(), "attach: {}", out.stderr);
    out.assert_stderr_has(&vm.otlp_url());
    let id = out.stdout.trim().to_owned();
    bus.demo(1, 5, 50, &[]);
    wait_until("the demo's last step in VictoriaMetrics", WATCHDOG, || {
        series(&vm, "demo[.]step[.]step")
            .iter()
            .any(|(_, _, p)| p.last().is_some_and(|(_, v)| *v == 4.0))
    });
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "detach: {}", out.stderr);
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "otlp_peer.alarm", version = 1, crate = "snapbus_schemas")]
struct Alarm {
    text: String,
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "otlp_peer.hop", version = 1, crate = "snapbus_schemas")]
struct Hop {
    value: f64,
}

/// Python's `log.record` (`snapbus.SnapbusHandler` emits it for a `logging` record).
#[allow(non_snake_case)]
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "log.record", version = 1, crate = "snapbus_schemas")]
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

/// This test process is a producer (the only test that makes it one): an event, a `logging`
/// record, a span with a child span and an event inside (the producer API's `span` and
/// `time_it`), and a gauge, exported to rotel, which prints the log records (with their
/// bodies) and the spans (with their parents) and forwards the gauge to VictoriaMetrics.
#[test]
fn rotel_receives_logs_and_spans_and_forwards_metrics_to_victoria_metrics() {
    use snapbus_schemas::builtin::SpanEvent;
    let vm = Vm::start();
    let rotel = Rotel::start(&vm.otlp_url());
    let bus = TestBus::up();
    let id = attach_otlp(
        &bus,
        &[
            "--endpoint",
            &rotel.url(),
            "--interval",
            "200ms",
            "--schema",
            "otlp_peer.*",
            "--schema",
            "snapbus.*",
            "--schema",
            "log.record",
        ],
    );
    assert!(snapbus::init(snapbus::Config {
        bus: Some(bus.name.clone()),
        name: Some("otlp-peer-test".into()),
        session_tag: Some("hop-study".into()),
        runtime_dir: Some(crate::util::runtime_root()),
        ..snapbus::Config::default()
    }));
    assert!(
        snapbus::wait_for_bus(WATCHDOG),
        "the test never joined its bus"
    );
    let t = snapbus::get_telemetry("otlp_test");
    let alarm = "coolant-temperature-high-0x5eb";
    t.snapshot(Level::WARN, &Alarm { text: alarm.into() });
    let message = "epoch 7 converged at loss 0.0123";
    t.snapshot(
        Level::INFO,
        &PyLogRecord {
            name: "trainer".into(),
            levelno: 20,
            message: message.into(),
            created: 1.0,
            pathname: "/src/train.py".into(),
            lineno: 4242,
            funcName: "fit".into(),
            thread: Some(1),
            process: Some(std::process::id()),
            exc_text: None,
        },
    );
    let outer = t.span(Level::INFO, "otlp-test-span");
    let outer_id = outer.context().expect("an enabled span").span_id;
    let child_id = t.time_it(Level::INFO, "otlp-test-child", || {
        let id = snapbus::trace::current_span().expect("the child").span_id;
        t.snapshot(
            Level::INFO,
            &SpanEvent {
                span_id: Some(id),
                name: "otlp-test-checkpoint".into(),
                attributes: Default::default(),
            },
        );
        id
    });
    drop(outer);
    t.snapshot(Level::INFO, &Hop { value: 42.5 });
    let (outer_hex, child_hex) = (format!("{outer_id:016x}"), format!("{child_id:016x}"));
    wait_until(
        "rotel printed the log records and the spans",
        WATCHDOG,
        || {
            let o = rotel.peer.output();
            [
                alarm,
                message,
                "otlp-test-span",
                "otlp-test-child",
                "otlp-test-checkpoint",
                "otlp-peer-test",
                &outer_hex,
                &child_hex,
            ]
            .iter()
            .all(|n| o.contains(n))
        },
    );
    let o = rotel.peer.output();
    // The child names its parent: the outer span's id is printed as the child's parent id.
    assert!(
        o.lines()
            .any(|l| l.contains(&outer_hex) && l.to_lowercase().contains("parent")),
        "no parent link in rotel's output:\n{o}"
    );
    wait_until("the gauge forwarded by rotel", WATCHDOG, || {
        series(&vm, "otlp_peer[.]hop[.]value")
            .iter()
            .any(|(_, l, p)| {
                l.get("service.name").is_some_and(|n| n == "otlp-peer-test")
                    && l.get("snapbus.session_tag")
                        .is_some_and(|n| n == "hop-study")
                    && p.iter().any(|(_, v)| *v == 42.5)
            })
    });
    snapbus::shutdown();
    // The board is published at the exporter's next flush: awaited.
    let mut b = Value::Null;
    wait_until("the board counts what rotel took", WATCHDOG, || {
        b = board(&bus, &id);
        b["exported.logs"] == 3 && b["exported.traces"] == 2
    });
    // The alarm, the logging record, the checkpoint; the two spans.
    assert_eq!(b["exported.logs"], 3, "{b}");
    assert_eq!(b["exported.traces"], 2, "{b}");
    // A logging record is a log record, never metrics.
    assert!(series(&vm, "log[.]record.*").is_empty());
    assert_eq!(b["state"], "ok", "{b}");
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "detach: {}", out.stderr);
}

fn tmp(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("otlp-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// `snapbus export FILE --format otlp --endpoint URL` and `extra` arguments.
fn export_otlp(file: &std::path::Path, url: &str, extra: &[&str]) -> crate::util::Output {
    let file = file.to_str().expect("utf-8");
    let mut args = vec!["export", file, "--format", "otlp", "--endpoint", url];
    args.extend_from_slice(extra);
    run(&args)
}

/// Writes a recording of `n` `otlp_peer.hop` records 15 s apart from `t0`.
fn write_recording(path: &std::path::Path, t0: u64, n: u64) {
    let info = crate::util::producer_info(77, "recorded", 77);
    let mut w =
        RecordingWriter::create(path, &WriterOptions::new("recorder", "test")).expect("create");
    let desc = Arc::new(Hop::descriptor().clone());
    for i in 0..n {
        let payload = snapbus_schemas::Wire::encode_to_vec(&Hop {
            value: i as f64 * 1.5,
        })
        .expect("encode");
        crate::util::write_record(&mut w, &info, &desc, (i, t0 + i * 15_000_000_000), &payload);
    }
    w.finish().expect("finish");
}

#[test]
fn export_sends_a_recording_with_its_original_timestamps() {
    let vm = Vm::start();
    let file = tmp("hops.mcap");
    // 2026-01-01T00:00:00Z: well in the past, as a recording is.
    let t0 = 1_767_225_600_000_000_000u64;
    write_recording(&file, t0, 6);
    let base = format!("http://{}/opentelemetry", vm.addr);
    let out = export_otlp(&file, &base, &[]);
    assert!(out.status.success(), "export: {}", out.stderr);
    out.assert_stderr_has("6 records read; 6 data points exported");
    wait_until(
        "the recording's points in VictoriaMetrics",
        WATCHDOG,
        || {
            series(&vm, "otlp_peer[.]hop[.]value")
                .first()
                .is_some_and(|(_, _, p)| p.len() == 6)
        },
    );
    let (_, labels, points) = series(&vm, "otlp_peer[.]hop[.]value").remove(0);
    assert_eq!(
        labels.get("service.name").map(String::as_str),
        Some("recorded")
    );
    let want: Vec<(i64, f64)> = (0..6u64)
        .map(|i| {
            (
                ((t0 + i * 15_000_000_000) / 1_000_000) as i64,
                i as f64 * 1.5,
            )
        })
        .collect();
    assert_eq!(points, want);
    let _ = std::fs::remove_file(&file);
}

#[test]
fn export_to_an_unreachable_endpoint_fails_and_counts_what_was_not_sent() {
    let file = tmp("unreachable.mcap");
    write_recording(&file, 1_767_225_600_000_000_000, 4);
    let url = format!("http://127.0.0.1:{}", free_port());
    let out = export_otlp(&file, &url, &["--timeout", "1500ms"]);
    assert!(!out.status.success(), "{}", out.stderr);
    out.assert_stderr_has("0 data points exported");
    out.assert_stderr_has("did not take the data within");
    out.assert_stderr_has("records were not sent");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn bad_urls_and_addresses_are_refused_before_anything_starts() {
    let bus = TestBus::up();
    for (args, needle) in [
        (
            vec!["--endpoint", "localhost:4318"],
            "scheme must be http://",
        ),
        (
            vec!["--endpoint", "https://collector:4318"],
            "https is not supported",
        ),
        (vec!["--metrics-endpoint", "http://h:70000/x"], "port"),
        (vec!["--metrics-listen", "nowhere"], "--metrics-listen"),
        (vec!["--schema", "[bad"], "glob"),
    ] {
        let mut all = vec!["attach", "otlp"];
        all.extend_from_slice(&args);
        let out = bus.run(&all);
        assert!(!out.status.success(), "{all:?} succeeded");
        assert!(out.stderr.contains(needle), "{all:?}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
    let consumers = bus.ls()["consumers"].as_array().map_or(0, Vec::len);
    assert_eq!(consumers, 0, "a refused exporter was started");
    // The environment's endpoint is checked too.
    let out = crate::util::run_cmd(
        bus.cmd(&["otlp"])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://x"),
    );
    assert!(!out.status.success());
    out.assert_stderr_has("ftp://x");
    // With no bus, the foreground verb says so.
    let out = run(&["otlp", "--bus", "no-such-bus-otlp"]);
    assert!(!out.status.success());
    out.assert_stderr_has("no bus");
}
