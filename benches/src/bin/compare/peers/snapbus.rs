//! snapbus: the producer's `Publisher` writes into its lane in shared memory, a `Subscriber`
//! in the consumer process reads it; the broker (a thread of the harness, as `snapbus up`
//! would be) introduces them.

use std::ops::ControlFlow;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use snapbus_bus::Level;
use snapbus_bus::lane::{LaneConfig, StartAt};
use snapbus_bus::publisher::EmitMeta;
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::subscriber::{
    BatchReads, Event, InPlaceEvent, InPlaceRecord, RecordRef, RingPayload, SubscribeOptions,
    Subscriber,
};
use snapbus_schemas::{Bytes, Snapshot};

use crate::common::{
    Head, RunArgs, Tally, Wait, finish_consumer, run_producer, run_producer_batched, say, word_sum,
};

pub(crate) const HOW: &str = "`Publisher::emit_with` of a `bench.blob { data: bytes }` \
    payload (what `snapshot()` of that type writes: an 8-byte length, then the message; one \
    copy into the ring; from 16 KiB on with non-temporal stores, the lane being larger than the \
    last-level cache; otherwise the platform's `memcpy`, the payload starting on a 16-byte \
    boundary) into a 64 MiB lane; the consumer is a \
    `Subscriber` (the API every snapbus consumer uses), which validates each record and copies its payload out of the ring \
    (the harness checks that copy); spinning: `next(Duration::ZERO)` in a \
    loop; sleeping: `next(100 ms)`, which spins 64 times, then sleeps on the doorbell futex.";

pub(crate) const HOW_IN_PLACE: &str = "as **snapbus**, but the consumer reads each record where \
    it lies in the ring (`Subscriber::next_in_place`: the words it checks, or every word with \
    `--every-byte`, through atomic loads; the result is kept only if the frame was not \
    overwritten meanwhile), no copy.";

pub(crate) const HOW_SMALL_RING: &str = "as **snapbus, reading in place**, with an 8 MiB lane \
    and frames of up to 2 MiB, a quarter of it (`LaneConfig`; `SNAPBUS_LANE_BYTES=8388608` or \
    `snapbus.init(lane_bytes=8 << 20)` for a real producer): the ring stays in the last-level \
    cache (a 16 MiB one only partly, on this machine: the rotating memcpy references, under \
    \"The machine's limits\"), at the price of less history (7 records of 1 MiB).";

pub(crate) const HOW_BATCH: &str = "as **snapbus, reading in place**, with the subscriber \
    reading in batches (`Subscriber::read_in_batches`, `BatchReads::default()`: a lane is read \
    once it holds 64 KiB not yet read, or its oldest unread byte has waited 5 ms), the mode of \
    the recorder, the aggregator and the exporters, and handing over all a batch holds in one \
    call (`Subscriber::drain_in_place`); no latency row (it holds records back by design).";

pub(crate) const HOW_EMIT_MANY: &str = "as **snapbus, batch reads, in place**, with the \
    producer emitting 64 KiB of messages at a time, as the batched socket writes them (1,024 \
    of 64 B, 16 of 4 KiB, one of 1 MiB: `Publisher::emit_many`, which claims them in runs of \
    up to 64 records, each run with one pass through the claim lock, one clock read and one \
    tail intent; every record is still framed, stamped and committed on its own, so readers see \
    the same records); no latency row.";

/// Bytes of messages per `emit_many` call of the `snapbus-emit-many` peer, as the batched
/// socket's 64 KiB buffer: 1,024 messages of 64 B, 16 of 4 KiB, one of 1 MiB.
const EMIT_MANY_BYTES: usize = 64 << 10;

/// The lane of the `snapbus-small-ring` peer.
const SMALL_RING_BYTES: usize = 8 << 20;

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

/// A `compare` subscription to every schema of the bus of `dir`: lanes of earlier runs are not
/// read; a run's lane appears later and is read from its first record.
pub(crate) fn subscribe(dir: &BusDir) -> Result<Subscriber> {
    Subscriber::connect(
        dir,
        SubscribeOptions {
            kind: "compare".into(),
            globs: Vec::new(),
            start: StartAt::Latest,
            cut: false,
            skip_lanes: Vec::new(),
            count_history_as_lost: false,
        },
    )
    .context("subscribe")
}

pub(crate) fn consumer(args: &RunArgs) -> Result<()> {
    let name = run_name(args)?;
    let dir = bus_dir(root(args)?)?;
    let mut sub = subscribe(&dir)?;
    say(&format!("ready {name}"))?;
    let timeout = match args.wait {
        Wait::Spin => Duration::ZERO,
        Wait::Sleep => Duration::from_millis(100),
    };
    let mut tally = Tally::new(args);
    if args.peer == "snapbus-batch" || args.peer == "snapbus-emit-many" {
        sub.read_in_batches(Some(BatchReads::default()));
    }
    if args.peer == "snapbus-batch" || args.peer == "snapbus-emit-many" {
        return InPlace::new(&mut sub, &name, timeout, tally).consume_drained();
    }
    if args.peer != "snapbus" {
        return InPlace::new(&mut sub, &name, timeout, tally).consume();
    }
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
            None => give_up_after_silence(&mut idle_since)?,
        }
    }
    finish_consumer(tally)
}

/// The consumer of the in-place peers, whose loops read each message's words where they lie:
/// what they are given and what they keep between records.
struct InPlace<'a> {
    sub: &'a mut Subscriber,
    name: &'a str,
    timeout: Duration,
    tally: Tally,
    every_byte: bool,
    /// The broker's id of this run's producer, from its first record.
    ours: Option<u64>,
    /// Since when nothing arrived.
    idle_since: Option<Instant>,
    /// A buffer that stays in L1, made once (not per record).
    scratch: [u8; 4096],
}

impl<'a> InPlace<'a> {
    fn new(sub: &'a mut Subscriber, name: &'a str, timeout: Duration, tally: Tally) -> Self {
        InPlace {
            sub,
            name,
            timeout,
            every_byte: tally.every_byte(),
            tally,
            ours: None,
            idle_since: None,
            scratch: [0u8; 4096],
        }
    }

    /// The consumer loop of the in-place peers: `next_in_place`.
    fn consume(mut self) -> Result<()> {
        loop {
            let scratch = &mut self.scratch;
            let read = |r: &InPlaceRecord<'_>| {
                head_in_place(r.payload, self.every_byte.then_some(scratch))
            };
            match self.sub.next_in_place(self.timeout, read)? {
                Some(InPlaceEvent::Record(RecordRef {
                    producer_id,
                    producer,
                    payload: value,
                    ..
                })) if Some(producer_id) == self.ours || producer.name == self.name => {
                    self.ours = Some(producer_id);
                    self.idle_since = None;
                    if !self.tally.on_head(value) {
                        break;
                    }
                }
                Some(InPlaceEvent::Other(Event::Joined(p))) if p.name == self.name => {
                    say("joined")?
                }
                Some(InPlaceEvent::Other(Event::Ended(p) | Event::Died(p)))
                    if p.name == self.name =>
                {
                    bail!("the producer's lane ended before its end message")
                }
                Some(_) => {}
                None => give_up_after_silence(&mut self.idle_since)?,
            }
        }
        finish_consumer(self.tally)
    }

    /// The consumer loop of the batch peers: `drain_in_place`, every record there is handed
    /// over in one call.
    fn consume_drained(mut self) -> Result<()> {
        let mut done = false;
        let mut failed = None;
        while !done {
            // Both closures inlined into the drain's loop (`Subscriber::drain_in_place`,
            // "Speed"): out of line, the 72-byte `Head` came back through the stack and reading
            // it back stalled every record (64 B `emit_many` row: 25 M/s, 38 M/s inlined).
            let scratch = &mut self.scratch;
            let n = self.sub.drain_in_place(
                self.timeout,
                usize::MAX,
                #[inline(always)]
                |r: &InPlaceRecord<'_>| {
                    head_in_place(r.payload, self.every_byte.then_some(scratch))
                },
                #[inline(always)]
                |ev| match ev {
                    InPlaceEvent::Record(RecordRef {
                        producer_id,
                        producer,
                        payload: value,
                        ..
                    }) if Some(producer_id) == self.ours || producer.name == self.name => {
                        self.ours = Some(producer_id);
                        if self.tally.on_head(value) {
                            ControlFlow::Continue(())
                        } else {
                            done = true;
                            ControlFlow::Break(())
                        }
                    }
                    InPlaceEvent::Other(Event::Joined(p)) if p.name == self.name => {
                        match say("joined") {
                            Ok(()) => ControlFlow::Continue(()),
                            Err(e) => {
                                failed = Some(e);
                                ControlFlow::Break(())
                            }
                        }
                    }
                    InPlaceEvent::Other(Event::Ended(p) | Event::Died(p))
                        if p.name == self.name =>
                    {
                        failed = Some(anyhow!("the producer's lane ended before its end message"));
                        ControlFlow::Break(())
                    }
                    _ => ControlFlow::Continue(()),
                },
            )?;
            if let Some(e) = failed {
                return Err(e);
            }
            if n > 0 {
                self.idle_since = None;
            } else {
                give_up_after_silence(&mut self.idle_since)?;
            }
        }
        finish_consumer(self.tally)
    }
}

/// A read that found nothing: an error once nothing has come from the producer for 60 s
/// (`idle_since`: since when, reset by the caller when something comes).
fn give_up_after_silence(idle_since: &mut Option<Instant>) -> Result<()> {
    if idle_since.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(60) {
        bail!("nothing from the producer for 60 s");
    }
    Ok(())
}

/// The message's 8 bytes at byte `b` (any offset) of a `len`-byte message in a `bytes` payload
/// where it lies, from the one or two payload words they span.
#[inline(always)]
fn message_word_at(v: &RingPayload<'_>, len: usize, b: usize) -> Option<u64> {
    if b + 8 > len {
        return None;
    }
    let (i, shift) = ((b + 8) / 8, (b % 8) * 8);
    let lo = v.word(i)?;
    if shift == 0 {
        return Some(lo);
    }
    Some(lo >> shift | v.word(i + 1)? << (64 - shift))
}

/// The head of the message in a `bytes` payload where it lies: an 8-byte length, then the
/// message, so message byte `b` is payload byte `b + 8`. With a `scratch` buffer, every byte
/// too (`--every-byte`).
#[inline(always)]
fn head_in_place(v: &RingPayload<'_>, scratch: Option<&mut [u8; 4096]>) -> Head {
    let len = v.len().saturating_sub(8);
    let at = |b| message_word_at(v, len, b);
    // Every byte: the payload a piece at a time through a buffer that stays in L1 (the
    // ring's bytes read once, with the atomic loads the view makes), summed as the copying
    // consumers sum theirs. The payload's words are the message's, shifted by the length
    // word in front.
    let sum = scratch.map(|scratch| {
        let mut sum = 0u64;
        v.for_each_chunk(scratch, |piece| {
            sum = sum.wrapping_add(word_sum(piece));
        });
        sum.wrapping_sub(v.word(0).unwrap_or(0))
    });
    Head {
        len,
        seq: at(0),
        t_nanos: at(8),
        trailer: if len >= 24 { at(len - 8) } else { None },
        sum,
    }
}

pub(crate) fn producer(args: &RunArgs) -> Result<()> {
    let dir = bus_dir(root(args)?)?;
    let lane = LaneConfig {
        capacity: if args.peer == "snapbus-small-ring" {
            SMALL_RING_BYTES
        } else {
            64 << 20
        },
        // At most a quarter of the ring (the lane's rule): 2 MiB in the small one.
        max_frame: if args.peer == "snapbus-small-ring" {
            SMALL_RING_BYTES / 4
        } else {
            4 << 20
        },
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
    if args.peer == "snapbus-emit-many" {
        let batch = (EMIT_MANY_BYTES / args.size).max(1);
        let report = run_producer_batched(args, &prefix, batch, |payloads| {
            publisher.emit_many(meta, payloads)?;
            Ok(())
        })?;
        publisher.close();
        return say(&format!("done {}", serde_json::to_string(&report)?));
    }
    let report = run_producer(
        args,
        &prefix,
        |payload| {
            publisher.emit_with(meta, payload.len(), |w| Ok(w.put(payload)?))?;
            Ok(())
        },
        || Ok(()),
    )?;
    publisher.close();
    say(&format!("done {}", serde_json::to_string(&report)?))
}
