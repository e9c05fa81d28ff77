//! (c) Doorbell: a consumer that sleeps on its doorbell is woken for every record.

use std::sync::Arc;
use std::time::Duration;

use loom::sync::atomic::AtomicU32;
use loom::thread;
use snapbus_bus::doorbell::Doorbell;
use snapbus_bus::lane::{Lane, LaneReader, Poll, StartAt};
use snapbus_bus::mem::HeapMem;

use super::{CONFIG, SALT, Seen, check, validate_single, write_single};

/// Consumer loop: poll; if nothing, announce sleep, re-check, then sleep or cancel. Returns
/// when `n` records were delivered.
fn consume(reader: &mut LaneReader<HeapMem>, bell: &Doorbell<'_>, n: usize, use_wait_until: bool) {
    let mut seen = Seen {
        from_zero: Some(reader.position() == 0),
        ..Seen::default()
    };
    while seen.delivered.len() < n {
        match reader.poll() {
            Poll::Pending => {
                // Claimed, not committed yet: the writer is mid-record; look again soon.
                thread::yield_now();
                continue;
            }
            Poll::Empty => {}
            p => {
                seen.on(p, &[], validate_single);
                continue;
            }
        }
        if use_wait_until {
            bell.wait_until(|| reader.has_pending_bytes(), 0, Duration::from_secs(3600));
        } else {
            let d = bell.prepare_sleep();
            if reader.has_pending_bytes() {
                bell.cancel();
                continue;
            }
            // No timeout in the loom futex: if this wakeup were lost, loom reports a deadlock.
            bell.sleep(d, Duration::from_secs(3600));
        }
    }
    assert_eq!(seen.lagged, 0);
    assert!(seen.delivered.iter().copied().eq(0..n as u64));
}

/// (c, CI) Producer: commit record 0, ring. Consumer: poll, prepare_sleep, re-check
/// `has_pending_bytes`, sleep or cancel. No lost wakeup (a lost one deadlocks the model).
#[test]
fn doorbell_no_lost_wakeup() {
    check("doorbell_no_lost_wakeup", 3, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let mut reader = lane.reader(StartAt::Oldest);
        let word = Arc::new(AtomicU32::new(0));
        let bell_word = Arc::clone(&word);
        let producer = thread::spawn(move || {
            write_single(&mut writer, 0);
            Doorbell::new(&bell_word).ring();
        });
        consume(&mut reader, &Doorbell::new(&word), 1, false);
        producer.join().expect("producer");
    });
}

/// (c, full) Two records, each followed by a ring, against a consumer sleeping through
/// `Doorbell::wait_until` (no spinning).
#[test]
fn full_doorbell_two_records_wait_until() {
    check("full_doorbell_two_records_wait_until", 3, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let mut reader = lane.reader(StartAt::Oldest);
        let word = Arc::new(AtomicU32::new(0));
        let bell_word = Arc::clone(&word);
        let producer = thread::spawn(move || {
            let bell = Doorbell::new(&bell_word);
            for seq in 0..2 {
                write_single(&mut writer, seq);
                bell.ring();
            }
        });
        consume(&mut reader, &Doorbell::new(&word), 2, true);
        producer.join().expect("producer");
    });
}
