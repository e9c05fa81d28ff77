//! Lanes a broker never saw, kept past their process's exit.
//!
//! A lane is introduced to the broker over its process's connection; a process that lives
//! and ends entirely inside a broker outage (a `fork()`ed worker) would take its lane, and
//! every record in it, with it. So a publisher keeps a **keeper**: a socket pair its forked
//! children inherit. A child whose lane no broker has been handed sends it (its hello and
//! fds) to its parent when it closes, and the parent's connection thread introduces it to
//! the next broker, as the child would have (the broker then knows it under the parent's
//! pid, the kernel's word for who handed it over). A lane that cannot be handed on (no
//! parent publisher, or it is gone) is counted as `unadopted` and said on stderr: never
//! reported written. A process about to end while the broker it started is still coming up
//! waits for the hand-over instead ([`Publisher::wait_handed`]).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Inner, Publisher};
use crate::control::{Conn, FromBroker, PROTOCOL_VERSION, ToBroker};

/// How long the parent waits for a broker's answer to a child's lane.
const ANSWER: Duration = Duration::from_secs(2);

/// A child's lane waiting for a broker: its hello and its (lane, catalog) fds.
struct Held {
    hello: ToBroker,
    fds: Vec<OwnedFd>,
}

/// The keeper of a publisher (see the module docs).
pub(super) struct Keeper {
    /// The end forked children send on.
    tx: Conn,
    /// The end this process's connection thread reads (closed in a forked child).
    rx: Mutex<Option<Conn>>,
    /// Children's lanes not handed to a broker yet.
    held: Mutex<Vec<Held>>,
}

impl Keeper {
    /// A new keeper, or `None` (said) if the socket pair could not be made.
    pub(super) fn new() -> Option<Keeper> {
        match Conn::pair() {
            Ok((tx, rx)) => Some(Keeper {
                tx,
                rx: Mutex::new(Some(rx)),
                held: Mutex::new(Vec::new()),
            }),
            Err(e) => {
                crate::say!(
                    "snapbus: no keeper for the lanes of forked children ({e}); a child that \
                     lives only while no broker is up loses its records (counted)"
                );
                None
            }
        }
    }

    /// In a forked child: drops the child's copies of the parent's receiving end and held
    /// lanes (they are the parent's to serve). Only `try_lock`: a thread of the parent that
    /// held a lock at the fork does not exist here.
    pub(super) fn forget_in_child(&self) {
        if let Ok(mut rx) = self.rx.try_lock() {
            rx.take();
        }
        if let Ok(mut held) = self.held.try_lock() {
            held.clear();
        }
    }

    /// The parent's side, from its connection thread: takes the lanes children sent, and
    /// introduces each to the broker if one is up.
    pub(super) fn tend(&self, inner: &Inner) {
        let Ok(mut held) = self.held.lock() else {
            return;
        };
        if let Ok(mut rx) = self.rx.lock() {
            if let Some(rx) = rx.as_mut() {
                while let Ok(Some((hello, fds))) = rx.try_recv::<ToBroker>() {
                    if matches!(hello, ToBroker::HelloProducer { .. }) && fds.len() == 2 {
                        held.push(Held { hello, fds });
                    }
                }
            }
        }
        if held.is_empty() {
            return;
        }
        let sock = inner.dir.socket_path();
        if !sock.exists() {
            return;
        }
        held.retain(|h| !introduce(&sock, h, inner.dir.name()));
    }

    /// Children's lanes still held (said when this process closes its own).
    pub(super) fn held(&self) -> usize {
        self.held.lock().map_or(0, |h| h.len())
    }
}

/// Introduces a child's lane to the broker at `sock`; whether it is done with (the broker
/// has it, or refused it).
fn introduce(sock: &std::path::Path, h: &Held, bus: impl std::fmt::Display) -> bool {
    let Ok(mut conn) = Conn::connect(sock) else {
        return false;
    };
    let fds: Vec<BorrowedFd<'_>> = h.fds.iter().map(AsFd::as_fd).collect();
    if conn.send(&h.hello, &fds).is_err() {
        return false;
    }
    // Once the hello is sent the broker holds the lane (a producer gone before its welcome is
    // kept like any other), unless it refuses it.
    if let Ok(Some((FromBroker::Error { message }, _))) = conn.recv::<FromBroker>(Some(ANSWER)) {
        crate::say!(
            "snapbus: the broker of bus '{bus}' refused the lane of a forked child ({message}); \
             its records are lost"
        );
    }
    true
}

/// When this process closes its lane: hands it on if no broker had it ([`hand_over`]), serves
/// the children's lanes a last time, and says which are lost with this process.
pub(super) fn on_close(inner: &Inner) {
    hand_over(inner);
    if let Some(k) = &inner.keeper {
        k.tend(inner);
        let n = k.held();
        if n > 0 {
            crate::say!(
                "snapbus: the lanes of {n} forked children never reached a broker of bus '{}' \
                 and are lost with this process",
                inner.dir.name()
            );
        }
    }
}

/// The child's side, when it closes its lane: hands the lane to the parent's keeper if no
/// broker was ever handed it, else counts its records as `unadopted`.
pub(super) fn hand_over(inner: &Inner) {
    let Ok(keys) = inner.keys.lock() else {
        return;
    };
    // Under the keys lock, which the connection thread holds while it sends a hello: after
    // this, it sends none.
    if inner.introduced.load(Ordering::Relaxed) || inner.handed.swap(true, Ordering::Relaxed) {
        return;
    }
    let frames = inner.lane.lane().stats().frames_committed;
    if frames == 0 {
        return;
    }
    let hello = ToBroker::HelloProducer {
        version: PROTOCOL_VERSION,
        info: inner.info.clone(),
        previous_id: None,
    };
    let why = match &inner.parent_keeper {
        Some(k) => match k
            .tx
            .send(&hello, &[inner.lane.fd().as_fd(), keys.catalog.fd()])
        {
            Ok(()) => return,
            Err(e) => format!("handing the lane to the parent process failed: {e}"),
        },
        None => "no broker was up while this process wrote its lane".to_owned(),
    };
    drop(keys);
    inner.unadopted.store(frames, Ordering::Relaxed);
    crate::say!(
        "snapbus: {frames} records of this process never reached a broker of bus '{}' and are \
         lost with it ({why}); counted as `unadopted`",
        inner.dir.name()
    );
}

impl Publisher {
    /// Waits up to `timeout` until a broker has been handed this lane (or the lane holds no
    /// record, or went to the parent process's keeper): for a process about to end while its
    /// broker is still starting, whose records would otherwise end with it. Returns whether
    /// they are safe. Polls every 5 ms; never called on the emit path.
    pub fn wait_handed(&self, timeout: Duration) -> bool {
        let Some(p) = self.existing() else {
            return true;
        };
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let inner = &p.inner;
            if inner.introduced.load(Ordering::Relaxed)
                || inner.handed.load(Ordering::Relaxed)
                || inner.lane.lane().stats().frames_committed == 0
            {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
