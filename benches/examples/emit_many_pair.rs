//! The smallest `emit_many` pair across processes, without the `compare` harness: a producer
//! (this process, CPU 0, with an in-process broker) calls `Publisher::emit_many` with
//! 1,024 records of 72 bytes (what `compare --size 64` sends: an 8-byte length, then the
//! message) for 2 s; a consumer process (this binary again, CPU 1) reads them in batches
//! with `Subscriber::drain_in_place` (`BatchReads::default()`), checking each record's
//! sequence words where they lie. It prints the producer's ns per record and what the
//! consumer read, so the bus alone can be told apart from the harness around it:
//!
//! ```sh
//! cargo run --release -p snapbus-benches --example emit_many_pair
//! ```
//!
//! A probe for investigations (see BENCHMARKS.md, issue #21), not a comparison: the peers'
//! figures come from `compare`, side by side in one run. `PAIR_SLEEP=1`: the consumer waits
//! up to 100 ms per call, sleeping, as `compare`'s throughput runs do (default: it spins).
//! `emit_many_pair _consumer ROOT KEY PRODUCER` alone, with `PAIR_BUS=NAME`, reads the records
//! of schema key `KEY` on bus `NAME` under `ROOT` until producer `PRODUCER`'s lane ends (this
//! binary's producer is `pair`); `PAIR_ROOT=DIR` makes the producer
//! use a running bus there (`snapbus up` with `SNAPBUS_RUNTIME_DIR=DIR`, `SNAPBUS_BUS=pair`)
//! instead of a broker of its own.

#![allow(missing_docs)]

use std::io::BufRead;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use snapbus_bus::lane::{LaneConfig, StartAt};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::subscriber::{BatchReads, InPlaceEvent, RecordRef, Subscriber};

const PAYLOAD_BYTES: usize = 72;
const SEND_SECS: f64 = 2.0;

fn pin(cpu: usize) -> Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).context("pin")
}

fn bus_dir(root: &std::path::Path) -> Result<BusDir> {
    Ok(BusDir::locate_in(
        root,
        &BusName::new(&std::env::var("PAIR_BUS").unwrap_or_else(|_| "pair".into()))
            .map_err(|e| anyhow!("{e}"))?,
    ))
}

/// The producer's name on the bus.
const PRODUCER: &str = "pair";

/// What `main` leaves behind, undone however it returns: the consumer process (killed and
/// reaped unless it was waited for) and the bus directory it made (not one of `PAIR_ROOT`).
/// Dropped after the broker and the publisher, which are declared after it.
#[derive(Default)]
struct Cleanup {
    child: Option<Child>,
    root: Option<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(root) = self.root.take() {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

/// The consumer process: says `ready` once subscribed, reads until the lane of `producer`
/// ends; prints what it read.
fn consumer(root: PathBuf, key: u16, producer: &str) -> Result<()> {
    pin(1)?;
    let mut sub = Subscriber::connect(
        &bus_dir(&root)?,
        snapbus_benches::every_schema("pair", StartAt::Oldest),
    )?;
    sub.read_in_batches(Some(BatchReads::default()));
    println!("ready");
    let (mut read, mut bad, mut next, mut ended) = (0u64, 0u64, 0u64, false);
    let deadline = Instant::now() + Duration::from_secs(60);
    // `PAIR_SLEEP=1`: wait as `compare`'s throughput runs do (up to 100 ms, sleeping).
    let timeout = match std::env::var_os("PAIR_SLEEP") {
        Some(_) => Duration::from_millis(100),
        None => Duration::ZERO,
    };
    while !ended && Instant::now() < deadline {
        let words = |r: &snapbus_bus::subscriber::InPlaceRecord<'_>| {
            (
                r.payload.word(1).unwrap_or(0),
                r.payload.word(8).unwrap_or(1),
            )
        };
        sub.drain_in_place(timeout, usize::MAX, words, |ev| {
            match ev {
                // The lane's own catalog records are not the pair's.
                InPlaceEvent::Record(RecordRef {
                    payload: (seq, trailer),
                    meta,
                    ..
                }) if meta.schema_key == key => {
                    read += 1;
                    if seq != trailer || seq < next {
                        bad += 1;
                    } else {
                        next = seq + 1;
                    }
                }
                InPlaceEvent::Other(
                    snapbus_bus::subscriber::Event::Ended(p)
                    | snapbus_bus::subscriber::Event::Died(p),
                ) if p.name == producer => ended = true,
                _ => {}
            }
            ControlFlow::Continue(())
        })?;
    }
    let lost = sub.stats().lost;
    println!("consumer: read {read}, lost {lost}, bad {bad}");
    if bad > 0 {
        bail!("{bad} records were not what was sent");
    }
    Ok(())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("_consumer") {
        let root = PathBuf::from(args.next().context("root")?);
        let key = args.next().context("key")?.parse()?;
        let producer = args.next().unwrap_or_else(|| PRODUCER.into());
        return consumer(root, key, &producer);
    }
    let external = std::env::var_os("PAIR_ROOT").map(PathBuf::from);
    let root = external.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("emit-many-pair-{}", std::process::id()))
    });
    let mut cleanup = Cleanup {
        child: None,
        root: external.is_none().then(|| root.clone()),
    };
    let dir = bus_dir(&root)?;
    let broker = match external {
        Some(_) => None,
        None => Some(snapbus_bus::broker::InProcess::start(
            dir.clone(),
            Duration::from_secs(10),
        )?),
    };
    let config = LaneConfig {
        capacity: 64 << 20,
        max_frame: 4 << 20,
        block_size: 64 << 10,
    };
    let (publisher, meta) =
        snapbus_benches::event_publisher(dir, PRODUCER, config).map_err(|e| anyhow!(e))?;
    let key = meta.schema_key;
    let child = cleanup.child.insert(
        Command::new(std::env::current_exe()?)
            .arg("_consumer")
            .arg(&root)
            .arg(key.to_string())
            .arg(PRODUCER)
            .stdout(Stdio::piped())
            .spawn()?,
    );
    // Sent once the consumer is subscribed (it reads from the lane's oldest record, so what
    // it would miss is only its start-up time, not records).
    let mut out = std::io::BufReader::new(child.stdout.take().context("consumer stdout")?);
    let mut line = String::new();
    out.read_line(&mut line)?;
    if line.trim() != "ready" {
        bail!("the consumer did not start: {line:?}");
    }
    pin(0)?;
    // As `compare` sends them: the message's length, then a byte pattern (no zero byte) under
    // the stamp words written below. Lines of zeros would reach memory faster than data.
    let message: Vec<u8> = (8..PAYLOAD_BYTES)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8 | 1)
        .collect();
    let mut first = ((PAYLOAD_BYTES - 8) as u64).to_le_bytes().to_vec();
    first.extend_from_slice(&message);
    let mut payloads = vec![first; 1024];
    let (mut sent, t0) = (0u64, Instant::now());
    while t0.elapsed().as_secs_f64() < SEND_SECS {
        for p in &mut payloads {
            p[8..16].copy_from_slice(&sent.to_le_bytes());
            p[64..72].copy_from_slice(&sent.to_le_bytes());
            sent += 1;
        }
        publisher.emit_many(meta, &payloads)?;
    }
    let ns = t0.elapsed().as_nanos() as f64 / sent as f64;
    publisher.close();
    let status = child.wait()?;
    cleanup.child = None;
    std::io::copy(&mut out, &mut std::io::stdout())?;
    println!(
        "producer: sent {sent}, {ns:.1} ns per record ({:.1} M/s)",
        1e3 / ns
    );
    drop(publisher);
    drop(broker);
    if !status.success() {
        bail!("the consumer failed: {status}");
    }
    Ok(())
}
