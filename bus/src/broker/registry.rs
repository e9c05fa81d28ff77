//! The registry: producers and consumers joining, leaving and dying; lanes handed on to
//! consumers; wake masks.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use super::readings::{Counter, RingCensus};
use super::supervision::has_exited;
use super::{Broker, Slot};
use crate::catalog::Catalog;
use crate::control::{
    Conn, ConsumerCounters, ConsumerInfo, FromBroker, LaneCursor, LaneInfo, ProducerInfo,
    ProducerStatus, RefusedLane, ToBroker,
};
use crate::doorbell::BELLS_PER_PAGE;
use crate::lane::{LaneState, ShmLane};
use crate::status::StatusEntry;

/// A producer: connected, or gone and kept for the retention period.
pub(super) struct Producer {
    pub(super) id: u64,
    pub(super) info: ProducerInfo,
    pub(super) conn: Option<Conn>,
    pub(super) lane: ShmLane,
    catalog_fd: OwnedFd,
    pub(super) catalog: Option<Catalog>,
    pub(super) pidfd: Option<OwnedFd>,
    pub(super) status: ProducerStatus,
    pub(super) gone_at: Option<Instant>,
    /// Its (own, effective) level filters, as it last reported them.
    pub(super) filters: Option<(String, String)>,
    /// Readings of its lane's commit counter, for its rate.
    pub(super) counter: Counter,
    /// The last census of its ring, if any.
    pub(super) census: Option<RingCensus>,
}

/// A connected consumer.
pub(super) struct Consumer {
    pub(super) id: u64,
    pub(super) info: ConsumerInfo,
    pub(super) conn: Conn,
    bell: u32,
    pub(super) delivered: u64,
    pub(super) lost: u64,
    pub(super) damaged: u64,
    pub(super) garbage: u64,
    /// Records it skipped for a schema key their producer's catalog does not explain.
    pub(super) unknown_keys: u64,
    /// Its cursors as last reported.
    pub(super) cursors: Vec<LaneCursor>,
    pub(super) refused: Vec<RefusedLane>,
    /// Its status board as last reported.
    pub(super) board: Vec<StatusEntry>,
    /// When it last reported (or joined).
    pub(super) last_report: Instant,
}

impl Broker {
    pub(super) fn add_producer(
        &mut self,
        conn: Conn,
        mut info: ProducerInfo,
        mut fds: Vec<OwnedFd>,
        previous_id: Option<u64>,
    ) {
        let refused = &mut self.refused;
        let mut refuse = |conn: &Conn, why: String| {
            // The kernel's word for the pid, not the message's.
            let pid = conn.peer_pid().unwrap_or(0);
            crate::say!(
                "snapbus broker: refused producer {:?} (pid {pid}): {why}",
                info.name,
            );
            super::fds::note_refused(refused, &info.name, pid, &why);
            let _ = conn.send(&FromBroker::Error { message: why }, &[]);
        };
        let n = fds.len();
        let Ok::<[OwnedFd; 2], _>([lane_fd, catalog_fd]) = std::mem::take(&mut fds).try_into()
        else {
            return refuse(&conn, super::fds::missing_fds(n));
        };
        let lane = match ShmLane::open_rw(lane_fd) {
            Ok(l) => l,
            Err(e) => return refuse(&conn, format!("lane refused: {e}")),
        };
        if lane.lane().geometry().salt != info.lane_id {
            return refuse(&conn, "lane id does not match the lane".into());
        }
        // The kernel's word for who is on the other end, not the message's.
        if let Some(pid) = conn.peer_pid() {
            info.pid = pid;
        }
        let pidfd = rustix::process::Pid::from_raw(info.pid as i32).and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
        let catalog = catalog_fd
            .try_clone()
            .ok()
            .and_then(|fd| Catalog::open(fd).ok());
        let wake_mask = self.wake_mask();
        let existing = self
            .producers
            .iter()
            .find(|(_, p)| p.info.lane_id == info.lane_id && p.info.pid == info.pid)
            .map(|(&k, p)| (k, p.id));
        let id = match existing {
            Some((_, id)) => id,
            None => self.id_for(0, previous_id),
        };
        let welcome = FromBroker::WelcomeProducer {
            producer_id: id,
            bus: self.dir.name().to_string(),
            filter: self.filter.clone(),
            wake_mask,
        };
        // A producer that reconnects keeps its entry (a dropped connection) or the id it
        // says it had (a broker restart).
        let (conn, status, gone_at) = if conn.send(&welcome, &[self.page.fd()]).is_ok() {
            (Some(conn), ProducerStatus::Live, None)
        } else {
            // Gone before it could be welcomed (a short-lived process, e.g. a forked worker
            // that emitted and exited): its lane still holds what it wrote, so it is kept and
            // handed to consumers like any other.
            let state = if lane.lane().stats().state == Some(LaneState::Closed) {
                ProducerStatus::Closed
            } else if pidfd.as_ref().is_none_or(has_exited) {
                lane.lane().mark_dead();
                ProducerStatus::Dead
            } else {
                ProducerStatus::Disconnected
            };
            (None, state, Some(Instant::now()))
        };
        let counter = Counter::new(lane.lane().stats().frames_committed, Instant::now());
        let entry = Producer {
            counter,
            census: None,
            id,
            info,
            conn,
            lane,
            catalog_fd,
            catalog,
            pidfd,
            status,
            gone_at,
            filters: None,
        };
        crate::say!(
            "snapbus broker: producer {id} '{}' (pid {}) joined ({status})",
            entry.info.name,
            entry.info.pid
        );
        match existing {
            Some((k, _)) => {
                self.producers.insert(k, entry);
            }
            None => {
                let k = self.new_slot();
                self.producers.insert(k, entry);
                let consumers: Vec<Slot> = self.consumers.keys().copied().collect();
                for c in consumers {
                    self.send_lane(c, k);
                }
            }
        }
    }

    /// Sends producer `p`'s lane to consumer `c` and rings its bell.
    fn send_lane(&self, c: Slot, p: Slot) -> bool {
        let (Some(prod), Some(cons)) = (self.producers.get(&p), self.consumers.get(&c)) else {
            return false;
        };
        let (Ok(lane_fd), Ok(cat_fd)) = (prod.lane.read_only_fd(), prod.catalog_fd.try_clone())
        else {
            return false;
        };
        let msg = FromBroker::Lane(LaneInfo {
            producer_id: prod.id,
            producer: prod.info.clone(),
            dead: prod.status == ProducerStatus::Dead,
        });
        let ok = cons
            .conn
            .send(&msg, &[lane_fd.as_fd(), cat_fd.as_fd()])
            .is_ok();
        if let Some(bell) = self.page.bell(cons.bell as usize) {
            bell.ring();
        }
        ok
    }

    pub(super) fn add_consumer(
        &mut self,
        conn: Conn,
        mut info: ConsumerInfo,
        previous_id: Option<u64>,
        (counters, cursors): (ConsumerCounters, Vec<LaneCursor>),
    ) {
        if let Some(pid) = conn.peer_pid() {
            info.pid = pid;
        }
        let used = self.wake_mask();
        let Some(bell) = (0..BELLS_PER_PAGE as u32).find(|b| used & (1 << b) == 0) else {
            let _ = conn.send(
                &FromBroker::Error {
                    message: format!("the bus has its maximum of {BELLS_PER_PAGE} consumers"),
                },
                &[],
            );
            return;
        };
        let id = self.id_for(info.pid, previous_id);
        let welcome = FromBroker::WelcomeConsumer {
            consumer_id: id,
            bus: self.dir.name().to_string(),
            bell,
        };
        if conn.send(&welcome, &[self.page.fd()]).is_err() {
            return;
        }
        crate::say!(
            "snapbus broker: consumer {id} '{}' (pid {}) joined, subscriptions {:?}",
            info.kind,
            info.pid,
            info.subscriptions
        );
        let c = self.new_slot();
        self.consumers.insert(
            c,
            Consumer {
                id,
                info,
                conn,
                bell,
                // A consumer rejoining a restarted broker starts from its own counters.
                delivered: counters.delivered,
                lost: counters.lost,
                damaged: counters.damaged,
                garbage: counters.garbage,
                unknown_keys: counters.unknown_keys,
                cursors,
                refused: Vec::new(),
                board: Vec::new(),
                last_report: Instant::now(),
            },
        );
        for &p in self.producers.keys() {
            self.send_lane(c, p);
        }
        // Tell the consumer it has every lane there is (an empty Lane list is a valid state).
        if let Some(cons) = self.consumers.get(&c) {
            let _ = cons.conn.send(&FromBroker::Ok, &[]);
        }
        self.update_wake_masks();
    }

    /// The doorbells of every consumer.
    fn wake_mask(&self) -> u64 {
        self.consumers.values().fold(0, |m, c| m | 1 << c.bell)
    }

    fn update_wake_masks(&self) {
        let mask = self.wake_mask();
        for p in self.producers.values() {
            if let Some(c) = &p.conn {
                let _ = c.send(&FromBroker::WakeMask { mask }, &[]);
            }
        }
    }

    pub(super) fn serve_producer(&mut self, k: Slot) {
        loop {
            let Some(conn) = self.producers.get_mut(&k).and_then(|p| p.conn.as_mut()) else {
                return;
            };
            match conn.try_recv::<ToBroker>() {
                Ok(Some((ToBroker::ProducerFilter { own, effective }, _))) => {
                    if let Some(p) = self.producers.get_mut(&k) {
                        p.filters = Some((own, effective));
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(_) => break,
            }
        }
        // EOF: the producer died, or closed its connection.
        let Some(p) = self.producers.get_mut(&k) else {
            return;
        };
        p.conn = None;
        p.gone_at = Some(Instant::now());
        let exited = p.pidfd.as_ref().is_none_or(has_exited);
        let closed = p.lane.lane().stats().state == Some(LaneState::Closed);
        if closed {
            p.status = ProducerStatus::Closed;
        } else if exited {
            self.producer_exited(k);
            return;
        } else {
            p.status = ProducerStatus::Disconnected;
        }
        crate::say!(
            "snapbus broker: producer {} '{}' (pid {}) {}",
            p.id,
            p.info.name,
            p.info.pid,
            p.status
        );
    }

    /// Producer `k`'s process is gone: mark its lane dead (readers skip what it left
    /// half-written) and tell the consumers.
    pub(super) fn producer_exited(&mut self, k: Slot) {
        let Some(p) = self.producers.get_mut(&k) else {
            return;
        };
        p.conn = None;
        p.gone_at.get_or_insert_with(Instant::now);
        if p.lane.lane().stats().state == Some(LaneState::Closed) {
            p.status = ProducerStatus::Closed;
            return;
        }
        p.lane.lane().mark_dead();
        p.status = ProducerStatus::Dead;
        crate::say!(
            "snapbus broker: producer {} '{}' (pid {}) died",
            p.id,
            p.info.name,
            p.info.pid
        );
        let id = p.id;
        for c in self.consumers.values() {
            let _ = c.conn.send(&FromBroker::LaneDead { producer_id: id }, &[]);
            if let Some(bell) = self.page.bell(c.bell as usize) {
                bell.ring();
            }
        }
    }

    pub(super) fn serve_consumer(&mut self, k: Slot) {
        loop {
            let Some(c) = self.consumers.get_mut(&k) else {
                return;
            };
            match c.conn.try_recv::<ToBroker>() {
                Ok(Some((
                    ToBroker::ConsumerStats {
                        delivered,
                        lost,
                        damaged,
                        garbage,
                        unknown_keys,
                        lanes,
                        refused,
                        board,
                    },
                    _,
                ))) => {
                    (c.delivered, c.lost, c.damaged, c.garbage) =
                        (delivered, lost, damaged, garbage);
                    c.unknown_keys = unknown_keys;
                    c.cursors = lanes;
                    c.refused = refused;
                    c.board = board;
                    c.last_report = Instant::now();
                }
                Ok(Some((ToBroker::Subscribed, _))) => {
                    let (id, pid) = (c.id, c.info.pid);
                    self.subscribed(id, pid);
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(_) => break,
            }
        }
        let Some(c) = self.consumers.remove(&k) else {
            return;
        };
        let last = self.consumer_state(&c);
        if let Some(s) = self.supervised.iter_mut().find(|s| s.kept.id == c.id) {
            s.kept.last = Some(last);
            self.dirty = true;
        }
        crate::say!(
            "snapbus broker: consumer {} '{}' (pid {}) left",
            c.id,
            c.info.kind,
            c.info.pid
        );
        self.update_wake_masks();
    }
}
