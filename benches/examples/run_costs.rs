//! What one side of the 64-byte `emit_many` pair costs a record, one thread, no other process:
//! the writer's and the reader's halves of `compare`'s `snapbus-emit-many` row measured apart,
//! so a change to either can be told from the other and from the cache traffic between two
//! processes (which a cross-process run adds to both). Four modes, each five rounds of 1 s
//! (`drain`: sixty rounds of three quarters of the ring), printing ns per record:
//!
//! - `write`: `SharedLaneWriter::write_run` of 64 records at a time into a lane (no bus);
//! - `emit`: `Publisher::emit_many` of 1,024 records at a time (an in-process broker);
//! - `read`: `LaneReader::read_in_place` of a lane filled first, one word of each record read;
//! - `drain`: `Subscriber::drain_in_place` of records emitted just before, three words of each
//!   read (what `compare`'s consumer reads), the same process emitting and draining in turns;
//!   the first rounds pay for mapping the ring's pages, the later ones are the steady state.
//!
//! ```sh
//! cargo run --release -p snapbus-benches --example run_costs -- emit   # 64 MiB ring, 72 B
//! cargo run --release -p snapbus-benches --example run_costs -- drain 67108864 72
//! ```
//!
//! A probe for investigations (BENCHMARKS.md, issue #21), not a comparison: the peers' figures
//! come from `compare`, side by side in one run.

#![allow(missing_docs)]

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use snapbus_benches::TempDir;
use snapbus_bus::broker::InProcess;
use snapbus_bus::lane::{LaneConfig, RUN_RECORDS, RecordMeta, ShmLane, StartAt, layout};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::subscriber::{InPlaceEvent, RecordRef, Subscriber};

const META: RecordMeta = snapbus_benches::LANE_META;

/// Records per `emit_many` call, as `compare`'s 64 KiB batches of 64 B messages.
const EMIT_BATCH: usize = 1024;

fn usage() -> anyhow::Error {
    anyhow!(
        "usage: run_costs write|emit|read|drain [RING_BYTES (power of two, 1 MiB..1 GiB; default 67108864)] [PAYLOAD_BYTES (8..4096; default 72)]"
    )
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().ok_or_else(usage)?.as_str();
    let ring_bytes: usize = match args.get(1) {
        Some(s) => s.parse().map_err(|_| usage())?,
        None => 64 << 20,
    };
    let payload_bytes: usize = match args.get(2) {
        Some(s) => s.parse().map_err(|_| usage())?,
        None => 72,
    };
    if args.len() > 3
        || !ring_bytes.is_power_of_two()
        || !(1 << 20..=1 << 30).contains(&ring_bytes)
        || !(8..=4096).contains(&payload_bytes)
    {
        return Err(usage());
    }
    let config = LaneConfig {
        capacity: ring_bytes,
        max_frame: (ring_bytes / 4).min(4 << 20),
        block_size: 64 << 10,
    };
    // Every record different in its first byte, as a producer's stamped messages are.
    let messages: Vec<Vec<u8>> = (0..RUN_RECORDS)
        .map(|i| {
            let mut m = vec![0x5a; payload_bytes];
            m[0] = i as u8;
            m
        })
        .collect();
    let run: Vec<&[u8]> = messages.iter().map(|m| &m[..]).collect();
    // A frame's bytes in the ring: its header and payload, aligned (the lane's layout).
    let frame_bytes = usize::try_from(layout::align_frame(
        (layout::FRAME_HEADER_LEN + payload_bytes) as u64,
    ))?;
    match mode {
        "write" => write(&config, &run),
        "read" => read(&config, &run, frame_bytes),
        "emit" | "drain" => on_bus(mode, config, &run, frame_bytes),
        _ => Err(usage()),
    }
}

fn report(what: &str, round: usize, records: u64, elapsed: Duration) {
    let ns = elapsed.as_nanos() as f64 / records.max(1) as f64;
    println!(
        "{what} round {round}: {records} records, {ns:.2} ns per record ({:.1} M/s)",
        1e3 / ns
    );
}

fn write(config: &LaneConfig, run: &[&[u8]]) -> Result<()> {
    let lane = ShmLane::create("run-costs", config).context("create the lane")?;
    let writer = lane
        .lane()
        .shared_writer()
        .ok_or_else(|| anyhow!("the lane has a writer already"))?;
    for round in 0..5 {
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed() < Duration::from_secs(1) {
            for _ in 0..256 {
                n += writer.write_run(META, run).written as u64;
            }
        }
        report("write_run", round, n, t.elapsed());
    }
    Ok(())
}

fn read(config: &LaneConfig, run: &[&[u8]], frame_bytes: usize) -> Result<()> {
    let lane = ShmLane::create("run-costs", config).context("create the lane")?;
    let writer = lane
        .lane()
        .shared_writer()
        .ok_or_else(|| anyhow!("the lane has a writer already"))?;
    // Fill the ring short of one run, so nothing is lapped.
    let records = config.capacity / frame_bytes - RUN_RECORDS;
    let mut written = 0;
    while written < records {
        written += writer.write_run(META, run).written;
    }
    for round in 0..5 {
        let mut reader = lane.lane().reader(StartAt::Oldest);
        let mut n = 0u64;
        let mut sum = 0u64;
        let t = Instant::now();
        while let Ok((_, w)) = reader.read_in_place(|_, v| v.word(0).unwrap_or(0)) {
            n += 1;
            sum = sum.wrapping_add(w);
        }
        let elapsed = t.elapsed();
        std::hint::black_box(sum);
        if n != written as u64 {
            bail!("read {n} records of {written}");
        }
        report("read_in_place", round, n, elapsed);
    }
    Ok(())
}

fn on_bus(mode: &str, config: LaneConfig, run: &[&[u8]], frame_bytes: usize) -> Result<()> {
    let root = TempDir::new("run-costs")?;
    let name = BusName::new("costs").map_err(|e| anyhow!("{e}"))?;
    let dir = BusDir::locate_in(root.path(), &name);
    let broker = InProcess::start(dir.clone(), Duration::from_secs(10))?;
    let (publisher, meta) =
        snapbus_benches::event_publisher(dir.clone(), "costs", config).map_err(|e| anyhow!(e))?;
    let batch: Vec<&[u8]> = (0..EMIT_BATCH).map(|i| run[i % run.len()]).collect();
    if mode == "emit" {
        for round in 0..5 {
            let t = Instant::now();
            let mut n = 0u64;
            while t.elapsed() < Duration::from_secs(1) {
                for _ in 0..16 {
                    publisher.emit_many(meta, &batch)?;
                    n += EMIT_BATCH as u64;
                }
            }
            report("emit_many", round, n, t.elapsed());
        }
    } else {
        let mut sub = Subscriber::connect(
            &dir,
            snapbus_benches::every_schema("run-costs", StartAt::Oldest),
        )?;
        // Three quarters of the ring a round: the reader is never lapped.
        let per_round = (config.capacity / frame_bytes) * 3 / 4 / EMIT_BATCH * EMIT_BATCH;
        for round in 0..60 {
            for _ in 0..per_round / EMIT_BATCH {
                publisher.emit_many(meta, &batch)?;
            }
            let mut n = 0usize;
            let mut sum = 0u64;
            let mut first = None;
            let deadline = Instant::now() + Duration::from_secs(10);
            while n < per_round {
                if Instant::now() > deadline {
                    bail!("round {round}: drained {n} records of {per_round} in 10 s");
                }
                sub.drain_in_place(
                    Duration::from_millis(10),
                    usize::MAX,
                    #[inline(always)]
                    |r| {
                        let w = |i| r.payload.word(i).unwrap_or(0);
                        w(1) ^ w(2) ^ w(payload_words(r.payload.len()))
                    },
                    #[inline(always)]
                    |ev| {
                        if let InPlaceEvent::Record(RecordRef { payload: value, .. }) = ev {
                            first.get_or_insert_with(Instant::now);
                            n += 1;
                            sum = sum.wrapping_add(value);
                        }
                        ControlFlow::Continue(())
                    },
                )?;
            }
            std::hint::black_box(sum);
            let elapsed = first.map_or(Duration::ZERO, |t| t.elapsed());
            report("drain_in_place", round, n as u64, elapsed);
        }
    }
    drop(publisher);
    drop(broker);
    Ok(())
}

/// The index of a payload's last whole word.
fn payload_words(len: usize) -> usize {
    (len / 8).saturating_sub(1)
}
