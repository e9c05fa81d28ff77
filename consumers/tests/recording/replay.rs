//! Replay: a recording published again on the bus, byte for byte and in order.

use std::sync::atomic::AtomicBool;

use super::*;
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::replay::{Pace, ReplaySummary, replay};

#[test]
fn replay_republishes_byte_identical_payloads_in_order() {
    let bus = Bus::start("rec5");
    let p = bus.publisher();
    let path = tmp("replay.mcap");
    record(&bus, &p, &path, 500, None);
    drop(p);
    let replayer = bus.publisher();
    let file = std::fs::File::open(&path).expect("open");
    let mut summary = ReplaySummary::default();
    replay(
        RecordingReader::new(file),
        &replayer,
        Pace::Max,
        &[Glob::new("rec.*").expect("glob")],
        &AtomicBool::new(false),
        &mut summary,
    )
    .expect("replay");
    assert_eq!(summary.emitted, 500);
    replayer.close();
    let out = tmp("replayed.mcap");
    record_to_end(&bus, &out, None);
    let (items, err) = read_all(&std::fs::read(&out).expect("read"));
    assert!(err.is_none());
    // The bus still holds the original producer's lane (closed, retained) and the replay's:
    // each carries the 500 payloads, byte for byte and in order.
    let mut by_producer: std::collections::BTreeMap<u64, Vec<Vec<u8>>> = Default::default();
    for i in &items {
        if let Item::Message(m) = i {
            by_producer
                .entry(m.channel.producer_id)
                .or_default()
                .push(m.data.clone());
        }
    }
    let want: Vec<Vec<u8>> = (0..500)
        .map(|i| step(i).encode_to_vec().expect("encode"))
        .collect();
    assert_eq!(by_producer.len(), 2, "original and replay");
    for (id, payloads) in by_producer {
        assert!(
            payloads == want,
            "producer {id}: {} payloads differ",
            payloads.len()
        );
    }
}
