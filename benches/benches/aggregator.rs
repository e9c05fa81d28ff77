//! The aggregator (consumers crate): how many 64-byte step events per second one worker
//! summarizes, beside a consumer that only counts them, measured in one run.
//!
//! Records: [`N`] = 1,000,000 events `Event::sample(i)` (the 64-byte `Event` of
//! `benches/src`; `episode = i / 1000`, so 1,000 episode windows of 1,000 records each, one
//! producer, one schema, one group unless grouped). Every row builds a fresh consumer outside
//! the timed region, checks its counters outside it too, and reports elements (events/s).
//!
//! - `aggregator/core/64B`: the records fed straight to `Consumer::on_event`, no bus. The
//!   1,000,000 payloads are encoded once into one 64 MB buffer; per event the loop builds a
//!   `Record` (fixed `ProducerInfo`, lane id `0x5eed`; `RecordHeader` with `seq = t_nanos = i`)
//!   and calls `on_event`:
//!   - `count`: a consumer that counts records (and `black_box`es each): the cost floor of the
//!     loop;
//!   - `all_fields`: `Aggregator::new(AggregatorOptions::new(Window::Episode), Vec<…>)` (the
//!     in-memory `SummarySink`): every numeric field summarized — 13 leaves (`step`, `t`,
//!     `reward`, `position.0..2`, `done`, `truncated`, `env_id`, `action`, `log_prob`, `value`,
//!     `seed`; `episode` is the window field);
//!   - `field_reward`: the same with `fields = ["reward"]`: one leaf (the per-field cost is
//!     `(all_fields − field_reward) / 12`);
//!   - `group_by_env_id`: the same as `all_fields` with `group_by = ["env_id"]` (12 leaves, one
//!     group: `env_id` is 3 in every event);
//!   - `all_fields_varying`: `all_fields` over events whose every field varies from record to
//!     record (`Event::sample` keeps 9 of its 13 leaves constant, and a constant field costs
//!     the aggregator almost nothing: no sketch); the realistic worst case.
//!
//!   The aggregator rows assert `stats().summarized == N` and 999 windows emitted (the last
//!   episode stays open: no producer end is fed).
//! - `aggregator/lane/64B`: end to end in one worker through a real lane. Setup, once: an
//!   in-process broker (a thread of this process), a `Publisher` with a 128 MiB lane (holds all
//!   1,000,000 frames of 104 bytes), `publisher.emit(Level::INFO, 0, &Event::sample(i))` for every event,
//!   then `publisher.close()` (the publisher stays alive, so the closed lane stays on the bus).
//!   Per iteration, timed: `snapbus_consumers::run(&dir, &opts, &mut consumer, None)` with
//!   `start: Oldest, until_end: true, handle_signals: false`: subscribing, reading the whole
//!   lane, the lane's end (the aggregator then closes the last window and emits the
//!   experiment summary), the final flush:
//!   - `count`: a counting consumer (what subscribing and reading alone cost);
//!   - `count_in_place`: the same, reading every record in place (`Consumer::extract`,
//!     with a plan that takes no field: the run loop's in-place path);
//!   - `all_fields`: the aggregator as in `core/all_fields`; asserts `summarized == N`, 1,000
//!     windows and 1 experiment summary.
//!
//! Settings: flat sampling, 10 samples, warm-up 1 s, measurement 6 s per `core` row and 10 s
//! per `lane` row (one iteration is a whole pass over the 1,000,000 events); about 1.5 minutes
//! after the build. The aggregator prints one `summarizing …` line to stderr per fresh
//! aggregator, the in-process broker its joins and leaves. Issue target: ≥ 5 M events/s for
//! one worker.
//!
//! Run: `cargo bench -p snapbus-benches --bench aggregator`.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use snapbus_bus::Level;
use snapbus_bus::ProducerInfo;
use snapbus_bus::broker;
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::lane::StartAt;
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::Record;
use snapbus_consumers::aggregator::{Aggregator, AggregatorOptions, Window};
use snapbus_consumers::fields::Plan;
use snapbus_consumers::{Consumer, Extract, Flow, HookError, RunOptions, run};
use snapbus_schemas::{SchemaDescriptor, Snapshot, Wire};

use snapbus_benches::{Event, TempDir, connected_publisher};

/// Events per iteration.
const N: usize = 1_000_000;
/// Encoded size of an `Event`.
const EVENT_LEN: usize = 64;
/// Records per episode window (`Event::sample`).
const EPISODE_LEN: usize = 1000;

type Sink = Vec<(Arc<SchemaDescriptor>, Vec<u8>)>;

/// Counts records: the floor of the loop that feeds them.
#[derive(Default)]
struct Count(u64);

impl Consumer for Count {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        self.0 += 1;
        black_box(r);
        Ok(Flow::Continue)
    }
}

/// A counting consumer that reads every record in place (and takes nothing from it): what
/// the run loop's in-place path costs.
#[derive(Default)]
struct CountInPlace(u64);

impl Consumer for CountInPlace {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        self.0 += 1;
        black_box(r);
        Ok(Flow::Continue)
    }

    /// A plan that extracts no field: only the walk over each record, in place.
    fn extract(&mut self, schema: &Arc<SchemaDescriptor>) -> Option<Extract> {
        let none = [Glob::new("no.such.field").unwrap()];
        let plan = Plan::compile(schema.root(), &[], None, &none).unwrap();
        Some(Extract {
            min_bytes: 0,
            ..Extract::new(Arc::new(plan))
        })
    }
}

fn producer_info() -> ProducerInfo {
    ProducerInfo {
        pid: std::process::id(),
        name: "bench".into(),
        cmdline: vec!["aggregator".into()],
        session_tag: None,
        perf_tag: None,
        lane_id: 0x5eed,
        started_nanos: 1_700_000_000_000_000_000,
        relayed: false,
    }
}

fn meta(i: usize) -> snapbus_consumers::RecordHeader {
    snapbus_consumers::RecordHeader {
        seq: i as u64,
        t_nanos: i as u64,
        schema_key: 1,
        schema_version: 1,
        level: Level::INFO,
        emitter_id: 0,
        payload_len: EVENT_LEN,
    }
}

/// The `N` events, encoded back to back.
fn payloads() -> Vec<u8> {
    let mut bytes = Vec::with_capacity(N * EVENT_LEN);
    for i in 0..N as u64 {
        bytes.extend_from_slice(&Event::sample(i).encode_to_vec().unwrap());
    }
    assert_eq!(bytes.len(), N * EVENT_LEN, "64-byte events");
    bytes
}

/// The `N` events with every field varying from record to record (the worst case: every
/// field's quantiles need the sketch; `Event::sample` keeps most fields constant).
fn varying_payloads() -> Vec<u8> {
    let mut bytes = Vec::with_capacity(N * EVENT_LEN);
    for i in 0..N as u64 {
        let e = Event {
            episode: (i / 1000) as u32,
            step: (i % 1000) as u32,
            t: i,
            reward: ((i * 37) % 2000) as f64 * 0.001 - 1.0,
            position: [i as f32 * 0.01, (i % 97) as f32, -((i % 13) as f32) - 0.5],
            done: i % 1000 == 999,
            truncated: i % 5000 == 4999,
            env_id: (i % 8) as u16 + 1,
            action: ((i * 7) % 18) as u32 + 1,
            log_prob: -((i % 100) as f32) * 0.01 - 0.001,
            value: (i % 1000) as f64 * 0.002 + 0.001,
            seed: 42 + i,
        };
        bytes.extend_from_slice(&e.encode_to_vec().unwrap());
    }
    assert_eq!(bytes.len(), N * EVENT_LEN, "64-byte events");
    bytes
}

/// Feeds every payload to `c` as a record of one producer.
fn feed<C: Consumer>(c: &mut C, info: &ProducerInfo, schema: &Arc<SchemaDescriptor>, bytes: &[u8]) {
    let producer = snapbus_consumers::Producer::from(info);
    for (i, payload) in bytes.chunks_exact(EVENT_LEN).enumerate() {
        let r = Record {
            producer_id: 1,
            producer,
            schema,
            emitter: None,
            header: meta(i),
            payload,
            extracted: None,
        };
        if !matches!(c.on_event(&r), Ok(Flow::Continue)) {
            panic!("on_event failed at {i}");
        }
    }
}

/// The aggregator variants of the rows.
fn variants() -> [(&'static str, AggregatorOptions); 3] {
    let all = AggregatorOptions::new(Window::Episode);
    let mut reward = all.clone();
    reward.fields = vec![Glob::new("reward").unwrap()];
    let mut grouped = all.clone();
    grouped.group_by = vec!["env_id".into()];
    [
        ("all_fields", all),
        ("field_reward", reward),
        ("group_by_env_id", grouped),
    ]
}

fn core(c: &mut Criterion) {
    let bytes = payloads();
    let info = producer_info();
    let schema = Arc::new(Event::descriptor().clone());

    let mut g = c.benchmark_group("aggregator/core/64B");
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(6));
    g.sample_size(10);
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("count", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut count = Count::default();
                let t0 = Instant::now();
                feed(&mut count, &info, &schema, &bytes);
                total += t0.elapsed();
                assert_eq!(count.0, N as u64);
            }
            total
        })
    });
    let varying = varying_payloads();
    let rows = variants()
        .into_iter()
        .map(|(name, opts)| (name, opts, &bytes))
        .chain([(
            "all_fields_varying",
            AggregatorOptions::new(Window::Episode),
            &varying,
        )]);
    for (name, opts, bytes) in rows {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut agg = Aggregator::new(opts.clone(), Sink::new());
                    let t0 = Instant::now();
                    feed(&mut agg, &info, &schema, bytes);
                    total += t0.elapsed();
                    let s = agg.stats();
                    assert_eq!(s.summarized, N as u64, "{name}: {s:?}");
                    assert_eq!(s.windows, (N / EPISODE_LEN - 1) as u64, "{name}: {s:?}");
                    drop(black_box(agg));
                }
                total
            })
        });
    }
    g.finish();
}

fn lane(c: &mut Criterion, tmp: &TempDir) {
    let dir = BusDir::locate_in(&tmp.path().join("bus"), &BusName::new("bench").unwrap());
    let broker = broker::InProcess::start(dir.clone(), Duration::from_secs(600)).unwrap();
    let lane = LaneConfig {
        capacity: 128 << 20,
        max_frame: 1 << 20,
        block_size: 64 << 10,
    };
    let publisher = connected_publisher(dir.clone(), "steps", lane).unwrap();
    for i in 0..N as u64 {
        publisher.emit(Level::INFO, 0, &Event::sample(i)).unwrap();
    }
    publisher.close();

    let mut opts = RunOptions {
        until_end: true,
        handle_signals: false,
        ..RunOptions::new("aggregator")
    };
    opts.subscribe.start = StartAt::Oldest;
    let mut count_opts = opts.clone();
    count_opts.subscribe.kind = "count".into();
    let agg_opts = AggregatorOptions::new(Window::Episode);

    let mut g = c.benchmark_group("aggregator/lane/64B");
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(10));
    g.sample_size(10);
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("count", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut count = Count::default();
                let t0 = Instant::now();
                let summary = run(&dir, &count_opts, &mut count, None).unwrap();
                total += t0.elapsed();
                assert_eq!((summary.delivered, summary.lost), (N as u64, 0));
                assert_eq!(count.0, N as u64);
            }
            total
        })
    });
    g.bench_function("count_in_place", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut count = CountInPlace::default();
                let t0 = Instant::now();
                let summary = run(&dir, &count_opts, &mut count, None).unwrap();
                total += t0.elapsed();
                assert_eq!((summary.delivered, summary.lost), (N as u64, 0));
                // The first record of a schema is copied (it comes after `on_schema`).
                assert_eq!((count.0, summary.read_in_place), (N as u64, N as u64 - 1));
            }
            total
        })
    });
    g.bench_function("all_fields", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut agg = Aggregator::new(agg_opts.clone(), Sink::new());
                let t0 = Instant::now();
                let summary = run(&dir, &opts, &mut agg, None).unwrap();
                total += t0.elapsed();
                assert_eq!((summary.delivered, summary.lost), (N as u64, 0));
                let s = agg.stats();
                assert_eq!(s.summarized, N as u64, "{s:?}");
                assert_eq!(
                    (s.windows, s.experiments),
                    ((N / EPISODE_LEN) as u64, 1),
                    "{s:?}"
                );
                drop(black_box(agg));
            }
            total
        })
    });
    g.finish();

    drop(publisher);
    broker.stop().unwrap();
}

fn main() {
    let tmp = TempDir::new("bench-aggregator").unwrap();
    let mut c = Criterion::default().configure_from_args();
    core(&mut c);
    lane(&mut c, &tmp);
    c.final_summary();
}
