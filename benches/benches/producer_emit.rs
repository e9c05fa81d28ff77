//! The cost of `telemetry.snapshot(level, &event)` for a 64-byte event, in the experiment's
//! thread, beside a `tracing` event with no subscriber (tracing's cheapest path) in the same
//! run:
//!
//! - `emit/64B/bus, no reader`: a broker runs (in a thread of this process), nobody reads;
//! - `emit/64B/bus+reader`: a broker runs (in a thread of this process) and a subscriber
//!   thread reads every record from the lane (subscribed, so its doorbell is in the wake mask:
//!   each emit pays the `fence(SeqCst)` + bell check; the reader sleeps when idle, so a wake-up
//!   syscall happens only when it is asleep);
//! - `emit/64B/disabled`: the same handle at `DEBUG` under the default `info` filter;
//! - `tracing/event/no subscriber`: `tracing::info!` with the same fields and no subscriber;
//! - `tracing/event/disabled`: `tracing::debug!` under a subscriber that enables only `INFO`.
//!
//! Run: `cargo bench -p snapbus-benches --bench producer_emit`. Results: `BENCHMARKS.md`.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, Throughput};
use snapbus::{Config, Level};
use snapbus_bus::broker;
use snapbus_bus::lane::StartAt;
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::subscriber::{Event as BusEvent, SubscribeOptions, Subscriber};
use snapbus_schemas::Wire;

use snapbus_benches::Event;

/// A subscriber debug filter: enables INFO and above only.
struct InfoOnly;

impl tracing::Subscriber for InfoOnly {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        *m.level() <= tracing::Level::INFO
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::INFO)
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn main() {
    let root =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-{}", std::process::id()));
    let name = BusName::new("bench").unwrap();
    let dir = BusDir::locate_in(&root, &name);
    let broker = broker::InProcess::start(dir.clone(), Duration::from_secs(10)).unwrap();
    snapbus::init(Config {
        bus: Some("bench".into()),
        name: Some("producer_emit".into()),
        runtime_dir: Some(root.clone()),
        ..Config::default()
    });
    let telemetry = snapbus::get_telemetry("bench");
    assert!(snapbus::wait_for_bus(Duration::from_secs(10)), "no bus");

    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    {
        // Before any consumer subscribes: no doorbell to check (the wake mask is empty).
        let mut g = c.benchmark_group("emit/64B");
        g.throughput(Throughput::Elements(1));
        let ev = Event::sample(1);
        g.bench_function("bus, no reader", |b| {
            b.iter(|| telemetry.snapshot(Level::INFO, black_box(&ev)))
        });
        g.finish();
    }

    // The reader: a subscriber thread that reads every record (sleeping on its doorbell when
    // there is nothing to read).
    let stop = Arc::new(AtomicBool::new(false));
    let read = Arc::new(AtomicU64::new(0));
    let reader = {
        let (stop, read, dir) = (Arc::clone(&stop), Arc::clone(&read), dir.clone());
        std::thread::spawn(move || {
            let mut sub = Subscriber::connect(
                &dir,
                SubscribeOptions {
                    kind: "bench".into(),
                    globs: Vec::new(),
                    start: StartAt::Latest,
                    cut: false,
                    skip_lanes: Vec::new(),
                    count_history_as_lost: false,
                },
            )
            .unwrap();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(Some(BusEvent::Record(r))) = sub.next(Duration::from_millis(50)) {
                    black_box(r.payload);
                    read.fetch_add(1, Ordering::Relaxed);
                }
            }
            sub.stats()
        })
    };
    // Wait until the reader is subscribed (it then sees a record).
    let mut i = 0u64;
    while read.load(Ordering::Relaxed) == 0 {
        telemetry.snapshot(Level::INFO, &Event::sample(i));
        i += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(Event::sample(0).encoded_len(), 64);
    {
        let mut g = c.benchmark_group("emit/64B");
        g.throughput(Throughput::Elements(1));
        let ev = Event::sample(1);
        g.bench_function("bus+reader", |b| {
            b.iter(|| telemetry.snapshot(Level::INFO, black_box(&ev)))
        });
        g.bench_function("disabled", |b| {
            b.iter(|| telemetry.snapshot(Level::DEBUG, black_box(&ev)))
        });
        g.finish();
    }
    {
        // A span (`span()` guard, one `snapbus.duration` record with its trace, span and
        // parent ids at its end) nested in an open one, and one whose level is off.
        let mut g = c.benchmark_group("span");
        g.throughput(Throughput::Elements(1));
        let outer = telemetry.span(Level::INFO, "outer");
        g.bench_function("enabled, nested", |b| {
            b.iter(|| drop(telemetry.span(Level::INFO, black_box("step"))))
        });
        g.bench_function("disabled", |b| {
            b.iter(|| drop(telemetry.span(Level::DEBUG, black_box("step"))))
        });
        // What a span emitted before it had ids: a duration sample, timed the same way.
        g.bench_function("duration sample without ids", |b| {
            b.iter(|| {
                let t0 = std::time::Instant::now();
                let label = black_box("step").to_owned();
                telemetry.snapshot(
                    Level::INFO,
                    &snapbus::schemas::builtin::DurationSample {
                        label,
                        duration_nanos: t0.elapsed().as_nanos() as u64,
                        ..Default::default()
                    },
                )
            })
        });
        drop(outer);
        g.finish();
    }
    {
        let mut g = c.benchmark_group("tracing/event");
        g.throughput(Throughput::Elements(1));
        let ev = Event::sample(1);
        g.bench_function("no subscriber", |b| {
            b.iter(|| {
                let e = black_box(&ev);
                tracing::info!(
                    episode = e.episode,
                    step = e.step,
                    t = e.t,
                    reward = e.reward,
                    done = e.done,
                    action = e.action,
                    value = e.value,
                    "step"
                );
            })
        });
        tracing::subscriber::with_default(InfoOnly, || {
            g.bench_function("disabled", |b| {
                b.iter(|| {
                    let e = black_box(&ev);
                    tracing::debug!(
                        episode = e.episode,
                        step = e.step,
                        reward = e.reward,
                        "step"
                    );
                })
            });
        });
        g.finish();
    }
    c.final_summary();

    stop.store(true, Ordering::Relaxed);
    let stats = reader.join().unwrap();
    eprintln!(
        "reader: {} records delivered, {} lost to overwrites (the reader shares 2 cores with the emitter)",
        stats.delivered, stats.lost
    );
    snapbus::shutdown();
    broker.stop().unwrap();
    let _ = std::fs::remove_dir(&root);
}
