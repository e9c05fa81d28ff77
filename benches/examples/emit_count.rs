//! A fixed number of `telemetry.snapshot(INFO, &event)` calls (the 64-byte event of
//! `producer_emit`), for counting instructions per emit with callgrind rather than timing
//! them on a shared machine:
//!
//! ```sh
//! # rustix's own backend reads the vDSO, which valgrind does not map: a plain build dies with
//! # SIGSEGV in `rustix::backend::param::auxv::check_elf_base` under valgrind (rustix#1559)
//! RUSTFLAGS="--cfg=rustix_use_libc" CARGO_TARGET_DIR=target/cg \
//!     cargo build --release -p snapbus-benches --example emit_count
//! valgrind --tool=callgrind --toggle-collect='*emit_loop*' \
//!     target/cg/release/examples/emit_count no-reader 100000
//! ```
//!
//! Only the `*_loop` functions are counted (with `--toggle-collect` for each, nothing of the
//! setup or the broker); divide a loop's inclusive `Ir` by the count. Modes:
//!
//! - `no-reader`: `emit_loop` alone (nobody subscribed);
//! - `reader`: a reader thread subscribes first (it reads every record, sleeping on its
//!   doorbell when idle), so each emit also checks the bell; the interleaving of the two
//!   threads under valgrind varies, so this count varies a little from run to run;
//! - `sub-after`: `emit_loop`, then a subscriber in the same thread reads the records back
//!   (`sub_loop`), without a second thread: deterministic;
//! - `lane`: a bare lane in this thread (no broker): `lane_write_loop` (`LaneWriter::write`),
//!   `shared_write_loop` (`SharedLaneWriter::write`), `poll_loop` (`LaneReader::poll`) and
//!   `in_place_loop` (`LaneReader::read_in_place`) over the records they wrote.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use snapbus::{Config, Level, Telemetry};
use snapbus_bus::broker;
use snapbus_bus::lane::{
    LaneConfig, LaneReader, LaneWriter, Poll, RecordMeta, SharedLaneWriter, ShmLane, StartAt,
};
use snapbus_bus::mem::ShmMem;
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::subscriber::{Event as BusEvent, Subscriber};

use snapbus_benches::Event;

/// The counted part: `n` emits of the same event.
#[inline(never)]
fn emit_loop(telemetry: &Telemetry, ev: &Event, n: u64) {
    for _ in 0..n {
        telemetry.snapshot(Level::INFO, black_box(ev));
    }
}

const META: RecordMeta = snapbus_benches::LANE_META;

#[inline(never)]
fn lane_write_loop(w: &mut LaneWriter<ShmMem>, ev: &Event, n: u64) {
    for _ in 0..n {
        let _ = black_box(w.write(META, black_box(ev)));
    }
}

#[inline(never)]
fn shared_write_loop(w: &SharedLaneWriter<ShmMem>, ev: &Event, n: u64) {
    for _ in 0..n {
        let _ = black_box(w.write(META, black_box(ev)));
    }
}

#[inline(never)]
fn poll_loop(r: &mut LaneReader<ShmMem>, n: u64) -> u64 {
    let mut got = 0;
    for _ in 0..n {
        if let Poll::Frame(f) = r.poll() {
            black_box(f.payload);
            got += 1;
        }
    }
    got
}

#[inline(never)]
fn in_place_loop(r: &mut LaneReader<ShmMem>, n: u64) -> u64 {
    let mut got = 0;
    for _ in 0..n {
        if r.read_in_place(|_, view| view.byte(0)).is_ok() {
            got += 1;
        }
    }
    got
}

/// Both writers and both ways of reading over a bare lane, in this thread.
fn lane_mode(n: u64) {
    let config = LaneConfig {
        capacity: 64 << 20,
        max_frame: 64 << 10,
        block_size: 64 << 10,
    };
    let ev = Event::sample(1);
    let lane = ShmLane::create("emit-count", &config).unwrap();
    let mut w = lane.lane().writer().unwrap();
    let _ = w.write(META, &ev);
    let mut r = lane.lane().reader(StartAt::Latest);
    lane_write_loop(&mut w, &ev, n);
    let polled = poll_loop(&mut r, n);
    let shared_lane = ShmLane::create("emit-count-shared", &config).unwrap();
    let sw = shared_lane.lane().shared_writer().unwrap();
    let _ = sw.write(META, &ev);
    let mut r2 = shared_lane.lane().reader(StartAt::Latest);
    shared_write_loop(&sw, &ev, n);
    let in_place = in_place_loop(&mut r2, n);
    println!("lane: {n} writes each, {polled} polled, {in_place} read in place");
}

/// A subscriber to every schema of the bus in `dir`.
fn subscribe(dir: &BusDir, start: StartAt) -> Subscriber {
    Subscriber::connect(dir, snapbus_benches::every_schema("bench", start)).unwrap()
}

#[inline(never)]
fn sub_loop(sub: &mut Subscriber, n: u64) -> u64 {
    let mut got = 0;
    while got < n {
        match sub.next(Duration::from_millis(100)) {
            Ok(Some(BusEvent::Record(r))) => {
                black_box(r.payload);
                got += 1;
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    got
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "no-reader".into());
    let n: u64 = args.next().map_or(100_000, |s| s.parse().unwrap());
    if mode == "lane" {
        lane_mode(n);
        return;
    }
    let root = std::env::temp_dir().join(format!("emit-count-{}", std::process::id()));
    let name = BusName::new("emitcount").unwrap();
    let dir = BusDir::locate_in(&root, &name);
    let broker = broker::InProcess::start(dir.clone(), Duration::from_secs(60)).unwrap();
    snapbus::init(Config {
        bus: Some("emitcount".into()),
        name: Some("emit_count".into()),
        runtime_dir: Some(PathBuf::from(&root)),
        ..Config::default()
    });
    let telemetry = snapbus::get_telemetry("bench");
    assert!(snapbus::wait_for_bus(Duration::from_secs(60)), "no bus");
    let ev = Event::sample(1);
    // Warm-up: the schema key and the wake state are cached on first use.
    emit_warm(&telemetry, &ev);

    let stop = Arc::new(AtomicBool::new(false));
    let read = Arc::new(AtomicU64::new(0));
    let reader = (mode == "reader").then(|| {
        let (stop, count, dir) = (Arc::clone(&stop), Arc::clone(&read), dir.clone());
        let reader = std::thread::spawn(move || {
            let mut sub = subscribe(&dir, StartAt::Latest);
            while !stop.load(Ordering::Relaxed) {
                if let Ok(Some(BusEvent::Record(r))) = sub.next(Duration::from_millis(50)) {
                    black_box(r.payload);
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        while read.load(Ordering::Relaxed) == 0 {
            emit_warm(&telemetry, &ev);
            std::thread::sleep(Duration::from_millis(1));
        }
        reader
    });
    let mut sub = (mode == "sub-after").then(|| subscribe(&dir, StartAt::Oldest));
    emit_loop(&telemetry, &ev, n);
    if let Some(sub) = &mut sub {
        let got = sub_loop(sub, n);
        println!("sub-after: {got} read back");
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(r) = reader {
        r.join().unwrap();
    }
    println!("{mode}: {n} emits, {} read", read.load(Ordering::Relaxed));
    snapbus::shutdown();
    broker.stop().unwrap();
    let _ = std::fs::remove_dir_all(&root);
}

#[inline(never)]
fn emit_warm(telemetry: &Telemetry, ev: &Event) {
    telemetry.snapshot(Level::INFO, ev);
}
