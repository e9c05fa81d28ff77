//! (d) Abort: a claim dropped without commit is skipped, not counted lost.

use std::sync::Arc;

use loom::thread;
use snapbus_bus::lane::{Lane, Poll, StartAt};

use super::{
    CONFIG, SALT, SHARED_LEN, Seen, check, payload, shared_meta, single_len, single_meta,
    validate_shared, validate_single, write_shared, write_single,
};

/// (d, CI) The writer commits record 0, drops the claim of record 1 (it becomes an ABORTED
/// frame), commits record 2, while the reader polls 3 times. The reader delivers 0 and 2, never
/// 1, and reports no loss.
#[test]
fn abort_is_skipped_not_lost() {
    check("abort_is_skipped_not_lost", 3, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let mut reader = lane.reader(StartAt::Oldest);
        let producer = thread::spawn(move || {
            write_single(&mut writer, 0);
            let claim = writer.claim(single_len(1), single_meta(1)).expect("claim");
            assert_eq!(claim.seq(), 1);
            drop(claim);
            write_single(&mut writer, 2);
            writer
        });
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 3, &[1], validate_single);
        let mut writer = producer.join().expect("writer");
        writer.close();
        seen.drain(&mut reader, &[1], validate_single);
        seen.finish(&reader, 3, &[1]);
        assert_eq!(seen.delivered, [0, 2]);
        assert_eq!(reader.stats().lost, 0);
        let stats = lane.stats();
        assert_eq!((stats.frames_committed, stats.aborted), (2, 1));
    });
}

/// (d, full) Through a shared writer: one thread claims and aborts, another claims and commits
/// two records, concurrently with 3 reader polls. Only the committed records are delivered and
/// nothing is lost.
#[test]
fn full_shared_abort_concurrent() {
    check("full_shared_abort_concurrent", 2, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let writer = Arc::new(lane.shared_writer().expect("writer"));
        let mut reader = lane.reader(StartAt::Oldest);
        let w = Arc::clone(&writer);
        let aborter = thread::spawn(move || {
            let mut claim = w.claim(SHARED_LEN, shared_meta(1, 0)).expect("claim");
            let seq = claim.seq();
            claim.write_payload(&payload(seq, 1, 8));
            drop(claim);
            seq
        });
        let w = Arc::clone(&writer);
        let committer = thread::spawn(move || {
            let a = write_shared(&w, 2, 0).expect("claim");
            let b = write_shared(&w, 2, 1).expect("claim");
            [a, b]
        });
        // The aborted seq is only known after the join; check the concurrent polls then.
        let mut polled = Vec::new();
        for _ in 0..3 {
            if let Poll::Frame(f) = reader.poll() {
                validate_shared(&f);
                polled.push(f.meta.seq);
            } else {
                assert_eq!(reader.stats().lost, 0);
            }
        }
        let aborted = [aborter.join().expect("aborter")];
        let committed = committer.join().expect("committer");
        assert!(polled.iter().all(|s| committed.contains(s)), "{polled:?}");
        writer.close();
        let mut seen = Seen {
            delivered: polled,
            ..Seen::default()
        };
        seen.drain(&mut reader, &aborted, validate_shared);
        assert_eq!(seen.delivered, committed);
        seen.finish(&reader, 3, &aborted);
        assert_eq!(reader.stats().lost, 0);
        assert_eq!(lane.stats().aborted, 1);
    });
}
