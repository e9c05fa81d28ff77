//! What the recorder writes: every record with its schema, producer and metadata; rotation
//! into complete parts; history records that say where a producer's records start.

use super::*;
use snapbus_consumers::recorder::rotated_path;

#[test]
fn a_recording_holds_every_record_with_its_schema_producer_and_metadata() {
    let bus = Bus::start("rec1");
    let p = bus.publisher();
    let path = tmp("one.mcap");
    let files = record(&bus, &p, &path, 1000, None);
    assert_eq!(files, std::slice::from_ref(&path));
    let bytes = std::fs::read(&path).expect("read");
    let (items, err) = read_all(&bytes);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(steps(&items), (0..1000).map(step).collect::<Vec<_>>());
    let Some(Item::Metadata { name, fields }) = items.first() else {
        panic!(
            "the first item is the recording metadata: {:?}",
            items.first()
        );
    };
    assert_eq!(name, "snapbus.recording");
    assert_eq!(fields["format_version"], "1");
    assert_eq!(fields["source"], "recorder");
    let producer = items.iter().find_map(|i| match i {
        Item::Metadata { name, fields } if name == "snapbus.producer" => Some(fields),
        _ => None,
    });
    assert_eq!(producer.expect("producer metadata")["name"], "rt-test");
    let Some(Item::Message(m)) = items.iter().find(|i| matches!(i, Item::Message(_))) else {
        panic!("no message");
    };
    assert_eq!(m.channel.schema.id(), "rec.step");
    assert_eq!(*m.channel.schema, *Step::descriptor());
    assert_eq!(m.channel.emitter.as_deref(), Some("trainer"));
    assert_eq!(m.channel.level, Level::INFO);
    let mut reader = RecordingReader::new(&bytes[..]);
    reader.by_ref().for_each(drop);
    assert!(
        reader.complete(),
        "an intact file is read through its footer"
    );
}

#[test]
fn rotation_splits_the_stream_into_complete_files_in_order() {
    let bus = Bus::start("rec2");
    let p = bus.publisher();
    let path = tmp("rot.mcap");
    let files = record(&bus, &p, &path, 3000, Some(20_000));
    assert!(files.len() >= 3, "{files:?}");
    assert_eq!(files[1], rotated_path(&path, 1));
    let mut all = Vec::new();
    for (k, f) in files.iter().enumerate() {
        let (items, err) = read_all(&std::fs::read(f).expect("read"));
        assert!(err.is_none(), "{f:?}: {err:?}");
        // Each part says where the producer's history in it starts.
        let h = items
            .iter()
            .find_map(|i| match i {
                Item::Metadata { name, fields } if name == "snapbus.history" => Some(fields),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{f:?}: no history record"));
        let first = steps(&items)[0].i;
        assert_eq!(h["first_seq"], first.to_string(), "{f:?}");
        if k == 0 {
            assert_eq!((h["start"].as_str(), first), ("oldest", 0), "{f:?}");
            assert_eq!(h["overwritten"], "0", "{f:?}");
        } else {
            assert_eq!(h["start"], "continued", "{f:?}");
            assert_eq!(first, all.len() as u64, "{f:?} continues the previous part");
        }
        all.extend(steps(&items));
    }
    assert_eq!(all, (0..3000).map(step).collect::<Vec<_>>());
}

/// Issue #15 item 3: a recording of a ring that had wrapped says where the producer's history
/// starts and how many earlier records were overwritten (and does not count them twice as a
/// loss record).
#[test]
fn a_recording_of_a_wrapped_ring_says_where_the_history_starts_and_what_was_overwritten() {
    let bus = Bus::start("rec9");
    let p = bus.publisher();
    let n = 60_000u64;
    for i in 0..n {
        p.emit(Level::INFO, 0, &step(i)).expect("emit");
    }
    p.close();
    let path = tmp("wrapped.mcap");
    let (delivered, _, _) = record_to_end(&bus, &path, None);
    assert!(delivered < n, "the ring wrapped");
    let (items, err) = read_all(&std::fs::read(&path).expect("read"));
    assert!(err.is_none(), "{err:?}");
    let history: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            Item::Metadata { name, fields } if name == "snapbus.history" => Some(fields),
            _ => None,
        })
        .collect();
    assert_eq!(history.len(), 1, "one history record per producer");
    let h = history[0];
    let first = steps(&items)[0].i;
    assert!(first > 0);
    assert_eq!(h["start"], "oldest");
    assert_eq!(h["first_seq"], first.to_string());
    assert_eq!(h["earlier"], first.to_string());
    assert_eq!(h["overwritten"], first.to_string(), "all were overwritten");
    assert_eq!(h["lane_id"], format!("{:016x}", p.info().lane_id));
    assert!(h.contains_key("first_nanos"));
    assert_eq!(steps(&items).len() as u64, n - first, "the rest is there");
    assert!(
        !items.iter().any(|i| matches!(i, Item::Loss { .. })),
        "the history is not counted again as a loss record"
    );
}

/// Review of #15: with `--rotate-mb`, a producer's history record and the record it describes
/// go into the same part (regression: a history record that filled the part rotated before its
/// record, leaving a part with a history and no record, and the next part without one).
#[test]
fn a_rotated_part_holds_each_history_with_its_first_record() {
    let who = producer("p", 0xc3);
    let schema = Arc::new(RecB::descriptor().clone());
    let path = tmp("rotate-history.mcap");
    let mut rec = Recorder::create(RecorderOptions {
        path: path.clone(),
        // Every part is full once anything is in it (its header, a history record): each
        // record rotates, so a history record always fills its part.
        rotate_bytes: Some(1),
        writer: WriterOptions::new("recorder", "test"),
        start: StartAt::Latest,
    })
    .expect("create");
    for seq in 0..3u32 {
        let payload = RecB { x: 0.0, i: seq }.encode_to_vec().expect("encode");
        feed_record(&mut rec, 1, &who, &schema, &payload, u64::from(seq));
    }
    let (files, _) = rec.finish().expect("finish");
    assert!(files.len() >= 2, "rotated: {files:?}");
    let mut all = Vec::new();
    for (k, f) in files.iter().enumerate() {
        let (items, err) = read_all(&std::fs::read(f).expect("read"));
        assert!(err.is_none(), "{err:?}");
        let history: Vec<&std::collections::BTreeMap<String, String>> = items
            .iter()
            .filter_map(|i| match i {
                Item::Metadata { name, fields } if name == "snapbus.history" => Some(fields),
                _ => None,
            })
            .collect();
        let seqs: Vec<u64> = items
            .iter()
            .filter_map(|i| match i {
                Item::Message(m) => Some(u64::from(RecB::decode_exact(&m.data).expect("a B").i)),
                _ => None,
            })
            .collect();
        match seqs.first() {
            None => assert!(history.is_empty(), "part {k}: a history without records"),
            Some(first) => {
                assert_eq!(history.len(), 1, "part {k}: one history record");
                assert_eq!(
                    history[0].get("first_seq").map(String::as_str),
                    Some(first.to_string().as_str()),
                    "part {k}: {:?}",
                    history[0]
                );
            }
        }
        all.extend(seqs);
    }
    assert_eq!(all, [0, 1, 2], "every record, once");
}
