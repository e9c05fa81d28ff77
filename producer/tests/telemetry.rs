//! The emit API against a real broker (run in a thread of the process) and a real subscriber.
//!
//! The producer's state is process-wide (one publisher, one set of counters), so each
//! scenario runs in a child process of its own: its test re-runs this test binary with
//! [`SCENARIO_ENV`] naming it. Every scenario starts the same way ([`Run::start`]: snapshots
//! made before a bus exists are counted, then a bus appears and the producer joins it) and ends
//! the same way ([`Run::finish`]: closing the lane ends the stream).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use snapbus::schemas::{
    EncodeError, Field, SchemaDescriptor, Snapshot, ToValue, TypeDesc, Value, Wire,
};
use snapbus::{Config, EmitError, FillError, Level, PublisherStats, Stats, Telemetry};
use snapbus_bus::broker;
use snapbus_bus::client::{BusClient, BusState, Census};
use snapbus_bus::lane::StartAt;
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::subscriber::{Event, Glob, SubscribeOptions, Subscriber};
use snapbus_schemas::builtin::{DurationSample, ResourceSample};

use crate::child::run_ignored_test;

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "test.event", version = 1, crate = "snapbus::schemas")]
struct TestEvent {
    thread: u32,
    i: u32,
    value: f64,
}

/// A hand-written `Wire` impl that promises 8 bytes and writes 4: its records fail to encode.
#[derive(Debug, Clone, PartialEq)]
struct Liar(u32);

impl Wire for Liar {
    const MIN_ENCODED_LEN: usize = 4;
    fn type_desc() -> snapbus::schemas::TypeDesc {
        u32::type_desc()
    }
    fn encoded_len(&self) -> usize {
        8
    }
    fn encode(&self, w: &mut snapbus::schemas::WireWriter<'_>) {
        self.0.encode(w);
    }
    fn decode(
        r: &mut snapbus::schemas::WireReader<'_>,
    ) -> Result<Self, snapbus::schemas::DecodeError> {
        u32::decode(r).map(Liar)
    }
}

impl ToValue for Liar {
    fn to_value(&self) -> snapbus::schemas::Value<'_> {
        self.0.to_value()
    }
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "test.liar", version = 1, crate = "snapbus::schemas")]
struct LiarEvent {
    x: Liar,
}

const WATCHDOG: Duration = Duration::from_secs(60);

/// Names the scenario a child process runs (see the module docs).
const SCENARIO_ENV: &str = "SNAPBUS_TELEMETRY_SCENARIO";

/// A scenario: what it does between [`Run::start`] and [`Run::finish`].
type Scenario = fn(&mut Run);

/// The scenarios, by the name [`in_child`] gives them.
const SCENARIOS: &[(&str, Scenario)] = &[
    ("joins", |_| {}),
    ("threads", threads),
    ("filters", filters),
    ("refusals", refusals),
    ("sampler", sampler),
    ("outage", outage),
    ("dynamic", dynamic),
    ("encoded", encoded),
];

#[test]
fn telemetry_is_off_without_a_bus_joins_one_later_and_ends_its_stream_on_shutdown() {
    in_child("joins");
}

#[test]
fn records_of_many_threads_arrive_in_order_and_ls_shows_the_run_metadata() {
    in_child("threads");
}

#[test]
fn filters_set_on_the_bus_reach_the_running_producer() {
    in_child("filters");
}

#[test]
fn oversize_and_unencodable_records_are_counted_not_written() {
    in_child("refusals");
}

#[test]
fn the_resource_sampler_emits_resource_samples() {
    in_child("sampler");
}

#[test]
fn the_lane_outlives_the_broker_and_a_new_broker_adopts_it_with_its_history() {
    in_child("outage");
}

#[test]
fn a_schema_known_only_at_run_time_takes_the_same_path() {
    in_child("dynamic");
}

#[test]
fn a_payload_the_caller_encodes_takes_the_same_path() {
    in_child("encoded");
}

/// Runs the scenario [`SCENARIO_ENV`] names, in this process (started by [`in_child`]).
#[test]
#[ignore = "run by the other tests of this module, each in a child process"]
fn scenario_in_this_process() {
    let name = std::env::var(SCENARIO_ENV).expect("a scenario name");
    let (_, scenario) = SCENARIOS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no scenario {name:?}"));
    let mut run = Run::start();
    scenario(&mut run);
    run.finish();
}

/// Runs the scenario `name` in a child process and checks that it ran and passed.
fn in_child(name: &str) {
    run_ignored_test(
        "telemetry::scenario_in_this_process",
        &[(SCENARIO_ENV, name)],
        2 * WATCHDOG,
    );
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < WATCHDOG, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The bus's state (`snapbus ls`, without a ring census).
fn ls(dir: &BusDir) -> BusState {
    BusClient::connect(dir)
        .expect("connect")
        .state_with(Census::Skip)
        .expect("ls")
}

/// Sets the bus's level filter (`snapbus filter`).
fn set_filter(dir: &BusDir, directives: &str) {
    BusClient::connect(dir)
        .expect("connect")
        .set_filter(directives)
        .expect("set the filter");
}

fn subscribe(dir: &BusDir, globs: &[&str]) -> Subscriber {
    Subscriber::connect(
        dir,
        SubscribeOptions {
            kind: "test".into(),
            globs: globs.iter().map(|g| Glob::new(g).expect("glob")).collect(),
            start: StartAt::Oldest,
            cut: false,
            skip_lanes: Vec::new(),
            count_history_as_lost: false,
        },
    )
    .expect("subscribe")
}

/// Reads events until `n` records arrived (or the watchdog), by schema id.
fn collect(sub: &mut Subscriber, n: usize) -> HashMap<String, Vec<Vec<u8>>> {
    let mut got: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
    let t0 = Instant::now();
    let mut count = 0;
    while count < n {
        assert!(
            t0.elapsed() < WATCHDOG,
            "only {count} of {n} records arrived"
        );
        if let Some(Event::Record(r)) = sub.next(Duration::from_millis(100)).expect("next") {
            got.entry(r.schema.id().to_owned())
                .or_default()
                .push(r.payload.to_vec());
            count += 1;
        }
    }
    got
}

/// A scenario's process: its bus, broker, telemetry handle and a subscriber of `test.*` and
/// `snapbus.*`.
struct Run {
    root: PathBuf,
    dir: BusDir,
    broker: Option<broker::InProcess>,
    t: Telemetry,
    sub: Subscriber,
    ev: TestEvent,
}

impl Run {
    /// Snapshots made before a bus exists are counted, not written; then a bus appears and
    /// the producer joins it by itself.
    fn start() -> Run {
        let root =
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("prod-{}", std::process::id()));
        let name = BusName::new("prodtest").expect("name");
        let dir = BusDir::locate_in(&root, &name);
        assert!(snapbus::init(Config {
            bus: Some(name.to_string()),
            name: Some("prodtest".into()),
            session_tag: Some("study-7".into()),
            perf_tag: Some("cpu".into()),
            lane_bytes: Some(1 << 20),
            runtime_dir: Some(root.clone()),
            // The bus appears later, started by the test.
            start_bus: Some(false),
            ..Config::default()
        }));
        let t = snapbus::telemetry!();
        assert_eq!(t.target(), "tests::telemetry");
        let ev = TestEvent {
            thread: 0,
            i: 0,
            value: 1.5,
        };

        // No bus: nothing is written, but every snapshot made is counted.
        assert!(!t.enabled(Level::INFO));
        assert!(matches!(
            t.try_snapshot(Level::INFO, &ev),
            Err(EmitError::NoLane(_))
        ));
        t.snapshot(Level::INFO, &ev);
        t.snapshot(Level::DEBUG, &ev); // filtered out by its level: not made, not counted
        assert!(!snapbus::is_connected());
        let s: Stats = snapbus::stats();
        assert!(!s.has_lane);
        assert_eq!((s.no_bus, s.not_written(), s.written()), (2, 2, 0));
        assert_eq!(s.lane, PublisherStats::default());

        // A bus appears; the producer joins it by itself.
        let broker =
            broker::InProcess::start(dir.clone(), Duration::from_secs(60)).expect("broker");
        assert!(snapbus::wait_for_bus(WATCHDOG), "the producer never joined");
        assert!(t.enabled(Level::INFO));
        assert!(!t.enabled(Level::DEBUG), "the default filter is info");
        let sub = subscribe(&dir, &["test.*", "snapbus.*"]);
        Run {
            root,
            dir,
            broker: Some(broker),
            t,
            sub,
            ev,
        }
    }

    /// Closing the lane: the subscriber sees the stream end; later snapshots are counted.
    fn finish(self) {
        let Run {
            root,
            dir,
            broker,
            t,
            mut sub,
            ev,
        } = self;
        snapbus::shutdown();
        t.snapshot(Level::INFO, &ev);
        assert_eq!(snapbus::stats().lane.closed, 1);
        let t0 = Instant::now();
        loop {
            assert!(t0.elapsed() < WATCHDOG, "the end never arrived");
            if let Some(Event::Ended(p)) = sub.next(Duration::from_millis(100)).expect("next") {
                assert_eq!(p.pid, std::process::id());
                break;
            }
        }
        broker.expect("a broker").stop().expect("broker");
        drop(sub);
        let _ = std::fs::remove_dir(&root);
        assert!(!dir.path().exists(), "the broker left its directory");
    }
}

/// Many threads emit at once; every record arrives, in order per thread; run metadata and
/// counters are in `ls`.
fn threads(run: &mut Run) {
    let Run { dir, t, sub, .. } = run;
    let threads = 4u32;
    let per_thread = 2000u32;
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let t = snapbus::get_telemetry("monty.models");
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    let ev = TestEvent {
                        thread,
                        i,
                        value: f64::from(i) * 0.5,
                    };
                    t.try_snapshot(Level::INFO, &ev)
                        .expect("emit")
                        .expect("enabled");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("emitter thread");
    }
    t.time_it(Level::INFO, "step", || {
        // A span whose level is off gets no id and leaves the context alone.
        let off = t.span(Level::TRACE, "off");
        assert_eq!(off.context(), None);
        drop(off);
        let inner = t.span(Level::INFO, "inner");
        assert_eq!(snapbus::trace::current_span(), inner.context());
        std::thread::sleep(Duration::from_millis(2))
    });
    assert_eq!(snapbus::trace::current_span(), None, "every span ended");
    let got = collect(sub, (threads * per_thread) as usize + 2);
    let events: Vec<TestEvent> = got["test.event"]
        .iter()
        .map(|b| TestEvent::decode_exact(b).expect("decode"))
        .collect();
    assert_eq!(events.len(), (threads * per_thread) as usize);
    for thread in 0..threads {
        let is: Vec<u32> = events
            .iter()
            .filter(|e| e.thread == thread)
            .map(|e| e.i)
            .collect();
        assert_eq!(is, (0..per_thread).collect::<Vec<_>>(), "thread {thread}");
    }
    // The inner span ends first, naming the outer one as its parent, in the outer's trace.
    let inner = DurationSample::decode_exact(&got["snapbus.duration"][0]).expect("duration");
    let d = DurationSample::decode_exact(&got["snapbus.duration"][1]).expect("duration");
    assert_eq!((inner.label.as_str(), d.label.as_str()), ("inner", "step"));
    assert!(d.duration_nanos >= 2_000_000, "{d:?}");
    assert!(
        d.span_id != 0 && d.trace_id != 0 && d.parent_id == 0,
        "a root: {d:?}"
    );
    assert_eq!(inner.parent_id, d.span_id, "{inner:?}");
    assert_eq!(inner.trace_id, d.trace_id, "{inner:?}");
    assert_ne!(inner.span_id, d.span_id);
    assert_eq!(sub.stats().lost, 0);

    // Run metadata and counters are in `ls`.
    let state = ls(dir);
    assert_eq!(state.producers.len(), 1);
    let p = &state.producers[0];
    assert_eq!(p.info.session_tag.as_deref(), Some("study-7"));
    assert_eq!(p.info.perf_tag.as_deref(), Some("cpu"));
    assert_eq!(p.info.pid, std::process::id());
    assert!(state.schemas.iter().any(|s| s.id == "test.event"));
}

/// `snapbus filter` (a SetFilter to the broker) reaches the running producer.
fn filters(run: &mut Run) {
    let Run { dir, t, ev, .. } = run;
    let frames = |s: &BusState| s.producers[0].frames;
    // The own filter (info) is in force; a binding deciding levels itself emits past it.
    assert!(!snapbus::bus_filter_in_force() && t.at(Level::DEBUG).is_none());
    let before = frames(&ls(dir));
    t.at_unfiltered(Level::DEBUG).snapshot(ev).expect("written");
    assert_eq!(frames(&ls(dir)), before + 1);
    set_filter(dir, "warn");
    wait_until("the filter reaches the producer", || {
        !t.enabled(Level::INFO)
    });
    assert!(snapbus::bus_filter_in_force());
    let before = frames(&ls(dir));
    t.snapshot(Level::INFO, ev);
    assert_eq!(frames(&ls(dir)), before, "a filtered snapshot was written");
    set_filter(dir, "warn,tests=debug");
    wait_until("the second filter arrives", || t.enabled(Level::DEBUG));
    t.snapshot(Level::DEBUG, ev);
    assert_eq!(frames(&ls(dir)), before + 1);
    BusClient::connect(dir)
        .expect("connect")
        .reset_filter()
        .expect("reset the filter");
    wait_until("the reset reaches the producer", || {
        !snapbus::bus_filter_in_force()
    });
    assert!(t.enabled(Level::INFO) && !t.enabled(Level::DEBUG));
}

/// A record too large for the lane (1 MiB lane: 256 KiB frames) is refused and counted; so is
/// one that does not encode (and `ls` shows both dropped).
fn refusals(run: &mut Run) {
    let Run { dir, t, .. } = run;
    let dropped_before = ls(dir).producers[0].dropped;
    let big = snapbus::schemas::builtin::DurationSample {
        label: "x".repeat(300 << 10),
        duration_nanos: 1,
        ..Default::default()
    };
    let err = t.try_snapshot(Level::WARN, &big).expect_err("oversize");
    // Said once (the error is transparent), not "record …: record …".
    assert_eq!(err.to_string().matches("exceeds").count(), 1, "{err}");
    assert_eq!(ls(dir).producers[0].dropped, dropped_before + 1);
    let s = snapbus::stats();
    assert!(s.has_lane && s.lane.connected);
    assert_eq!((s.lane.oversize, s.no_bus, s.not_written()), (1, 2, 3));
    let err = t
        .try_snapshot(Level::WARN, &LiarEvent { x: Liar(7) })
        .expect_err("does not encode");
    assert!(matches!(err, EmitError::Encode(_)), "{err}");
    assert_eq!(ls(dir).producers[0].dropped, dropped_before + 2);
    let s = snapbus::stats();
    assert_eq!((s.lane.encode_errors, s.not_written()), (1, 4));
}

/// The resource sampler emits `snapbus.resource` samples.
fn sampler(run: &mut Run) {
    set_filter(&run.dir, "info");
    let sampler = snapbus::sample_resources(Duration::from_millis(20)).expect("sampler");
    let got = loop {
        let g = collect(&mut run.sub, 1);
        if g.contains_key("snapbus.resource") {
            break g;
        }
    };
    drop(sampler);
    let r = ResourceSample::decode_exact(&got["snapbus.resource"][0]).expect("resource");
    assert!(r.rss_bytes > 1 << 20 && r.threads >= 2, "{r:?}");
}

/// The broker goes away: the lane does not depend on it. Every snapshot is still written (the
/// subscriber, which mapped the lane, keeps reading it), and a new broker re-adopts the lane
/// with its history.
fn outage(run: &mut Run) {
    let Run {
        dir,
        broker,
        t,
        sub,
        ..
    } = run;
    broker.take().expect("a broker").stop().expect("broker");
    wait_until("the producer notices the broker is gone", || {
        !snapbus::is_connected()
    });
    let written_before = snapbus::stats().written();
    let outage = 300u32;
    let mut first_seq = None;
    for i in 0..outage {
        let ev = TestEvent {
            thread: 99,
            i,
            value: 0.0,
        };
        assert!(t.enabled(Level::INFO), "enabled without a broker");
        let seq = t
            .try_snapshot(Level::INFO, &ev)
            .expect("emit")
            .expect("written");
        // Written one after another: consecutive sequence numbers.
        let first = *first_seq.get_or_insert(seq);
        assert_eq!(seq, first + u64::from(i));
    }
    *broker = Some(broker::InProcess::start(dir.clone(), Duration::from_secs(60)).expect("broker"));
    assert!(
        snapbus::wait_for_bus(WATCHDOG),
        "the producer never rejoined"
    );
    for i in outage..2 * outage {
        let ev = TestEvent {
            thread: 99,
            i,
            value: 0.0,
        };
        t.snapshot(Level::INFO, &ev);
    }
    let s = snapbus::stats();
    assert_eq!(s.written(), written_before + u64::from(2 * outage));
    assert_eq!((s.no_bus, s.not_written()), (2, 2), "nothing else dropped");
    let lost_before = sub.stats().lost;
    let mut is = Vec::new();
    while is.len() < 2 * outage as usize {
        let got = collect(sub, 1);
        if let Some(b) = got.get("test.event") {
            let e = TestEvent::decode_exact(&b[0]).expect("decode");
            if e.thread == 99 {
                is.push(e.i);
            }
        }
    }
    assert_eq!(is, (0..2 * outage).collect::<Vec<_>>(), "no gap");
    assert_eq!(sub.stats().lost, lost_before);
    // A late subscriber of the new broker gets the whole history, outage included.
    let mut late = subscribe(dir, &["test.event"]);
    let history = collect(&mut late, 2 * outage as usize);
    let outage_is: Vec<u32> = history["test.event"]
        .iter()
        .map(|b| TestEvent::decode_exact(b).expect("decode"))
        .filter(|e| e.thread == 99)
        .map(|e| e.i)
        .collect();
    assert_eq!(outage_is, (0..2 * outage).collect::<Vec<_>>());
}

/// The run-time schema of [`dynamic`] and [`encoded`].
fn dynamic_schema() -> SchemaDescriptor {
    SchemaDescriptor::new(
        "test.dynamic",
        1,
        TypeDesc::Struct {
            fields: vec![Field::new("x", TypeDesc::F64)],
        },
    )
    .expect("schema")
}

/// A schema known only at run time (`snapshot_value`) takes the same path: published to the
/// subscriber, filtered by level, and a value that does not match its schema is an encode
/// error, counted, with nothing written.
fn dynamic(run: &mut Run) {
    let Run { t, sub, .. } = run;
    let dynamic = dynamic_schema();
    let before = snapbus::stats();
    let value = Value::Struct(vec![("x".into(), Value::F64(2.5))]);
    let wrong = Value::Struct(vec![("x".into(), Value::U8(1))]);
    assert!(matches!(
        t.try_snapshot_value(Level::INFO, &dynamic, &wrong),
        Err(EmitError::Encode(_))
    ));
    assert_eq!(
        t.try_snapshot_value(Level::DEBUG, &dynamic, &value)
            .expect("filtered"),
        None
    );
    t.try_snapshot_value(Level::INFO, &dynamic, &value)
        .expect("emit")
        .expect("enabled");
    let got = collect(sub, 1);
    assert_eq!(got["test.dynamic"], [2.5f64.to_le_bytes().to_vec()]);
    let after = snapbus::stats();
    assert_eq!(after.written(), before.written() + 1);
    assert_eq!(after.lane.encode_errors, before.lane.encode_errors + 1);
    assert_eq!(after.not_written(), before.not_written() + 1);
}

/// A payload the caller encodes itself (`try_snapshot_encoded`, and `at` then
/// `snapshot_encoded`: the Python binding's path): the same schema, filter and counters;
/// written in place, exactly `len` bytes; a `fill` that fails, or writes fewer bytes than
/// promised, is an encode error with nothing delivered; one given up is counted nowhere.
fn encoded(run: &mut Run) {
    let Run { t, sub, .. } = run;
    let dynamic = dynamic_schema();
    let before = snapbus::stats();
    assert_eq!(
        t.try_snapshot_encoded(Level::DEBUG, &dynamic, 8, |_| unreachable!("filtered out"))
            .expect("filtered"),
        None
    );
    assert!(t.at(Level::DEBUG).is_none(), "filtered out");
    t.try_snapshot_encoded(Level::INFO, &dynamic, 8, |w| {
        assert_eq!(w.len(), 8, "exactly the length asked for");
        w.put(&4.5f64.to_le_bytes())?;
        Ok(())
    })
    .expect("emit")
    .expect("enabled");
    assert!(matches!(
        t.try_snapshot_encoded(Level::INFO, &dynamic, 8, |_| {
            Err(EncodeError::LengthMismatch {
                promised: 8,
                written: 0,
            }
            .into())
        }),
        Err(EmitError::Encode(_))
    ));
    assert!(matches!(
        t.try_snapshot_encoded(Level::INFO, &dynamic, 8, |w| Ok(w.put(&[1, 2, 3, 4])?)),
        Err(EmitError::Encode(EncodeError::LengthMismatch {
            promised: 8,
            written: 4
        }))
    ));
    assert!(matches!(
        t.try_snapshot_encoded(Level::INFO, &dynamic, 8, |_| Err(FillError::Abort)),
        Err(EmitError::Aborted)
    ));
    let at = t.at(Level::INFO).expect("info passes the filter");
    at.snapshot_encoded(&dynamic, 8, |w| Ok(w.put(&6.5f64.to_le_bytes())?))
        .expect("emit");
    let got = collect(sub, 2);
    assert_eq!(
        got["test.dynamic"],
        [4.5f64.to_le_bytes().to_vec(), 6.5f64.to_le_bytes().to_vec()]
    );
    let after = snapbus::stats();
    assert_eq!(after.written(), before.written() + 2);
    assert_eq!(after.lane.encode_errors, before.lane.encode_errors + 2);
    assert_eq!(after.not_written(), before.not_written() + 2);
}
