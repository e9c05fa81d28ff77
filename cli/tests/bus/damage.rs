//! A damaged ring: corrupted commit words read past at once and counted as damage, a corrupt
//! lane header refused loudly.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{TestBus, broker_lane_file, consumer, set_word_at, wait_until, word_at};
use crate::util::WATCHDOG;

/// Ten corrupted commit words in a ring of old records are read past at once (not a stall of
/// seconds per spot), the records they held counted as damaged, not lost, and shown in `ls`;
/// a lane whose header is corrupt is refused loudly (the consumer's stderr and `ls`), not
/// silently left out. (Regression: 10 spots stalled a new reader 42 s, reported as overwrite
/// loss, and a corrupt header made new consumers say "(0 producers)".)
#[test]
fn damaged_frames_are_skipped_fast_and_counted_as_damage() {
    let bus = TestBus::up();
    bus.demo(20, 49, 0, &[]);
    let broker = bus.ls()["broker_pid"].as_u64().expect("broker pid") as u32;
    let lane = broker_lane_file(broker);
    // Header words: capacity (2), data offset (7), claim tail (16).
    let (cap, data_off, tail) = (word_at(&lane, 16), word_at(&lane, 56), word_at(&lane, 128));
    assert!(tail < cap, "the ring wrapped");
    let mut records = Vec::new();
    let mut pos = 0;
    while pos < tail {
        let len_meta = word_at(&lane, data_off + pos + 8);
        if (len_meta >> 32) as u8 == 1 {
            records.push(pos);
        }
        pos += ((len_meta as u32 as u64) + 7) & !7;
    }
    assert_eq!(records.len(), 1000);
    let last_t = word_at(&lane, data_off + records[999] + 32);
    let spots: Vec<u64> = (0..10).map(|i| records[50 + i * 97]).collect();
    for &at in &spots {
        set_word_at(&lane, data_off + at, 0x0bad_0bad_0bad_0bad);
    }
    // The records must be older than a reader's stall timeout (5 s) for their age to prove
    // that no live writer is still writing them: let them age (time is the condition here).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let age = Duration::from_nanos(now.saturating_sub(last_t));
    std::thread::sleep(Duration::from_millis(5_500).saturating_sub(age));
    let t0 = Instant::now();
    let echo = bus.spawn("echo", &["echo", "--from", "oldest"]);
    let pid = echo.pid();
    let first = echo.json_lines(1);
    let t1 = Instant::now();
    let rest = echo.json_lines(989);
    let (all, spread) = (t0.elapsed(), t1.elapsed());
    assert_eq!(first[0]["seq"], 0);
    assert!(
        spread < Duration::from_secs(1) && all < Duration::from_secs(3),
        "10 damaged spots took {spread:?} to read past ({all:?} in all)"
    );
    let seqs: Vec<u64> = first
        .iter()
        .chain(&rest)
        .map(|l| l["seq"].as_u64().expect("seq"))
        .collect();
    let damaged: Vec<u64> = (0..10).map(|i| 50 + i * 97).collect();
    let expected: Vec<u64> = (0..1000).filter(|s| !damaged.contains(s)).collect();
    assert_eq!(seqs, expected);
    let mut seen = Value::Null;
    wait_until("ls shows the damage", WATCHDOG, || {
        seen = consumer(&bus, pid).expect("the echo in ls");
        seen["delivered"] == 990
    });
    assert_eq!(
        (&seen["damaged"], &seen["lost"], &seen["garbage"]),
        (&Value::from(10), &Value::from(0), &Value::from(10)),
        "{seen}"
    );
    let text = bus.run(&["ls"]).stdout;
    assert!(
        text.contains("10 (10 spots)"),
        "the text ls shows the damage: {text}"
    );
    // A corrupt header: the lane is refused, and said so.
    set_word_at(&lane, 0, 0x0bad_0bad_0bad_0bad);
    let late = bus.spawn("late echo", &["echo", "--from", "oldest"]);
    let line = late.expect_stderr("not reading producer 'demo'");
    assert!(line.contains("refused"), "{line}");
    wait_until("ls shows the refused lane", WATCHDOG, || {
        consumer(&bus, late.pid()).is_some_and(|c| {
            c["refused"][0]
                .as_str()
                .is_some_and(|r| r.contains("'demo'") && r.contains("magic"))
        })
    });
    bus.run(&["ls"])
        .assert_stdout_has("refuses producer 'demo'");
}
