//! Records the recorder lost: they are in the file as loss records.

use super::*;
use snapbus_consumers::RunOptions;

use crate::common::lag;

/// A recorder that stalls on its first record until told to go on (so the producer laps it).
struct Stalling {
    inner: Recorder,
    gate: Option<std::sync::mpsc::Receiver<()>>,
    started: Option<std::sync::mpsc::Sender<()>>,
}

impl snapbus_consumers::Consumer for Stalling {
    fn on_event(
        &mut self,
        r: &snapbus_consumers::Record<'_>,
    ) -> Result<snapbus_consumers::Flow, snapbus_consumers::HookError> {
        if let Some(tx) = self.started.take() {
            let _ = tx.send(());
        }
        if let Some(gate) = self.gate.take() {
            let _ = gate.recv();
        }
        self.inner.on_event(r)
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

#[test]
fn records_lost_before_the_recorder_read_them_are_in_the_file_as_loss_records() {
    use snapbus_consumers::Consumer as _;
    let bus = Bus::start("rec6");
    let p = bus.publisher();
    let path = tmp("loss.mcap");
    let (go_tx, go_rx) = std::sync::mpsc::channel();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let mut rec = Stalling {
        inner: Recorder::create(RecorderOptions {
            path: path.clone(),
            rotate_bytes: None,
            writer: WriterOptions::new("recorder", "test"),
            start: StartAt::Latest,
        })
        .expect("create"),
        gate: Some(go_rx),
        started: Some(started_tx),
    };
    let dir = bus.dir().clone();
    let recorder = std::thread::spawn(move || {
        let mut opts = RunOptions::new("recorder");
        opts.subscribe.start = StartAt::Latest;
        opts.until_end = true;
        opts.handle_signals = false;
        let summary = run(&dir, &opts, &mut rec, None).expect("run");
        rec.flush().expect("flush");
        let (_, messages) = rec.inner.finish().expect("finish");
        (summary, messages)
    });
    // Emit until the recorder holds its first record, then lap it several times over (the
    // lane is 1 MiB; each record is about 80 bytes).
    let mut emitted = 0u64;
    loop {
        p.emit(Level::INFO, 0, &step(emitted)).expect("emit");
        emitted += 1;
        if started_rx.try_recv().is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    for _ in 0..60_000 {
        p.emit(Level::INFO, 0, &step(emitted)).expect("emit");
        emitted += 1;
    }
    go_tx.send(()).expect("go");
    p.close();
    let (summary, _) = recorder.join().expect("recorder thread");
    assert!(summary.lost > 0, "the recorder was lapped");
    let (items, err) = read_all(&std::fs::read(&path).expect("read"));
    assert!(err.is_none(), "{err:?}");
    let recorded = steps(&items).len() as u64;
    let lost_in_file: u64 = items
        .iter()
        .filter_map(|i| match i {
            Item::Loss { record, .. } => Some(record.lost),
            _ => None,
        })
        .sum();
    assert_eq!(lost_in_file, summary.lost, "every loss is in the file");
    // From the first record the recorder received on, every record is recorded or counted.
    let first = steps(&items)[0].i;
    assert_eq!(
        recorded + lost_in_file,
        emitted - first,
        "recorded + lost = emitted since the first recorded record"
    );
}

/// Review of #15: a recorder started from `latest` (or a time) that loses records of a producer
/// before its first record writes them as a loss record; only a recorder reading from the
/// oldest record counts them as where the producer's history starts. (Regression: they went
/// into a history count the file never showed for such a start.)
#[test]
fn losses_before_the_first_record_of_a_latest_recorder_are_loss_records() {
    use snapbus_consumers::Consumer as _;
    let who = producer("p", 0xd4);
    let schema = Arc::new(RecB::descriptor().clone());
    let path = tmp("latest-early-loss.mcap");
    let mut rec = Recorder::create(RecorderOptions {
        path: path.clone(),
        rotate_bytes: None,
        writer: WriterOptions::new("recorder", "test"),
        start: StartAt::Latest,
    })
    .expect("create");
    rec.on_lag(lag(1, &who, 5)).expect("on_lag");
    let payload = RecB { x: 0.0, i: 7 }.encode_to_vec().expect("encode");
    feed_record(&mut rec, 1, &who, &schema, &payload, 12);
    assert_eq!((rec.losses(), rec.history_losses()), (5, 0));
    rec.finish().expect("finish");
    let (items, err) = read_all(&std::fs::read(&path).expect("read"));
    assert!(err.is_none(), "{err:?}");
    let lost: u64 = items
        .iter()
        .filter_map(|i| match i {
            Item::Loss { record, .. } => Some(record.lost),
            _ => None,
        })
        .sum();
    assert_eq!(lost, 5, "the loss is in the file");
}
