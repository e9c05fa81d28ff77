//! (b) The producer killed at every crash point, and at random moments.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use rustix::process::Signal;
use snapbus_bus::doorbell::Doorbell;
use snapbus_bus::lane::{Frame, LaneReader, LaneState, Poll, ReaderStats, StartAt};
use snapbus_bus::mem::ShmMem;

use super::harness::{Deadline, Proc, Watchdog, open_lane, spawn};
use super::roles::{Checker, Rng, frame_bytes};
use super::{bells, lane_path, producer_env, secs, time_seed};

/// Polls `r` once and checks the outcome. Returns `(idle, empty, closed)`.
/// One read: every other call in place (`read_in_place`, the payload read word by word
/// through the ring view, as `Subscriber::next_in_place` does), the others copying (`poll`),
/// so the crash cases check both paths. Returns (idle, empty, closed).
fn read_step(r: &mut LaneReader<ShmMem>, chk: &mut Checker) -> (bool, bool, bool) {
    chk.steps += 1;
    let buf: Vec<u8>;
    let poll = if chk.steps % 2 == 0 {
        match r.read_in_place(|m, view| {
            (0..m.payload_len.div_ceil(8))
                .flat_map(|k| view.word(k).unwrap_or(u64::MAX).to_le_bytes())
                .take(m.payload_len)
                .collect::<Vec<u8>>()
        }) {
            Ok((meta, bytes)) => {
                buf = bytes;
                Poll::Frame(Frame {
                    meta,
                    payload: &buf,
                })
            }
            Err(no) => Poll::from(no),
        }
    } else {
        r.poll()
    };
    let kind = (
        matches!(poll, Poll::Empty | Poll::Pending),
        matches!(poll, Poll::Empty),
        matches!(poll, Poll::Closed),
    );
    chk.on(&poll);
    kind
}

/// The first record at or after `from` that is preceded by a PAD to the ring's physical end
/// (the writer's claim arithmetic, replayed).
fn first_padded_seq(cap: u64, from: u64) -> u64 {
    let mut tail = 0u64;
    for seq in 0.. {
        let len = frame_bytes(seq);
        let off = tail & (cap - 1);
        if off + len > cap {
            if seq >= from {
                return seq;
            }
            tail += cap - off;
        }
        tail += len;
    }
    unreachable!()
}

/// Reads `r` while the producer writes, until it dies; asserts it died of SIGKILL (`at`: where,
/// for the message).
fn read_until_killed(
    producer: &mut Proc,
    r: &mut LaneReader<ShmMem>,
    chk: &mut Checker,
    bell: &Doorbell<'_>,
    dl: Deadline,
    at: &str,
) {
    let nap = Duration::from_millis(5);
    let status = loop {
        assert!(!dl.passed(), "producer did not die\n{}", producer.log());
        let (idle, _, closed) = read_step(r, chk);
        assert!(!closed, "the lane was closed\n{}", producer.log());
        if idle {
            if let Some(status) = producer.try_status() {
                break status;
            }
            bell.wait_until(|| r.has_pending_bytes(), 100, nap);
        }
    };
    assert_eq!(
        status.signal(),
        Some(Signal::KILL.as_raw()),
        "producer should die of SIGKILL {at}, got {status}\n{}",
        producer.log()
    );
}

/// What a reader read past a dead writer: nothing corrupt or out of order, every one of the
/// `committed` records delivered or counted lost (delivered, if everything `fits` the ring),
/// the newest of them last, and the writer's unfinished claims as `holes`, no garbage.
fn assert_read_past_death(
    chk: &Checker,
    s: &ReaderStats,
    committed: u64,
    holes: u64,
    fits: bool,
    ctx: &str,
) {
    assert_eq!(
        (chk.corrupt, chk.order_err, chk.acct_err),
        (0, 0, 0),
        "{ctx}"
    );
    assert_eq!(
        chk.last,
        Some(committed - 1),
        "last committed record: {ctx}"
    );
    assert_eq!(s.delivered + s.lost, committed, "exact loss: {ctx}");
    assert_eq!(s.lost, chk.lagged, "{ctx}");
    assert_eq!(s.holes, holes, "the writer's unfinished claims: {ctx}");
    assert_eq!(s.garbage, 0, "{ctx}");
    if fits {
        assert_eq!((s.lost, s.lapped), (0, 0), "{ctx}");
        assert_eq!(s.delivered, committed, "every committed record: {ctx}");
    }
}

/// Once the test saw the writer's death (waitpid): tells the reader, which may now skip what
/// the writer left claimed, and reads to the end.
fn read_past_dead_writer(r: &mut LaneReader<ShmMem>, chk: &mut Checker, dl: Deadline) {
    r.set_writer_gone(true);
    loop {
        assert!(
            !dl.passed(),
            "the reader does not get past the dead writer's claim"
        );
        let (_, empty, closed) = read_step(r, chk);
        assert!(!closed);
        if empty && !r.has_pending_bytes() {
            break;
        }
    }
}

/// Reads (in this process, with a lane mapped before anything is written) from a producer
/// that crashes at its `k`-th pass through `point`, then checks what the reader got. `shared`:
/// the producer writes through the shared writer (a `Publisher`'s) instead of `write_bytes`.
fn crash_case(point: &str, k: u64, cap: u64, fits: bool, shared: bool, dl: Deadline) {
    let real = cfg!(feature = "testpoints");
    let bells = bells();
    let mut env = producer_env(cap, &bells, 1);
    env.push(("MP_MODE", "bytes".into()));
    if shared {
        env.push(("MP_WRITER", "shared".into()));
    }
    env.push(if real {
        ("SNAPBUS_CRASH_AT", format!("{point}:{k}"))
    } else {
        ("MP_SELFKILL", format!("{point}:{k}"))
    });
    let mut producer = spawn(&format!("producer[{point}:{k}]"), "producer", &env);
    let lane = open_lane(&lane_path(&mut producer, dl));
    let mut r = lane.lane().reader(StartAt::Oldest);
    let bell = bells.page.bell(0).expect("bell");
    let nap = Duration::from_millis(5);
    let mut chk = Checker::default();
    producer.send("write 1");
    while chk.delivered == 0 {
        assert!(!dl.passed(), "no first record\n{}", producer.log());
        if read_step(&mut r, &mut chk).0 {
            bell.wait_until(|| r.has_pending_bytes(), 100, nap);
        }
    }
    producer.send(&format!("write {}", k + 1000));
    // Read while it writes, until it dies.
    read_until_killed(
        &mut producer,
        &mut r,
        &mut chk,
        &bell,
        dl,
        &format!("at {point}:{k}"),
    );
    while let Some(w) = producer.try_expect("wrote") {
        assert_eq!(
            w.num("total"),
            1,
            "it wrote past the crash point: {}",
            w.line
        );
    }
    read_past_dead_writer(&mut r, &mut chk, dl);
    let committed = if point == "after_commit" { k } else { k - 1 };
    let s = r.stats();
    let ls = lane.lane().stats();
    let ctx = format!(
        "{point}:{k} (cap {cap}, shared writer: {shared}, real test point: {real}): {s:?} {ls:?} \
         {chk:?}"
    );
    let hole = u64::from(point != "after_commit");
    assert_read_past_death(&chk, &s, committed, hole, fits, &ctx);
    // `frames_committed` is bumped after the commit word: the real `after_commit` point is
    // between the two. The shared writer counts a claim when it makes it (claims in flight
    // count), so the claim the kill interrupted is counted whatever the point.
    let counted = if shared {
        k
    } else if point == "after_commit" && real {
        k - 1
    } else {
        committed
    };
    assert_eq!(ls.frames_committed, counted, "{ctx}");
    assert_eq!(ls.state, Some(LaneState::Live), "{ctx}");
    assert_eq!(r.position(), ls.claim_tail, "read to the end: {ctx}");
    eprintln!("crash {point}:{k} cap={cap}: {s:?}");
}

fn crash_at(test: &'static str, point: &str, shared: bool) {
    let wd = Watchdog::new(test, secs(180));
    // No wrap: everything up to the crash fits the ring, so the reader must get all of it.
    let (k, cap) = (1500, 4 << 20);
    assert!((0..k).map(frame_bytes).sum::<u64>() < cap);
    crash_case(point, k, cap, true, shared, wd.deadline);
    // Many laps, and the fatal record is the first one after a PAD at the ring's end.
    let cap = 1 << 20;
    let k = first_padded_seq(cap, 15_000) + 1;
    crash_case(point, k, cap, false, shared, wd.deadline);
}

#[test]
#[cfg_attr(
    not(feature = "testpoints"),
    ignore = "needs --features testpoints (inside claim)"
)]
fn producer_killed_after_intent() {
    crash_at("producer_killed_after_intent", "after_intent", false);
}

#[test]
fn producer_killed_after_busy() {
    crash_at("producer_killed_after_busy", "after_busy", false);
}

#[test]
fn producer_killed_mid_payload() {
    crash_at("producer_killed_mid_payload", "mid_payload", false);
}

#[test]
fn producer_killed_before_commit() {
    crash_at("producer_killed_before_commit", "before_commit", false);
}

#[test]
fn producer_killed_after_commit() {
    crash_at("producer_killed_after_commit", "after_commit", false);
}

// The same kills in the shared writer every `Publisher` writes through: its claim runs the
// same sequence and crash points (`mid_payload` is `write_bytes`'s, which it does not have).

#[test]
#[cfg_attr(
    not(feature = "testpoints"),
    ignore = "needs --features testpoints (inside claim)"
)]
fn shared_writer_killed_after_intent() {
    crash_at("shared_writer_killed_after_intent", "after_intent", true);
}

#[test]
fn shared_writer_killed_after_busy() {
    crash_at("shared_writer_killed_after_busy", "after_busy", true);
}

#[test]
fn shared_writer_killed_before_commit() {
    crash_at("shared_writer_killed_before_commit", "before_commit", true);
}

#[test]
fn shared_writer_killed_after_commit() {
    crash_at("shared_writer_killed_after_commit", "after_commit", true);
}

/// A producer writing runs of `RUN` records (`write_run`) dies in its `k`-th run, once the
/// run's first record is committed: right after (`run_after_first_commit`), or once its second
/// record's header and BUSY word are written (`run_after_busy`). The reader gets every record
/// up to the first of that run, intact, counts the rest of the run as holes (the BUSY frame
/// one, the claimed records never begun one more), and reads to the claimed tail. No wrap
/// (`cap` 4 MiB), then many laps (1 MiB).
fn run_crash_case(point: &str, k: u64, cap: u64, fits: bool, shared: bool, dl: Deadline) {
    const RUN: u64 = 4;
    let bells = bells();
    let mut env = producer_env(cap, &bells, 1);
    env.push(("MP_MODE", "runs".into()));
    env.push(("MP_RUN", RUN.to_string()));
    if shared {
        env.push(("MP_WRITER", "shared".into()));
    }
    env.push(("SNAPBUS_CRASH_AT", format!("{point}:{k}")));
    let mut producer = spawn(&format!("producer[runs:{k}]"), "producer", &env);
    let lane = open_lane(&lane_path(&mut producer, dl));
    let mut r = lane.lane().reader(StartAt::Oldest);
    let bell = bells.page.bell(0).expect("bell");
    let mut chk = Checker::default();
    chk.run_len = RUN;
    producer.send(&format!("write {}", (k + 1000) * RUN));
    read_until_killed(
        &mut producer,
        &mut r,
        &mut chk,
        &bell,
        dl,
        &format!("in run {k}"),
    );
    read_past_dead_writer(&mut r, &mut chk, dl);
    // Runs 1..k-1 whole, and the first record of run k.
    let committed = (k - 1) * RUN + 1;
    let s = r.stats();
    let ls = lane.lane().stats();
    let ctx =
        format!("{point} in run {k} (cap {cap}, shared writer: {shared}): {s:?} {ls:?} {chk:?}");
    let holes = if point == "run_after_busy" { 2 } else { 1 };
    assert_read_past_death(&chk, &s, committed, holes, fits, &ctx);
    // The shared writer counts a run's claims when it makes them, the single writer after
    // its last commit.
    let counted = if shared { k * RUN } else { (k - 1) * RUN };
    assert_eq!(ls.frames_committed, counted, "{ctx}");
    assert_eq!(r.position(), ls.claim_tail, "read to the end: {ctx}");
    eprintln!("crash {point} in run {k} cap={cap}: {s:?}");
}

fn run_crash(test: &'static str, shared: bool) {
    let wd = Watchdog::new(test, secs(180));
    let (k, cap) = (300, 4 << 20);
    assert!((0..k * 4).map(frame_bytes).sum::<u64>() < cap);
    for point in ["run_after_first_commit", "run_after_busy"] {
        run_crash_case(point, k, cap, true, shared, wd.deadline);
        run_crash_case(point, 4000, 1 << 20, false, shared, wd.deadline);
    }
}

#[test]
#[cfg_attr(
    not(feature = "testpoints"),
    ignore = "needs --features testpoints (inside a run)"
)]
fn writer_killed_mid_run() {
    run_crash("writer_killed_mid_run", false);
}

#[test]
#[cfg_attr(
    not(feature = "testpoints"),
    ignore = "needs --features testpoints (inside a run)"
)]
fn shared_writer_killed_mid_run() {
    run_crash("shared_writer_killed_mid_run", true);
}

/// `kill -9` from outside, after a random number of records were read (plus a random spin):
/// the reader gets every committed record (or counts it lost if it was lapped), at most one
/// hole, nothing torn.
#[test]
fn producer_killed_externally_at_random_moments() {
    let wd = Watchdog::new("producer_killed_externally_at_random_moments", secs(180));
    let dl = wd.deadline;
    let seed = time_seed();
    eprintln!("producer_killed_externally_at_random_moments: SNAPBUS_MP_SEED={seed}");
    let mut rng = Rng(seed);
    let mut holes = 0;
    let rounds = 6;
    for round in 0..rounds {
        let bells = bells();
        let mut producer = spawn(
            &format!("producer[round {round}]"),
            "producer",
            &producer_env(1 << 20, &bells, 1),
        );
        let lane = open_lane(&lane_path(&mut producer, dl));
        let mut r = lane.lane().reader(StartAt::Oldest);
        let bell = bells.page.bell(0).expect("bell");
        let nap = Duration::from_millis(5);
        let mut chk = Checker::default();
        producer.send("write 1");
        producer.send("write 1000000000");
        let target = 1 + rng.below(20_000);
        while chk.delivered < target {
            assert!(
                !dl.passed(),
                "round {round}: reader stuck\n{}",
                producer.log()
            );
            if read_step(&mut r, &mut chk).0 {
                assert!(producer.try_status().is_none(), "{}", producer.log());
                bell.wait_until(|| r.has_pending_bytes(), 100, nap);
            }
        }
        for _ in 0..rng.below(200_000) {
            std::hint::spin_loop();
        }
        producer.signal(Signal::KILL);
        let status = producer.wait(dl);
        assert_eq!(status.signal(), Some(Signal::KILL.as_raw()));
        r.set_writer_gone(true);
        loop {
            assert!(!dl.passed(), "round {round}: stuck after the kill");
            let (_, empty, closed) = read_step(&mut r, &mut chk);
            assert!(!closed);
            if empty && !r.has_pending_bytes() {
                break;
            }
        }
        let s = r.stats();
        let ls = lane.lane().stats();
        let ctx = format!("round {round} (seed {seed}): {s:?} {ls:?} {chk:?}");
        assert_eq!(
            (chk.corrupt, chk.order_err, chk.acct_err),
            (0, 0, 0),
            "{ctx}"
        );
        assert!(chk.first_err.is_none(), "{ctx}");
        let last = chk.last.expect("delivered something");
        assert_eq!(s.delivered + s.lost, last + 1, "exact loss: {ctx}");
        // `frames_committed` lags the commit word by one if the kill fell between them.
        assert!(
            last + 1 == ls.frames_committed || last == ls.frames_committed,
            "the last committed record was read: {ctx}"
        );
        assert!(s.holes <= 1, "{ctx}");
        assert_eq!(s.garbage, 0, "{ctx}");
        assert_eq!(r.position(), ls.claim_tail, "read to the end: {ctx}");
        holes += s.holes;
        eprintln!(
            "round {round}: killed after {} committed records, {} delivered, hole: {}",
            last + 1,
            s.delivered,
            s.holes
        );
    }
    eprintln!("{holes} of {rounds} kills landed between claim and commit");
}
