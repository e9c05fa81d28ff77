//! The run loop against a real broker (a thread of this test) and a real publisher.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use snapbus_bus::Level;
use snapbus_bus::broker;
use snapbus_bus::lane::StartAt;
use snapbus_bus::publisher::Publisher;
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::schemas::{SchemaDescriptor, Snapshot, Wire};
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::Record;
use snapbus_consumers::fields::Plan;
use snapbus_consumers::{
    Consumer, Extract, Flow, HookError, Item, ProducerChange, Reader, RunOptions, StopReason, run,
};

use crate::common::small_publisher;

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "rt.tick", version = 1, crate = "snapbus_bus::schemas")]
struct Tick {
    i: u64,
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "rt.other", version = 1, crate = "snapbus_bus::schemas")]
struct Other {
    x: f32,
}

#[derive(Default)]
struct Recorder {
    ticks: Vec<u64>,
    schemas: Vec<String>,
    joined: u32,
    ended: u32,
    flushes: u32,
    stop_after: Option<usize>,
}

impl Consumer for Recorder {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        assert_eq!(
            r.schema.id(),
            "rt.tick",
            "a schema outside the glob was delivered"
        );
        self.ticks.push(Tick::decode_exact(r.payload)?.i);
        Ok(match self.stop_after {
            Some(n) if self.ticks.len() >= n => Flow::Stop,
            _ => Flow::Continue,
        })
    }
    fn on_schema(&mut self, schema: &Arc<SchemaDescriptor>) -> Result<Flow, HookError> {
        self.schemas.push(schema.id().to_owned());
        Ok(Flow::Continue)
    }
    fn on_producer(&mut self, change: ProducerChange<'_>) -> Result<Flow, HookError> {
        match change {
            ProducerChange::Joined(_) => self.joined += 1,
            ProducerChange::Ended(_) => self.ended += 1,
            ProducerChange::Died(_) => {}
        }
        Ok(Flow::Continue)
    }
    fn flush(&mut self) -> Result<(), HookError> {
        self.flushes += 1;
        Ok(())
    }
}

/// A broker in this process and its bus.
pub(crate) struct Bus(broker::InProcess);

impl Bus {
    pub(crate) fn start(name: &str) -> Bus {
        let root =
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cons-{}", std::process::id()));
        let dir = BusDir::locate_in(&root, &BusName::new(name).expect("name"));
        Bus(broker::InProcess::start(dir, Duration::from_secs(60)).expect("broker"))
    }

    pub(crate) fn dir(&self) -> &BusDir {
        self.0.dir()
    }

    pub(crate) fn publisher(&self) -> Publisher {
        let p = small_publisher(self.dir(), "rt-test");
        let t0 = std::time::Instant::now();
        while !p.is_connected() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "publisher never joined"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        p
    }
}

fn opts(start: StartAt) -> RunOptions {
    let mut o = RunOptions::new("rt-test");
    o.subscribe.globs = vec![Glob::new("rt.t*").expect("glob")];
    o.subscribe.start = start;
    o.until_end = true;
    o.handle_signals = false;
    o
}

/// Ticks `0..n`.
fn emit_ticks(p: &Publisher, n: u64) {
    for i in 0..n {
        p.emit(Level::INFO, 0, &Tick { i }).expect("emit");
    }
}

/// `n` ticks, each followed by a record of another schema, then the lane's end.
fn emit_ticks_and_others(p: &Publisher, n: u64) {
    for i in 0..n {
        p.emit(Level::INFO, 0, &Tick { i }).expect("emit");
        p.emit(Level::INFO, 0, &Other { x: i as f32 })
            .expect("emit");
    }
    p.close();
}

#[test]
fn run_delivers_every_subscribed_record_then_flushes_and_returns_at_the_end() {
    let bus = Bus::start("rt1");
    let p = bus.publisher();
    emit_ticks_and_others(&p, 500);
    let mut c = Recorder::default();
    let summary = run(bus.dir(), &opts(StartAt::Oldest), &mut c, None).expect("run");
    assert_eq!(summary.reason, StopReason::AllEnded);
    assert_eq!(summary.delivered, 500);
    assert_eq!(summary.lost, 0);
    assert_eq!(c.ticks, (0..500).collect::<Vec<_>>());
    assert_eq!(
        c.schemas,
        ["rt.tick"],
        "on_schema once, for subscribed schemas only"
    );
    assert_eq!((c.joined, c.ended), (1, 1));
    assert!(c.flushes >= 1, "flushed before returning");
    drop(p);
}

#[test]
fn a_hook_can_stop_the_run_and_the_callers_flag_too() {
    let bus = Bus::start("rt2");
    let p = bus.publisher();
    emit_ticks(&p, 100);
    let mut c = Recorder {
        stop_after: Some(10),
        ..Recorder::default()
    };
    let summary = run(bus.dir(), &opts(StartAt::Oldest), &mut c, None).expect("run");
    assert_eq!(summary.reason, StopReason::Consumer);
    assert_eq!(c.ticks, (0..10).collect::<Vec<_>>());
    // The producer is still live: only the caller's flag ends this run.
    let stop = AtomicBool::new(true);
    let mut c = Recorder::default();
    let summary = run(bus.dir(), &opts(StartAt::Latest), &mut c, Some(&stop)).expect("run");
    assert_eq!(summary.reason, StopReason::Stopped);
    assert!(c.flushes >= 1);
    drop(p);
}

#[test]
fn without_a_bus_run_fails_with_the_message_users_see() {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cons-nobus");
    let dir = BusDir::locate_in(&root, &BusName::new("nobody").expect("name"));
    let err =
        run(&dir, &opts(StartAt::Latest), &mut Recorder::default(), None).expect_err("no bus");
    assert!(
        err.to_string()
            .contains("no bus 'nobody' is running — start one with `snapbus up`"),
        "{err}"
    );
}

/// Tells the run to stop at its first record (through the caller's flag), and emits `more`
/// records at its second (the run has seen the stop by then: they come after it); optionally
/// slow (a consumer that takes `per_record` over each record).
struct StopsAtFirst<'a> {
    stop: &'a AtomicBool,
    publisher: &'a Publisher,
    more: u64,
    per_record: Duration,
    ticks: Vec<u64>,
    /// Producers reported ended.
    ended: u32,
}

impl Consumer for StopsAtFirst<'_> {
    fn on_producer(&mut self, change: ProducerChange<'_>) -> Result<Flow, HookError> {
        if let ProducerChange::Ended(_) = change {
            self.ended += 1;
        }
        Ok(Flow::Continue)
    }

    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        self.ticks.push(Tick::decode_exact(r.payload)?.i);
        if self.ticks.len() == 1 {
            self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if self.ticks.len() == 2 {
            // Emitted after the run saw the stop: not for this run.
            for i in 0..self.more {
                self.publisher
                    .emit(Level::INFO, 0, &Tick { i: 1_000_000 + i })?;
            }
        }
        std::thread::sleep(self.per_record);
        Ok(Flow::Continue)
    }
}

#[test]
fn a_stopped_run_first_reads_what_was_emitted_before_the_stop_and_nothing_after() {
    let bus = Bus::start("rt-drain");
    let p = bus.publisher();
    emit_ticks(&p, 2000);
    let stop = AtomicBool::new(false);
    let mut c = StopsAtFirst {
        stop: &stop,
        publisher: &p,
        more: 50,
        per_record: Duration::ZERO,
        ticks: Vec::new(),
        ended: 0,
    };
    let mut o = opts(StartAt::Oldest);
    o.until_end = false;
    // A drain longer than the test: it ends because everything before the stop was read.
    o.drain_on_stop = Duration::from_secs(3600);
    let summary = run(bus.dir(), &o, &mut c, Some(&stop)).expect("run");
    assert_eq!(summary.reason, StopReason::Stopped);
    assert_eq!(
        c.ticks.len(),
        2000,
        "records after the stop read: {:?}",
        &c.ticks[1990..]
    );
    assert!(c.ticks.iter().copied().eq(0..2000));
    assert_eq!((summary.delivered, summary.unread_bytes), (2000, 0));
    // Its producer goes on: the cut is not its end.
    assert_eq!(c.ended, 0, "a producer reported ended at the cut");

    // No drain: it stops at once, and says how much it left unread.
    let stop = AtomicBool::new(false);
    let mut c = StopsAtFirst {
        stop: &stop,
        publisher: &p,
        more: 0,
        per_record: Duration::ZERO,
        ticks: Vec::new(),
        ended: 0,
    };
    o.drain_on_stop = Duration::ZERO;
    let summary = run(bus.dir(), &o, &mut c, Some(&stop)).expect("run");
    assert_eq!(summary.reason, StopReason::Stopped);
    assert!(c.ticks.len() < 2050, "{} read", c.ticks.len());
    assert!(summary.unread_bytes > 0, "{summary:?}");
    drop(p);
}

#[test]
fn a_drain_that_runs_out_of_time_reports_what_it_left_unread() {
    let bus = Bus::start("rt-drain-slow");
    let p = bus.publisher();
    emit_ticks(&p, 1000);
    let stop = AtomicBool::new(false);
    // 2 ms a record: 1000 records take 2 s, the drain has 100 ms.
    let mut c = StopsAtFirst {
        stop: &stop,
        publisher: &p,
        more: 0,
        per_record: Duration::from_millis(2),
        ticks: Vec::new(),
        ended: 0,
    };
    let mut o = opts(StartAt::Oldest);
    o.until_end = false;
    o.drain_on_stop = Duration::from_millis(100);
    let summary = run(bus.dir(), &o, &mut c, Some(&stop)).expect("run");
    assert_eq!(summary.reason, StopReason::Stopped);
    let read = c.ticks.len() as u64;
    assert!(read < 1000, "{read} read");
    assert!(c.ticks.iter().copied().eq(0..read));
    // Every record not read is in the unread bytes (a frame is at least its 48-byte header
    // and the 8-byte payload, 64 bytes once aligned).
    assert!(
        summary.unread_bytes >= (1000 - read) * 64,
        "{summary:?} after {read} records"
    );
    drop(p);
}

/// A consumer that has the ticks' numbers extracted in place ([`Consumer::extract`]).
#[derive(Default)]
struct InPlaceTicks {
    /// Read in place (delivered), and read from a copy.
    in_place: Vec<u64>,
    copied: Vec<u64>,
}

impl Consumer for InPlaceTicks {
    fn extract(&mut self, schema: &Arc<SchemaDescriptor>) -> Option<Extract> {
        Some(Extract {
            min_bytes: 0,
            ..Extract::new(Arc::new(Plan::numeric(schema.root())))
        })
    }
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        match r.extracted {
            Some(x) => {
                assert!(r.payload.is_empty(), "the payload was read in place");
                assert_eq!(x.values.len(), 1, "one leaf: i");
                self.in_place.push(x.values[0] as u64);
            }
            None => self.copied.push(Tick::decode_exact(r.payload)?.i),
        }
        Ok(Flow::Continue)
    }
}

#[test]
fn a_consumer_that_reads_in_place_gets_the_first_record_of_a_schema_copied_and_the_rest_in_place() {
    let bus = Bus::start("rt-inplace");
    let p = bus.publisher();
    emit_ticks_and_others(&p, 500);
    let mut c = InPlaceTicks::default();
    let summary = run(bus.dir(), &opts(StartAt::Oldest), &mut c, None).expect("run");
    assert_eq!((summary.delivered, summary.lost), (500, 0));
    assert_eq!(summary.read_in_place, 499);
    // The first after `on_schema`, from a copy; every other one in place, in order.
    assert_eq!(c.copied, [0]);
    assert_eq!(c.in_place, (1..500).collect::<Vec<_>>());
    drop(p);
}

#[test]
fn records_below_the_extract_size_or_at_its_level_are_copied() {
    let bus = Bus::start("rt-inplace-level");
    let p = bus.publisher();
    for i in 0..100u64 {
        let level = if i % 2 == 0 { Level::INFO } else { Level::WARN };
        p.emit(level, 0, &Tick { i }).expect("emit");
    }
    p.close();
    struct BelowWarn(InPlaceTicks);
    impl Consumer for BelowWarn {
        fn extract(&mut self, schema: &Arc<SchemaDescriptor>) -> Option<Extract> {
            let x = self.0.extract(schema)?;
            Some(Extract {
                below_level: Some(Level::WARN),
                ..x
            })
        }
        fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
            self.0.on_event(r)
        }
    }
    let mut c = BelowWarn(InPlaceTicks::default());
    let summary = run(bus.dir(), &opts(StartAt::Oldest), &mut c, None).expect("run");
    assert_eq!((summary.delivered, summary.read_in_place), (100, 49));
    assert_eq!(c.0.in_place, (2..100).step_by(2).collect::<Vec<_>>());
    let copied: Vec<u64> = std::iter::once(0).chain((1..100).step_by(2)).collect();
    assert_eq!(c.0.copied, copied);
    // Records smaller than `min_bytes` are copied (a tick is 8 bytes).
    let mut c = InPlaceTicks::default();
    let mut reader = Reader::open(bus.dir(), &opts(StartAt::Oldest)).expect("open");
    loop {
        let schema = match reader.next().expect("next") {
            Some(Item::End(s)) => break assert_eq!((s.delivered, s.read_in_place), (100, 0)),
            Some(Item::NewSchema(r)) => {
                c.on_event(&r).expect("on_event");
                Arc::clone(r.schema)
            }
            Some(Item::Record(r)) => {
                c.on_event(&r).expect("on_event");
                continue;
            }
            _ => continue,
        };
        let x = c.extract(&schema).expect("extract");
        reader.set_extract(&schema, Some(Extract { min_bytes: 9, ..x }));
    }
    assert_eq!(c.copied, (0..100).collect::<Vec<_>>());
    drop(p);
}

#[test]
fn a_record_overwritten_while_it_is_read_in_place_is_never_delivered_but_counted_lost() {
    let bus = Bus::start("rt-inplace-lap");
    let p = bus.publisher();
    emit_ticks(&p, 100);
    // A tick's frame is at least 48 bytes: 30,000 of them lap the 1 MiB ring.
    let more = 30_000u64;
    let mut reader = Reader::open(bus.dir(), &opts(StartAt::Oldest)).expect("open");
    let (mut looked_at, mut delivered) = (Vec::new(), Vec::new());
    let t0 = std::time::Instant::now();
    let summary = loop {
        // A watchdog stops it if tick 10 is never read in place (then the lane is never
        // closed).
        if t0.elapsed() > Duration::from_secs(60) {
            reader.stop();
        }
        let item = reader
            .next_with(Duration::from_millis(100), |r| {
                let i = r.payload.word(0).expect("a tick is one word");
                looked_at.push(i);
                if i == 10 {
                    // Overwritten while it is being read: more than a ring's worth of
                    // records, the lane's last.
                    for j in 0..more {
                        p.emit(Level::INFO, 0, &Tick { i: 1_000_000 + j })
                            .expect("emit");
                    }
                    p.close();
                }
                i
            })
            .expect("next");
        match item {
            Some(Item::Record(r) | Item::NewSchema(r)) => delivered.push(r.payload),
            Some(Item::End(s)) => break s,
            _ => {}
        }
    };
    assert_eq!(
        summary.reason,
        StopReason::AllEnded,
        "the watchdog stopped the run"
    );
    let last = 1_000_000 + more - 1;
    assert!(looked_at.contains(&10), "tick 10 was read in place");
    assert!(
        !delivered.contains(&10),
        "tick 10 was overwritten while it was read, yet delivered"
    );
    assert!(delivered.windows(2).all(|w| w[0] < w[1]), "in order");
    assert_eq!(delivered.last(), Some(&last));
    // Exact books: every record emitted is delivered or counted lost.
    assert_eq!(summary.delivered, delivered.len() as u64);
    assert_eq!(summary.delivered + summary.lost, 100 + more, "{summary:?}");
    assert!(summary.lost > 0);
    drop(p);
}

#[cfg(feature = "prometheus")]
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "rt.big", version = 1, crate = "snapbus_bus::schemas")]
struct Big {
    step: u64,
    hist: Vec<f32>,
}

/// The Prometheus exporter reads records of `IN_PLACE_MIN_BYTES` and more in place: what it
/// serves is what the records held.
#[cfg(feature = "prometheus")]
#[test]
fn the_prometheus_exporter_serves_the_values_of_records_it_read_in_place() {
    use std::io::{Read, Write};

    use snapbus_consumers::fields::IN_PLACE_MIN_BYTES;
    use snapbus_consumers::prometheus::{Exporter, PrometheusOptions};

    let bus = Bus::start("rt-prom-inplace");
    let p = bus.publisher();
    let n = 50u64;
    let big = |i: u64| Big {
        step: i,
        hist: (0..512)
            .map(|k| ((k * 3 + i) % 101) as f32 - 50.0)
            .collect(),
    };
    assert!(big(0).encode_to_vec().expect("encode").len() >= IN_PLACE_MIN_BYTES);
    for i in 0..n {
        p.emit(Level::INFO, 0, &big(i)).expect("emit");
    }
    p.close();
    let mut e = Exporter::new(PrometheusOptions::default());
    let token = "0123456789abcdef0123456789abcdef";
    let server = e
        .serve("127.0.0.1:0".parse().expect("addr"), None, token.into())
        .expect("serve");
    let mut o = e.run_options();
    o.subscribe.start = StartAt::Oldest;
    o.until_end = true;
    o.handle_signals = false;
    let summary = run(bus.dir(), &o, &mut e, None).expect("run");
    assert_eq!((summary.delivered, summary.lost), (n, 0));
    // All but the first (copied, after `on_schema`).
    assert_eq!(summary.read_in_place, n - 1);
    // `run` flushed, so the last values are published.
    let mut s = std::net::TcpStream::connect(server.addr()).expect("connect");
    s.write_all(
        format!("GET /metrics HTTP/1.0\r\nAuthorization: Bearer {token}\r\n\r\n").as_bytes(),
    )
    .expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let value = |suffix: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| {
                !l.starts_with('#')
                    && l.split(['{', ' '])
                        .next()
                        .is_some_and(|m| m.ends_with(suffix))
            })
            .unwrap_or_else(|| panic!("no {suffix} in {text}"));
        line.rsplit(' ')
            .next()
            .expect("a value")
            .parse()
            .expect("a number")
    };
    let last = big(n - 1).hist;
    let mean = last.iter().map(|&v| f64::from(v)).sum::<f64>() / last.len() as f64;
    let min = last.iter().copied().fold(f32::INFINITY, f32::min);
    let max = last.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    assert_eq!(value("step"), (n - 1) as f64);
    assert_eq!(value("hist_mean"), mean);
    assert_eq!(value("hist_min"), f64::from(min));
    assert_eq!(value("hist_max"), f64::from(max));
    drop(p);
}

/// Pulls a reader's items until its end: the ticks delivered (in place or copied), the lost
/// counts it reported, and its summary. `at(reader, i)` runs after the `i`-th tick.
fn pull(
    reader: &mut Reader,
    mut at: impl FnMut(&Reader, usize),
) -> (Vec<u64>, Vec<u64>, snapbus_consumers::RunSummary) {
    let (mut ticks, mut lags) = (Vec::new(), Vec::new());
    loop {
        match reader.next().expect("next") {
            Some(Item::Record(r) | Item::NewSchema(r)) => {
                ticks.push(Tick::decode_exact(r.payload).expect("a tick").i);
                at(reader, ticks.len());
            }
            Some(Item::Lag(lag)) => lags.push(lag.lost),
            Some(Item::End(s)) => return (ticks, lags, s),
            _ => {}
        }
    }
}

#[test]
fn a_stopped_reader_hands_out_what_was_emitted_before_the_stop_then_its_end() {
    let bus = Bus::start("rt-reader-drain");
    let p = bus.publisher();
    emit_ticks(&p, 2000);
    let mut o = opts(StartAt::Oldest);
    o.until_end = false;
    o.drain_on_stop = Duration::from_secs(3600);
    let mut reader = Reader::open(bus.dir(), &o).expect("open");
    let (ticks, lags, summary) = pull(&mut reader, |reader, n| {
        if n == 1 {
            reader.stop();
        }
        if n == 2 {
            // Emitted after the reader saw the stop: not for this run.
            for i in 0..50 {
                p.emit(Level::INFO, 0, &Tick { i: 1_000_000 + i })
                    .expect("emit");
            }
        }
    });
    assert_eq!(summary.reason, StopReason::Stopped);
    assert!(ticks.iter().copied().eq(0..2000), "{} read", ticks.len());
    assert!(lags.is_empty());
    assert_eq!((summary.delivered, summary.unread_bytes), (2000, 0));
    // The end is repeated.
    assert!(matches!(reader.next(), Ok(Some(Item::End(s))) if s == summary));
    drop(p);
}

#[test]
fn a_reader_reports_records_overwritten_before_it_read_them_as_lag_with_exact_books() {
    let bus = Bus::start("rt-reader-lag");
    let p = bus.publisher();
    // A tick's frame is at least 48 bytes: 30,000 of them lap the 1 MiB ring.
    let n = 30_000u64;
    emit_ticks(&p, n);
    p.close();
    let mut o = opts(StartAt::Oldest);
    o.subscribe.count_history_as_lost = true;
    let mut reader = Reader::open(bus.dir(), &o).expect("open");
    let (ticks, lags, summary) = pull(&mut reader, |_, _| {});
    assert_eq!(summary.reason, StopReason::AllEnded);
    let lost: u64 = lags.iter().sum();
    assert!(lost > 0, "nothing lost");
    assert_eq!(summary.lost, lost);
    assert_eq!(summary.delivered, ticks.len() as u64);
    assert_eq!(summary.delivered + lost, n);
    // What is left of the ring, in order, up to the last.
    assert!(ticks.windows(2).all(|w| w[0] + 1 == w[1]));
    assert_eq!(ticks.last(), Some(&(n - 1)));
    drop(p);
}

#[test]
fn a_reader_in_batches_waits_for_a_batch_or_its_longest_wait() {
    let bus = Bus::start("rt-reader-batch");
    let p = bus.publisher();
    let mut o = opts(StartAt::Oldest);
    o.until_end = false;
    o.batch = Some(snapbus_consumers::BatchReads {
        min_bytes: 1 << 20,
        max_wait: Duration::from_millis(400),
    });
    let mut reader = Reader::open(bus.dir(), &o).expect("open");
    emit_ticks(&p, 10);
    let t0 = std::time::Instant::now();
    let mut ticks = Vec::new();
    while ticks.len() < 10 {
        assert!(t0.elapsed() < Duration::from_secs(30), "{ticks:?}");
        if let Some(Item::Record(r) | Item::NewSchema(r)) = reader.next().expect("next") {
            if ticks.is_empty() {
                // Far less than a batch: read once its first byte has waited long enough.
                assert!(
                    t0.elapsed() >= Duration::from_millis(300),
                    "{:?}",
                    t0.elapsed()
                );
            }
            ticks.push(Tick::decode_exact(r.payload).expect("a tick").i);
        }
    }
    assert_eq!(ticks, (0..10).collect::<Vec<_>>());
    reader.stop();
    let (_, _, summary) = pull(&mut reader, |_, _| {});
    assert_eq!(summary.reason, StopReason::Stopped);
    drop(p);
}
