//! Records filed under their own producer and schema when a broker restarts or reuses a
//! producer id.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

use super::*;

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "rec.a", version = 1, crate = "snapbus_bus::schemas")]
struct RecA {
    i: u64,
    note: String,
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "rec.d", version = 1, crate = "snapbus_bus::schemas")]
struct RecD {
    flag: bool,
}

/// Polls `cond` every 5 ms until it holds; panics after 30 s.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn named_publisher(dir: &snapbus_bus::runtime::BusDir, name: &str) -> Publisher {
    let p = crate::common::small_publisher(dir, name);
    wait_for("the publisher to join", || p.is_connected());
    p
}

/// Per lane: records seen and the producer id of the last one.
type Seen = Arc<Mutex<HashMap<u64, (u64, u64)>>>;

/// A recorder that also notes, per lane, what it was handed.
struct Watching {
    inner: Recorder,
    seen: Seen,
}

impl snapbus_consumers::Consumer for Watching {
    fn on_event(
        &mut self,
        r: &snapbus_consumers::Record<'_>,
    ) -> Result<snapbus_consumers::Flow, snapbus_consumers::HookError> {
        let flow = self.inner.on_event(r)?;
        let mut seen = self.seen.lock().expect("lock");
        let e = seen.entry(r.producer.lane_id).or_default();
        e.0 += 1;
        e.1 = r.producer_id;
        Ok(flow)
    }
    fn on_lag(
        &mut self,
        lag: snapbus_consumers::Lag<'_>,
    ) -> Result<snapbus_consumers::Flow, snapbus_consumers::HookError> {
        self.inner.on_lag(lag)
    }
    fn flush(&mut self) -> Result<(), snapbus_consumers::HookError> {
        self.inner.flush()
    }
}

/// Sets the flag when dropped (a failed assertion stops the recorder thread too).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Issue #15 item 2, end to end: a recorder re-adopted by a restarted broker (an in-process one:
/// no state file) goes on filing every record under its own producer and schema, for the
/// producers that rejoin and for new ones (which the new broker numbers from its own counter).
/// The deterministic case of an id handed to another lane is
/// `a_broker_id_reused_by_another_lane_does_not_misfile_records`.
#[test]
fn a_recorder_re_adopted_by_a_restarted_broker_files_every_record_under_its_own_producer() {
    use snapbus_bus::broker::InProcess;
    let root =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("readopt-{}", std::process::id()));
    let dir = snapbus_bus::runtime::BusDir::locate_in(
        &root,
        &snapbus_bus::runtime::BusName::new("rec8").expect("name"),
    );
    let broker = InProcess::start(dir.clone(), std::time::Duration::from_secs(60)).expect("broker");
    let d1 = named_publisher(&dir, "D1");
    let d2 = named_publisher(&dir, "D2");
    for p in [&d1, &d2] {
        for _ in 0..10 {
            p.emit(Level::INFO, 0, &RecD { flag: true }).expect("emit");
        }
    }
    let path = tmp("readopt.mcap");
    let seen: Seen = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let _guard = StopOnDrop(Arc::clone(&stop));
    let mut rec = Watching {
        inner: Recorder::create(RecorderOptions {
            path: path.clone(),
            rotate_bytes: None,
            writer: WriterOptions::new("recorder", "test"),
            start: StartAt::Oldest,
        })
        .expect("create"),
        seen: Arc::clone(&seen),
    };
    let recorder = {
        let (dir, stop) = (dir.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut opts = rec.inner.run_options("recorder");
            opts.until_end = true;
            opts.handle_signals = false;
            let summary = run(&dir, &opts, &mut rec, Some(&stop)).expect("run");
            rec.inner.finish().expect("finish");
            summary
        })
    };
    let a = named_publisher(&dir, "A");
    let b = named_publisher(&dir, "B");
    let (lane_a, lane_b) = (a.info().lane_id, b.info().lane_id);
    let (lane_d1, lane_d2) = (d1.info().lane_id, d2.info().lane_id);
    let mut sent = (0u64, 0u32);
    let emit_ab = |sent: &mut (u64, u32)| {
        a.emit(
            Level::INFO,
            0,
            &RecA {
                i: sent.0,
                note: "a".repeat((sent.0 % 5) as usize),
            },
        )
        .expect("emit a");
        b.emit(
            Level::INFO,
            0,
            &RecB {
                x: sent.1 as f32,
                i: sent.1,
            },
        )
        .expect("emit b");
        sent.0 += 1;
        sent.1 += 1;
    };
    for _ in 0..100 {
        emit_ab(&mut sent);
    }
    let count = |lane: u64| seen.lock().expect("lock").get(&lane).map_or(0, |e| e.0);
    wait_for("the first records to be recorded", || {
        count(lane_d1) == 10 && count(lane_d2) == 10 && count(lane_a) == 100 && count(lane_b) == 100
    });
    drop((d1, d2));
    broker.stop().expect("broker stops");
    wait_for("the producers to lose the broker", || {
        !a.is_connected() && !b.is_connected()
    });
    let broker = InProcess::start(dir.clone(), std::time::Duration::from_secs(60)).expect("broker");
    wait_for("the producers to rejoin the new broker", || {
        a.is_connected() && b.is_connected()
    });
    let n1 = named_publisher(&dir, "N1");
    let n2 = named_publisher(&dir, "N2");
    let (lane_n1, lane_n2) = (n1.info().lane_id, n2.info().lane_id);
    for i in 0..10u32 {
        n1.emit(Level::INFO, 0, &RecB { x: 0.5, i })
            .expect("emit n1");
        n2.emit(
            Level::INFO,
            0,
            &RecA {
                i: u64::from(i),
                note: "n".into(),
            },
        )
        .expect("emit n2");
    }
    wait_for("the recorder to read the new producers", || {
        count(lane_n1) == 10 && count(lane_n2) == 10
    });
    for _ in 0..100 {
        emit_ab(&mut sent);
    }
    a.close();
    b.close();
    n1.close();
    n2.close();
    let summary = recorder.join().expect("recorder thread");
    drop(broker);
    assert_eq!(summary.lost, 0, "nothing was overwritten");
    let (items, err) = read_all(&std::fs::read(&path).expect("read"));
    assert!(err.is_none(), "{err:?}");
    let (mut got_a, mut got_b, mut got_d, mut got_n) = (Vec::new(), Vec::new(), 0, 0);
    for i in &items {
        let Item::Message(m) = i else { continue };
        let c = &m.channel;
        match (c.producer.as_str(), c.schema.id()) {
            ("A", "rec.a") => got_a.push(RecA::decode_exact(&m.data).expect("an A decodes").i),
            ("B", "rec.b") => got_b.push(RecB::decode_exact(&m.data).expect("a B decodes").i),
            ("D1" | "D2", "rec.d") => {
                RecD::decode_exact(&m.data).expect("a D decodes");
                got_d += 1;
            }
            ("N1", "rec.b") => {
                RecB::decode_exact(&m.data).expect("an N1 decodes");
                got_n += 1;
            }
            ("N2", "rec.a") => {
                RecA::decode_exact(&m.data).expect("an N2 decodes");
                got_n += 1;
            }
            (p, s) => panic!("a record of schema {s} filed under producer {p}"),
        }
        assert!(
            c.lane_id
                .is_some_and(|l| [lane_a, lane_b, lane_d1, lane_d2, lane_n1, lane_n2].contains(&l)),
            "the channel names the producer's lane: {:?}",
            c.lane_id
        );
    }
    assert_eq!(got_a, (0..sent.0).collect::<Vec<_>>(), "every A, in order");
    assert_eq!(got_b, (0..sent.1).collect::<Vec<_>>(), "every B, in order");
    assert_eq!(got_d, 20);
    assert_eq!(got_n, 20);
}

/// Issue #15 item 2: a broker's producer id is not an identity (a broker that restarts without
/// its state file numbers producers anew): two lanes seen under the same producer id, each with
/// its own schema under key 1, are filed under their own lanes. (Regression: channels were keyed
/// by the producer id, so the second lane's records were filed under the first one's channel
/// and schema, and decoded as garbage.)
#[test]
fn a_broker_id_reused_by_another_lane_does_not_misfile_records() {
    use snapbus_bus::ProducerInfo;
    let (old, new) = (producer("old", 0xa1), producer("new", 0xb2));
    let (schema_d, schema_b) = (
        Arc::new(RecD::descriptor().clone()),
        Arc::new(RecB::descriptor().clone()),
    );
    let path = tmp("reused-id.mcap");
    let mut rec = Recorder::create(RecorderOptions {
        path: path.clone(),
        rotate_bytes: None,
        writer: WriterOptions::new("recorder", "test"),
        start: StartAt::Latest,
    })
    .expect("create");
    let feed = |rec: &mut Recorder, who: &ProducerInfo, schema: &Arc<_>, payload: Vec<u8>, seq| {
        feed_record(rec, 1, who, schema, &payload, seq);
    };
    for seq in 0..3 {
        feed(
            &mut rec,
            &old,
            &schema_d,
            RecD { flag: true }.encode_to_vec().expect("encode"),
            seq,
        );
    }
    for seq in 0..3u32 {
        let b = RecB { x: 1.5, i: seq };
        feed(
            &mut rec,
            &new,
            &schema_b,
            b.encode_to_vec().expect("encode"),
            u64::from(seq),
        );
    }
    rec.finish().expect("finish");
    let (items, err) = read_all(&std::fs::read(&path).expect("read"));
    assert!(err.is_none(), "{err:?}");
    let mut filed = Vec::new();
    for i in &items {
        let Item::Message(m) = i else { continue };
        let c = &m.channel;
        match (c.producer.as_str(), c.schema.id()) {
            ("old", "rec.d") => assert!(RecD::decode_exact(&m.data).expect("a D").flag),
            ("new", "rec.b") => {
                filed.push(RecB::decode_exact(&m.data).expect("a B").i);
            }
            (p, s) => panic!("a record of schema {s} filed under producer {p}"),
        }
    }
    assert_eq!(filed, [0, 1, 2], "every record of the new lane, under it");
}
