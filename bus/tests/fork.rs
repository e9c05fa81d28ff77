//! A `fork()`ed child never writes its parent's lane (Python `multiprocessing` forks workers
//! that inherit the parent's publisher): it gets a lane and a broker connection of its own,
//! and closing it leaves the parent's lane alone. A real `fork()` of this test process, a
//! real broker (threads of this process) and a real subscriber.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use snapbus_bus::Level;
use snapbus_bus::broker;
use snapbus_bus::lane::LaneState;
use snapbus_bus::publisher::Publisher;
use snapbus_bus::schemas::{Snapshot, Wire};
use snapbus_bus::subscriber::Event;

use crate::common::{small_publisher, subscribe_oldest, test_bus};

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "test.fork", version = 1, crate = "snapbus_bus::schemas")]
struct ForkEvent {
    pid: u32,
    i: u32,
}

/// A record as a reader saw it: (payload pid, i, emitter name).
type Seen = (u32, u32, Option<String>);

const WATCHDOG: Duration = Duration::from_secs(60);
const N: u32 = 500;

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < WATCHDOG, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The child's side: emit through the parent's publisher (the child's own lane is created
/// on first use), wait until the broker has it, close it. Returns the exit code. Nothing here
/// may take a lock another thread of the parent could have held at the fork (no printing).
fn child(p: &Publisher, emitter: u16) -> i32 {
    let pid = std::process::id();
    for i in 0..N {
        if p.emit(Level::INFO, emitter, &ForkEvent { pid, i }).is_err() {
            return 10;
        }
    }
    let t0 = Instant::now();
    while !p.is_connected() {
        if t0.elapsed() > WATCHDOG {
            return 11;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if p.info().pid != pid || p.stats().written != u64::from(N) {
        return 12;
    }
    // Closes the child's lane, never the parent's.
    p.close();
    if p.emit(Level::INFO, emitter, &ForkEvent { pid, i: N })
        .is_ok()
        || p.stats().closed != 1
    {
        return 13;
    }
    0
}

/// `fork()`s; runs [`child`] in the child and `_exit`s with its code. Returns the child's pid.
#[allow(unsafe_code)]
fn fork_child(p: &Publisher, emitter: u16) -> libc::pid_t {
    // SAFETY: `fork` has no memory-safety preconditions; the child runs only `child` (which
    // allocates and spawns a thread, as a forked Python worker does: glibc's at-fork handlers
    // keep malloc usable) and leaves with `_exit`, so it runs no destructor or at-exit
    // handler of the parent's state.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| child(p, emitter)))
            .unwrap_or(101);
        // SAFETY: `_exit` ends the process at once; nothing after it runs.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Waits for `pid` under the watchdog (killing it if it hangs); returns its exit code.
#[allow(unsafe_code)]
fn wait_child(pid: libc::pid_t) -> i32 {
    let t0 = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid, writable int; WNOHANG makes the call return at once.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(r >= 0, "waitpid failed");
        if r == pid {
            assert!(libc::WIFEXITED(status), "the child died: status {status}");
            return libc::WEXITSTATUS(status);
        }
        if t0.elapsed() > WATCHDOG {
            // SAFETY: `pid` is our own child, not yet reaped; SIGKILL then reap it.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("the forked child hung; killed it");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_forked_child_gets_its_own_lane_and_never_writes_or_closes_its_parents() {
    let (root, dir) = test_bus("fork", "forktest");
    let broker = broker::InProcess::start(dir.clone(), Duration::from_secs(60)).expect("broker");
    let p = small_publisher(dir.clone(), "forktest");
    wait_until("the publisher joins", || p.is_connected());
    let emitter = p.emitter("fork-test");
    let parent = std::process::id();
    p.emit(Level::INFO, emitter, &ForkEvent { pid: parent, i: 0 })
        .expect("emit before the fork");

    let child_pid = fork_child(&p, emitter);
    for i in 1..N {
        p.emit(Level::INFO, emitter, &ForkEvent { pid: parent, i })
            .expect("parent emit");
    }
    assert_eq!(wait_child(child_pid), 0, "the child failed (see `child`)");
    // The child's close did not close the parent's lane.
    assert_eq!(p.lane().lane().stats().state, Some(LaneState::Live));
    for i in N..2 * N {
        p.emit(Level::INFO, emitter, &ForkEvent { pid: parent, i })
            .expect("parent emit after the child closed its lane");
    }
    assert_eq!(p.stats().written, u64::from(2 * N));
    assert_eq!(p.info().pid, parent);

    let mut sub = subscribe_oldest(&dir, "test.fork");
    // (lane pid, lane id) → (payload pid, i, emitter) in order.
    let mut lanes: BTreeMap<(u32, u64), Vec<Seen>> = BTreeMap::new();
    let t0 = Instant::now();
    let mut got = 0;
    while got < 3 * N {
        assert!(t0.elapsed() < WATCHDOG, "only {got} of {} records", 3 * N);
        if let Some(Event::Record(r)) = sub.next(Duration::from_millis(100)).expect("next") {
            let e = ForkEvent::decode_exact(r.payload).expect("decode");
            lanes
                .entry((r.producer.pid, r.producer.lane_id))
                .or_default()
                .push((e.pid, e.i, r.emitter.map(str::to_owned)));
            got += 1;
        }
    }
    assert_eq!(lanes.len(), 2, "two lanes: {:?}", lanes.keys());
    for ((lane_pid, _), records) in &lanes {
        let (want_pid, n) = if *lane_pid == parent {
            (parent, 2 * N)
        } else {
            assert_eq!(*lane_pid, child_pid as u32, "a lane of an unknown process");
            (child_pid as u32, N)
        };
        let expected: Vec<_> = (0..n)
            .map(|i| (want_pid, i, Some("fork-test".to_owned())))
            .collect();
        assert_eq!(
            records, &expected,
            "lane of pid {lane_pid} holds exactly its own records, in order"
        );
    }
    drop(sub);
    drop(p);
    broker.stop().expect("broker");
    let _ = std::fs::remove_dir(&root);
}

/// A lane no broker was ever handed, closed by a process with no parent publisher to hand it
/// to (issue #44, item 1): its records are counted `unadopted`, never reported written.
#[test]
fn a_lane_no_broker_ever_had_is_counted_unadopted_when_closed() {
    let (root, dir) = test_bus("unadopted", "nobroker");
    let p = small_publisher(dir, "alone");
    let emitter = p.emitter("alone");
    for i in 0..10 {
        p.emit(Level::INFO, emitter, &ForkEvent { pid: 1, i })
            .expect("emit");
    }
    assert_eq!(p.stats().written, 10);
    p.close();
    let s = p.stats();
    assert_eq!((s.written, s.unadopted), (0, 10), "{s:?}");
    assert_eq!(s.not_written(), 10 + s.closed);
    let _ = std::fs::remove_dir_all(root);
}
