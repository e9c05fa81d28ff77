//! Multi-process tests (real processes, watchdog, cleanup).
//!
//! The test binary re-executes itself as producer and reader processes (see [`harness`]);
//! lanes are sealed memfds that readers open through `/proc/<producer>/fd/<n>`, as consumers
//! do. Every record is checksummed (its payload is a PRNG stream seeded by its sequence number,
//! see [`roles`]), so a reader verifies every frame it is handed.
//!
//! - (a) [`stream_checksummed_frames_between_processes`] (and the 10-million-frame
//!   [`stream_10m_checksummed_frames_between_processes`], `#[ignore]`d: run it in release):
//!   no corrupt frame, sequence numbers strictly increasing, every gap reported by `Lagged`,
//!   `delivered + lost == written`, and the reader reaches `Closed`; and paced
//!   ([`paced_stream_delivers_every_checksummed_frame`], and the 10-million-frame
//!   [`paced_stream_10m_delivers_every_checksummed_frame`], `#[ignore]`d), so that the reader
//!   process receives and checks every one of the records; and one record at a time to a
//!   reader that sleeps between them ([`sleeping_reader_is_woken_for_every_record`]): no
//!   wakeup is lost.
//! - (b) `producer_killed_<point>` for each crash point (`shared_writer_killed_<point>`: the
//!   same through the shared writer a `Publisher` uses), and
//!   [`producer_killed_externally_at_random_moments`]: a reader that had the lane mapped gets
//!   every record committed before the kill, reports the uncommitted claim as a hole once told
//!   the writer is gone, and never delivers a torn frame.
//! - (c) [`stopped_reader_does_not_hold_up_the_producer`] and
//!   [`killed_readers_cost_the_producer_nothing`].
//! - (d) [`reader_process_survives_and_counts_garbage_lanes`] and
//!   [`reader_process_refuses_garbage_headers_and_unsealed_segments`].
//!
//! Crash points: with the `testpoints` feature the producer dies inside the writer
//! (`SNAPBUS_CRASH_AT`); without it the tests emulate the points reachable through the public
//! claim API (`after_busy`, `mid_payload`, `before_commit`, `after_commit`) and
//! `producer_killed_after_intent` is ignored. The full set, in release:
//! `cargo test -p snapbus-bus --release --features testpoints --test tests multiprocess -- --include-ignored`.
//!
//! Loss baseline: a reader that starts at position 0 of a lane knows the first record is
//! number 0, so it reports everything it missed, even when it is lapped before its first
//! delivery (`producer_killed_externally_at_random_moments` writes without a handshake).

mod harness;
mod roles;

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::process::Signal;
use snapbus_bus::doorbell::{Doorbell, DoorbellPage, SLEEPING};
use snapbus_bus::lane::{
    Frame, LaneConfig, LaneReader, LaneState, Poll, ReaderStats, ShmLane, StartAt,
};
use snapbus_bus::mem::ShmMem;

use harness::{Deadline, Proc, Watchdog, bell_word, open_lane, proc_fd_path, spawn};
use roles::{Checker, Rng, frame_bytes};

/// The entry point of every child process: plays the role named by `SNAPBUS_MP_ROLE`, and
/// does nothing when run as an ordinary test.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(harness::ROLE_ENV) else {
        return;
    };
    // Die with the test thread that spawned us, even if it is killed or aborts.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    let parent: i32 = std::env::var(harness::PARENT_ENV)
        .ok()
        .and_then(|p| p.parse().ok())
        .expect("SNAPBUS_MP_PARENT");
    if rustix::process::Pid::as_raw(rustix::process::getppid()) != parent {
        eprintln!("the test process is gone; exiting");
        std::process::exit(3);
    }
    roles::run(&role);
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A doorbell page this process created, and the path children open it by.
struct Bells {
    page: DoorbellPage,
    path: String,
}

fn bells() -> Bells {
    let page = DoorbellPage::create("snapbus-mp-bells").expect("doorbell page");
    let path = proc_fd_path(std::process::id() as i32, page.fd().as_raw_fd());
    Bells { page, path }
}

/// Producer environment: a lane of `cap` bytes taking 64 KiB records, ringing `mask`.
fn producer_env(cap: u64, bells: &Bells, mask: u64) -> Vec<(&'static str, String)> {
    vec![
        ("MP_CAP", cap.to_string()),
        ("MP_MAX_FRAME", (128u64 << 10).to_string()),
        ("MP_BLOCK", (64u64 << 10).to_string()),
        ("MP_BELL", bells.path.clone()),
        ("MP_BELL_MASK", mask.to_string()),
    ]
}

fn reader_env(lane: &str, bells: &Bells, index: usize) -> Vec<(&'static str, String)> {
    vec![
        ("MP_LANE", lane.to_owned()),
        ("MP_BELL", bells.path.clone()),
        ("MP_BELL_INDEX", index.to_string()),
    ]
}

/// The `/proc` path of the lane a producer announced in its `ready` line.
fn lane_path(producer: &mut Proc, dl: Deadline) -> String {
    let ready = producer.expect("ready", dl);
    proc_fd_path(ready.num("pid") as i32, ready.num("fd") as i32)
}

/// Asserts a reader child's `result` line shows a clean, exactly accounted read of `total`
/// records that reached the end of the lane.
fn assert_clean_full_read(res: &harness::Msg, total: u64, log: &str) {
    let ctx = || format!("{}\n{log}", res.line);
    for key in ["corrupt", "order_err", "acct_err", "garbage", "holes"] {
        assert_eq!(res.num(key), 0, "{key}: {}", ctx());
    }
    assert_eq!(
        res.num("lagged"),
        res.num("lost"),
        "Lagged sum vs stats: {}",
        ctx()
    );
    assert_eq!(res.num("my_delivered"), res.num("delivered"), "{}", ctx());
    assert_eq!(
        res.num("delivered") + res.num("lost"),
        total,
        "delivered + lost == written: {}",
        ctx()
    );
    assert_eq!(res.num("last_seq"), total - 1, "read to the end: {}", ctx());
}

// ---------------------------------------------------------------------------------------------
// (a) Streaming checksummed frames between a producer and a reader process.

/// Records per batch of a paced stream (see [`stream`]).
const PACE_BATCH: u64 = 256;

/// Streams `n` records from a producer process to a reader process. Unpaced, the producer
/// writes as fast as it can and laps the reader (loss is reported exactly). Paced, it writes
/// batches of [`PACE_BATCH`] records (each well under half the 4 MiB ring) and waits for the
/// reader to deliver a batch before writing the next, so every record is delivered and
/// checked: nothing lost.
fn stream(test: &'static str, n: u64, paced: bool, budget: Duration) {
    assert!(n >= 2);
    let wd = Watchdog::new(test, budget);
    let dl = wd.deadline;
    let t0 = Instant::now();
    let bells = bells();
    let cap = 4u64 << 20;
    let mut producer = spawn("producer", "producer", &producer_env(cap, &bells, 1));
    let lane = lane_path(&mut producer, dl);
    let mut renv = reader_env(&lane, &bells, 0);
    if paced {
        renv.push(("MP_PROGRESS", PACE_BATCH.to_string()));
    }
    let mut reader = spawn("reader", "reader", &renv);
    reader.expect("ready", dl);
    // Handshake: the reader delivers record 0 before the rest is written (loss baseline).
    producer.send("write 1");
    assert_eq!(reader.expect("reading", dl).num("seq"), 0);
    let t_write = Instant::now();
    if paced {
        let mut written = 1;
        while written + PACE_BATCH <= n {
            // Up to the next multiple of the batch, where the reader reports progress.
            let batch = PACE_BATCH - written % PACE_BATCH;
            let bytes: u64 = (written..written + batch).map(frame_bytes).sum();
            assert!(bytes <= cap / 2, "batch at {written} is {bytes} bytes");
            producer.send(&format!("write {batch}"));
            written += batch;
            assert_eq!(reader.expect("progress", dl).num("delivered"), written);
        }
        producer.send(&format!("write {}", n - written));
    } else {
        producer.send(&format!("write {}", n - 1));
    }
    producer.send("close");
    let closed = producer.expect("closed", dl);
    let write_time = t_write.elapsed();
    producer.wait_success(dl);
    let res = reader.expect("result", dl);
    let read_time = t_write.elapsed();
    reader.wait_success(dl);
    assert_eq!(
        (closed.num("total"), closed.num("errors")),
        (n, 0),
        "{}",
        producer.log()
    );
    assert_clean_full_read(&res, n, &reader.log());
    if paced {
        assert_eq!(
            (res.num("delivered"), res.num("lost")),
            (n, 0),
            "a paced stream loses nothing: {}",
            res.line
        );
    }
    let mib = (0..n).map(frame_bytes).sum::<u64>() as f64 / f64::from(1 << 20);
    eprintln!(
        "{test}: {n} records ({mib:.0} MiB of frames) written in {write_time:.2?}, read to \
         Closed in {read_time:.2?} (total {:.2?}); reader: {}",
        t0.elapsed(),
        res.line
    );
}

/// (a), always on: a producer process streams checksummed records of mixed sizes (8 B–4 KiB,
/// some 64 KiB; half written in place through claims) to a reader process that sleeps on a
/// doorbell when idle.
#[test]
fn stream_checksummed_frames_between_processes() {
    let n = if cfg!(debug_assertions) {
        100_000
    } else {
        1_000_000
    };
    stream(
        "stream_checksummed_frames_between_processes",
        n,
        false,
        secs(240),
    );
}

/// (a), always on: a reader process that sleeps on its doorbell between records (with a 10 s
/// timeout) is woken by the producer process for every one of 400 records, one at a time,
/// each written after a varying delay so the rings land before, during and after the reader's
/// move to sleep. A lost wakeup (the asymmetric-fence protocol of `doorbell` failing) would
/// leave a record unread for 10 s: no round may take 2 s.
#[test]
fn sleeping_reader_is_woken_for_every_record() {
    const ROUNDS: u64 = 400;
    let wd = Watchdog::new("sleeping_reader_is_woken_for_every_record", secs(60));
    let dl = wd.deadline;
    let bells = bells();
    let mut producer = spawn("producer", "producer", &producer_env(4 << 20, &bells, 1));
    let lane = lane_path(&mut producer, dl);
    let mut renv = reader_env(&lane, &bells, 0);
    renv.push(("MP_PROGRESS", "1".to_owned()));
    renv.push(("MP_SLEEP_MS", "10000".to_owned()));
    let mut reader = spawn("reader", "reader", &renv);
    reader.expect("ready", dl);
    let mut slowest = Duration::ZERO;
    for i in 0..ROUNDS {
        // 0 to ~80 µs after the reader announced the last record: it is spinning, preparing
        // to sleep or asleep when the ring comes.
        let delay = Duration::from_nanos((i * 7919) % 80_000);
        let t = Instant::now();
        while t.elapsed() < delay {
            std::hint::spin_loop();
        }
        let t0 = Instant::now();
        producer.send("write 1");
        let round = Deadline::after(secs(2).min(dl.left()));
        assert_eq!(
            reader.expect("progress", round).num("delivered"),
            i + 1,
            "{}",
            reader.log()
        );
        slowest = slowest.max(t0.elapsed());
    }
    producer.send("close");
    producer.expect("closed", dl);
    producer.wait_success(dl);
    let res = reader.expect("result", dl);
    reader.wait_success(dl);
    assert_clean_full_read(&res, ROUNDS, &reader.log());
    eprintln!(
        "{ROUNDS} rounds, slowest {slowest:.2?}; reader: {}",
        res.line
    );
}

/// (a), always on: as above, paced so that the reader gets (and checks) every record.
#[test]
fn paced_stream_delivers_every_checksummed_frame() {
    let n = if cfg!(debug_assertions) {
        20_000
    } else {
        200_000
    };
    stream(
        "paced_stream_delivers_every_checksummed_frame",
        n,
        true,
        secs(240),
    );
}

/// (a), the full-size run: 10 million records (`MP_STREAM_FRAMES` overrides). Slow in debug.
#[test]
#[ignore = "10M frames: run in release (see the module docs)"]
fn stream_10m_checksummed_frames_between_processes() {
    let n = std::env::var("MP_STREAM_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    stream(
        "stream_10m_checksummed_frames_between_processes",
        n,
        false,
        secs(900),
    );
}

/// (a), the full-size lossless run: 10 million records (`MP_STREAM_FRAMES` overrides), paced,
/// every one delivered to the reader process and checked. Slow in debug.
#[test]
#[ignore = "10M frames: run in release (see the module docs)"]
fn paced_stream_10m_delivers_every_checksummed_frame() {
    let n = std::env::var("MP_STREAM_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    stream(
        "paced_stream_10m_delivers_every_checksummed_frame",
        n,
        true,
        secs(900),
    );
}

// ---------------------------------------------------------------------------------------------
// (b) The producer killed at every crash point, and at random moments.

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

fn time_seed() -> u64 {
    std::env::var("SNAPBUS_MP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
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

// ---------------------------------------------------------------------------------------------
// (c) Readers stopped or killed: the producer does not notice.

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

// ---------------------------------------------------------------------------------------------
// (d) Garbage: reader processes over corrupt lanes and segments.

/// A writer process fills its lane with garbage (raw word stores: random words, fake frame
/// headers with valid commit tags, all-random data, garbage tail/state words); a reader
/// process maps it and polls until it goes quiet. It must not crash, must go quiet, must
/// never deliver a sequence number twice, and must count what it skipped.
#[test]
fn reader_process_survives_and_counts_garbage_lanes() {
    let wd = Watchdog::new(
        "reader_process_survives_and_counts_garbage_lanes",
        secs(240),
    );
    let dl = wd.deadline;
    let seed = time_seed();
    eprintln!("reader_process_survives_and_counts_garbage_lanes: SNAPBUS_MP_SEED={seed}");
    let mut rng = Rng(seed);
    // (mode, counters variant, reader start): random words and fake frames with random
    // starts; random data with starts that read it; every garbage tail with every start.
    let mut rounds: Vec<(&str, Option<u64>, Option<&str>)> = Vec::new();
    for i in 0..4 {
        rounds.push(("words", None, None));
        // Half from the oldest record, which is sure to meet the frame planted on a boundary.
        rounds.push(("frames", None, (i % 2 == 0).then_some("oldest")));
    }
    for start in ["oldest", "time"] {
        rounds.push(("noise", None, Some(start)));
        rounds.push(("noise_all", None, Some(start)));
    }
    for variant in 0..9 {
        for start in ["oldest", "latest", "time"] {
            rounds.push(("counters", Some(variant), Some(start)));
        }
    }
    let mut detected: BTreeMap<&str, u64> = BTreeMap::new();
    for (round, &(mode, variant, start)) in rounds.iter().enumerate() {
        let (wseed, rseed) = (rng.next(), rng.next());
        // Sometimes fewer records than fit the ring (readers then start at position 0).
        let valid = 1 + rng.below([200, 3000][round % 2]);
        let mut wenv = vec![
            ("MP_CAP", (256u64 << 10).to_string()),
            ("MP_MAX_FRAME", (32u64 << 10).to_string()),
            ("MP_BLOCK", (4u64 << 10).to_string()),
            ("MP_VALID", valid.to_string()),
            ("MP_GARBAGE", mode.to_owned()),
            ("MP_SEED", wseed.to_string()),
        ];
        if let Some(v) = variant {
            wenv.push(("MP_VARIANT", v.to_string()));
        }
        let mut writer = spawn(&format!("garbage writer[{round}]"), "garbage_writer", &wenv);
        let lane = lane_path(&mut writer, dl);
        let mut renv = vec![
            ("MP_LANE", lane),
            ("MP_SEED", rseed.to_string()),
            ("MP_POLLS", "200000".into()),
        ];
        if let Some(start) = start {
            renv.push(("MP_START", start.to_owned()));
        }
        let mut reader = spawn(&format!("garbage reader[{round}]"), "garbage_reader", &renv);
        let res = reader.expect("result", dl);
        reader.wait_success(dl);
        let ctx = format!(
            "round {round} mode {mode} variant {variant:?} (seed {seed}): {}\n{}",
            res.line,
            reader.log()
        );
        assert_eq!(res.num("quiet"), 1, "the reader never went quiet: {ctx}");
        assert_eq!(res.num("order_err"), 0, "{ctx}");
        let skipped = res.num("garbage") + res.num("holes") + res.num("torn");
        if mode == "frames" && start == Some("oldest") {
            // One fake frame replaces the last record's header: a reader from the oldest
            // record meets it.
            assert!(
                skipped > 0,
                "a fake frame on a boundary read without complaint: {ctx}"
            );
        }
        if mode == "noise" {
            // The anchors are intact, so the reader starts inside the random data. (With
            // random anchors too, a reader may find no frame boundary and start at the tail.)
            assert!(skipped > 0, "random data read without complaint: {ctx}");
        }
        *detected.entry(mode).or_default() += skipped;
        writer.wait_success(dl);
        eprintln!("{mode} {variant:?}: {}", res.line);
    }
    eprintln!("garbage, holes and torn copies counted, by mode: {detected:?}");
    assert!(
        detected["frames"] + detected["words"] > 0,
        "no garbage was ever reported"
    );
}

/// A memfd holding `bytes`, with `seals` (none: created without `MFD_ALLOW_SEALING`).
fn memfd(bytes: &[u8], seals: Option<SealFlags>) -> OwnedFd {
    let flags = match seals {
        Some(_) => MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        None => MemfdFlags::CLOEXEC,
    };
    let fd = rustix::fs::memfd_create("snapbus-mp-garbage", flags).expect("memfd_create");
    rustix::fs::ftruncate(&fd, bytes.len() as u64).expect("ftruncate");
    File::from(fd.try_clone().expect("dup"))
        .write_all_at(bytes, 0)
        .expect("write memfd");
    if let Some(seals) = seals {
        rustix::fs::fcntl_add_seals(&fd, seals).expect("seal");
    }
    fd
}

/// A reader process asked to open segments with garbage headers, unsealed or partly sealed
/// memfds, and bad sizes refuses each with the right error (and opens the valid control).
#[test]
fn reader_process_refuses_garbage_headers_and_unsealed_segments() {
    let wd = Watchdog::new(
        "reader_process_refuses_garbage_headers_and_unsealed_segments",
        secs(60),
    );
    let dl = wd.deadline;
    let config = LaneConfig {
        capacity: 64 << 10,
        max_frame: 8 << 10,
        block_size: 4 << 10,
    };
    let lane = ShmLane::create("snapbus-mp-image", &config).expect("lane");
    let mut w = lane.lane().writer().expect("writer");
    for seq in 0..50 {
        w.write_bytes(roles::meta(seq), &[seq as u8; 100])
            .expect("write");
    }
    let len = lane.lane().geometry().segment_len() as usize;
    let mut image = vec![0u8; len];
    File::from(lane.fd().try_clone_to_owned().expect("dup"))
        .read_exact_at(&mut image, 0)
        .expect("read lane image");
    let with = |word: usize, v: u64| {
        let mut b = image.clone();
        b[word * 8..word * 8 + 8].copy_from_slice(&v.to_le_bytes());
        b
    };
    let mut rng = Rng(time_seed());
    let random: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let mut magic_then_random = random.clone();
    magic_then_random[..8].copy_from_slice(&image[..8]);
    let sealed = Some(SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL);
    // (label, segment, expected error text: "" = opens)
    let cases: Vec<(&str, OwnedFd, &str)> = vec![
        ("valid", memfd(&image, sealed), ""),
        ("unsealed", memfd(&image, None), "not_sealed"),
        (
            "shrink_sealed_only",
            memfd(&image, Some(SealFlags::SHRINK)),
            "not_sealed",
        ),
        ("random", memfd(&random, sealed), "not_a_snapbus_lane"),
        ("zeros", memfd(&vec![0; len], sealed), "not_a_snapbus_lane"),
        (
            "magic_then_random",
            memfd(&magic_then_random, sealed),
            "lane",
        ),
        ("version", memfd(&with(1, 7), sealed), "layout_version"),
        (
            "not_initialised",
            memfd(&with(10, 0), sealed),
            "not_initialised",
        ),
        ("capacity", memfd(&with(2, 3 << 20), sealed), "capacity"),
        ("max_frame", memfd(&with(3, 1 << 30), sealed), "max_frame"),
        ("salt", memfd(&with(4, 0), sealed), "salt"),
        ("block_shift", memfd(&with(5, 63), sealed), "block_size"),
        ("data_off", memfd(&with(7, 8192 + 4096), sealed), "disagree"),
        ("truncated", memfd(&image[..len / 2], sealed), "needs"),
        ("odd_size", memfd(&image[..4096 + 8], sealed), "is_invalid"),
        ("empty", memfd(&[], sealed), "is_invalid"),
    ];
    let me = std::process::id() as i32;
    let spec: Vec<String> = cases
        .iter()
        .map(|(label, fd, _)| format!("{label}={}", proc_fd_path(me, fd.as_fd().as_raw_fd())))
        .collect();
    let mut child = spawn("open_check", "open_check", &[("MP_OPEN", spec.join(","))]);
    for (label, _, needle) in &cases {
        let msg = child.expect("open", dl);
        assert_eq!(msg.str("label"), *label, "{}", msg.line);
        if needle.is_empty() {
            assert_eq!(msg.num("ok"), 1, "{label} should open: {}", msg.line);
        } else {
            assert_eq!(msg.num("ok"), 0, "{label} should be refused: {}", msg.line);
            let err = msg.str("err");
            assert!(
                err.contains(needle),
                "{label}: error `{err}` should mention `{needle}`"
            );
        }
        eprintln!("{label}: {}", msg.line);
    }
    child.wait_success(dl);
}
