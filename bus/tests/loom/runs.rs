//! (e) Runs: several records in one claim (`write_run`).

use std::sync::Arc;
use std::sync::atomic::Ordering as StdOrdering;

use loom::thread;
use snapbus_bus::lane::{Frame, Lane, LaneConfig, StartAt};
use snapbus_bus::mem::LaneMem;

use super::{
    HEADER, SALT, SHARED_LEN, Seen, check, payload, shared_meta, validate_shared, write_shared,
};

/// The lane of the run models: twice the others', so a run may span two 64-byte frames
/// (a run spans at most `max_frame`, here 128 B).
const RUN_CONFIG: LaneConfig = LaneConfig {
    capacity: 1024,
    max_frame: 128,
    block_size: 128,
};

/// (e, CI) 14 records are written first (tail 896); then a thread writes a run of 3 records
/// (sequence numbers 14–16) through the shared writer: the run's span limit cuts it into a
/// run of 2 ([896, 1024)) and a run of 1 at the ring's start, which overwrites record 0, while
/// the reader, positioned at record 0, polls 3 times. Every record must arrive intact or be
/// counted lost, and the lane must drain.
#[test]
fn run_wraps_under_reader() {
    check("run_wraps_under_reader", 2, || {
        let lane = Lane::heap(&RUN_CONFIG, SALT).expect("lane");
        let writer = Arc::new(lane.shared_writer().expect("writer"));
        let mut reader = lane.reader(StartAt::Oldest);
        for i in 0..14 {
            assert_eq!(write_shared(&writer, 0, i), Some(u64::from(i)));
        }
        let w = Arc::clone(&writer);
        let t = thread::spawn(move || {
            let payloads: Vec<Vec<u8>> = (14..17).map(|s| payload(s, 1, SHARED_LEN)).collect();
            let first = w.write_run(shared_meta(1, 0), &payloads);
            assert_eq!(
                (first.first_seq, first.written, first.refused),
                (14, 2, None)
            );
            let second = w.write_run(shared_meta(1, 0), &payloads[2..]);
            assert_eq!(
                (second.first_seq, second.written, second.refused),
                (16, 1, None)
            );
        });
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 3, &[], validate_shared);
        t.join().expect("run thread");
        writer.close();
        seen.drain(&mut reader, &[], validate_shared);
        seen.finish(&reader, 17, &[]);
        assert_eq!(lane.stats().frames_committed, 17);
    });
}

/// Any record of the pad model: its payload is its sequence number's, of the length it says
/// (none or 16 bytes), from the writer it names.
fn validate_any_len(f: &Frame<'_>) {
    let seq = f.meta.seq;
    let len = f.meta.payload_len;
    assert!(len == 0 || len == SHARED_LEN, "seq {seq}: length {len}");
    assert_eq!(
        f.payload,
        &payload(seq, f.meta.emitter, len)[..],
        "seq {seq}: torn payload"
    );
}

/// The lane of the pad model: a run's span (at most `max_frame`, 256 B here) holds two frames
/// and an explicit PAD frame (at least a header, 48 B) between them.
const PAD_CONFIG: LaneConfig = LaneConfig {
    capacity: 2048,
    max_frame: 256,
    block_size: 256,
};

/// (e, CI) A run meets the ring's end between its records: 3 empty records (48-byte
/// frames) and 28 of 16 bytes (64-byte frames) are written first (tail 1936); then a thread
/// writes a run of 2: [1936, 2000), a PAD frame to the end (48 bytes), and [2048, 2112), which
/// overwrites record 0 and the start of record 1, while the reader, at record 0, polls 3
/// times.
#[test]
fn run_pads_between_its_records_under_reader() {
    check("run_pads_between_its_records_under_reader", 2, || {
        let lane = Lane::heap(&PAD_CONFIG, SALT).expect("lane");
        let writer = Arc::new(lane.shared_writer().expect("writer"));
        let mut reader = lane.reader(StartAt::Oldest);
        for seq in 0..31u64 {
            let len = if seq < 3 { 0 } else { SHARED_LEN };
            let mut c = writer.claim(len, shared_meta(0, 0)).expect("claim");
            assert_eq!(c.seq(), seq);
            c.write_payload(&payload(seq, 0, len));
            c.commit();
        }
        assert_eq!(lane.stats().claim_tail, 1936);
        let w = Arc::clone(&writer);
        let t = thread::spawn(move || {
            let payloads: Vec<Vec<u8>> = (31..33).map(|s| payload(s, 1, SHARED_LEN)).collect();
            let run = w.write_run(shared_meta(1, 0), &payloads);
            assert_eq!((run.first_seq, run.written, run.refused), (31, 2, None));
        });
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 3, &[], validate_any_len);
        t.join().expect("run thread");
        assert_eq!(
            lane.stats().claim_tail,
            2112,
            "a PAD between the run's records"
        );
        writer.close();
        seen.drain(&mut reader, &[], validate_any_len);
        seen.finish(&reader, 33, &[]);
    });
}

/// Payload of the `k`-th record of a run written by `thread` in [`full_run_beside_claims`]
/// (its sequence number is not known before the run is claimed).
fn run_payload(thread: u16, k: u64) -> Vec<u8> {
    payload(100 + k, thread, SHARED_LEN)
}

/// A run record (emitter 1) is one of the run's payloads, in order; any other record is a
/// single claim's (`validate_shared`).
fn validate_run_or_shared(f: &Frame<'_>) {
    if f.meta.emitter != 1 {
        return validate_shared(f);
    }
    let seq = f.meta.seq;
    assert_eq!(f.meta.pos, 64 * seq, "seq {seq} at a wrong position");
    assert_eq!(f.meta.payload_len, SHARED_LEN, "seq {seq}: length");
    assert!(
        (0..2).any(|k| f.payload == &run_payload(1, k)[..]),
        "seq {seq}: torn or stale run payload"
    );
}

/// (e, full) From an empty lane, one thread writes a run of 2 records while another claims and
/// commits 2 single records, through one shared writer, and the reader polls 3 times: the
/// run's records are claimed back to back (nothing between them), every record arrives intact,
/// and the lane drains.
#[test]
fn full_run_beside_claims() {
    check("full_run_beside_claims", 2, || {
        let lane = Lane::heap(&RUN_CONFIG, SALT).expect("lane");
        let writer = Arc::new(lane.shared_writer().expect("writer"));
        let mut reader = lane.reader(StartAt::Oldest);
        let w = Arc::clone(&writer);
        let runner = thread::spawn(move || {
            let payloads: Vec<Vec<u8>> = (0..2).map(|k| run_payload(1, k)).collect();
            let run = w.write_run(shared_meta(1, 0), &payloads);
            assert_eq!((run.written, run.refused), (2, None));
            run.first_seq
        });
        let w = Arc::clone(&writer);
        let single = thread::spawn(move || {
            (0..2)
                .map(|i| write_shared(&w, 2, i).expect("no lap"))
                .collect::<Vec<u64>>()
        });
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 3, &[], validate_run_or_shared);
        let first = runner.join().expect("run thread");
        let singles = single.join().expect("claim thread");
        assert!(
            !singles.contains(&(first + 1)),
            "a claim between a run's records: run at {first}, claims {singles:?}"
        );
        // The run's records in order: record `first + k` holds the run's `k`-th payload.
        for k in 0..2u64 {
            let g = lane.geometry();
            let base = ((g.data_off + (64 * (first + k)) % g.capacity) / 8) as usize;
            let want = run_payload(1, k);
            for (w, chunk) in want.chunks(8).enumerate() {
                let got = lane
                    .mem()
                    .get(base + (HEADER / 8) as usize + w)
                    .expect("in the lane")
                    .load(StdOrdering::Relaxed);
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                assert_eq!(got, u64::from_le_bytes(word), "run record {k}, word {w}");
            }
        }
        writer.close();
        seen.drain(&mut reader, &[], validate_run_or_shared);
        seen.finish(&reader, 4, &[]);
    });
}
