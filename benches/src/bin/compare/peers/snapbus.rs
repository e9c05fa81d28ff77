//! snapbus: the producer's `Publisher` writes into its lane in shared memory, a `Subscriber`
//! in the consumer process reads it; the broker (a thread of the harness, as `snapbus up`
//! would be) introduces them.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use snapbus_bus::Level;
use snapbus_bus::lane::{LaneConfig, StartAt};
use snapbus_bus::publisher::EmitMeta;
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::subscriber::{Event, SubscribeOptions, Subscriber};
use snapbus_schemas::{Bytes, Snapshot};

use crate::common::{RunArgs, Tally, Wait, finish_consumer, run_producer, say};

pub(crate) const HOW: &str = "`Publisher::emit_raw` of a `bench.blob { data: bytes }` \
    payload (what `snapshot()` of that type writes: an 8-byte length, then the message; one \
    copy into the ring) into a 64 MiB lane; the consumer is a `Subscriber` (the API every \
    snapbus consumer uses), which validates each record and copies its payload out of the ring \
    (the harness checks that copy); spinning: `next(Duration::ZERO)` in a \
    loop; sleeping: `next(100 ms)`, which spins 64 times, then sleeps on the doorbell futex.";

/// The payload type: the message as one `bytes` field.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "bench.blob", version = 1)]
pub(crate) struct Blob {
    /// The message.
    pub(crate) data: Bytes,
}

/// The bus all runs share: `<scratch root>/bus`, name `compare`.
pub(crate) fn bus_dir(scratch_root: &Path) -> Result<BusDir> {
    let name = BusName::new("compare").map_err(|e| anyhow!("{e}"))?;
    Ok(BusDir::locate_in(&scratch_root.join("bus"), &name))
}

/// The run's producer name: the run's scratch directory name (unique per run).
fn run_name(args: &RunArgs) -> Result<String> {
    args.scratch
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("bad scratch directory"))
}

fn root(args: &RunArgs) -> Result<&Path> {
    args.scratch
        .parent()
        .ok_or_else(|| anyhow!("scratch has no parent"))
}

pub(crate) fn consumer(args: &RunArgs) -> Result<()> {
    let name = run_name(args)?;
    let dir = bus_dir(root(args)?)?;
    let mut sub = Subscriber::connect(
        &dir,
        SubscribeOptions {
            kind: "compare".into(),
            globs: Vec::new(),
            // Lanes of earlier runs are not read; this run's lane appears later and is read
            // from its first record.
            start: StartAt::Latest,
            cut: false,
            skip_lanes: Vec::new(),
            count_history_as_lost: false,
        },
    )
    .context("subscribe")?;
    say(&format!("ready {name}"))?;
    let timeout = match args.wait {
        Wait::Spin => Duration::ZERO,
        Wait::Sleep => Duration::from_millis(100),
    };
    let mut tally = Tally::new(args);
    // The broker's id of this run's producer, from its first record (compared per record:
    // cheaper than its name).
    let mut ours = None;
    // Since when nothing arrived (no clock read per record).
    let mut idle_since: Option<Instant> = None;
    loop {
        match sub.next(timeout)? {
            Some(Event::Joined(p)) if p.name == name => say("joined")?,
            Some(Event::Record(r)) if Some(r.producer_id) == ours || r.producer.name == name => {
                ours = Some(r.producer_id);
                idle_since = None;
                // A `bytes` value: an 8-byte length, then the bytes (the Subscriber's copy).
                let data = r.payload.get(8..).unwrap_or(&[]);
                if !tally.on_message(data) {
                    break;
                }
            }
            Some(Event::Ended(p) | Event::Died(p)) if p.name == name => {
                bail!("the producer's lane ended before its end message")
            }
            Some(_) => {}
            None => {
                if idle_since.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(60) {
                    bail!("nothing from the producer for 60 s");
                }
            }
        }
    }
    finish_consumer(tally)
}

pub(crate) fn producer(args: &RunArgs) -> Result<()> {
    let dir = bus_dir(root(args)?)?;
    let lane = LaneConfig {
        capacity: 64 << 20,
        max_frame: 4 << 20,
        block_size: 64 << 10,
    };
    let publisher = snapbus_benches::connected_publisher(dir, &args.rendezvous, lane)
        .map_err(|e| anyhow!(e))?;
    let key = publisher.register_schema(Blob::descriptor())?;
    let meta = EmitMeta {
        schema_key: key,
        schema_version: Blob::VERSION as u16,
        level: Level::INFO,
        emitter: 0,
    };
    let prefix = (args.size as u64).to_le_bytes();
    let report = run_producer(
        args,
        &prefix,
        |payload| {
            publisher.emit_raw(meta, payload)?;
            Ok(())
        },
        || Ok(()),
    )?;
    publisher.close();
    say(&format!("done {}", serde_json::to_string(&report)?))
}
