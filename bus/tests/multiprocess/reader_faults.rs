//! (c) Readers stopped or killed: the producer does not notice.

use std::os::unix::process::ExitStatusExt;

use rustix::process::Signal;
use snapbus_bus::doorbell::SLEEPING;

use super::harness::{Watchdog, bell_word, spawn};
use super::{assert_clean_full_read, bells, lane_path, producer_env, reader_env, secs};

/// A reader `SIGSTOP`ped mid-stream: the producer writes enough to lap it many times and
/// finishes while it is still stopped; resumed, the reader reports the loss exactly.
#[test]
fn stopped_reader_does_not_hold_up_the_producer() {
    let wd = Watchdog::new("stopped_reader_does_not_hold_up_the_producer", secs(180));
    let dl = wd.deadline;
    let bells = bells();
    let mut producer = spawn("producer", "producer", &producer_env(1 << 20, &bells, 1));
    let lane = lane_path(&mut producer, dl);
    let mut env = reader_env(&lane, &bells, 0);
    env.push(("MP_MILESTONE", "500".into()));
    let mut reader = spawn("reader", "reader", &env);
    reader.expect("ready", dl);
    producer.send("write 1");
    reader.expect("reading", dl);
    assert_eq!(producer.expect("wrote", dl).num("total"), 1);
    let (n1, n2) = (20_000, 30_000);
    producer.send(&format!("write {n1}"));
    reader.expect("milestone", dl);
    reader.signal(Signal::STOP);
    dl.wait_for("the reader to stop", || reader.sched_state() == Some('T'));
    let w1 = producer.expect("wrote", dl);
    producer.send(&format!("write {n2}"));
    let w2 = producer.expect("wrote", dl);
    let stopped = reader.sched_state();
    assert_eq!(
        (w1.num("total"), w2.num("total"), w2.num("errors")),
        (1 + n1, 1 + n1 + n2, 0),
        "{}",
        producer.log()
    );
    assert_eq!(
        stopped,
        Some('T'),
        "the producer finished while the reader was stopped"
    );
    reader.signal(Signal::CONT);
    producer.send("close");
    producer.expect("closed", dl);
    producer.wait_success(dl);
    let res = reader.expect("result", dl);
    reader.wait_success(dl);
    let total = 1 + n1 + n2;
    assert_clean_full_read(&res, total, &reader.log());
    assert!(
        res.num("lapped") >= 1 && res.num("lost") > 0,
        "it was lapped while stopped: {}",
        res.line
    );
    eprintln!("stopped reader: {}", res.line);
}

/// Two readers killed with `kill -9`: one asleep on its doorbell, one mid-stream. The producer
/// writes on without error, and a dead sleeper's doorbell costs exactly one wake.
#[test]
fn killed_readers_cost_the_producer_nothing() {
    let wd = Watchdog::new("killed_readers_cost_the_producer_nothing", secs(180));
    let dl = wd.deadline;
    let bells = bells();
    let mut producer = spawn("producer", "producer", &producer_env(1 << 20, &bells, 0b11));
    let lane = lane_path(&mut producer, dl);
    let mut env = reader_env(&lane, &bells, 0);
    env.push(("MP_MILESTONE", "500".into()));
    let mut busy = spawn("busy reader", "reader", &env);
    let mut env = reader_env(&lane, &bells, 1);
    env.push(("MP_SLEEP_MS", "600000".into()));
    let mut sleeper = spawn("sleeping reader", "reader", &env);
    busy.expect("ready", dl);
    sleeper.expect("ready", dl);
    producer.send("write 1");
    busy.expect("reading", dl);
    sleeper.expect("reading", dl);
    // No ring is in flight once the producer has answered.
    assert_eq!(producer.expect("wrote", dl).num("total"), 1);
    dl.wait_for("the sleeper to block on its doorbell", || {
        bell_word(&bells.page, 1) & SLEEPING != 0 && sleeper.sched_state() == Some('S')
    });
    let d = bell_word(&bells.page, 1);
    sleeper.signal(Signal::KILL);
    assert_eq!(sleeper.wait(dl).signal(), Some(Signal::KILL.as_raw()));
    let (n1, n2) = (20_000, 30_000);
    producer.send(&format!("write {n1}"));
    busy.expect("milestone", dl);
    busy.signal(Signal::KILL);
    assert_eq!(busy.wait(dl).signal(), Some(Signal::KILL.as_raw()));
    let b = bell_word(&bells.page, 0);
    producer.send(&format!("write {n2}"));
    let w1 = producer.expect("wrote", dl);
    let w2 = producer.expect("wrote", dl);
    assert_eq!(
        (w1.num("total"), w2.num("total"), w2.num("errors")),
        (1 + n1, 1 + n1 + n2, 0),
        "{}",
        producer.log()
    );
    producer.send("close");
    producer.expect("closed", dl);
    producer.wait_success(dl);
    // One ring finds SLEEPING and clears it (count + 2, one futex wake); later rings see it
    // clear and make no syscall.
    let once = |w: u32| {
        if w & SLEEPING != 0 {
            w.wrapping_add(2) & !SLEEPING
        } else {
            w
        }
    };
    assert_eq!(
        bell_word(&bells.page, 1),
        once(d),
        "sleeper's bell (was {d:#x})"
    );
    assert_eq!(
        bell_word(&bells.page, 0),
        once(b),
        "busy reader's bell (was {b:#x})"
    );
}
