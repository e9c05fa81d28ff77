//! Multi-process tests (real processes, watchdog, cleanup).
//!
//! The test binary re-executes itself as producer and reader processes (see [`harness`]);
//! lanes are sealed memfds that readers open through `/proc/<producer>/fd/<n>`, as consumers
//! do. Every record is checksummed (its payload is a PRNG stream seeded by its sequence number,
//! see [`roles`]), so a reader verifies every frame it is handed.
//!
//! - (a) [`streaming`]: [`streaming::stream_checksummed_frames_between_processes`] (and the
//!   10-million-frame [`streaming::stream_10m_checksummed_frames_between_processes`],
//!   `#[ignore]`d: run it in release): no corrupt frame, sequence numbers strictly increasing,
//!   every gap reported by `Lagged`, `delivered + lost == written`, and the reader reaches
//!   `Closed`; and paced ([`streaming::paced_stream_delivers_every_checksummed_frame`], and the
//!   10-million-frame [`streaming::paced_stream_10m_delivers_every_checksummed_frame`],
//!   `#[ignore]`d), so that the reader process receives and checks every one of the records;
//!   and one record at a time to a reader that sleeps between them
//!   ([`streaming::sleeping_reader_is_woken_for_every_record`]): no wakeup is lost.
//! - (b) [`crashes`]: `producer_killed_<point>` for each crash point
//!   (`shared_writer_killed_<point>`: the same through the shared writer a `Publisher` uses),
//!   and [`crashes::producer_killed_externally_at_random_moments`]: a reader that had the lane
//!   mapped gets every record committed before the kill, reports the uncommitted claim as a
//!   hole once told the writer is gone, and never delivers a torn frame.
//! - (c) [`reader_faults`]: [`reader_faults::stopped_reader_does_not_hold_up_the_producer`] and
//!   [`reader_faults::killed_readers_cost_the_producer_nothing`].
//! - (d) [`garbage`]: [`garbage::reader_process_survives_and_counts_garbage_lanes`] and
//!   [`garbage::reader_process_refuses_garbage_headers_and_unsealed_segments`].
//!
//! This file holds the entry point of the child processes and the helpers the test files
//! share.
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

mod crashes;
mod garbage;
mod harness;
mod reader_faults;
mod roles;
mod streaming;

use std::os::fd::AsRawFd;
use std::time::Duration;

use rustix::process::Signal;
use snapbus_bus::doorbell::DoorbellPage;

use harness::{Deadline, Proc, proc_fd_path};

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
