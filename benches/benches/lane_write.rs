//! One thread writing 64-byte records into a shared-memory lane (`ShmLane`, a sealed memfd
//! mapped read-write), and the parts that make up the cost of a write:
//!
//! - `lane_write/64B`: `LaneWriter::write_bytes` with a 64-byte payload and the explicit
//!   `claim` + `payload_mut` + `commit` path, on the default 64 MiB lane and on a 256 KiB lane
//!   (ring resident in L2), plus `write_bytes` with a doorbell subscribed (the producer's
//!   `fence(SeqCst)` + load per record; nobody asleep, so never a syscall);
//! - `lane_write/64B/run`: `LaneWriter::write_run` of 64 records of 64 bytes in one claim,
//!   and `SharedLaneWriter::write_run` (what `Publisher::emit_many` does: the claim lock,
//!   the lap guard, one in-flight slot per run), throughput per record;
//! - `lane_write/parts`: the pieces of a claim measured alone: `claim` + `commit` without
//!   touching the payload, the CLOCK_REALTIME read each claim makes (`now_realtime_nanos`), and
//!   a relaxed `fetch_add` vs a plain load + store on a private word (the `frames_committed`
//!   counter a commit bumps);
//! - `lane_read/64B`: write one 64-byte record and read it back in the same thread, with
//!   `poll()` (copy) and `read_in_place` (header + last byte), so the reader's cost is the
//!   difference with `write_bytes`.
//!
//! Every bench id but the run processes one record per iteration (throughput in elements:
//! records/s).
//! No reader runs in another process here; see `lane_crossprocess` for that.
//!
//! Run: `cargo bench -p snapbus-benches --bench lane_write`. Results: `BENCHMARKS.md`.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{BenchmarkGroup, Criterion, Throughput, measurement::WallTime};
use snapbus_bus::doorbell::DoorbellPage;
use snapbus_bus::lane::{
    LaneConfig, Poll, RUN_RECORDS, RecordMeta, ShmLane, StartAt, now_realtime_nanos,
};

const PAYLOAD: usize = 64;
const META: RecordMeta = snapbus_benches::LANE_META;

/// The default lane: 64 MiB data, 8 MiB frames, 64 KiB anchor blocks.
fn default_lane() -> ShmLane {
    ShmLane::create("bench-lane", &LaneConfig::default()).unwrap()
}

/// A 256 KiB lane: the whole ring stays in the core's L2 (512 KiB).
fn small_lane() -> ShmLane {
    let config = LaneConfig {
        capacity: 256 << 10,
        max_frame: 32 << 10,
        block_size: 16 << 10,
    };
    ShmLane::create("bench-lane-small", &config).unwrap()
}

/// A benchmark group with the settings every group here shares (per record, 1 s warm-up,
/// 2 s of measurement, 60 samples).
fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));
    group.sample_size(60);
    group
}

fn write(c: &mut Criterion) {
    let payload = [0x5au8; PAYLOAD];

    let mut g = group(c, "lane_write/64B");

    let lane = default_lane();
    let mut w = lane.lane().writer().unwrap();
    g.bench_function("write_bytes", |b| {
        b.iter(|| w.write_bytes(META, black_box(&payload)).unwrap())
    });
    g.bench_function("claim+payload_mut+commit", |b| {
        b.iter(|| {
            let mut claim = w.claim(PAYLOAD, META).unwrap();
            claim.payload_mut().copy_from_slice(black_box(&payload));
            let seq = claim.seq();
            claim.commit();
            seq
        })
    });

    g.finish();

    // A run of 64 records in one claim (`write_run`, what `emit_many` does): per record.
    let mut g = group(c, "lane_write/64B/run");
    g.throughput(Throughput::Elements(RUN_RECORDS as u64));
    let run = [payload; RUN_RECORDS];
    g.bench_function("write_run", |b| {
        b.iter(|| w.write_run(META, black_box(&run)).written)
    });
    // The same through the shared writer (every `Publisher`'s): its claim lock, lap guard and
    // in-flight slots, with no other thread.
    let shared_lane = default_lane();
    let sw = shared_lane.lane().shared_writer().unwrap();
    g.bench_function("shared_write_run", |b| {
        b.iter(|| sw.write_run(META, black_box(&run)).written)
    });
    g.finish();

    let mut g = group(c, "lane_write/64B");
    let small = small_lane();
    let mut small_w = small.lane().writer().unwrap();
    g.bench_function("write_bytes/ring256KiB", |b| {
        b.iter(|| small_w.write_bytes(META, black_box(&payload)).unwrap())
    });

    // One subscriber whose bell is never asleep: the fence and the load, no syscall.
    let page = Arc::new(DoorbellPage::create("bench-bells").unwrap());
    w.set_doorbells(Some((Arc::clone(&page), 1)));
    g.bench_function("write_bytes+doorbell", |b| {
        b.iter(|| w.write_bytes(META, black_box(&payload)).unwrap())
    });
    w.set_doorbells(None);
    g.finish();

    // ---- parts ------------------------------------------------------------------------------
    let mut g = group(c, "lane_write/parts");
    g.bench_function("claim+commit (payload untouched)", |b| {
        b.iter(|| {
            let claim = w.claim(PAYLOAD, META).unwrap();
            let seq = claim.seq();
            claim.commit();
            seq
        })
    });
    g.bench_function("now_realtime_nanos", |b| b.iter(now_realtime_nanos));
    let counter = AtomicU64::new(0);
    g.bench_function("fetch_add relaxed", |b| {
        b.iter(|| black_box(&counter).fetch_add(1, Ordering::Relaxed))
    });
    g.bench_function("load+store relaxed", |b| {
        b.iter(|| {
            let c = black_box(&counter);
            c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed)
        })
    });
    g.finish();

    // ---- same-thread write + read -----------------------------------------------------------
    let mut g = group(c, "lane_read/64B");
    let mut r = lane.lane().reader(StartAt::Latest);
    g.bench_function("write_bytes+poll", |b| {
        b.iter(|| {
            w.write_bytes(META, black_box(&payload)).unwrap();
            match r.poll() {
                Poll::Frame(f) => f.payload[PAYLOAD - 1],
                other => panic!("expected a frame, got {other:?}"),
            }
        })
    });
    let mut r = lane.lane().reader(StartAt::Latest);
    g.bench_function("write_bytes+read_in_place", |b| {
        b.iter(|| {
            w.write_bytes(META, black_box(&payload)).unwrap();
            match r.read_in_place(|m, v| v.byte(m.payload_len - 1)) {
                Ok((_, Some(last))) => last,
                other => panic!("expected a frame, got {other:?}"),
            }
        })
    });
    g.finish();
}

criterion::criterion_group!(benches, write);
criterion::criterion_main!(benches);
